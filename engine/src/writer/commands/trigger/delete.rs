//! Delete a trigger. Runs it started go on, and starts already waiting on one of
//! its keys still start as the runs before them close: each was answered `202`.

use super::*;

/// Delete a trigger.
#[derive(Debug)]
pub struct DeleteTrigger {
    pub ns: String,
    pub trigger_id: String,
}

impl Apply for DeleteTrigger {
    type Output = ();
    const NAME: &'static str = "delete_trigger";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let Some(t) = cx.tx.trigger(&self.ns, &self.trigger_id)? else {
            return Err(not_found(&self.ns, &self.trigger_id).into());
        };
        if t.source == Source::Config {
            return Err(read_only(&t).into());
        }
        cx.tx.delete_trigger(&self.ns, &self.trigger_id)?;
        tracing::info!(trigger_id = %t.id, namespace = %t.namespace, "trigger deleted");
        Ok(())
    }
}
