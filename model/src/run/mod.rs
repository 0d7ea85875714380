//! The state machine of a run: its state row, its events, and every legal
//! transition. Pure: no storage, no clock, no I/O. Each transition appends numbered
//! events and effects to an [`Out`]; the store writes both in the same transaction
//! as the new state, so history and state never disagree.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::Millis;
use crate::contract::{MAX_RECORDED_REFUSALS, Violations};
use crate::token::TokenClaims;
use crate::trace::TraceContext;
use crate::workflow::WorkflowDef;

mod approval;
pub mod attrs;
pub mod delivery;
mod events;
mod failure;
mod heartbeat;
pub mod issue;
#[cfg(test)]
mod issue_tests;
mod rate_limit;
mod refusal;
pub mod reset;
pub mod size;
#[cfg(test)]
mod test_fx;
pub mod usage;
mod wait;
pub mod wire;

pub use approval::{Proposal, rejection_message};
pub use delivery::{Attempt, AttemptOutcome, Delivery, DeliveryPolicy, DeliveryStatus, DeliveryTarget};
pub use events::{Event, EventKind, RunStatus, TimeoutKind};
pub use heartbeat::{HeartbeatNote, StuckNote, UsageOutcome};
pub use issue::{Issue, IssueReport, Severity};
pub use rate_limit::{MAX_RATE_LIMIT_PARK_MS, RATE_LIMITED_ERROR_TYPE};
pub use refusal::{Action, LeaseRef, Refusal};
pub use reset::{CarriedStep, ResetKind, ResetPlan, ResetRequest};
pub use usage::{RunBudget, TOKEN_BUDGET_EXCEEDED, Usage};
pub use wait::{
    ChildOutcome, ChildStarted, MAX_CHILD_NOTES_QUOTED, PAUSED_ERROR_TYPE, ParentClosePolicy, WaitOn, Waiting,
};
pub use wait::{MAX_CHILD_RESULT_QUOTED, MAX_RESUME_MESSAGE_BYTES, quoted_result};

/// The lease of the step attempt in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// Its number, which the task token names.
    pub seq: u64,
    /// The worker holding it.
    pub worker: String,
    /// When it was granted.
    pub started_ms: Millis,
    /// When the start-to-close timeout ends it.
    pub close_deadline_ms: Millis,
    /// The step's heartbeat timeout (none: no heartbeats required).
    pub heartbeat_timeout_ms: Option<Millis>,
    /// When it ends without another heartbeat.
    pub heartbeat_deadline_ms: Option<Millis>,
}

impl Lease {
    /// The earlier of the two deadlines, and which one it is.
    pub fn next_deadline(&self) -> (Millis, TimeoutKind) {
        match self.heartbeat_deadline_ms {
            Some(hb) if hb < self.close_deadline_ms => (hb, TimeoutKind::Heartbeat),
            _ => (self.close_deadline_ms, TimeoutKind::StartToClose),
        }
    }
}

/// Where the current step is.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Waiting in a task queue as task `task_seq`.
    Scheduled {
        /// The task queue.
        queue: String,
        /// The task's number.
        task_seq: u64,
    },
    /// Leased to a worker.
    Started(Lease),
    /// Waiting for the retry backoff to pass.
    BackingOff {
        /// When the backoff ends.
        until_ms: Millis,
    },
    /// The step waits (for child runs), holding no lease and no task.
    Waiting(Waiting),
    /// The run is closed.
    Closed,
}

