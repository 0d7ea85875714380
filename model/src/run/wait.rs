//! Waiting steps and child runs: a step that ends its lease to wait (for child runs
//! it started), holding no lease, no task row and no deadline, and resumes from its
//! checkpoint when the wait ends.
//!
//! A resume is not a new attempt: the step is scheduled again under the same attempt
//! number (a new lease), so waiting never uses up the retry policy, as a Temporal
//! activity's heartbeat-resumed work would not. What the step waited for reaches the
//! next worker as `resume_input`, text to append to the transcript as a user message.

use serde_json::json;

use super::*;

/// Longest notes of one child quoted to its parent when it resumes (the child's
/// history has them whole).
pub const MAX_CHILD_NOTES_QUOTED: usize = 16 * 1024;
/// Most artifact paths of one child quoted to its parent.
pub const MAX_CHILD_ARTIFACTS_QUOTED: usize = 64;
/// Longest structured result of one child (its JSON text) quoted to its parent; a
/// longer one is quoted as a string, the start of its JSON text cut with `…` (the
/// child's history has it whole).
pub const MAX_CHILD_RESULT_QUOTED: usize = 16 * 1024;
/// Most bytes of one resume message (it travels in the step's task beside
/// `size::MAX_TASK_BYTES`): with many children, each child's notes, result and
/// artifacts are quoted shorter so that all of them fit.
pub const MAX_RESUME_MESSAGE_BYTES: usize = 1 << 20;

/// What happens to a child run still open when its parent closes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ParentClosePolicy {
    /// Request its cancellation (its worker stops at its next turn).
    #[default]
    Cancel,
    /// End it at once.
    Terminate,
    /// Leave it running.
    Abandon,
}

impl ParentClosePolicy {
    /// The API's name: `cancel`, `terminate`, `abandon`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Terminate => "terminate",
            Self::Abandon => "abandon",
        }
    }

    /// Reads an API name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "" | "cancel" => Some(Self::Cancel),
            "terminate" => Some(Self::Terminate),
            "abandon" => Some(Self::Abandon),
            _ => None,
        }
    }
}

/// How a child run ended, as its parent learns it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildOutcome {
    /// The child run.
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// The notes of its last completed step, or its failure.
    pub notes: String,
    /// The artifacts of all its steps.
    pub artifacts: Vec<String>,
    /// The structured result of its last step, as compact JSON (empty: none; only a
    /// completed run has one).
    pub result: String,
}

impl ChildOutcome {
    /// The outcome of a closed run (`None` while it is open). Notes and result are
    /// kept only as long as they are ever quoted, so a parent's record stays small
    /// however much its children wrote.
    pub fn of(run: &RunState) -> Option<Self> {
        if run.status.is_open() {
            return None;
        }
        let (notes, result) = match run.status {
            RunStatus::Completed => run
                .steps
                .last()
                .map(|s| (s.notes.as_str(), s.result.as_str()))
                .unwrap_or_default(),
            _ => (run.failure.as_str(), ""),
        };
        Some(Self {
            run_id: run.run_id.clone(),
            status: run.status,
            notes: crate::text::cut(notes, MAX_CHILD_NOTES_QUOTED, "…"),
            artifacts: run
                .steps
                .iter()
                .flat_map(|s| s.artifacts.iter().cloned())
                .collect(),
            result: crate::text::cut(result, MAX_CHILD_RESULT_QUOTED, "…"),
        })
    }

    /// The JSON the parent's model reads: `{childRunId, outcome, notes, artifacts,
    /// result}`, `result` being the child's structured result object, `null` when it
    /// has none, or a string (the start of its JSON text, cut with `…`) when it is
    /// longer than [`MAX_CHILD_RESULT_QUOTED`].
    pub fn to_json(&self) -> serde_json::Value {
        self.to_json_within(MAX_CHILD_NOTES_QUOTED, usize::MAX)
    }

    /// [`Self::to_json`] with notes and result cut to `text` bytes (at most their
    /// usual bounds) and artifacts to `artifact_bytes` of paths.
    fn to_json_within(&self, text: usize, artifact_bytes: usize) -> serde_json::Value {
        let mut used = 0;
        let artifacts: Vec<&String> = self
            .artifacts
            .iter()
            .take(MAX_CHILD_ARTIFACTS_QUOTED)
            .take_while(|a| {
                used += a.len();
                used <= artifact_bytes
            })
            .collect();
        json!({
            "childRunId": self.run_id,
            "outcome": self.status.name(),
            "notes": crate::text::cut(&self.notes, text.min(MAX_CHILD_NOTES_QUOTED), "…"),
            "artifacts": artifacts,
            "result": quoted_result(&self.result, text.min(MAX_CHILD_RESULT_QUOTED)),
        })
    }
}

