//! A step set its run's search attributes mid-step.

use super::*;
use std::collections::BTreeMap;

/// Attributes (name → text, empty: unset) the step attempt `claims` names sets.
#[derive(Debug)]
pub struct UpsertAttributes {
    pub claims: TokenClaims,
    pub identity: String,
    pub attributes: BTreeMap<String, String>,
}

impl Apply for UpsertAttributes {
    /// How many attributes changed.
    type Output = usize;
    const NAME: &'static str = "upsert_attributes";

    fn apply(self, cx: &mut Cx) -> Result<usize, CommandError> {
        let Self {
            claims,
            identity,
            attributes,
        } = self;
        let decl = cx
            .tx
            .namespace(&claims.namespace)?
            .map(|n| n.attributes)
            .unwrap_or_default();
        cx.with_run(&claims.run_key(), |run, out| {
            run.check_lease(&claims)?;
            let set = railyard_model::attributes::parse_set(&decl, &attributes, "attributes")?;
            run.upsert_attributes(&claims, &identity, set, out)
        })
    }
}
