//! What a run's history records: its statuses and event types.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::wire;
use crate::Millis;
use crate::contract::Violation;
use crate::workflow::WorkflowDef;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Open: a step is scheduled, running or waiting.
    Running,
    /// Every step completed.
    Completed,
    /// A step failed past its retries, or the run failed otherwise.
    Failed,
    /// Canceled at a client's request.
    Canceled,
    /// Terminated by a client.
    Terminated,
    /// Past its run timeout.
    TimedOut,
}

impl RunStatus {
    /// Every status, in declaration order.
    pub const ALL: [RunStatus; 6] = [
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
        Self::Terminated,
        Self::TimedOut,
    ];

    /// Whether the run can still change.
    pub fn is_open(self) -> bool {
        self == Self::Running
    }

    /// The API's name (`RUNNING` ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Canceled => "CANCELED",
            Self::Terminated => "TERMINATED",
            Self::TimedOut => "TIMED_OUT",
        }
    }
}

/// Which deadline a lease missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    /// The attempt ran past its start-to-close timeout.
    StartToClose,
    /// No heartbeat came within the heartbeat timeout.
    Heartbeat,
    /// The lease was handed to a poll that had gone away (see `RunState::undelivered`).
    Undelivered,
    /// A waiting step's wait timeout passed (see `RunState::wait_timer`), or its
    /// approval timeout (the event says which by its step's state).
    Wait,
}