/// Per-step record, for describing a run and for later steps' prompts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepRecord {
    /// `scheduled`, `running`, `completed`, ...
    pub state: String,
    /// The current or last attempt, from 1 (0: not yet started).
    pub attempt: u32,
    /// What its completion reported.
    pub notes: String,
    /// What its completion produced.
    pub artifacts: Vec<String>,
    /// The worker of the last lease.
    pub worker: String,
    /// The last failure's message.
    pub last_failure: String,
    /// The structured result of its completion, as compact JSON (empty: none).
    pub result: String,
    /// Refusals of a result recorded for the current attempt (see
    /// [`RunState::refuse_result`]).
    pub result_refusals: u32,
    /// Tokens of all the step's attempts.
    pub usage: Usage,
    /// The running total the attempt in flight last reported.
    pub attempt_usage: Usage,
    /// The model the last report named.
    pub model: String,
    /// Issues its agents reported, over all its attempts (`report_issue`).
    pub issues: u32,
    /// Issues recorded for the current attempt (bounded, [`issue::MAX_RECORDED_ISSUES`]).
    pub attempt_issues: u32,
    /// Mid-step changes of the run's search attributes recorded for the current
    /// attempt (bounded, [`attrs::MAX_UPDATES_PER_ATTEMPT`]).
    pub attempt_attribute_updates: u32,
    /// Carried over, as it completed, from the run this one was reset from
    /// (`reset`): its usage is not this run's spending.
    pub carried: bool,
}

/// A signal recorded in history that the worker has not yet acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingSignal {
    /// The `SignalReceived` event.
    pub event_id: u64,
    /// The signal's name.
    pub name: String,
    /// Its payload, as JSON text.
    pub payload_json: String,
}

/// The state of a run. Not a storage format: the store writes it as a
/// `store::records` run record, which names its definition instead of holding it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    /// The run's namespace.
    pub namespace: String,
    /// The run's id.
    pub run_id: String,
    /// The workflow it runs.
    pub workflow_id: String,
    /// Shared with the registry and the store's definition cache: cloning a run
    /// never copies its definition.
    pub definition: Arc<WorkflowDef>,
    /// Where it is in its life.
    pub status: RunStatus,
    /// Its goal.
    pub goal: String,
    /// Its context, as the steps so far left it.
    pub context: BTreeMap<String, String>,
    /// The parent run (empty: a root).
    pub parent_run_id: String,
    /// The start's request id (empty: none).
    pub request_id: String,
    /// Where its result is posted when it closes (empty: nowhere).
    pub callback_url: String,
    /// The queue of steps that name none (empty: the definition's).
    pub task_queue: String,
    /// The schedule that started it (empty: none); told when the run closes.
    pub schedule_id: String,
    /// When it started.
    pub start_ms: Millis,
    /// When it closed (none: open).
    pub close_ms: Option<Millis>,
    /// The id of its last history event.
    pub last_event_id: u64,
    /// The index of the step in progress.
    pub current_step: usize,
    /// Where the current step is.
    pub phase: Phase,
    /// One record per step of the definition.
    pub steps: Vec<StepRecord>,
    /// Leases granted so far (the next lease's number).
    pub lease_counter: u64,
    /// A client asked it to cancel.
    pub cancel_requested: bool,
    /// Why it failed (empty: it did not).
    pub failure: String,
    /// Signals the worker has not acknowledged yet.
    pub pending_signals: Vec<PendingSignal>,
    /// The step of the parent run that started this one (empty: none).
    pub parent_step_id: String,
    /// 0 for a run nobody spawned; a child's is its parent's plus one.
    pub depth: u32,
    /// What happens to this run if it is still open when its parent closes.
    pub parent_close_policy: ParentClosePolicy,
    /// Child runs this run has started, for the per-run limit.
    pub children_started: u32,
    /// What a step resumed from a wait is to read, for the next worker that leases it
    /// (cleared once its checkpoint holds it, or the step ends).
    pub resume_input: Vec<String>,
    /// Paused: no step is dispatched until it is unpaused.
    pub paused: bool,
    /// Tokens of all the run's steps.
    pub usage: Usage,
    /// The run's token budget.
    pub budget: RunBudget,
    /// Result deliveries, one per target, armed as the run closes (`delivery`).
    pub deliveries: Vec<Delivery>,
    /// The OpenTelemetry trace the run's spans join (`crate::trace`).
    pub trace: TraceContext,
    /// The first issues its agents reported (at most [`issue::MAX_KEPT_ISSUES`]);
    /// the steps count them all.
    pub issues: Vec<Issue>,
    /// The principles its steps' agents follow, composed and pinned when it started
    /// (`crate::principles`; empty: none).
    pub principles: String,
    /// The run this one was reset or rerun from (empty: none; see `reset`).
    pub reset_from: String,
    /// The latest run reset or rerun from this one (empty: none).
    pub reset_to: String,
    /// Its search attributes (`crate::attributes`).
    pub attributes: crate::attributes::Attributes,
    /// Its priority, fairness and concurrency keys (`crate::flow`).
    pub flow: crate::flow::Flow,
}

