//! What the loop does between turns: heartbeat the transcript and take the signals
//! the answer carries, wait on the children it spawned, settle coordinator notes,
//! and act on a stuck verdict.

use super::*;

impl StepRun<'_> {
    /// Heartbeats with the checkpoint and pending notes. `Some` when the step must stop.
    pub(super) async fn heartbeat(&mut self) -> Option<Outcome> {
        let notes = std::mem::take(&mut self.notes);
        match self.lease.heartbeat(self.checkpoint(), notes.clone()).await {
            Ok(hb) => {
                if let Some(message) = hb.budget_exceeded {
                    warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                        reason = %message, "the server failed the step: token budget exceeded");
                    return Some(Outcome::EndedByServer {
                        error_type: TOKEN_BUDGET_EXCEEDED.into(),
                        message,
                    });
                }
                if hb.cancel_requested {
                    info!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                        "cancellation requested");
                    return Some(Outcome::Canceled {
                        checkpoint: self.checkpoint(),
                    });
                }
                // This heartbeat acknowledged every signal handed over before it.
                self.unacked_signals = false;
                self.take_signals(&hb.signals);
                if hb.pause_requested {
                    info!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                        "run paused; suspending the step");
                    return Some(Outcome::Paused {
                        checkpoint: self.checkpoint(),
                    });
                }
                None
            }
            Err(LeaseError::Lost(m)) => Some(Outcome::LeaseLost(m)),
            Err(LeaseError::Failed(m)) => {
                // The lease may be fine; the next heartbeat carries the notes again.
                warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                    error = %m, "heartbeat failed; continuing");
                let mut pending = notes;
                pending.append(&mut self.notes);
                self.notes = pending;
                None
            }
        }
    }

    /// Ends the lease with the step waiting for this turn's child runs. `Some` when
    /// the step must stop (it waits, or the lease is gone); `None` when the server
    /// refused, and the turn's waiting calls now read the refusal as their error.
    pub(super) async fn wait_for_children(&mut self) -> Option<Outcome> {
        let waits = std::mem::take(&mut self.turn_waits);
        let (mut children, mut awaited) = (Vec::new(), Vec::new());
        for (_, w) in &waits {
            match w {
                TurnWait::Spawn(spec) => children.push(spec.clone()),
                TurnWait::Await(ids) => awaited.extend(ids.iter().cloned()),
            }
        }
        // Notes of this turn reach history before the lease ends.
        if (!self.notes.is_empty() || self.unacked_signals)
            && let Some(Outcome::LeaseLost(m)) = self.settle().await
        {
            return Some(Outcome::LeaseLost(m));
        }
        match self.lease.spawn(children, true, awaited, self.checkpoint()).await {
            Ok(child_run_ids) => {
                info!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                    children = ?child_run_ids, "step waits for child runs");
                Some(Outcome::Waiting { child_run_ids })
            }
            Err(SpawnError::Lost(m)) => Some(Outcome::LeaseLost(m)),
            Err(SpawnError::Refused(m)) => {
                warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                    error = %m, "child runs refused");
                if let Some(last) = self.req.messages.last_mut() {
                    for (i, _) in &waits {
                        if let Some(Block::ToolResult {
                            content, is_error, ..
                        }) = last.content.get_mut(*i)
                        {
                            *content = m.clone();
                            *is_error = true;
                        }
                    }
                }
                None
            }
        }
    }

    /// The last word before the result is reported: pending notes, and the
    /// acknowledgement of the signals the model read. `Some` when the lease is gone.
    pub(super) async fn settle(&mut self) -> Option<Outcome> {
        let notes = std::mem::take(&mut self.notes);
        match self.lease.settle(notes).await {
            Ok(()) => {
                self.unacked_signals = false;
                None
            }
            Err(LeaseError::Lost(m)) => Some(Outcome::LeaseLost(m)),
            Err(LeaseError::Failed(m)) => {
                warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                    error = %m, "last heartbeat before reporting failed; reporting anyway");
                None
            }
        }
    }

    /// Acts on a stuck verdict: a warning is told to the model (added to this turn's
    /// results) and recorded; a fatal one fails the step. `Some` when the step ends.
    pub(super) async fn on_stuck(&mut self, v: StuckVerdict, results: &mut Vec<Block>) -> Option<Outcome> {
        let signal = v.signal.name();
        warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
            signal, fatal = v.fatal, message = %one_line(&v.message, 200), "agent looks stuck");
        self.emit(EventKind::Stuck {
            signal: signal.to_string(),
            message: v.message.clone(),
            fatal: v.fatal,
        });
        self.lease.report_stuck(StuckReport {
            signal: signal.to_string(),
            message: v.message.clone(),
            fatal: v.fatal,
        });
        if !v.fatal {
            results.push(Block::text(format!("[stuck: {signal}] {}", v.message)));
            return None;
        }
        // The AgentStuck record goes out with a last heartbeat before the failure.
        if let Some(Outcome::LeaseLost(m)) = self.settle().await {
            return Some(Outcome::LeaseLost(m));
        }
        Some(self.fail(
            AGENT_STUCK,
            format!("the agent is stuck ({signal}): {}", v.message),
            true,
        ))
    }
}
