//! Change a namespace's settings.

use super::*;
use railyard_model::namespace::{Namespace, NamespaceChange};

/// New settings for a namespace (those given; the rest stay).
#[derive(Debug)]
pub struct UpdateNamespace {
    pub name: String,
    pub change: NamespaceChange,
}

impl Apply for UpdateNamespace {
    type Output = Namespace;
    const NAME: &'static str = "update_namespace";

    fn apply(self, cx: &mut Cx) -> Result<Namespace, CommandError> {
        let Some(mut ns) = cx.tx.namespace(&self.name)? else {
            return Err(Rejection::NotFound(format!("namespace {:?} does not exist", self.name)).into());
        };
        self.change.apply_to(&mut ns);
        ns.updated_ms = cx.now();
        cx.tx.put_namespace(&ns)?;
        Ok(ns)
    }
}