/// Work for the store besides writing events and the state row.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Add a ready task row (and, after commit, hand it to matching).
    EnqueueTask {
        /// The task queue.
        queue: String,
        /// The task's number.
        task_seq: u64,
    },
    /// Remove a ready task row that is no longer wanted.
    RemoveTask {
        /// The task queue.
        queue: String,
        /// The task's number.
        task_seq: u64,
    },
    /// Fire `timer` at `due_ms`.
    Timer {
        /// When it fires.
        due_ms: Millis,
        /// What it does.
        timer: Timer,
    },
    /// Replace the checkpoint with these bytes.
    SaveCheckpoint(Vec<u8>),
    /// Append these bytes to the checkpoint (its base was checked by the command).
    AppendCheckpoint(Vec<u8>),
    /// Step `step`'s checkpoint is final (the step completed, or the run closed while
    /// it was in flight): the writer keeps it as the step's transcript, within the
    /// per-run bound, or drops it.
    EndCheckpoint {
        /// The step's index.
        step: usize,
    },
}

/// What a heartbeat does to the stored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointUpdate {
    /// Leaves it as it is.
    Keep,
    /// Replaces it whole.
    Replace(Vec<u8>),
    /// Appends to it (the caller checked that the worker's base is the stored one).
    Append(Vec<u8>),
}

impl From<Vec<u8>> for CheckpointUpdate {
    /// Empty bytes keep the checkpoint; others replace it.
    fn from(bytes: Vec<u8>) -> Self {
        if bytes.is_empty() {
            Self::Keep
        } else {
            Self::Replace(bytes)
        }
    }
}

/// What a durable timer does when it fires. A stale timer (its attempt has moved on)
/// does nothing. Lease deadlines are not timers: see [`RunState::lease_deadline`].
#[derive(Debug, Clone, PartialEq)]
pub enum Timer {
    /// A step's retry backoff passed: schedule its next attempt.
    Backoff {
        /// The run's namespace.
        namespace: String,
        /// The run.
        run_id: String,
        /// The step's index.
        step_index: usize,
        /// The attempt to schedule.
        attempt: u32,
    },
    /// A schedule's next fire time came: evaluate it. A stale one (the schedule
    /// keeps another timer, or is gone) does nothing.
    ScheduleFire {
        /// The schedule's namespace.
        namespace: String,
        /// The schedule.
        schedule_id: String,
    },
    /// A step's wait timed out (`wait_id`: its `StepWaiting` event); stale once the
    /// wait has ended.
    WaitTimeout {
        /// The run's namespace.
        namespace: String,
        /// The run.
        run_id: String,
        /// The wait's `StepWaiting` event.
        wait_id: u64,
    },
    /// Attempt `attempt` of a run's result delivery to `target` (its name): start it,
    /// or, when it is in flight, its deadline passed (see `delivery`).
    Delivery {
        /// The run's namespace.
        namespace: String,
        /// The run.
        run_id: String,
        /// The delivery target's name.
        target: String,
        /// The attempt, from 1.
        attempt: u32,
    },
}

