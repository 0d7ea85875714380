//! A step completed; with `take_next`, the next step leased to the same worker.

use super::*;

/// The completion of the step attempt `claims` names.
#[derive(Debug)]
pub struct Complete {
    pub claims: TokenClaims,
    pub identity: String,
    pub completion: StepCompletion,
}

impl Apply for Complete {
    type Output = Option<Grant>;
    const NAME: &'static str = "complete";

    fn apply(self, cx: &mut Cx) -> Result<Result<Option<Grant>, ApiError>, StorageError> {
        let Self {
            claims,
            identity,
            completion: c,
        } = self;
        let r = cx.with_run(&claims.namespace, &claims.run_id, |run, out| {
            let queue = run.current_queue();
            run.complete(&claims, &identity, c.notes, c.artifacts, c.context, out)?;
            // The next step's task must still fit: refused here, nothing is written.
            run.check_size()?;
            let next_seq = match &run.phase {
                Phase::Scheduled { queue: q, task_seq } if c.take_next && Some(q) == queue.as_ref() => {
                    *task_seq
                }
                _ => return Ok(None),
            };
            let lease = run.lease(next_seq, &identity, out)?;
            Ok(Some((run.clone(), lease)))
        })?;
        if r.is_ok() {
            cx.metrics
                .steps_completed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // A new step starts with no checkpoint.
        Ok(r.map(|next| {
            next.map(|(run, lease)| Grant {
                run,
                lease,
                checkpoint: Vec::new(),
            })
        }))
    }

    fn handed(next: &Option<Grant>) -> Option<Handed> {
        next.as_ref().map(Grant::handed)
    }
}
