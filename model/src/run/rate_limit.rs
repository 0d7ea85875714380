//! A step parked for a provider's rate limit: the worker was told to wait past the
//! limit's reset (a 429 with a reset time, or the fleet's bucket), so it gave its
//! lease back with its checkpoint. The step waits without a lease, a task or a
//! worker slot, uses up no attempt, and is scheduled again under the same attempt
//! when the reset time comes.

use super::*;

/// The error type a worker reports (`FailStepTask`, with the reset time) when it
/// parks a step for a provider's rate limit.
pub const RATE_LIMITED_ERROR_TYPE: &str = "rate_limited";

/// The longest a step may park for a rate limit: a reset further ahead is refused.
pub const MAX_RATE_LIMIT_PARK_MS: Millis = 24 * 3600 * 1000;

impl RunState {
    /// Ends the lease `claims` names with the step waiting for rate-limit `key` to
    /// reset at `until_ms`. A time already past schedules the step again at once; a
    /// cancel requested ends the run as a cancel would.
    pub fn park_rate_limited(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        checkpoint: Vec<u8>,
        key: String,
        until_ms: Millis,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_lease(claims)?;
        if !checkpoint.is_empty() {
            out.effects.push(Effect::SaveCheckpoint(checkpoint));
        }
        self.resume_input.clear();
        if self.cancel_requested {
            self.steps[self.current_step].state = "FAILED".into();
            self.close_on_cancel_request(out);
            return Ok(());
        }
        let (step_id, attempt) = (self.step_id(), self.attempt());
        self.push(
            out,
            identity,
            EventKind::StepWaiting {
                step_id,
                attempt,
                on: WaitOn::RATE_LIMIT.into(),
                run_ids: Vec::new(),
                deadline_ms: Some(until_ms),
            },
        );
        let wait_id = self.last_event_id;
        self.steps[self.current_step].state = "WAITING".into();
        self.phase = Phase::Waiting(Waiting {
            on: WaitOn::RateLimit { key },
            since_ms: out.now,
            deadline_ms: Some(until_ms),
            wait_id,
        });
        if until_ms <= out.now {
            self.rate_limit_reset(out);
        } else {
            out.effects.push(Effect::Timer {
                due_ms: until_ms,
                timer: Timer::WaitTimeout {
                    namespace: self.namespace.clone(),
                    run_id: self.run_id.clone(),
                    wait_id,
                },
            });
        }
        Ok(())
    }

    /// The rate limit the step waits for has reset: `StepResumed`, and the step is
    /// scheduled again under the same attempt (parked instead while the run is
    /// paused). Its transcript gets no message: the model never saw the wait.
    pub(super) fn rate_limit_reset(&mut self, out: &mut Out) {
        let Phase::Waiting(w) = &self.phase else {
            return;
        };
        let waited_ms = out.now - w.since_ms;
        let (step_id, attempt) = (self.step_id(), self.attempt());
        self.push(
            out,
            "server",
            EventKind::StepResumed {
                step_id,
                attempt,
                reason: "rate limit reset".into(),
                waited_ms,
            },
        );
        self.schedule_or_park(self.current_step, attempt, out);
    }
}
