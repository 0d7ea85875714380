//! Batch operations: one action (cancel, terminate, reset, rerun, signal) applied to
//! every run a list query matched when the batch started, at a bounded rate.
//!
//! A batch is a durable job: its header ([`Batch`]) and one [`BatchItem`] per
//! matched run, snapshotted at start (at most [`MAX_BATCH_RUNS`]), so the set never
//! drifts while the batch works through it. Items are acted on in order; the writer
//! applies an item's action and records its [`Outcome`] (and the header's counts) in
//! one transaction, so an item is acted on at most once, whatever crashes. The spec
//! is `docs/batches.md`.

use crate::Millis;
use crate::error::Rejection;
use crate::limits::{self, check_len, check_name};

/// Most runs one batch acts on: a query matching more is refused (narrow it, or run
/// several batches).
pub const MAX_BATCH_RUNS: usize = 10_000;
/// Most batches running at once in a namespace.
pub const MAX_RUNNING_BATCHES: usize = 4;
/// Slowest rate, in runs acted on per second.
pub const MIN_RATE: u32 = 1;
/// Fastest rate.
pub const MAX_RATE: u32 = 1_000;
/// The rate when a request names none.
pub const DEFAULT_RATE: u32 = 50;
/// Most bytes of a batch's signal payload (kept in the batch's header).
pub const SIGNAL_PAYLOAD: usize = 64 * 1024;
/// Most bytes of a batch's query text.
pub const QUERY: usize = 4 * 1024;

/// What a batch does to each run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchAction {
    /// Cancel each run.
    Cancel,
    /// Terminate each run.
    Terminate,
    /// Reset to `to_step` (`None`: each run's first failed step).
    Reset {
        /// The step to reset to.
        to_step: Option<String>,
    },
    /// Rerun each run from its first step.
    Rerun,
    /// Send each run a signal.
    Signal {
        /// The signal's name.
        name: String,
        /// Its payload, as JSON text.
        payload_json: String,
    },
}

impl BatchAction {
    /// The action's name: `cancel`, `terminate`, `reset`, `rerun`, `signal`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Terminate => "terminate",
            Self::Reset { .. } => "reset",
            Self::Rerun => "rerun",
            Self::Signal { .. } => "signal",
        }
    }

    /// Whether the action needs an open run (a closed one is skipped); reset and
    /// rerun act on closed runs too.
    pub fn needs_open(&self) -> bool {
        matches!(self, Self::Cancel | Self::Terminate | Self::Signal { .. })
    }

    /// Whether the action starts a new run for each run it acts on.
    pub fn starts_runs(&self) -> bool {
        matches!(self, Self::Reset { .. } | Self::Rerun)
    }

    /// Checks the action's own fields, naming them.
    pub fn check(&self) -> Result<(), Rejection> {
        match self {
            Self::Reset { to_step: Some(s) } => check_name("to_step", s),
            Self::Signal { name, payload_json } => {
                check_name("signal_name", name)?;
                check_len("signal_payload_json", payload_json, SIGNAL_PAYLOAD)?;
                if !payload_json.is_empty() {
                    serde_json::from_str::<serde_json::Value>(payload_json).map_err(|e| {
                        Rejection::field("signal_payload_json", format!("is not valid JSON: {e}"))
                    })?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Where a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchState {
    /// Working through its runs.
    Running,
    /// Every run acted on (or skipped, or failed).
    Completed,
    /// Stopped before the end; the runs not reached are left as they are.
    Stopped,
}

impl BatchState {
    /// `running`, `completed`, `stopped`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Stopped => "stopped",
        }
    }
}

/// A batch's header: what it does, and how far it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Its namespace.
    pub namespace: String,
    /// Its id.
    pub batch_id: String,
    /// What it does to each run.
    pub action: BatchAction,
    /// The list query whose matches, at start, are the batch's runs.
    pub query: String,
    /// Recorded with each action (the cancel's or terminate's reason, the reset's).
    pub reason: String,
    /// Runs acted on per second, at most.
    pub rate: u32,
    /// Who started it.
    pub identity: String,
    /// When it started.
    pub created_ms: Millis,
    /// When it completed or was stopped.
    pub closed_ms: Option<Millis>,
    /// Running, completed or stopped.
    pub state: BatchState,
    /// Who stopped it, and why (empty unless stopped).
    pub stopped_by: String,
    /// Why it was stopped.
    pub stop_reason: String,
    /// Runs in the batch.
    pub total: u64,
    /// Items reached so far, in order (each has an outcome): the next item's index.
    pub next: u64,
    /// Runs acted on.
    pub succeeded: u64,
    /// Runs not acted on (closed already, or gone).
    pub skipped: u64,
    /// Runs whose action was refused.
    pub failed: u64,
}

impl Batch {
    /// Whether it still works through its runs.
    pub fn is_running(&self) -> bool {
        self.state == BatchState::Running
    }

    /// Records an item's outcome in the counts and moves past it; completes the
    /// batch at its last item.
    pub fn record(&mut self, outcome: &Outcome, now: Millis) {
        match outcome {
            Outcome::Done { .. } => self.succeeded += 1,
            Outcome::Skipped { .. } => self.skipped += 1,
            Outcome::Failed { .. } => self.failed += 1,
        }
        self.next += 1;
        if self.next >= self.total {
            self.state = BatchState::Completed;
            self.closed_ms = Some(now);
        }
    }

    /// Stops a running batch; a batch already closed is left as it is (`false`).
    pub fn stop(&mut self, identity: &str, reason: String, now: Millis) -> bool {
        if !self.is_running() {
            return false;
        }
        self.state = BatchState::Stopped;
        self.closed_ms = Some(now);
        self.stopped_by = identity.to_string();
        self.stop_reason = reason;
        true
    }
}

/// What became of one run of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acted on; `new_run_id` is the run a reset or rerun started (else empty).
    Done {
        /// The run a reset or rerun started (empty otherwise).
        new_run_id: String,
    },
    /// Not acted on, and not an error: the run was closed already, or is gone.
    Skipped {
        /// Why.
        reason: String,
    },
    /// The action was refused, with the refusal's message.
    Failed {
        /// The refusal's message.
        reason: String,
    },
}