/// Parameters of a new run, checked by the caller.
#[derive(Debug, Clone, Default)]
pub struct StartParams {
    /// The namespace it starts in.
    pub namespace: String,
    /// Its run id.
    pub run_id: String,
    /// Its goal.
    pub goal: String,
    /// Its starting context.
    pub context: BTreeMap<String, String>,
    /// The start's request id (empty: none).
    pub request_id: String,
    /// The parent run (empty: a root).
    pub parent_run_id: String,
    /// Where its result is posted when it closes (empty: nowhere).
    pub callback_url: String,
    /// The queue of steps that name none (empty: the definition's).
    pub task_queue: String,
    /// The schedule starting it (empty: none).
    pub schedule_id: String,
    /// Who starts it.
    pub identity: String,
    /// The parent's step that starts it (empty: none).
    pub parent_step_id: String,
    /// Its depth in its tree (0: a root).
    pub depth: u32,
    /// What becomes of it when its parent closes first.
    pub parent_close_policy: ParentClosePolicy,
    /// The run's budget; each limit not given here is the definition's.
    pub budget: RunBudget,
    /// The trace it joins (`None`: derived from its namespace and id).
    pub trace: Option<TraceContext>,
    /// Search attributes to set, as text (name → value), read by the namespace's
    /// declarations when the start is checked (`crate::attributes::parse_set`).
    pub attributes: BTreeMap<String, String>,
    /// Its priority and keys (`crate::flow`); a child's are its parent's unless told.
    pub flow: crate::flow::Flow,
}

/// Collects a transition's events and effects. `next_seq` hands out task and
/// timer sequence numbers, shared by every run.
pub struct Out<'a> {
    /// The transition's time.
    pub now: Millis,
    /// The last sequence number handed out.
    pub next_seq: &'a mut u64,
    /// The events to append, in order.
    pub events: Vec<Event>,
    /// The effects to carry out with them.
    pub effects: Vec<Effect>,
}

impl<'a> Out<'a> {
    /// An empty collection at `now`.
    pub fn new(now: Millis, next_seq: &'a mut u64) -> Self {
        Self {
            now,
            next_seq,
            events: Vec::new(),
            effects: Vec::new(),
        }
    }

    fn seq(&mut self) -> u64 {
        *self.next_seq += 1;
        *self.next_seq
    }
}

/// What a completion records for its step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepDone {
    /// What the step did.
    pub notes: String,
    /// What it produced (paths or URLs).
    pub artifacts: Vec<String>,
    /// The context entries it sets for the steps after it.
    pub context_updates: BTreeMap<String, String>,
    /// The structured result as compact JSON (empty: none).
    pub result: String,
}

/// A worker's report that a step failed.
#[derive(Debug, Clone, Default)]
pub struct StepFailure {
    /// Matched against the step's non-retryable error types.
    pub error_type: String,
    /// What went wrong, for people.
    pub message: String,
    /// Fail without further attempts.
    pub non_retryable: bool,
    /// Handed to the next attempt.
    pub checkpoint: Vec<u8>,
}

/// Error type a worker uses to report that it stopped a step because the run's
/// cancellation was requested.
pub const CANCELED_ERROR_TYPE: &str = "canceled";

impl RunState {
    /// A new run: `RunStarted`, then its first step scheduled.
    pub fn start(p: StartParams, definition: Arc<WorkflowDef>, out: &mut Out) -> Self {
        let mut run = Self::started(p, definition, out);
        run.schedule(0, 1, out);
        run
    }

    /// A new run with its `RunStarted` recorded and no step scheduled yet.
    fn started(p: StartParams, definition: Arc<WorkflowDef>, out: &mut Out) -> Self {
        let steps = vec![
            StepRecord {
                state: "PENDING".into(),
                ..Default::default()
            };
            definition.steps.len()
        ];
        let mut run = Self {
            namespace: p.namespace,
            run_id: p.run_id,
            workflow_id: definition.id.clone(),
            definition: definition.clone(),
            status: RunStatus::Running,
            goal: p.goal.clone(),
            context: p.context.clone(),
            parent_run_id: p.parent_run_id.clone(),
            request_id: p.request_id.clone(),
            callback_url: p.callback_url.clone(),
            task_queue: p.task_queue.clone(),
            schedule_id: p.schedule_id.clone(),
            start_ms: out.now,
            close_ms: None,
            last_event_id: 0,
            current_step: 0,
            phase: Phase::BackingOff { until_ms: out.now },
            steps,
            lease_counter: 0,
            cancel_requested: false,
            failure: String::new(),
            pending_signals: Vec::new(),
            parent_step_id: p.parent_step_id.clone(),
            depth: p.depth,
            parent_close_policy: p.parent_close_policy,
            children_started: 0,
            resume_input: Vec::new(),
            paused: false,
            usage: Usage::default(),
            budget: RunBudget {
                max_tokens: p.budget.max_tokens.or(definition.max_tokens),
                max_cost_usd: p.budget.max_cost_usd.or(definition.max_cost_usd),
            },
            deliveries: Vec::new(),
            trace: TraceContext::derived("", ""),
            issues: Vec::new(),
            principles: String::new(),
            reset_from: String::new(),
            reset_to: String::new(),
            attributes: Default::default(),
            flow: p.flow.clone(),
        };
        run.trace = p
            .trace
            .unwrap_or_else(|| TraceContext::derived(&run.namespace, &run.run_id));
        run.push(
            out,
            &p.identity,
            EventKind::RunStarted {
                workflow_id: definition.id.clone(),
                definition,
                goal: p.goal,
                context: p.context,
                request_id: p.request_id,
                parent_run_id: p.parent_run_id,
                callback_url: p.callback_url,
                task_queue: p.task_queue,
                parent_step_id: p.parent_step_id,
                depth: p.depth,
            },
        );
        run
    }

