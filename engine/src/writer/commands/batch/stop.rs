//! Stop a running batch: the runs it has not reached are left as they are. Stopping
//! a batch that has ended answers it as it is.

use super::*;

/// Stop a batch, recording who and why.
#[derive(Debug)]
pub struct StopBatch {
    pub ns: String,
    pub batch_id: String,
    pub identity: String,
    pub reason: String,
}

impl Apply for StopBatch {
    type Output = Batch;
    const NAME: &'static str = "stop_batch";

    fn apply(self, cx: &mut Cx) -> Result<Batch, CommandError> {
        let Some(mut b) = cx.tx.batch(&self.ns, &self.batch_id)? else {
            return Err(not_found(&self.ns, &self.batch_id).into());
        };
        if b.stop(&self.identity, self.reason, cx.now()) {
            cx.tx.save_batch(&b)?;
        }
        Ok(b)
    }
}