impl Outcome {
    /// `done`, `skipped`, `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Done { .. } => "done",
            Self::Skipped { .. } => "skipped",
            Self::Failed { .. } => "failed",
        }
    }

    /// The reason (empty for `done`).
    pub fn reason(&self) -> &str {
        match self {
            Self::Done { .. } => "",
            Self::Skipped { reason } | Self::Failed { reason } => reason,
        }
    }
}

/// One run of a batch, and its outcome once reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchItem {
    /// The run.
    pub run_id: String,
    /// What became of it (none: not reached yet).
    pub outcome: Option<Outcome>,
    /// When it was reached.
    pub at_ms: Option<Millis>,
}

/// Checks a batch request's fields (the query is parsed by the server, against the
/// namespace's fields).
pub fn check_request(action: &BatchAction, query: &str, reason: &str, rate: u32) -> Result<(), Rejection> {
    action.check()?;
    if query.trim().is_empty() {
        return Err(Rejection::field(
            "query",
            "must not be empty: a batch acts on the runs a query matches",
        ));
    }
    check_len("query", query, QUERY)?;
    check_len("reason", reason, limits::MESSAGE)?;
    if !(MIN_RATE..=MAX_RATE).contains(&rate) {
        return Err(Rejection::field(
            "rate",
            format!("{rate} runs per second is outside {MIN_RATE}..={MAX_RATE}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(total: u64) -> Batch {
        Batch {
            namespace: "default".into(),
            batch_id: "b".into(),
            action: BatchAction::Terminate,
            query: "Status = \"RUNNING\"".into(),
            reason: String::new(),
            rate: 10,
            identity: "me".into(),
            created_ms: 1,
            closed_ms: None,
            state: BatchState::Running,
            stopped_by: String::new(),
            stop_reason: String::new(),
            total,
            next: 0,
            succeeded: 0,
            skipped: 0,
            failed: 0,
        }
    }

    #[test]
    fn recording_the_last_item_completes_the_batch() {
        let mut b = batch(2);
        b.record(
            &Outcome::Done {
                new_run_id: String::new(),
            },
            5,
        );
        assert!(b.is_running());
        b.record(
            &Outcome::Skipped {
                reason: "closed".into(),
            },
            6,
        );
        assert_eq!(
            (b.state, b.closed_ms, b.succeeded, b.skipped),
            (BatchState::Completed, Some(6), 1, 1)
        );
        assert!(
            !b.stop("me", "late".into(), 7),
            "a completed batch is not stopped"
        );
        assert_eq!(b.state, BatchState::Completed);
    }

    #[test]
    fn requests_are_checked_naming_the_field() {
        let err = |r: Result<(), Rejection>| r.unwrap_err().to_string();
        assert!(err(check_request(&BatchAction::Cancel, " ", "", 10)).starts_with("query:"));
        assert!(err(check_request(&BatchAction::Cancel, "x", "", 0)).starts_with("rate:"));
        assert!(err(check_request(&BatchAction::Cancel, "x", "", MAX_RATE + 1)).starts_with("rate:"));
        let sig = BatchAction::Signal {
            name: "go".into(),
            payload_json: "{nope".into(),
        };
        assert!(err(check_request(&sig, "x", "", 10)).starts_with("signal_payload_json:"));
        let reset = BatchAction::Reset {
            to_step: Some("a b".into()),
        };
        assert!(err(check_request(&reset, "x", "", 10)).starts_with("to_step:"));
        assert!(check_request(&BatchAction::Rerun, "x", "", 10).is_ok());
    }
}