/// A child's result as its parent reads it: `null` for none, the object when it is
/// at most `max` bytes of JSON, else a string, the start of its text cut with `…`.
pub fn quoted_result(result: &str, max: usize) -> serde_json::Value {
    if result.is_empty() {
        serde_json::Value::Null
    } else if result.len() <= max {
        super::wire::result_value(result)
    } else {
        serde_json::Value::String(crate::text::cut(result, max, "…"))
    }
}

/// What a waiting step waits for.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitOn {
    /// Child runs of this run: the step resumes once every one has closed.
    Children {
        /// The children, in the order they were started.
        run_ids: Vec<String>,
        /// The outcomes of those that have closed, in the order they closed.
        done: Vec<ChildOutcome>,
    },
    /// The run is paused: the step resumes when it is unpaused.
    Unpause,
    /// The step's completion is held for a person's approval (`requireConfirmation`).
    Approval(Box<super::Proposal>),
    /// A provider's rate limit under `key`: the step resumes when it resets (the
    /// wait's deadline).
    RateLimit {
        /// The rate-limit key the worker named (empty: none).
        key: String,
    },
}

impl WaitOn {
    /// The API's name of a wait for a rate limit.
    pub const RATE_LIMIT: &'static str = "rate_limit";

    /// The API's name of what it waits for: `children`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Children { .. } => "children",
            Self::Unpause => "unpause",
            Self::Approval(_) => "approval",
            Self::RateLimit { .. } => Self::RATE_LIMIT,
        }
    }

    /// Whether the wait's condition is met.
    fn satisfied(&self) -> bool {
        match self {
            Self::Children { run_ids, done } => run_ids.iter().all(|id| done.iter().any(|d| &d.run_id == id)),
            Self::Unpause | Self::Approval(_) | Self::RateLimit { .. } => false,
        }
    }
}

/// A step's wait in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// What it waits for.
    pub on: WaitOn,
    /// When it began.
    pub since_ms: Millis,
    /// When the wait times out (a `WaitTimeout` timer row is armed for it).
    pub deadline_ms: Option<Millis>,
    /// The id of its `StepWaiting` event: names this wait in its timer.
    pub wait_id: u64,
}

/// A child run started under a step's lease, as its parent records it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildStarted {
    /// The child run.
    pub run_id: String,
    /// The workflow it runs.
    pub workflow_id: String,
    /// What becomes of it when the parent closes first.
    pub parent_close_policy: ParentClosePolicy,
}

impl RunState {
    /// Records child runs started under the lease `claims` names (the children
    /// themselves are started by the same command, in the same transaction).
    pub fn children_started(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        children: &[ChildStarted],
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_lease(claims)?;
        let step_id = self.step_id();
        for c in children {
            self.children_started += 1;
            self.push(
                out,
                identity,
                EventKind::ChildRunStarted {
                    child_run_id: c.run_id.clone(),
                    workflow_id: c.workflow_id.clone(),
                    step_id: step_id.clone(),
                    parent_close_policy: c.parent_close_policy,
                },
            );
        }
        Ok(())
    }

