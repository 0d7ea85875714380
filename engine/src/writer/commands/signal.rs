//! A signal to a run, recorded once per request id (and run), refused past the
//! namespace's limit of pending signals.

use super::*;

/// Signal `name` with `payload` to a run.
#[derive(Debug)]
pub struct Signal {
    pub ns: String,
    pub run_id: String,
    pub identity: String,
    pub name: String,
    pub payload: String,
    /// Empty, or the id that makes a retried request a no-op.
    pub request_id: String,
}

impl Apply for Signal {
    type Output = ();
    const NAME: &'static str = "signal";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let key = railyard_store::backend::signal_key(&self.run_id, &self.request_id);
        if !self.request_id.is_empty() && cx.tx.idempotency(&self.ns, &key)?.is_some() {
            return Ok(());
        }
        let max_pending = cx
            .tx
            .namespace(&self.ns)?
            .map_or(0, |n| n.limits.max_pending_signals);
        let ns = &self.ns;
        cx.with_run(&RunKey::new(&self.ns, &self.run_id), |run, out| {
            run.signal(&self.identity, self.name, self.payload, out)?;
            let pending = run.pending_signals.len() as u64;
            if max_pending > 0 && pending > max_pending {
                return Err(Rejection::ResourceExhausted(format!(
                    "run {:?} would have {pending} signals pending, more than the limit of namespace \
                     {ns:?} (max pending signals {max_pending}); the worker running its step takes \
                     them on its next heartbeat",
                    run.run_id
                )));
            }
            // Pending signals travel in the step's task: refused past the limit.
            Ok(run.check_size()?)
        })?;
        if !self.request_id.is_empty() {
            cx.tx.insert_idempotency(&self.ns, &key, &self.run_id)?;
        }
        Ok(())
    }
}
