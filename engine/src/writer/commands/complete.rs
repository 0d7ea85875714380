//! A step completed; with `take_next`, the next step leased to the same worker. A
//! completion that breaks the step's output contract is refused, and the refusal
//! recorded (`StepResultRefused`, bounded per attempt). A `requireConfirmation`
//! step's accepted completion is held for approval instead (`approve.rs`).

use super::*;
use railyard_model::contract;
use railyard_model::run::StepDone;

/// The completion of the step attempt `claims` names.
#[derive(Debug)]
pub struct Complete {
    pub claims: TokenClaims,
    pub identity: String,
    pub completion: StepCompletion,
}

/// What a completion came to.
#[derive(Debug)]
pub enum Completed {
    /// Recorded; with the next step when it was leased to the caller (eager dispatch).
    Done(Option<Box<Grant>>),
    /// Refused for breaking the output contract, and the refusal recorded in history;
    /// the message lists the violations.
    Refused(String),
    /// Accepted and held for approval: the step waits, no next step is leased.
    Held,
}

impl Apply for Complete {
    type Output = Completed;
    const NAME: &'static str = "complete";

    fn apply(self, cx: &mut Cx) -> Result<Completed, CommandError> {
        let Self {
            claims,
            identity,
            completion: c,
        } = self;
        let decl = if c.attributes.is_empty() {
            Default::default()
        } else {
            cx.tx
                .namespace(&claims.namespace)?
                .map(|n| n.attributes)
                .unwrap_or_default()
        };
        let r = cx.with_run(&claims.run_key(), |run, out| {
            let queue = run.current_queue();
            run.check_lease(&claims)?;
            // Read before anything changes; set only when the result is accepted.
            let attributes =
                railyard_model::attributes::parse_set(&decl, &c.attributes, "search_attributes")?;
            let def = run.definition.clone();
            let step = &def.steps[run.current_step];
            if step.output.is_some() || !step.required_artifacts.is_empty() {
                let violations = contract::check_completion(
                    step.output.as_ref(),
                    &step.required_artifacts,
                    c.result.as_ref(),
                    &c.artifacts,
                )
                .map_err(|e| {
                    Rejection::FailedPrecondition(format!(
                        "the output contract of step {} cannot be checked: {e}",
                        step.id
                    ))
                })?;
                if !violations.is_empty() {
                    let message = violations.message(&step.id);
                    if run.refuse_result(&claims, &identity, &violations, out)? {
                        return Ok(Completed::Refused(message));
                    }
                    // Enough refusals of this attempt are in history: refused alike,
                    // and nothing is written.
                    return Err(Rejection::InvalidArgument(message));
                }
            }
            let done = StepDone {
                notes: c.notes,
                artifacts: c.artifacts,
                context_updates: c.context,
                result: c.result.map(|v| v.to_string()).unwrap_or_default(),
            };
            run.set_attributes(attributes, &claims.step, &identity, out)?;
            if step.require_confirmation {
                // Once approved, the next step's task must still fit: checked now on a
                // copy, so that an approval is never refused for it.
                let mut probe = run.clone();
                let mut seq = 0;
                let mut scratch = Out::new(out.now, &mut seq);
                probe.complete_with_result(&claims, &identity, done.clone(), &mut scratch)?;
                probe.check_size()?;
                run.hold_for_approval(&claims, &identity, done, c.checkpoint, out)?;
                return Ok(Completed::Held);
            }
            run.complete_with_result(&claims, &identity, done, out)?;
            // The next step's task must still fit: refused here, nothing is written.
            run.check_size()?;
            let next_seq = match &run.phase {
                Phase::Scheduled { queue: q, task_seq } if c.take_next && Some(q) == queue.as_ref() => {
                    *task_seq
                }
                _ => return Ok(Completed::Done(None)),
            };
            let lease = run.lease(next_seq, &identity, out)?;
            // A new step starts with no checkpoint.
            Ok(Completed::Done(Some(Box::new(Grant {
                run: run.clone(),
                lease,
                checkpoint: Vec::new(),
                checkpoint_digest: None,
            }))))
        })?;
        if matches!(r, Completed::Done(_)) {
            cx.metrics
                .steps_completed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(r)
    }

    fn handed(done: &Completed) -> Option<Handed> {
        match done {
            Completed::Done(Some(grant)) => Some(grant.handed()),
            _ => None,
        }
    }
}