/// What happened, as recorded in history.
///
/// Its `Serialize` is the API's view of an event's attributes, and nothing else
/// (see [`super::wire::event_attributes`]): each variant is a JSON object of its
/// fields, named in camelCase, with the serde attributes below saying where the
/// view differs from the field (a name, a field shown only when set, a value
/// shown by its API name). Renaming a field here renames it in the API; the tests
/// in `wire_tests.rs` pin the JSON of every event type. Storage never uses it: the
/// store writes `store::records` event records of its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged, rename_all_fields = "camelCase")]
pub enum EventKind {
    /// The run began.
    RunStarted {
        /// The workflow it runs.
        workflow_id: String,
        /// As its file format writes it (`workflow::WorkflowDef`), which is public
        /// already: users write it.
        #[serde(serialize_with = "wire::definition")]
        definition: Arc<WorkflowDef>,
        /// The run's goal.
        goal: String,
        /// The run's starting context.
        context: BTreeMap<String, String>,
        /// The start's request id (empty: none).
        request_id: String,
        /// The parent run (empty: a root).
        parent_run_id: String,
        /// Where the result is posted when the run closes (empty: nowhere).
        callback_url: String,
        /// The queue of steps that name none (empty: the definition's). Shown only
        /// when set, so the events of runs started before it existed read as they did.
        #[serde(skip_serializing_if = "String::is_empty")]
        task_queue: String,
        /// The parent's step that started it (empty: none); shown only for a child.
        #[serde(skip_serializing_if = "String::is_empty")]
        parent_step_id: String,
        /// Its depth in its tree (0: a root); shown only for a child, like
        /// `parentStepId` (a child run has both, a root neither: `SpawnChildren`).
        #[serde(skip_serializing_if = "wire::is_root")]
        depth: u32,
    },
    /// A step's task was queued.
    StepScheduled {
        /// The step's id.
        step_id: String,
        /// The step's position in the workflow, from 0.
        step_index: usize,
        /// The attempt, from 1.
        attempt: u32,
        /// The queue the step's task goes to.
        task_queue: String,
    },
    /// A worker leased the step.
    StepStarted {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The identity of the worker that leased it.
        worker: String,
        /// The lease's number, which its task token names.
        lease: u64,
    },
    /// The step completed.
    StepCompleted {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// What the step reported it did.
        notes: String,
        /// What it produced (paths or URLs).
        artifacts: Vec<String>,
        /// The context entries it set for the steps after it.
        context_updates: BTreeMap<String, String>,
        /// The structured result, as compact JSON (empty: none). Shown parsed, and
        /// only when there is one, so completions without a result read as they did.
        #[serde(skip_serializing_if = "String::is_empty", serialize_with = "wire::result")]
        result: String,
    },
    /// A completion refused because it broke the step's output contract; the step
    /// stays where it was. At most `contract::MAX_RECORDED_REFUSALS` per attempt.
    StepResultRefused {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// At most `contract::MAX_VIOLATIONS`.
        violations: Vec<Violation>,
        /// All the violations, listed or not.
        total_violations: u32,
    },
    /// The attempt failed.
    StepFailed {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The failure's type, matched against the step's non-retryable types.
        error_type: String,
        /// What happened, for people.
        message: String,
        /// Whether another attempt is planned.
        will_retry: bool,
        /// When that attempt starts, if one is planned.
        next_attempt_at_ms: Option<Millis>,
    },
    /// The attempt missed a deadline.
    StepTimedOut {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// Which deadline was missed.
        #[serde(serialize_with = "wire::timeout")]
        timeout: TimeoutKind,
        /// Whether another attempt is planned.
        will_retry: bool,
        /// When that attempt starts, if one is planned.
        next_attempt_at_ms: Option<Millis>,
    },
    /// A signal reached the run.
    SignalReceived {
        /// The signal's name.
        name: String,
        /// Its payload, as JSON text.
        payload_json: String,
    },
    /// A problem the agent reported (`report_issue`); the step goes on. At most
    /// `issue::MAX_RECORDED_ISSUES` per attempt.
    IssueReported {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// How serious the agent judged it.
        #[serde(serialize_with = "wire::severity")]
        severity: super::Severity,
        /// One line on the issue.
        summary: String,
        /// Its details (may be empty).
        details: String,
    },
    /// The run's search attributes changed (`crate::attributes`): at its start, by a
    /// step's completion, or mid-step (`Tasks.UpsertSearchAttributes`); `step_id`
    /// empty when no step set them.
    SearchAttributesChanged {
        /// The step's id.
        step_id: String,
        /// Each attribute set or unset.
        changes: Vec<crate::attributes::AttributeChange>,
    },
    /// A note from the agent to its coordinator; it does not advance the step.
    CoordinatorNote {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// What kind of note it is (`progress`, `finding`, `blocked`, `question`).
        kind: String,
        /// What happened, for people.
        message: String,
    },
    /// A client asked the run to cancel.
    CancelRequested {
        /// Why, as given.
        reason: String,
    },
    /// The step ended its lease to wait; `on` is what for (`children`).
    StepWaiting {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// What the step waits for.
        on: String,
        /// The runs it waits for.
        run_ids: Vec<String>,
        /// When the wait times out (none: never).
        #[serde(rename = "deadlineUnixMs")]
        deadline_ms: Option<Millis>,
    },
    /// The wait ended (`reason`: `children`, `timeout`); the step is scheduled again
    /// under the same attempt.
    StepResumed {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// Why the wait ended.
        reason: String,
        /// How long the step waited.
        waited_ms: Millis,
    },
    /// The step started a child run.
    ChildRunStarted {
        /// The child's run id.
        child_run_id: String,
        /// The workflow it runs.
        workflow_id: String,
        /// The step's id.
        step_id: String,
        /// What becomes of it when the parent closes first.
        #[serde(serialize_with = "wire::policy")]
        parent_close_policy: super::ParentClosePolicy,
    },
    /// A child run closed.
    ChildRunCompleted {
        /// The child's run id.
        child_run_id: String,
        /// How it ended.
        #[serde(rename = "outcome", serialize_with = "wire::status")]
        status: RunStatus,
        /// What the step reported it did.
        notes: String,
        /// What it produced (paths or URLs).
        artifacts: Vec<String>,
        /// The child's structured result as JSON text, cut to
        /// [`super::MAX_CHILD_RESULT_QUOTED`] (empty: none). Shown as the parent
        /// reads it ([`super::quoted_result`]), only when there is one.
        #[serde(
            skip_serializing_if = "String::is_empty",
            serialize_with = "wire::child_result"
        )]
        result: String,
    },
    /// The run was paused.
    RunPaused {
        /// Why, as given.
        reason: String,
    },
    /// The run was unpaused.
    RunUnpaused {},
    /// A completion of a `requireConfirmation` step was accepted and is held: the
    /// step waits for `ApproveStep` / `RejectStep` (or its approval timeout). The
    /// proposal is the completion as the worker sent it.
    StepAwaitingApproval {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// What the step reported it did.
        notes: String,
        /// What it produced (paths or URLs).
        artifacts: Vec<String>,
        /// The context entries it set for the steps after it.
        context_updates: BTreeMap<String, String>,
        /// The structured result, as compact JSON (empty: none); shown as in
        /// `StepCompleted`.
        #[serde(skip_serializing_if = "String::is_empty", serialize_with = "wire::result")]
        result: String,
        /// When the wait times out (none: never).
        #[serde(rename = "deadlineUnixMs")]
        deadline_ms: Option<Millis>,
    },
    /// The held result was approved (by the event's identity; `server` for an
    /// approval by timeout policy); the step completes with it.
    StepApproved {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The approver's note.
        note: String,
    },
    /// The held result was rejected with `feedback`; the step re-opens on the same
    /// transcript, under the same attempt.
    StepRejected {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// What the rejecter asked for instead.
        feedback: String,
    },
    /// The tokens one attempt's model turns used (recorded when the attempt ends, if
    /// any were reported), and the model they are from.
    StepUsage {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The model the usage is from.
        model: String,
        /// Shown as its counts beside the other fields (`inputTokens` ...).
        #[serde(flatten)]
        usage: super::Usage,
    },
    /// The worker saw its agent going round in circles (`signal`: `repeated_call`,
    /// `repeated_error`, `no_progress`): `AgentStuckWarning` when it warned the model,
    /// `AgentStuck` when it failed the step for it.
    AgentStuck {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// Which sign was seen.
        signal: String,
        /// What happened, for people.
        message: String,
        /// Shown by the event's type (`AgentStuck` or `AgentStuckWarning`).
        #[serde(skip)]
        fatal: bool,
    },
    /// The run completed.
    RunCompleted {
        /// The run's context as it closed.
        context: BTreeMap<String, String>,
    },
    /// The run failed.
    RunFailed {
        /// Why it failed.
        reason: String,
    },
    /// The run was canceled.
    RunCanceled {
        /// Why, as given.
        reason: String,
    },
    /// The run was terminated.
    RunTerminated {
        /// Why, as given.
        reason: String,
    },
    /// This run was made from `from_run_id`'s state (`kind`: `reset` or `rerun`),
    /// starting at `step_id`; see `run::reset`.
    RunResetFrom {
        /// The run it was made from.
        from_run_id: String,
        /// The step this run starts at.
        step_id: String,
        /// `reset` or `rerun`.
        kind: String,
        /// Why, as given.
        reason: String,
    },
    /// A step carried over, as it completed, from the run this one was reset from:
    /// it is not run again, and its usage is not this run's spending.
    StepCarried {
        /// The step's id.
        step_id: String,
        /// The attempt, from 1.
        attempt: u32,
        /// What the step reported it did.
        notes: String,
        /// What it produced (paths or URLs).
        artifacts: Vec<String>,
        /// The context entries it set for the steps after it.
        context_updates: BTreeMap<String, String>,
        /// Shown as in `StepCompleted`.
        #[serde(skip_serializing_if = "String::is_empty", serialize_with = "wire::result")]
        result: String,
        /// The model the usage is from.
        model: String,
        /// Shown as its counts beside the other fields, as in `StepUsage`.
        #[serde(flatten)]
        usage: super::Usage,
    },
    /// `to_run_id` was made from this run's state by a reset or rerun (`kind`),
    /// starting at `step_id`.
    RunResetTo {
        /// The run made from it.
        to_run_id: String,
        /// The step the new run starts at.
        step_id: String,
        /// `reset` or `rerun`.
        kind: String,
        /// Why, as given.
        reason: String,
    },
    /// A batch (`batch_id`) acted on this run (`action`: `cancel`, `terminate`,
    /// `reset`, `rerun`, `signal`); the action's own events come just before, in the
    /// same commit. See `crate::batch`.
    BatchApplied {
        /// The batch.
        batch_id: String,
        /// What the batch did to the run.
        action: String,
    },
    /// An attempt to POST the closed run's result to `target` began.
    DeliveryAttempted {
        /// The delivery target's name.
        target: String,
        /// The URL posted to.
        url: String,
        /// The attempt, from 1.
        attempt: u32,
    },
    /// `target` answered the attempt with a 2xx status.
    DeliverySucceeded {
        /// The delivery target's name.
        target: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The receiver's HTTP status.
        http_status: u16,
    },
    /// The attempt failed; `will_retry` says whether another is planned.
    DeliveryFailed {
        /// The delivery target's name.
        target: String,
        /// The attempt, from 1.
        attempt: u32,
        /// What failed.
        error: String,
        /// Whether another attempt is planned.
        will_retry: bool,
        /// When that attempt starts, if one is planned.
        next_attempt_at_ms: Option<Millis>,
    },
}

