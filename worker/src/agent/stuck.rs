//! Stuck detection: signs that an agent is going round in circles.
//!
//! Three signals, each with a threshold a step may set (`stuck` in its definition,
//! [`StuckThresholds`]; 0 or absent takes the default):
//!
//! - `repeated_call`: the same tool call with the same arguments `repeatedCalls`
//!   times in a row (default 3);
//! - `repeated_error`: the same error from the same tool `repeatedErrors` times in
//!   the step (default 3);
//! - `no_progress`: no progress call (`complete_step`, `signal_coordinator`, a
//!   successful `write_file` or `edit_file`) in the last `noProgressTurns` turns
//!   (default 10).
//!
//! The first sign is a warning: the model is told plainly, in a user message naming
//! the loop, and the warning is recorded in history (`AgentStuckWarning`). If the same
//! sign shows again (the same call once more, the same error once more, or two more
//! turns without progress) the step fails with the non-retryable `agent_stuck` and an
//! `AgentStuck` event naming the signal. Breaking the loop (a different call, progress)
//! clears the warning.

use std::collections::HashMap;

use railyard_model::text::prefix;
use railyard_proto::v1;
use serde_json::Value;

use crate::tools::{COMPLETE_STEP, SIGNAL_COORDINATOR};

/// Default of `repeatedCalls`.
const DEFAULT_REPEATED_CALLS: u32 = 3;
/// Default of `repeatedErrors`.
const DEFAULT_REPEATED_ERRORS: u32 = 3;
/// Default of `noProgressTurns`.
const DEFAULT_NO_PROGRESS_TURNS: u32 = 10;
/// Turns without progress, after a warning, before the step fails.
const NO_PROGRESS_GRACE: u32 = 2;
/// Distinct errors remembered per step (older ones are forgotten first).
const MAX_ERRORS_TRACKED: usize = 64;
/// Bytes of an error message that identify it.
const ERROR_KEY_BYTES: usize = 200;

/// When a step's agent counts as stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StuckThresholds {
    pub repeated_calls: u32,
    pub repeated_errors: u32,
    pub no_progress_turns: u32,
}

impl Default for StuckThresholds {
    fn default() -> Self {
        Self {
            repeated_calls: DEFAULT_REPEATED_CALLS,
            repeated_errors: DEFAULT_REPEATED_ERRORS,
            no_progress_turns: DEFAULT_NO_PROGRESS_TURNS,
        }
    }
}

impl StuckThresholds {
    /// The task's thresholds, each 0 (or absent) taking the default.
    pub(super) fn from_task(task: &v1::StepTask) -> Self {
        let d = Self::default();
        let Some(s) = &task.stuck else { return d };
        let or = |v: u32, default: u32| if v == 0 { default } else { v };
        Self {
            repeated_calls: or(s.repeated_calls, d.repeated_calls),
            repeated_errors: or(s.repeated_errors, d.repeated_errors),
            no_progress_turns: or(s.no_progress_turns, d.no_progress_turns),
        }
    }
}

/// Which sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum StuckSignal {
    RepeatedCall,
    RepeatedError,
    NoProgress,
}

impl StuckSignal {
    /// As history and the wire name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::RepeatedCall => "repeated_call",
            Self::RepeatedError => "repeated_error",
            Self::NoProgress => "no_progress",
        }
    }
}

/// A sign, and whether it ends the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StuckVerdict {
    pub signal: StuckSignal,
    /// What the model (and history) is told.
    pub message: String,
    /// `false`: a warning; `true`: the step fails `agent_stuck`.
    pub fatal: bool,
}

/// One tool call of a turn and how it went.
#[derive(Debug, Clone, Copy)]
pub(super) struct CallOutcome<'a> {
    pub name: &'a str,
    pub input: &'a Value,
    pub is_error: bool,
    /// The result text (the error, when `is_error`).
    pub content: &'a str,
}

/// Watches one step's turns.
#[derive(Debug)]
pub(super) struct StuckDetector {
    thresholds: StuckThresholds,
    /// The last call (name and arguments as JSON text) and how many times in a row.
    last_call: Option<(String, String)>,
    call_streak: u32,
    call_warned: bool,
    /// Per (tool, error prefix): times seen, and whether warned.
    errors: HashMap<(String, String), (u32, bool)>,
    /// Insertion order of `errors`, to forget the oldest.
    error_order: Vec<(String, String)>,
    turns_without_progress: u32,
    progress_warned: bool,
}

impl StuckDetector {
    pub(super) fn new(thresholds: StuckThresholds) -> Self {
        Self {
            thresholds,
            last_call: None,
            call_streak: 0,
            call_warned: false,
            errors: HashMap::new(),
            error_order: Vec::new(),
            turns_without_progress: 0,
            progress_warned: false,
        }
    }

