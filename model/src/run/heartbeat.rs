//! A step attempt's heartbeats: the deadline they extend, the checkpoint and notes
//! they carry, the signals they acknowledge, and the usage and stuck signs they
//! report (which can end the step when a budget is passed).

use super::*;

/// A note for the coordinator, as a heartbeat carries it (recorded as a
/// `CoordinatorNote` event).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatNote {
    /// What kind of note (`blocked`, `progress` ...), as the agent names it.
    pub kind: String,
    /// The note itself.
    pub message: String,
}

/// A sign of a stuck agent, as a heartbeat reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StuckNote {
    /// Which sign (`repeated_call`, `repeated_error`, `no_progress`).
    pub signal: String,
    /// What the worker saw.
    pub message: String,
    /// The worker failed the step for it (else it only warned the model).
    pub fatal: bool,
}

/// What a heartbeat's usage report did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageOutcome {
    /// What the report added to the run's totals (for metrics).
    pub added: Usage,
    /// Set when the report passed the budget and the step was failed for it.
    pub budget_exceeded: Option<String>,
}

impl RunState {
    /// Extends the heartbeat deadline, stores the checkpoint, records notes, drops
    /// signals up to `acked`. Returns the signals still pending.
    pub fn heartbeat(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        checkpoint: impl Into<CheckpointUpdate>,
        notes: Vec<HeartbeatNote>,
        acked: u64,
        out: &mut Out,
    ) -> Result<Vec<PendingSignal>, Refusal> {
        self.check_lease(claims)?;
        if let Phase::Started(lease) = &mut self.phase
            && let Some(t) = lease.heartbeat_timeout_ms
        {
            lease.heartbeat_deadline_ms = Some(out.now + t);
        }
        let effect = match checkpoint.into() {
            CheckpointUpdate::Keep => None,
            CheckpointUpdate::Replace(bytes) => Some(Effect::SaveCheckpoint(bytes)),
            CheckpointUpdate::Append(bytes) => Some(Effect::AppendCheckpoint(bytes)),
        };
        if let Some(effect) = effect {
            // The worker's transcript now holds what the step resumed with.
            self.resume_input.clear();
            out.effects.push(effect);
        }
        for HeartbeatNote { kind, message } in notes {
            let (step_id, attempt) = (self.step_id(), self.attempt());
            self.push(
                out,
                identity,
                EventKind::CoordinatorNote {
                    step_id,
                    attempt,
                    kind,
                    message,
                },
            );
        }
        self.pending_signals.retain(|s| s.event_id > acked);
        Ok(self.pending_signals.clone())
    }

    /// Records a heartbeat's usage report (the attempt's running total) and stuck
    /// signs. When the usage passes the step's or the run's budget, the step fails
    /// `token_budget_exceeded` (non-retryable) in the same transition.
    pub fn record_usage(
        &mut self,
        claims: &TokenClaims,
        usage: Option<Usage>,
        model: &str,
        stuck: Vec<StuckNote>,
        out: &mut Out,
    ) -> Result<UsageOutcome, Refusal> {
        self.check_lease(claims)?;
        for note in stuck {
            let (step_id, attempt) = (self.step_id(), self.attempt());
            self.push(
                out,
                "server",
                EventKind::AgentStuck {
                    step_id,
                    attempt,
                    signal: note.signal,
                    message: note.message,
                    fatal: note.fatal,
                },
            );
        }
        let Some(reported) = usage else {
            return Ok(UsageOutcome::default());
        };
        let index = self.current_step;
        let rec = &mut self.steps[index];
        let added = reported.growth_since(&rec.attempt_usage);
        rec.attempt_usage = reported.max(&rec.attempt_usage);
        rec.usage.add(&added);
        if !model.is_empty() && rec.model != model {
            rec.model = model.to_string();
        }
        self.usage.add(&added);
        let step_max = self.definition.steps[index].max_tokens;
        let exceeded = usage::budget_exceeded(step_max, &self.steps[index].usage, &self.budget, &self.usage);
        if let Some(message) = &exceeded {
            let failure = StepFailure {
                error_type: TOKEN_BUDGET_EXCEEDED.into(),
                message: message.clone(),
                non_retryable: true,
                checkpoint: Vec::new(),
            };
            self.fail(claims, "server", failure, out)?;
        }
        Ok(UsageOutcome {
            added,
            budget_exceeded: exceeded,
        })
    }

    /// Records the attempt in flight's usage, if it reported any, as it ends.
    pub(super) fn usage_event(&mut self, out: &mut Out) {
        let Some(rec) = self.steps.get(self.current_step) else {
            return;
        };
        if rec.attempt_usage.is_zero() {
            return;
        }
        let (usage, model) = (rec.attempt_usage, rec.model.clone());
        let (step_id, attempt) = (self.step_id(), self.attempt());
        self.push(
            out,
            "server",
            EventKind::StepUsage {
                step_id,
                attempt,
                model,
                usage,
            },
        );
    }
}