    /// Ends the lease `claims` names with the step waiting on child runs `run_ids`
    /// (`done`: the outcomes of those already closed). The checkpoint is stored; the
    /// step holds no lease, no task and no deadline until the wait ends, at once if
    /// every child has closed already.
    pub fn suspend_on_children(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        checkpoint: Vec<u8>,
        run_ids: Vec<String>,
        done: Vec<ChildOutcome>,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_lease(claims)?;
        if !checkpoint.is_empty() {
            out.effects.push(Effect::SaveCheckpoint(checkpoint));
        }
        self.resume_input.clear();
        if self.cancel_requested {
            // The worker should have stopped: the step ends here, as a cancel would.
            self.steps[self.current_step].state = "FAILED".into();
            self.close_on_cancel_request(out);
            return Ok(());
        }
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let step = &self.definition.steps[self.current_step];
        let deadline_ms = step.wait_timeout_ms().map(|t| out.now + t);
        self.push(
            out,
            identity,
            EventKind::StepWaiting {
                step_id,
                attempt,
                on: "children".into(),
                run_ids: run_ids.clone(),
                deadline_ms,
            },
        );
        let wait_id = self.last_event_id;
        self.steps[self.current_step].state = "WAITING".into();
        self.phase = Phase::Waiting(Waiting {
            on: WaitOn::Children { run_ids, done },
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
        if self.waiting().is_some_and(|w| w.on.satisfied()) {
            self.resume("children", out);
        }
        Ok(())
    }

    /// The wait in progress, if the step waits.
    pub fn waiting(&self) -> Option<&Waiting> {
        match &self.phase {
            Phase::Waiting(w) if self.status.is_open() => Some(w),
            _ => None,
        }
    }

    /// A child run of this run closed: recorded in history, and, when the step waits
    /// for it and it was the last, the step resumes. A closed parent records nothing.
    pub fn child_closed(&mut self, child: ChildOutcome, out: &mut Out) {
        if !self.status.is_open() {
            return;
        }
        self.push(
            out,
            "server",
            EventKind::ChildRunCompleted {
                child_run_id: child.run_id.clone(),
                status: child.status,
                notes: crate::text::cut(&child.notes, MAX_CHILD_NOTES_QUOTED, "…"),
                artifacts: child.artifacts.clone(),
                result: crate::text::cut(&child.result, MAX_CHILD_RESULT_QUOTED, "…"),
            },
        );
        let satisfied = match &mut self.phase {
            Phase::Waiting(Waiting {
                on: WaitOn::Children { run_ids, done },
                ..
            }) => {
                if run_ids.contains(&child.run_id) && !done.iter().any(|d| d.run_id == child.run_id) {
                    done.push(child);
                }
                run_ids.iter().all(|id| done.iter().any(|d| &d.run_id == id))
            }
            _ => false,
        };
        if satisfied {
            self.resume("children", out);
        }
    }

    /// A wait timer fired: if wait `wait_id` is still in progress, end it by the
    /// step's policy (`fail`: the step fails without retry; `resume`: it resumes
    /// with what has arrived). A stale timer does nothing.
    pub fn wait_timer(&mut self, wait_id: u64, out: &mut Out) {
        if self.waiting().is_none_or(|w| w.wait_id != wait_id) {
            return;
        }
        if matches!(
            self.waiting(),
            Some(Waiting {
                on: WaitOn::Approval(_),
                ..
            })
        ) {
            self.approval_timed_out(out);
            return;
        }
        if matches!(
            self.waiting(),
            Some(Waiting {
                on: WaitOn::RateLimit { .. },
                ..
            })
        ) {
            self.rate_limit_reset(out);
            return;
        }
        let step = &self.definition.steps[self.current_step];
        match step.wait_timeout_policy() {
            crate::workflow::WaitTimeoutPolicy::Resume => self.resume("timeout", out),
            crate::workflow::WaitTimeoutPolicy::Fail => {
                let (step_id, attempt) = (self.step_id(), self.attempt());
                self.steps[self.current_step].last_failure = "timed out (Wait)".into();
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
                self.after_failure(None, &format!("step timed out waiting on attempt {attempt}"), out);
            }
        }
    }

    /// Ends the wait: `StepResumed`, and the step scheduled again under the same
    /// attempt, with what it waited for as input to its transcript.
    fn resume(&mut self, reason: &str, out: &mut Out) {
        let Phase::Waiting(w) = &self.phase else {
            return;
        };
        let message = resume_message(&w.on, reason);
        self.resume_with(reason, message, out);
    }

    /// Ends the wait with `message` as what the step reads when it resumes.
    pub(super) fn resume_with(&mut self, reason: &str, message: String, out: &mut Out) {
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
                reason: reason.into(),
                waited_ms,
            },
        );
        self.resume_input.push(message);
        self.schedule_or_park(self.current_step, attempt, out);
    }

    /// Schedules step `index`'s attempt, or, while the run is paused, parks the step
    /// to wait for the unpause instead (no task is queued).
    pub(super) fn schedule_or_park(&mut self, index: usize, attempt: u32, out: &mut Out) {
        if !self.paused {
            self.schedule(index, attempt, out);
            return;
        }
        self.current_step = index;
        self.steps[index].attempt = attempt;
        self.park(out);
    }

