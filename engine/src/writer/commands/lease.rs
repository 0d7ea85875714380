//! Lease a ready task to the poll that took it from matching.

use super::*;

/// Lease `task` to `worker`.
#[derive(Debug)]
pub struct LeaseTask {
    pub task: TaskRef,
    pub worker: String,
}

impl Apply for LeaseTask {
    type Output = Grant;
    const NAME: &'static str = "lease";

    fn apply(self, cx: &mut Cx) -> Result<Grant, CommandError> {
        let task = self.task;
        let r = cx
            .with_run(&RunKey::new(&task.namespace, &task.run_id), |run, out| {
                let lease = run.lease(task.task_seq, &self.worker, out)?;
                Ok((run.clone(), lease))
            })
            .refused()?;
        let (run, lease) = match r {
            Ok(v) => v,
            Err(e) => {
                // The run moved on (or is gone): drop the row if it is still there.
                cx.tx.remove_task(&task.namespace, &task.queue, task.task_seq)?;
                return Err(e.into());
            }
        };
        let (checkpoint, checkpoint_digest) = cx.handed_checkpoint(&run)?;
        Ok(Grant {
            run,
            lease,
            checkpoint,
            checkpoint_digest,
        })
    }

    fn handed(grant: &Grant) -> Option<Handed> {
        Some(grant.handed())
    }
}
