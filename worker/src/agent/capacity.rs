//! The fleet's rate limit around a model call (docs/flow-control.md): capacity is
//! asked before each call, a short wait is waited out, and a long one, or a
//! provider's 429 resetting later than a call waits, parks the step: it gives its
//! lease and slot back with its transcript, uses up no attempt, and the server
//! dispatches it again at the reset.

use super::*;
use crate::provider::rate_limit::{self, PARK_AFTER};

/// Most tokens one capacity request names (the server's bound).
const MAX_ESTIMATE: u64 = 10_000_000;

impl StepRun<'_> {
    /// Asks the lease for capacity for the next call; `Some` when the step must stop
    /// (it parks until the time the server named, or the lease is gone). A capacity
    /// request that does not get through lets the call go: the provider's own limit
    /// still holds.
    pub(super) async fn await_capacity(&mut self) -> Option<Outcome> {
        let tokens = self.estimate_tokens();
        loop {
            match self.lease.acquire_capacity(tokens).await {
                Ok(None) => return None,
                Ok(Some(at_ms)) => {
                    let wait =
                        Duration::from_millis(u64::try_from(at_ms - rate_limit::now_unix_ms()).unwrap_or(0));
                    if wait > PARK_AFTER {
                        return Some(self.park(at_ms, "the fleet's rate limit is spent"));
                    }
                    debug!(run_id = %self.task.run_id, step = %self.task.step_id, wait_ms = wait.as_millis() as u64,
                        "waiting for the fleet's rate limit");
                    tokio::time::sleep(wait).await;
                }
                Err(LeaseError::Lost(message)) => return Some(Outcome::LeaseLost(message)),
                Err(LeaseError::Failed(e)) => {
                    warn!(run_id = %self.task.run_id, step = %self.task.step_id, error = %e,
                        "capacity request failed; calling the model without it");
                    return None;
                }
            }
        }
    }

    /// The provider refused for a rate limit resetting in `reset_in`: the fleet is
    /// told, and the step parks until then.
    pub(super) async fn rate_limited(&mut self, reset_in: Duration) -> Outcome {
        let at_ms =
            rate_limit::now_unix_ms().saturating_add(i64::try_from(reset_in.as_millis()).unwrap_or(i64::MAX));
        self.lease.report_rate_limited(at_ms).await;
        self.park(at_ms, "the provider answered 429")
    }

    fn park(&self, until_unix_ms: i64, why: &str) -> Outcome {
        info!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
            until_unix_ms, reason = why, "step parks for a rate limit; slot released");
        Outcome::RateLimited {
            checkpoint: self.checkpoint(),
            until_unix_ms,
        }
    }

    /// The tokens the next call may use: its transcript's text at about four bytes a
    /// token, and its output limit.
    fn estimate_tokens(&self) -> u64 {
        let text: usize = self
            .req
            .messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|b| match b {
                Block::Text { text } => text.len(),
                Block::ToolUse { input, .. } => input.to_string().len(),
                Block::ToolResult { content, .. } => content.len(),
            })
            .sum::<usize>()
            .saturating_add(self.req.system.len());
        (text as u64 / 4)
            .saturating_add(self.req.max_tokens.map_or(0, u64::from))
            .min(MAX_ESTIMATE)
    }
}
