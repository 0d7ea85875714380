//! A step's failures and deadlines: a worker's reported failure, the retry policy's
//! backoff, a lease that expired or a task no worker took in time, and the timers
//! that bring a backoff or a deadline due.

use super::*;

impl RunState {
    /// Records a failure reported by the worker; returns whether another attempt follows.
    pub fn fail(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        f: StepFailure,
        out: &mut Out,
    ) -> Result<bool, Refusal> {
        if self.paused && f.error_type == PAUSED_ERROR_TYPE {
            self.suspend_paused(claims, f.checkpoint, out)?;
            return Ok(false);
        }
        self.check_lease(claims)?;
        self.usage_event(out);
        if !f.checkpoint.is_empty() {
            self.resume_input.clear();
            out.effects.push(Effect::SaveCheckpoint(f.checkpoint));
        }
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let canceled = self.cancel_requested && f.error_type == CANCELED_ERROR_TYPE;
        let next = if canceled {
            None
        } else {
            self.retry_at(&f.error_type, !f.non_retryable, out.now)
        };
        self.steps[self.current_step].last_failure = format!("{}: {}", f.error_type, f.message);
        self.push(
            out,
            identity,
            EventKind::StepFailed {
                step_id,
                attempt,
                error_type: f.error_type.clone(),
                message: f.message.clone(),
                will_retry: next.is_some(),
                next_attempt_at_ms: next,
            },
        );
        self.after_failure(
            next,
            &format!("step failed: {}: {}", f.error_type, f.message),
            out,
        );
        Ok(next.is_some())
    }

    /// When the next attempt may start, if the retry policy allows one.
    pub(super) fn retry_at(&self, error_type: &str, retryable: bool, now: Millis) -> Option<Millis> {
        if self.cancel_requested || !retryable {
            return None;
        }
        let policy = self.definition.steps[self.current_step].retry_policy();
        let attempt = self.attempt();
        policy
            .allows_retry(attempt, error_type)
            .then(|| now + policy.backoff_ms(attempt + 1))
    }

    pub(super) fn after_failure(&mut self, next: Option<Millis>, reason: &str, out: &mut Out) {
        match next {
            Some(until_ms) => {
                let attempt = self.attempt() + 1;
                self.phase = Phase::BackingOff { until_ms };
                self.steps[self.current_step].state = "BACKING_OFF".into();
                out.effects.push(Effect::Timer {
                    due_ms: until_ms,
                    timer: Timer::Backoff {
                        namespace: self.namespace.clone(),
                        run_id: self.run_id.clone(),
                        step_index: self.current_step,
                        attempt,
                    },
                });
            }
            None if self.cancel_requested => {
                self.steps[self.current_step].state = "FAILED".into();
                self.close_on_cancel_request(out);
            }
            None => {
                self.steps[self.current_step].state = "FAILED".into();
                self.failure = reason.to_string();
                self.close(
                    RunStatus::Failed,
                    out,
                    "server",
                    EventKind::RunFailed {
                        reason: reason.to_string(),
                    },
                );
            }
        }
    }

    /// The deadline of the lease in flight, if any: when the store must call
    /// [`RunState::lease_timer`]. It follows from the state alone, so the store keeps
    /// it in memory and derives it again at start rather than writing a timer row.
    pub fn lease_deadline(&self) -> Option<(Millis, u64)> {
        match &self.phase {
            Phase::Started(lease) if self.status.is_open() => Some((lease.next_deadline().0, lease.seq)),
            _ => None,
        }
    }

    /// The lease's deadline may have passed: time the attempt out if it has. A stale
    /// call (the lease moved on, or a heartbeat pushed the deadline back) does nothing.
    pub fn lease_timer(&mut self, lease_seq: u64, out: &mut Out) {
        let Phase::Started(lease) = &self.phase else {
            return;
        };
        if lease.seq != lease_seq || !self.status.is_open() {
            return;
        }
        let (due_ms, kind) = lease.next_deadline();
        if out.now >= due_ms {
            self.time_out(kind, out);
        }
    }

    /// The server leased the step to a caller that was gone by the time the commit
    /// finished: nobody holds the lease, so end it now instead of at its deadline.
    /// No worker ever saw this attempt, so it is offered again at once under a new
    /// lease, and it does not count against the retry policy.
    pub fn undelivered(&mut self, lease_seq: u64, out: &mut Out) {
        if !matches!(&self.phase, Phase::Started(lease) if lease.seq == lease_seq) || !self.status.is_open() {
            return;
        }
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let again = !self.cancel_requested;
        self.push(
            out,
            "server",
            EventKind::StepTimedOut {
                step_id,
                attempt,
                timeout: TimeoutKind::Undelivered,
                will_retry: again,
                next_attempt_at_ms: again.then_some(out.now),
            },
        );
        if again {
            self.schedule_or_park(self.current_step, attempt, out);
        } else {
            self.after_failure(None, "the step was never delivered", out);
        }
    }

    pub(super) fn time_out(&mut self, kind: TimeoutKind, out: &mut Out) {
        self.usage_event(out);
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let next = self.retry_at("timeout", true, out.now);
        self.steps[self.current_step].last_failure = format!("timed out ({kind:?})");
        self.push(
            out,
            "server",
            EventKind::StepTimedOut {
                step_id,
                attempt,
                timeout: kind,
                will_retry: next.is_some(),
                next_attempt_at_ms: next,
            },
        );
        self.after_failure(
            next,
            &format!("step timed out ({kind:?}) on attempt {attempt}"),
            out,
        );
    }

    /// A backoff timer fired: schedule the next attempt.
    pub fn backoff_timer(&mut self, step_index: usize, attempt: u32, out: &mut Out) {
        if self.status.is_open()
            && matches!(self.phase, Phase::BackingOff { .. })
            && self.current_step == step_index
            && self.attempt() + 1 == attempt
        {
            self.schedule_or_park(step_index, attempt, out);
        }
    }
}
