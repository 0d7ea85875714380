//! Approvals: a `requireConfirmation` step whose completion the server accepts does
//! not complete; its proposal is held and the step waits (`WaitOn::Approval`, no
//! lease, no task, no slot) for a person. An approval completes the step with the
//! held proposal through the one completion path; a rejection re-opens the step on
//! the same transcript, under the same attempt, with the feedback as its resume
//! input. The step's `approval` options time the wait out by its policy.

use super::*;
use crate::approval::{ApprovalTimeoutPolicy, DEFAULT_TIMEOUT_FEEDBACK};

/// A completion held for approval, and who proposed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The completion as the worker sent it.
    pub done: StepDone,
    /// The identity of the worker that sent the completion.
    pub proposed_by: String,
}

/// What a step whose result was rejected reads when it resumes.
pub fn rejection_message(identity: &str, feedback: &str) -> String {
    format!(
        "[railyard] Your result for this step was not approved: {identity} rejected it with this feedback:\n\
         {feedback}\n\
         Address the feedback, then call complete_step again with your revised result."
    )
}

impl RunState {
    /// Holds the completion of the step in flight for approval: `StepAwaitingApproval`
    /// with the proposal; the lease ends, `checkpoint` (the transcript that proposed
    /// it) is stored, and the step waits with no task and no slot, until its approval
    /// timeout at most. The caller has checked the output contract already.
    pub fn hold_for_approval(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        done: StepDone,
        checkpoint: Vec<u8>,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_lease(claims)?;
        self.usage_event(out);
        if !checkpoint.is_empty() {
            // The transcript now holds whatever the step resumed with.
            self.resume_input.clear();
            out.effects.push(Effect::SaveCheckpoint(checkpoint));
        }
        if self.cancel_requested {
            // The worker should have stopped: nobody is left to approve; as a cancel would.
            self.steps[self.current_step].state = "FAILED".into();
            self.close_on_cancel_request(out);
            return Ok(());
        }
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let deadline_ms = self.definition.steps[self.current_step]
            .approval_timeout_ms()
            .map(|t| out.now + t);
        self.push(
            out,
            identity,
            EventKind::StepAwaitingApproval {
                step_id,
                attempt,
                notes: done.notes.clone(),
                artifacts: done.artifacts.clone(),
                context_updates: done.context_updates.clone(),
                result: done.result.clone(),
                deadline_ms,
            },
        );
        let wait_id = self.last_event_id;
        self.steps[self.current_step].state = "AWAITING_APPROVAL".into();
        self.phase = Phase::Waiting(Waiting {
            on: WaitOn::Approval(Box::new(Proposal {
                done,
                proposed_by: identity.to_string(),
            })),
            since_ms: out.now,
            deadline_ms,
            wait_id,
        });
        if let Some(due_ms) = deadline_ms {
            out.effects.push(Effect::Timer {
                due_ms,
                timer: Timer::WaitTimeout {
                    namespace: self.namespace.clone(),
                    run_id: self.run_id.clone(),
                    wait_id,
                },
            });
        }
        Ok(())
    }

    /// The proposal held for approval, while the step waits for one.
    pub fn awaiting_approval(&self) -> Option<&Proposal> {
        match self.waiting() {
            Some(Waiting {
                on: WaitOn::Approval(p),
                ..
            }) => Some(p),
            _ => None,
        }
    }

    /// Approves the held result of step `step_id` (empty: whichever awaits): the
    /// step completes with it (`StepApproved`, then as any accepted completion).
    pub fn approve(
        &mut self,
        identity: &str,
        step_id: &str,
        note: String,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_awaiting(step_id, Action::Approve)?;
        self.approve_held(identity, note, out);
        Ok(())
    }

