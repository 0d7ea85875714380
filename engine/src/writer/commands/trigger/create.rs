//! Create a trigger.

use super::*;

/// A new trigger, checked by the service layer.
#[derive(Debug)]
pub struct CreateTrigger {
    pub trigger: Trigger,
}

impl Apply for CreateTrigger {
    type Output = Trigger;
    const NAME: &'static str = "create_trigger";

    fn apply(self, cx: &mut Cx) -> Result<Trigger, CommandError> {
        let mut t = self.trigger;
        if cx.tx.namespace(&t.namespace)?.is_none() {
            return Err(Rejection::NotFound(format!("namespace {:?} does not exist", t.namespace)).into());
        }
        if cx.tx.trigger(&t.namespace, &t.id)?.is_some() {
            return Err(Rejection::AlreadyExists(format!(
                "trigger {:?} already exists in namespace {:?}",
                t.id, t.namespace
            ))
            .into());
        }
        t.source = Source::Api;
        t.created_ms = cx.now();
        t.updated_ms = cx.now();
        t.poll_state = poll_state_of(&t, None, cx.now());
        cx.tx.save_trigger(&t)?;
        tracing::info!(trigger_id = %t.id, namespace = %t.namespace, workflow = %t.workflow_id, "trigger created");
        Ok(t)
    }
}
