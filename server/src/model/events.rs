//! What a run's history records: its statuses and event types.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::clock::Millis;
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
}

/// What happened, as recorded in history. Neither a storage nor a wire format:
/// the store writes `store::records` event records, and the API maps each event
/// field by field in [`super::wire`].
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    RunStarted {
        workflow_id: String,
        definition: Arc<WorkflowDef>,
        goal: String,
        context: BTreeMap<String, String>,
        request_id: String,
        parent_run_id: String,
        callback_url: String,
        /// The queue of steps that name none (empty: the definition's).
        task_queue: String,
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
        timeout: TimeoutKind,
        will_retry: bool,
        next_attempt_at_ms: Option<Millis>,
    },
    SignalReceived {
        name: String,
        payload_json: String,
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
            Self::StepFailed { .. } => "StepFailed",
            Self::StepTimedOut { .. } => "StepTimedOut",
            Self::SignalReceived { .. } => "SignalReceived",
            Self::CoordinatorNote { .. } => "CoordinatorNote",
            Self::CancelRequested { .. } => "CancelRequested",
            Self::RunCompleted { .. } => "RunCompleted",
            Self::RunFailed { .. } => "RunFailed",
            Self::RunCanceled { .. } => "RunCanceled",
            Self::RunTerminated { .. } => "RunTerminated",
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