    /// The step waits for the run to be unpaused.
    fn park(&mut self, out: &mut Out) {
        let (step_id, attempt) = (self.step_id(), self.attempt());
        self.push(
            out,
            "server",
            EventKind::StepWaiting {
                step_id,
                attempt,
                on: "unpause".into(),
                run_ids: Vec::new(),
                deadline_ms: None,
            },
        );
        self.steps[self.current_step].state = "WAITING".into();
        self.phase = Phase::Waiting(Waiting {
            on: WaitOn::Unpause,
            since_ms: out.now,
            deadline_ms: None,
            wait_id: self.last_event_id,
        });
    }

    /// Pauses the run: no step is dispatched until it is unpaused. A step queued is
    /// taken back; a step in flight is asked (on its next heartbeat) to suspend at its
    /// next turn. Answers whether anything changed.
    pub fn pause(&mut self, identity: &str, reason: String, out: &mut Out) -> Result<bool, Refusal> {
        self.require_open(Action::Pause)?;
        if self.paused {
            return Ok(false);
        }
        self.paused = true;
        self.push(out, identity, EventKind::RunPaused { reason });
        if let Phase::Scheduled { queue, task_seq } = &self.phase {
            out.effects.push(Effect::RemoveTask {
                queue: queue.clone(),
                task_seq: *task_seq,
            });
            self.park(out);
        }
        Ok(true)
    }

    /// Unpauses the run; a step parked by the pause is scheduled again under the same
    /// attempt, to resume from its checkpoint. Answers whether anything changed.
    pub fn unpause(&mut self, identity: &str, out: &mut Out) -> Result<bool, Refusal> {
        self.require_open(Action::Unpause)?;
        if !self.paused {
            return Ok(false);
        }
        self.paused = false;
        self.push(out, identity, EventKind::RunUnpaused {});
        if matches!(
            self.waiting(),
            Some(Waiting {
                on: WaitOn::Unpause,
                ..
            })
        ) {
            self.resume("unpause", out);
        }
        Ok(true)
    }

    /// The worker suspended the step because the run is paused (it reported the
    /// error type [`PAUSED_ERROR_TYPE`]): the step parks with its checkpoint; this is
    /// no failure and uses up no attempt.
    pub(super) fn suspend_paused(
        &mut self,
        claims: &TokenClaims,
        checkpoint: Vec<u8>,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_lease(claims)?;
        if !checkpoint.is_empty() {
            out.effects.push(Effect::SaveCheckpoint(checkpoint));
        }
        self.resume_input.clear();
        self.park(out);
        Ok(())
    }
}

/// The error type a worker reports (`FailStepTask`) when it suspended a step because
/// its run is paused.
pub const PAUSED_ERROR_TYPE: &str = "paused";

/// The text a resumed step's model reads: what it waited for, as JSON.
pub(super) fn resume_message(on: &WaitOn, reason: &str) -> String {
    match on {
        WaitOn::Unpause => {
            "[railyard] The run was paused and has been unpaused; continue where you left off.".into()
        }
        // An approval's end writes its own message (`approval.rs`); never reached.
        WaitOn::Approval(_) => format!("[railyard] The wait for approval ended ({reason})."),
        // A rate limit's reset resumes without a message (`rate_limit.rs`); never reached.
        WaitOn::RateLimit { .. } => format!("[railyard] The wait for a rate limit ended ({reason})."),
        WaitOn::Children { run_ids, done } => {
            // In the order the step started (or named) them, not the order they closed.
            let finished: Vec<&ChildOutcome> = run_ids
                .iter()
                .filter_map(|id| done.iter().find(|d| &d.run_id == id))
                .collect();
            let pending: Vec<&String> = run_ids
                .iter()
                .filter(|id| !done.iter().any(|d| &d.run_id == *id))
                .collect();
            let head = if reason == "timeout" {
                "[the wait for your child runs timed out; these have finished, the rest are still running]"
            } else {
                "[the child runs you waited for have finished]"
            };
            // Each child's share of the message; halved until the whole fits (JSON
            // escaping can make text longer than its bytes), down to no text at all.
            let mut share = MAX_RESUME_MESSAGE_BYTES / 2 / finished.len().max(1);
            loop {
                let results: Vec<serde_json::Value> = finished
                    .iter()
                    .map(|c| c.to_json_within(share / 3, share / 3))
                    .collect();
                let body = json!({ "children": results, "stillRunning": pending });
                let message = format!("{head}\n{body}");
                if message.len() <= MAX_RESUME_MESSAGE_BYTES || share == 0 {
                    return message;
                }
                share /= 2;
            }
        }
    }
}
