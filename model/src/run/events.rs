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
    Running,
    Completed,
    Failed,
    Canceled,
    Terminated,
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

    pub fn is_open(self) -> bool {
        self == Self::Running
    }

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
    StartToClose,
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
    RunStarted {
        workflow_id: String,
        /// As its file format writes it (`workflow::WorkflowDef`), which is public
        /// already: users write it.
        #[serde(serialize_with = "wire::definition")]
        definition: Arc<WorkflowDef>,
        goal: String,
        context: BTreeMap<String, String>,
        request_id: String,
        parent_run_id: String,
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
    StepScheduled {
        step_id: String,
        step_index: usize,
        attempt: u32,
        task_queue: String,
    },
    StepStarted {
        step_id: String,
        attempt: u32,
        worker: String,
        lease: u64,
    },
    StepCompleted {
        step_id: String,
        attempt: u32,
        notes: String,
        artifacts: Vec<String>,
        context_updates: BTreeMap<String, String>,
        /// The structured result, as compact JSON (empty: none). Shown parsed, and
        /// only when there is one, so completions without a result read as they did.
        #[serde(skip_serializing_if = "String::is_empty", serialize_with = "wire::result")]
        result: String,
    },
    /// A completion refused because it broke the step's output contract; the step
    /// stays where it was. At most `contract::MAX_RECORDED_REFUSALS` per attempt.
    StepResultRefused {
        step_id: String,
        attempt: u32,
        /// At most `contract::MAX_VIOLATIONS`.
        violations: Vec<Violation>,
        /// All the violations, listed or not.
        total_violations: u32,
    },
    StepFailed {
        step_id: String,
        attempt: u32,
        error_type: String,
        message: String,
        will_retry: bool,
        next_attempt_at_ms: Option<Millis>,
    },
    StepTimedOut {
        step_id: String,
        attempt: u32,
        #[serde(serialize_with = "wire::timeout")]
        timeout: TimeoutKind,
        will_retry: bool,
        next_attempt_at_ms: Option<Millis>,
    },
    SignalReceived {
        name: String,
        payload_json: String,
    },
    /// A problem the agent reported (`report_issue`); the step goes on. At most
    /// `issue::MAX_RECORDED_ISSUES` per attempt.
    IssueReported {
        step_id: String,
        attempt: u32,
        #[serde(serialize_with = "wire::severity")]
        severity: super::Severity,
        summary: String,
        details: String,
    },
    /// The run's search attributes changed (`crate::attributes`): at its start, by a
    /// step's completion, or mid-step (`Tasks.UpsertSearchAttributes`); `step_id`
    /// empty when no step set them.
    SearchAttributesChanged {
        step_id: String,
        changes: Vec<crate::attributes::AttributeChange>,
    },
    /// A note from the agent to its coordinator; it does not advance the step.
    CoordinatorNote {
        step_id: String,
        attempt: u32,
        kind: String,
        message: String,
    },
    CancelRequested {
        reason: String,
    },
    /// The step ended its lease to wait; `on` is what for (`children`).
    StepWaiting {
        step_id: String,
        attempt: u32,
        on: String,
        run_ids: Vec<String>,
        #[serde(rename = "deadlineUnixMs")]
        deadline_ms: Option<Millis>,
    },
    /// The wait ended (`reason`: `children`, `timeout`); the step is scheduled again
    /// under the same attempt.
    StepResumed {
        step_id: String,
        attempt: u32,
        reason: String,
        waited_ms: Millis,
    },
    ChildRunStarted {
        child_run_id: String,
        workflow_id: String,
        step_id: String,
        #[serde(serialize_with = "wire::policy")]
        parent_close_policy: super::ParentClosePolicy,
    },
    ChildRunCompleted {
        child_run_id: String,
        #[serde(rename = "outcome", serialize_with = "wire::status")]
        status: RunStatus,
        notes: String,
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
    RunPaused {
        reason: String,
    },
    RunUnpaused {},
    /// A completion of a `requireConfirmation` step was accepted and is held: the
    /// step waits for `ApproveStep` / `RejectStep` (or its approval timeout). The
    /// proposal is the completion as the worker sent it.
    StepAwaitingApproval {
        step_id: String,
        attempt: u32,
        notes: String,
        artifacts: Vec<String>,
        context_updates: BTreeMap<String, String>,
        /// The structured result, as compact JSON (empty: none); shown as in
        /// `StepCompleted`.
        #[serde(skip_serializing_if = "String::is_empty", serialize_with = "wire::result")]
        result: String,
        #[serde(rename = "deadlineUnixMs")]
        deadline_ms: Option<Millis>,
    },
    /// The held result was approved (by the event's identity; `server` for an
    /// approval by timeout policy); the step completes with it.
    StepApproved {
        step_id: String,
        attempt: u32,
        note: String,
    },
    /// The held result was rejected with `feedback`; the step re-opens on the same
    /// transcript, under the same attempt.
    StepRejected {
        step_id: String,
        attempt: u32,
        feedback: String,
    },
    /// The tokens one attempt's model turns used (recorded when the attempt ends, if
    /// any were reported), and the model they are from.
    StepUsage {
        step_id: String,
        attempt: u32,
        model: String,
        /// Shown as its counts beside the other fields (`inputTokens` ...).
        #[serde(flatten)]
        usage: super::Usage,
    },
    /// The worker saw its agent going round in circles (`signal`: `repeated_call`,
    /// `repeated_error`, `no_progress`): `AgentStuckWarning` when it warned the model,
    /// `AgentStuck` when it failed the step for it.
    AgentStuck {
        step_id: String,
        attempt: u32,
        signal: String,
        message: String,
        /// Shown by the event's type (`AgentStuck` or `AgentStuckWarning`).
        #[serde(skip)]
        fatal: bool,
    },
    RunCompleted {
        context: BTreeMap<String, String>,
    },
    RunFailed {
        reason: String,
    },
    RunCanceled {
        reason: String,
    },
    RunTerminated {
        reason: String,
    },
    /// This run was made from `from_run_id`'s state (`kind`: `reset` or `rerun`),
    /// starting at `step_id`; see `run::reset`.
    RunResetFrom {
        from_run_id: String,
        step_id: String,
        kind: String,
        reason: String,
    },
    /// A step carried over, as it completed, from the run this one was reset from:
    /// it is not run again, and its usage is not this run's spending.
    StepCarried {
        step_id: String,
        attempt: u32,
        notes: String,
        artifacts: Vec<String>,
        context_updates: BTreeMap<String, String>,
        /// Shown as in `StepCompleted`.
        #[serde(skip_serializing_if = "String::is_empty", serialize_with = "wire::result")]
        result: String,
        model: String,
        /// Shown as its counts beside the other fields, as in `StepUsage`.
        #[serde(flatten)]
        usage: super::Usage,
    },
    /// `to_run_id` was made from this run's state by a reset or rerun (`kind`),
    /// starting at `step_id`.
    RunResetTo {
        to_run_id: String,
        step_id: String,
        kind: String,
        reason: String,
    },
    /// A batch (`batch_id`) acted on this run (`action`: `cancel`, `terminate`,
    /// `reset`, `rerun`, `signal`); the action's own events come just before, in the
    /// same commit. See `crate::batch`.
    BatchApplied {
        batch_id: String,
        action: String,
    },
    /// An attempt to POST the closed run's result to `target` began.
    DeliveryAttempted {
        target: String,
        url: String,
        attempt: u32,
    },
    /// `target` answered the attempt with a 2xx status.
    DeliverySucceeded {
        target: String,
        attempt: u32,
        http_status: u16,
    },
    /// The attempt failed; `will_retry` says whether another is planned.
    DeliveryFailed {
        target: String,
        attempt: u32,
        error: String,
        will_retry: bool,
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
    pub id: u64,
    pub time_ms: Millis,
    pub identity: String,
    pub kind: EventKind,
}