impl EventKind {
    /// The event type name, e.g. `"StepStarted"`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "RunStarted",
            Self::StepScheduled { .. } => "StepScheduled",
            Self::StepStarted { .. } => "StepStarted",
            Self::StepCompleted { .. } => "StepCompleted",
            Self::StepResultRefused { .. } => "StepResultRefused",
            Self::StepFailed { .. } => "StepFailed",
            Self::StepTimedOut { .. } => "StepTimedOut",
            Self::SignalReceived { .. } => "SignalReceived",
            Self::IssueReported { .. } => "IssueReported",
            Self::SearchAttributesChanged { .. } => "SearchAttributesChanged",
            Self::CoordinatorNote { .. } => "CoordinatorNote",
            Self::CancelRequested { .. } => "CancelRequested",
            Self::StepWaiting { .. } => "StepWaiting",
            Self::StepResumed { .. } => "StepResumed",
            Self::ChildRunStarted { .. } => "ChildRunStarted",
            Self::ChildRunCompleted { .. } => "ChildRunCompleted",
            Self::RunPaused { .. } => "RunPaused",
            Self::RunUnpaused { .. } => "RunUnpaused",
            Self::StepAwaitingApproval { .. } => "StepAwaitingApproval",
            Self::StepApproved { .. } => "StepApproved",
            Self::StepRejected { .. } => "StepRejected",
            Self::StepUsage { .. } => "StepUsage",
            Self::AgentStuck { fatal: true, .. } => "AgentStuck",
            Self::AgentStuck { fatal: false, .. } => "AgentStuckWarning",
            Self::RunCompleted { .. } => "RunCompleted",
            Self::RunFailed { .. } => "RunFailed",
            Self::RunCanceled { .. } => "RunCanceled",
            Self::RunTerminated { .. } => "RunTerminated",
            Self::RunResetFrom { .. } => "RunResetFrom",
            Self::StepCarried { .. } => "StepCarried",
            Self::RunResetTo { .. } => "RunResetTo",
            Self::BatchApplied { .. } => "BatchApplied",
            Self::DeliveryAttempted { .. } => "DeliveryAttempted",
            Self::DeliverySucceeded { .. } => "DeliverySucceeded",
            Self::DeliveryFailed { .. } => "DeliveryFailed",
        }
    }
}

/// One numbered history entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Its number in the run's history, from 1.
    pub id: u64,
    /// When it was recorded.
    pub time_ms: Millis,
    /// Who caused it (a worker, a client, or `server`).
    pub identity: String,
    /// What happened.
    pub kind: EventKind,
}