    fn push(&mut self, out: &mut Out, identity: &str, kind: EventKind) {
        self.last_event_id += 1;
        out.events.push(Event {
            id: self.last_event_id,
            time_ms: out.now,
            identity: identity.to_string(),
            kind,
        });
    }

    fn step_id(&self) -> String {
        self.definition
            .steps
            .get(self.current_step)
            .map(|s| s.id.clone())
            .unwrap_or_default()
    }

    /// The queue of the step in flight, while one is.
    pub fn current_queue(&self) -> Option<String> {
        let step = self.definition.steps.get(self.current_step)?;
        self.status
            .is_open()
            .then(|| step.queue(&self.definition, &self.task_queue).to_string())
    }

    fn attempt(&self) -> u32 {
        self.steps.get(self.current_step).map(|s| s.attempt).unwrap_or(0)
    }

    fn schedule(&mut self, index: usize, attempt: u32, out: &mut Out) {
        let Some(step) = self.definition.steps.get(index) else {
            return;
        };
        let queue = step.queue(&self.definition, &self.task_queue).to_string();
        let step_id = step.id.clone();
        let task_seq = out.seq();
        self.current_step = index;
        self.phase = Phase::Scheduled {
            queue: queue.clone(),
            task_seq,
        };
        let rec = &mut self.steps[index];
        rec.state = "SCHEDULED".into();
        rec.attempt = attempt;
        rec.result_refusals = 0;
        rec.attempt_issues = 0;
        rec.attempt_attribute_updates = 0;
        self.push(
            out,
            "server",
            EventKind::StepScheduled {
                step_id,
                step_index: index,
                attempt,
                task_queue: queue.clone(),
            },
        );
        out.effects.push(Effect::EnqueueTask { queue, task_seq });
    }

    /// Closes the run as canceled where a cancel request was waiting for the step in
    /// flight to end.
    fn close_on_cancel_request(&mut self, out: &mut Out) {
        let kind = EventKind::RunCanceled {
            reason: "cancel requested".into(),
        };
        self.close(RunStatus::Canceled, out, "server", kind);
    }

    fn close(&mut self, status: RunStatus, out: &mut Out, identity: &str, kind: EventKind) {
        if let Phase::Scheduled { queue, task_seq } = &self.phase {
            out.effects.push(Effect::RemoveTask {
                queue: queue.clone(),
                task_seq: *task_seq,
            });
        }
        self.status = status;
        self.phase = Phase::Closed;
        self.close_ms = Some(out.now);
        self.pending_signals.clear();
        self.resume_input.clear();
        out.effects.push(Effect::EndCheckpoint {
            step: self.current_step,
        });
        self.push(out, identity, kind);
    }

    fn require_open(&self, action: Action) -> Result<(), Refusal> {
        if self.status.is_open() {
            Ok(())
        } else {
            Err(Refusal::RunClosed {
                run_id: self.run_id.clone(),
                status: self.status,
                action,
            })
        }
    }