    /// Rejects the held result of step `step_id` (empty: whichever awaits): the step
    /// re-opens under the same attempt (`StepRejected`, `StepResumed`, then scheduled,
    /// or parked while paused), and its next worker reads `feedback` on the same
    /// transcript.
    pub fn reject(
        &mut self,
        identity: &str,
        step_id: &str,
        feedback: String,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_awaiting(step_id, Action::Reject)?;
        self.reject_held(identity, feedback, out);
        Ok(())
    }

    /// Whether an approval of `step_id` may be given now; refuses naming the state.
    fn check_awaiting(&self, step_id: &str, action: Action) -> Result<(), Refusal> {
        self.require_open(action)?;
        let current = self.step_id();
        if self.awaiting_approval().is_none() {
            let state = self
                .steps
                .get(self.current_step)
                .map(|s| s.state.clone())
                .unwrap_or_default();
            let state = match &self.phase {
                Phase::Waiting(w) => format!("{state} (waiting on {})", w.on.kind()),
                _ => state,
            };
            return Err(Refusal::NotAwaitingApproval {
                run_id: self.run_id.clone(),
                step: current,
                state,
                action,
            });
        }
        if !step_id.is_empty() && step_id != current {
            return Err(Refusal::NotTheStepAwaiting {
                run_id: self.run_id.clone(),
                given: crate::error::echo(step_id),
                awaiting: current,
            });
        }
        Ok(())
    }

    fn take_proposal(&mut self) -> Option<Proposal> {
        match &mut self.phase {
            Phase::Waiting(Waiting {
                on: WaitOn::Approval(p),
                ..
            }) => Some(std::mem::replace(
                p.as_mut(),
                Proposal {
                    done: StepDone::default(),
                    proposed_by: String::new(),
                },
            )),
            _ => None,
        }
    }

    fn approve_held(&mut self, identity: &str, note: String, out: &mut Out) {
        let Some(proposal) = self.take_proposal() else {
            return;
        };
        let (step_id, attempt) = (self.step_id(), self.attempt());
        self.push(
            out,
            identity,
            EventKind::StepApproved {
                step_id,
                attempt,
                note,
            },
        );
        self.finish_step(identity, proposal.done, out);
    }

    fn reject_held(&mut self, identity: &str, feedback: String, out: &mut Out) {
        if self.take_proposal().is_none() {
            return;
        }
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let message = rejection_message(identity, &feedback);
        self.push(
            out,
            identity,
            EventKind::StepRejected {
                step_id,
                attempt,
                feedback,
            },
        );
        self.resume_with("rejected", message, out);
    }

    /// The approval wait timed out: the step's `approval.onTimeout` decides, recorded
    /// as the server's doing.
    pub(super) fn approval_timed_out(&mut self, out: &mut Out) {
        let step = &self.definition.steps[self.current_step];
        let options = step.approval.clone().unwrap_or_default();
        let seconds = options.timeout_seconds.unwrap_or(0);
        match options.on_timeout {
            ApprovalTimeoutPolicy::Approve => self.approve_held(
                "server",
                format!("nobody answered within {seconds} s; approved by the step's onTimeout policy"),
                out,
            ),
            ApprovalTimeoutPolicy::Reject => {
                let feedback = if options.feedback.is_empty() {
                    DEFAULT_TIMEOUT_FEEDBACK.to_string()
                } else {
                    options.feedback
                };
                self.reject_held("server", feedback, out);
            }
            ApprovalTimeoutPolicy::Fail => {
                let (step_id, attempt) = (self.step_id(), self.attempt());
                self.steps[self.current_step].last_failure = "timed out (Wait) awaiting approval".into();
                self.push(
                    out,
                    "server",
                    EventKind::StepTimedOut {
                        step_id,
                        attempt,
                        timeout: TimeoutKind::Wait,
                        will_retry: false,
                        next_attempt_at_ms: None,
                    },
                );
                self.after_failure(
                    None,
                    &format!("step timed out awaiting approval on attempt {attempt} (after {seconds} s)"),
                    out,
                );
            }
        }
    }
}
