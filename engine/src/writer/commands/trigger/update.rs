//! Replace what a trigger is.

use super::*;

/// A trigger's new definition, checked by the service layer.
#[derive(Debug)]
pub struct UpdateTrigger {
    pub trigger: Trigger,
}

impl Apply for UpdateTrigger {
    type Output = Trigger;
    const NAME: &'static str = "update_trigger";

    fn apply(self, cx: &mut Cx) -> Result<Trigger, CommandError> {
        let mut t = self.trigger;
        let Some(old) = cx.tx.trigger(&t.namespace, &t.id)? else {
            return Err(not_found(&t.namespace, &t.id).into());
        };
        if old.source == Source::Config {
            return Err(read_only(&old).into());
        }
        t.source = Source::Api;
        t.created_ms = old.created_ms;
        t.updated_ms = cx.now();
        t.poll_state = poll_state_of(&t, Some(&old), cx.now());
        t.recent = old.recent;
        cx.tx.save_trigger(&t)?;
        tracing::info!(trigger_id = %t.id, namespace = %t.namespace, "trigger updated");
        Ok(t)
    }
}