    /// Leases ready task `task_seq` to `worker`. Fails when the task is stale (the run
    /// moved on since it was queued); the caller then takes the next task.
    pub fn lease(&mut self, task_seq: u64, worker: &str, out: &mut Out) -> Result<Lease, Refusal> {
        let stale = || Refusal::TaskNotReady { task_seq };
        if !self.status.is_open() {
            return Err(stale());
        }
        let Phase::Scheduled {
            queue,
            task_seq: current,
        } = &self.phase
        else {
            return Err(stale());
        };
        if *current != task_seq {
            return Err(stale());
        }
        out.effects.push(Effect::RemoveTask {
            queue: queue.clone(),
            task_seq,
        });
        let step = &self.definition.steps[self.current_step];
        self.lease_counter += 1;
        let hb = step.heartbeat_timeout_ms();
        let lease = Lease {
            seq: self.lease_counter,
            worker: worker.to_string(),
            started_ms: out.now,
            close_deadline_ms: out.now + step.timeout_ms(),
            heartbeat_timeout_ms: hb,
            heartbeat_deadline_ms: hb.map(|t| out.now + t),
        };
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let rec = &mut self.steps[self.current_step];
        rec.state = "STARTED".into();
        rec.worker = worker.to_string();
        rec.attempt_usage = Usage::default();
        self.phase = Phase::Started(lease.clone());
        self.push(
            out,
            worker,
            EventKind::StepStarted {
                step_id,
                attempt,
                worker: worker.into(),
                lease: lease.seq,
            },
        );
        Ok(lease)
    }

    /// The lease a token stands for, if it is still the current one.
    pub fn check_lease(&self, claims: &TokenClaims) -> Result<&Lease, Refusal> {
        self.require_open(Action::AcceptReport)?;
        let claimed = || LeaseRef {
            lease: claims.lease,
            step: claims.step.clone(),
            attempt: claims.attempt,
        };
        let Phase::Started(current) = &self.phase else {
            return Err(Refusal::StepNotLeased { claimed: claimed() });
        };
        if current.seq != claims.lease || claims.step != self.step_id() || claims.attempt != self.attempt() {
            return Err(Refusal::StaleLease {
                claimed: claimed(),
                current: LeaseRef {
                    lease: current.seq,
                    step: self.step_id(),
                    attempt: self.attempt(),
                },
            });
        }
        Ok(current)
    }

    /// Records the step's result and moves on: the next step, or the run completes.
    pub fn complete(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        notes: String,
        artifacts: Vec<String>,
        context_updates: BTreeMap<String, String>,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        let done = StepDone {
            notes,
            artifacts,
            context_updates,
            result: String::new(),
        };
        self.complete_with_result(claims, identity, done, out)
    }

    /// [`RunState::complete`] with a structured result (compact JSON, empty for
    /// none), already checked against the step's output contract by the caller.
    pub fn complete_with_result(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        done: StepDone,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.check_lease(claims)?;
        self.usage_event(out);
        self.finish_step(identity, done, out);
        Ok(())
    }

    /// Records the step's result (`StepCompleted`) and moves on: the next step
    /// (parked while paused), or the run completes. The one completion path, for an
    /// accepted completion and an approved one alike.
    fn finish_step(&mut self, identity: &str, done: StepDone, out: &mut Out) {
        let StepDone {
            notes,
            artifacts,
            context_updates,
            result,
        } = done;
        let (step_id, attempt) = (self.step_id(), self.attempt());
        self.context.extend(context_updates.clone());
        self.resume_input.clear();
        let rec = &mut self.steps[self.current_step];
        rec.state = "COMPLETED".into();
        rec.notes = notes.clone();
        rec.artifacts = artifacts.clone();
        rec.result = result.clone();
        out.effects.push(Effect::EndCheckpoint {
            step: self.current_step,
        });
        self.push(
            out,
            identity,
            EventKind::StepCompleted {
                step_id,
                attempt,
                notes,
                artifacts,
                context_updates,
                result,
            },
        );
        let next = self.current_step + 1;
        if next < self.definition.steps.len() {
            if self.cancel_requested {
                self.close_on_cancel_request(out);
            } else {
                self.schedule_or_park(next, 1, out);
            }
        } else {
            self.current_step = next;
            let context = self.context.clone();
            self.close(
                RunStatus::Completed,
                out,
                identity,
                EventKind::RunCompleted { context },
            );
        }
    }

