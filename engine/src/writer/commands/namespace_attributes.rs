//! Declare or remove a namespace's search attribute.

use super::*;
use railyard_model::query::{AttributeTypes, ValueType};

/// Declares `name` as `declare` in namespace `namespace`, or (`None`) removes it.
/// Removing leaves runs' values and index entries as they are: the attribute is no
/// longer settable or queryable, and declaring it again with the same type makes
/// the values queryable again (`docs/search-and-queries.md`).
#[derive(Debug)]
pub struct ChangeAttribute {
    pub namespace: String,
    pub name: String,
    pub declare: Option<ValueType>,
}

impl Apply for ChangeAttribute {
    /// The namespace's declarations after the change.
    type Output = AttributeTypes;
    const NAME: &'static str = "change_attribute";

    fn apply(self, cx: &mut Cx) -> Result<AttributeTypes, CommandError> {
        let Some(mut ns) = cx.tx.namespace(&self.namespace)? else {
            return Err(Rejection::NotFound(format!("namespace {:?} does not exist", self.namespace)).into());
        };
        let changed = match self.declare {
            Some(ty) => railyard_model::attributes::declare(&mut ns.attributes, &self.name, ty)?,
            None => {
                if ns.attributes.remove(&self.name).is_none() {
                    return Err(Rejection::NotFound(format!(
                        "namespace {} declares no search attribute {}",
                        self.namespace,
                        railyard_model::echo(&self.name)
                    ))
                    .into());
                }
                true
            }
        };
        if changed {
            ns.updated_ms = cx.now();
            cx.tx.put_namespace(&ns)?;
        }
        Ok(ns.attributes)
    }
}