    /// Looks at one finished turn; the strongest sign it shows, if any (a fatal one
    /// before a warning).
    pub(super) fn observe_turn(&mut self, calls: &[CallOutcome<'_>]) -> Option<StuckVerdict> {
        let mut verdicts = Vec::new();
        let mut progress = false;
        for call in calls {
            progress |= is_progress(call);
            if let Some(v) = self.observe_call(call) {
                verdicts.push(v);
            }
            if call.is_error
                && let Some(v) = self.observe_error(call)
            {
                verdicts.push(v);
            }
        }
        if progress {
            self.turns_without_progress = 0;
            self.progress_warned = false;
        } else {
            self.turns_without_progress += 1;
            let k = self.thresholds.no_progress_turns;
            if self.progress_warned && self.turns_without_progress >= k + NO_PROGRESS_GRACE {
                verdicts.push(StuckVerdict {
                    signal: StuckSignal::NoProgress,
                    message: format!(
                        "no progress in {} turns, even after a warning: no complete_step, signal_coordinator or file write",
                        self.turns_without_progress
                    ),
                    fatal: true,
                });
            } else if !self.progress_warned && self.turns_without_progress >= k {
                self.progress_warned = true;
                verdicts.push(StuckVerdict {
                    signal: StuckSignal::NoProgress,
                    message: format!(
                        "You have made no progress in {k} turns: no file written, no note sent, no complete_step. \
                         Stop exploring: write your result, call signal_coordinator if you are blocked, or call \
                         complete_step. The step fails if this goes on."
                    ),
                    fatal: false,
                });
            }
        }
        verdicts.sort_by_key(|v| !v.fatal);
        verdicts.into_iter().next()
    }

    fn observe_call(&mut self, call: &CallOutcome<'_>) -> Option<StuckVerdict> {
        let key = (call.name.to_string(), call.input.to_string());
        if self.last_call.as_ref() == Some(&key) {
            self.call_streak += 1;
        } else {
            self.last_call = Some(key);
            self.call_streak = 1;
            self.call_warned = false;
        }
        let n = self.thresholds.repeated_calls;
        if self.call_streak < n {
            return None;
        }
        let name = call.name;
        if self.call_warned {
            return Some(StuckVerdict {
                signal: StuckSignal::RepeatedCall,
                message: format!(
                    "the same {name} call with the same arguments {} times in a row, even after a warning",
                    self.call_streak
                ),
                fatal: true,
            });
        }
        self.call_warned = true;
        Some(StuckVerdict {
            signal: StuckSignal::RepeatedCall,
            message: format!(
                "You have called {name} with the same arguments {} times in a row and got the same kind of \
                 answer. Repeating it will not change the result: try something different, or call \
                 signal_coordinator if you are blocked. The step fails if you call it the same way again.",
                self.call_streak
            ),
            fatal: false,
        })
    }

    fn observe_error(&mut self, call: &CallOutcome<'_>) -> Option<StuckVerdict> {
        let key = (
            call.name.to_string(),
            prefix(call.content, ERROR_KEY_BYTES).to_string(),
        );
        if !self.errors.contains_key(&key) {
            if self.error_order.len() >= MAX_ERRORS_TRACKED {
                let oldest = self.error_order.remove(0);
                self.errors.remove(&oldest);
            }
            self.error_order.push(key.clone());
        }
        let entry = self.errors.entry(key).or_insert((0, false));
        entry.0 += 1;
        let (count, warned) = *entry;
        let n = self.thresholds.repeated_errors;
        if count < n {
            return None;
        }
        let (name, error) = (call.name, prefix(call.content, 120));
        if warned {
            return Some(StuckVerdict {
                signal: StuckSignal::RepeatedError,
                message: format!(
                    "{name} failed with the same error {count} times, even after a warning: {error}"
                ),
                fatal: true,
            });
        }
        entry.1 = true;
        Some(StuckVerdict {
            signal: StuckSignal::RepeatedError,
            message: format!(
                "{name} has failed {count} times with the same error: {error}. Read the error and change your \
                 approach; the step fails if the same error comes again."
            ),
            fatal: false,
        })
    }
}

/// A call that moves the step forward.
fn is_progress(call: &CallOutcome<'_>) -> bool {
    !call.is_error
        && matches!(
            call.name,
            COMPLETE_STEP | SIGNAL_COORDINATOR | "write_file" | "edit_file"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call<'a>(name: &'a str, input: &'a Value) -> CallOutcome<'a> {
        CallOutcome {
            name,
            input,
            is_error: false,
            content: "ok",
        }
    }

    #[test]
    fn the_same_call_is_warned_then_fatal() {
        let mut d = StuckDetector::new(StuckThresholds::default());
        let ls = json!({"path": "."});
        assert_eq!(d.observe_turn(&[call("list_files", &ls)]), None);
        assert_eq!(d.observe_turn(&[call("list_files", &ls)]), None);
        let warn = d.observe_turn(&[call("list_files", &ls)]).unwrap();
        assert_eq!((warn.signal, warn.fatal), (StuckSignal::RepeatedCall, false));
        assert!(
            warn.message.contains("list_files") && warn.message.contains("3 times"),
            "{}",
            warn.message
        );
        let fatal = d.observe_turn(&[call("list_files", &ls)]).unwrap();
        assert_eq!((fatal.signal, fatal.fatal), (StuckSignal::RepeatedCall, true));
    }

    #[test]
    fn varied_calls_are_not_flagged_and_a_break_clears_the_warning() {
        let mut d = StuckDetector::new(StuckThresholds {
            no_progress_turns: 100,
            ..Default::default()
        });
        let inputs: Vec<Value> = (0..8).map(|i| json!({"path": format!("f{i}.txt")})).collect();
        for input in &inputs {
            assert_eq!(d.observe_turn(&[call("read_file", input)]), None);
        }
        let a = json!({"path": "a"});
        let b = json!({"path": "b"});
        for _ in 0..2 {
            assert_eq!(d.observe_turn(&[call("read_file", &a)]), None);
        }
        assert!(!d.observe_turn(&[call("read_file", &a)]).unwrap().fatal);
        assert_eq!(d.observe_turn(&[call("read_file", &b)]), None);
        // A new streak of the old call starts over: warned again, not failed.
        d.observe_turn(&[call("read_file", &a)]);
        d.observe_turn(&[call("read_file", &a)]);
        assert!(!d.observe_turn(&[call("read_file", &a)]).unwrap().fatal);
    }

    #[test]
    fn the_same_error_counts_across_turns() {
        let t = StuckThresholds {
            repeated_errors: 2,
            ..Default::default()
        };
        let mut d = StuckDetector::new(t);
        let (x, y) = (json!({"command": "make"}), json!({"command": "make all"}));
        let fail = |input| CallOutcome {
            name: "bash",
            input,
            is_error: true,
            content: "exit status 2: no rule to make target",
        };
        assert_eq!(d.observe_turn(&[fail(&x)]), None);
        let warn = d.observe_turn(&[fail(&y)]).unwrap();
        assert_eq!((warn.signal, warn.fatal), (StuckSignal::RepeatedError, false));
        let fatal = d.observe_turn(&[fail(&x)]).unwrap();
        assert_eq!((fatal.signal, fatal.fatal), (StuckSignal::RepeatedError, true));
    }

    #[test]
    fn no_progress_is_warned_then_fatal_and_progress_resets_it() {
        let t = StuckThresholds {
            no_progress_turns: 3,
            ..Default::default()
        };
        let mut d = StuckDetector::new(t);
        let reads: Vec<Value> = (0..20).map(|i| json!({"path": i.to_string()})).collect();
        let mut it = reads.iter();
        let mut read = || call("read_file", it.next().unwrap());
        assert_eq!(d.observe_turn(&[read()]), None);
        assert_eq!(d.observe_turn(&[read()]), None);
        let warn = d.observe_turn(&[read()]).unwrap();
        assert_eq!((warn.signal, warn.fatal), (StuckSignal::NoProgress, false));
        // A write is progress: the count starts over.
        let w = json!({"path": "out.md", "content": "x"});
        assert_eq!(d.observe_turn(&[call("write_file", &w)]), None);
        assert_eq!(d.observe_turn(&[read()]), None);
        assert_eq!(d.observe_turn(&[read()]), None);
        assert!(!d.observe_turn(&[read()]).unwrap().fatal);
        assert_eq!(d.observe_turn(&[read()]), None);
        let fatal = d.observe_turn(&[read()]).unwrap();
        assert_eq!((fatal.signal, fatal.fatal), (StuckSignal::NoProgress, true));
    }

    #[test]
    fn thresholds_come_from_the_task_with_defaults() {
        let mut task = v1::StepTask::default();
        assert_eq!(StuckThresholds::from_task(&task), StuckThresholds::default());
        task.stuck = Some(v1::StuckThresholds {
            repeated_calls: 5,
            repeated_errors: 0,
            no_progress_turns: 4,
        });
        let t = StuckThresholds::from_task(&task);
        assert_eq!(
            (t.repeated_calls, t.repeated_errors, t.no_progress_turns),
            (5, 3, 4)
        );
    }
}