    /// Records that a completion of the step in flight was refused for breaking its
    /// output contract (`StepResultRefused`); nothing else changes. Returns `false`,
    /// recording nothing, once [`MAX_RECORDED_REFUSALS`] were recorded for this
    /// attempt: the refusal still stands, but history stays bounded.
    pub fn refuse_result(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        violations: &Violations,
        out: &mut Out,
    ) -> Result<bool, Refusal> {
        self.check_lease(claims)?;
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let rec = &mut self.steps[self.current_step];
        if rec.result_refusals >= MAX_RECORDED_REFUSALS {
            return Ok(false);
        }
        rec.result_refusals += 1;
        self.push(
            out,
            identity,
            EventKind::StepResultRefused {
                step_id,
                attempt,
                violations: violations.listed.clone(),
                total_violations: u32::try_from(violations.total).unwrap_or(u32::MAX),
            },
        );
        Ok(true)
    }

    /// Whether the step in flight has recorded all the refusals it may
    /// ([`RunState::refuse_result`] would record nothing).
    pub fn refusals_exhausted(&self) -> bool {
        self.steps
            .get(self.current_step)
            .is_some_and(|s| s.result_refusals >= MAX_RECORDED_REFUSALS)
    }

    /// The results of the steps before the current one, for its prompt: (step id,
    /// result JSON, empty for none).
    pub fn earlier_results(&self) -> Vec<(&str, &str)> {
        self.definition
            .steps
            .iter()
            .zip(&self.steps)
            .take(self.current_step)
            .map(|(d, s)| (d.id.as_str(), s.result.as_str()))
            .collect()
    }

    /// Records a signal for the worker to pick up.
    pub fn signal(
        &mut self,
        identity: &str,
        name: String,
        payload_json: String,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.require_open(Action::Signal)?;
        self.push(
            out,
            identity,
            EventKind::SignalReceived {
                name: name.clone(),
                payload_json: payload_json.clone(),
            },
        );
        self.pending_signals.push(PendingSignal {
            event_id: self.last_event_id,
            name,
            payload_json,
        });
        Ok(())
    }

    /// Requests cancellation: at once when no worker holds the step, otherwise when
    /// the worker reports back (it learns of the request on its next heartbeat).
    pub fn cancel(&mut self, identity: &str, reason: String, out: &mut Out) -> Result<(), Refusal> {
        self.require_open(Action::Cancel)?;
        if self.cancel_requested {
            return Ok(());
        }
        self.cancel_requested = true;
        self.push(
            out,
            identity,
            EventKind::CancelRequested {
                reason: reason.clone(),
            },
        );
        if !matches!(self.phase, Phase::Started(_)) {
            self.close(
                RunStatus::Canceled,
                out,
                identity,
                EventKind::RunCanceled { reason },
            );
        }
        Ok(())
    }

    /// Records that batch `batch_id` applied `action` to this run (open or closed):
    /// one `BatchApplied` event, after the action's own.
    pub fn note_batch(&mut self, identity: &str, batch_id: &str, action: &str, out: &mut Out) {
        self.push(
            out,
            identity,
            EventKind::BatchApplied {
                batch_id: batch_id.to_string(),
                action: action.to_string(),
            },
        );
    }

    /// Ends the run at once; a worker holding a step loses its lease.
    pub fn terminate(&mut self, identity: &str, reason: String, out: &mut Out) -> Result<(), Refusal> {
        self.require_open(Action::Terminate)?;
        if matches!(self.phase, Phase::Started(_)) {
            self.usage_event(out);
        }
        self.close(
            RunStatus::Terminated,
            out,
            identity,
            EventKind::RunTerminated { reason },
        );
        Ok(())
    }
}

#[cfg(test)]
mod approval_tests;
#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod reset_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wait_tests;
#[cfg(test)]
mod wire_tests;
