//! Storage layout 2, frozen: the serde images of the model types that the release
//! before versioned records wrote (a state row holding its whole definition, events
//! adjacently tagged with camelCase attributes, timers externally tagged), and each
//! one's conversion to the layout-3 record the migration writes ([`super::layout3`]).
//! Only the migration reads these; nothing writes them. Do not change them to
//! follow the model (they name no model type): they describe files that exist.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::layout3::{self as l3, V1};

/// Milliseconds since the Unix epoch.
type Millis = i64;

#[derive(Deserialize)]
pub(super) struct RunV2 {
    namespace: String,
    run_id: String,
    workflow_id: String,
    definition: DefinitionV2,
    status: StatusV2,
    goal: String,
    context: BTreeMap<String, String>,
    parent_run_id: String,
    request_id: String,
    callback_url: String,
    start_ms: Millis,
    close_ms: Option<Millis>,
    last_event_id: u64,
    current_step: usize,
    phase: PhaseV2,
    steps: Vec<StepStateV2>,
    lease_counter: u64,
    cancel_requested: bool,
    failure: String,
    pending_signals: Vec<SignalV2>,
}

#[derive(Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum StatusV2 {
    Running,
    Completed,
    Failed,
    Canceled,
    Terminated,
    TimedOut,
}

#[derive(Deserialize)]
enum PhaseV2 {
    Scheduled { queue: String, task_seq: u64 },
    Started(LeaseV2),
    BackingOff { until_ms: Millis },
    Closed,
}

#[derive(Deserialize)]
struct LeaseV2 {
    seq: u64,
    worker: String,
    started_ms: Millis,
    close_deadline_ms: Millis,
    heartbeat_timeout_ms: Option<Millis>,
    heartbeat_deadline_ms: Option<Millis>,
}

#[derive(Deserialize)]
struct StepStateV2 {
    state: String,
    attempt: u32,
    notes: String,
    artifacts: Vec<String>,
    worker: String,
    last_failure: String,
}

#[derive(Deserialize)]
struct SignalV2 {
    event_id: u64,
    name: String,
    payload_json: String,
}

/// The definition file format as layout 2 stored it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DefinitionV2 {
    id: String,
    version: String,
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    task_queue: Option<String>,
    steps: Vec<StepDefV2>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StepDefV2 {
    id: String,
    title: String,
    prompt: String,
    #[serde(default)]
    task_queue: Option<String>,
    #[serde(default)]
    allowed_tools: Vec<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    timeout_seconds: Option<u32>,
    #[serde(default)]
    heartbeat_timeout_seconds: Option<u32>,
    #[serde(default)]
    retry: Option<RetryV2>,
    #[serde(default)]
    require_confirmation: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RetryV2 {
    initial_interval_seconds: f64,
    backoff_coefficient: f64,
    maximum_interval_seconds: f64,
    maximum_attempts: u32,
    #[serde(default)]
    non_retryable_error_types: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct EventV2 {
    id: u64,
    time_ms: Millis,
    identity: String,
    kind: KindV2,
}

#[derive(Deserialize)]
#[serde(tag = "type", content = "attributes", rename_all_fields = "camelCase")]
enum KindV2 {
    RunStarted {
        workflow_id: String,
        definition: DefinitionV2,
        goal: String,
        context: BTreeMap<String, String>,
        request_id: String,
        parent_run_id: String,
        callback_url: String,
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
        timeout: TimeoutV2,
        will_retry: bool,
        next_attempt_at_ms: Option<Millis>,
    },
    SignalReceived {
        name: String,
        payload_json: String,
    },
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
}

#[derive(Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum TimeoutV2 {
    StartToClose,
    Heartbeat,
    Undelivered,
}

#[derive(Deserialize)]
pub(super) enum TimerV2 {
    Backoff {
        namespace: String,
        run_id: String,
        step_index: usize,
        attempt: u32,
    },
}

impl DefinitionV2 {
    /// The definition as layout 3 stores it: field by field (layout 2 had no
    /// budgets, waits, contracts or approvals, which layout 3 writes only when set).
    pub(super) fn into_layout3(self) -> l3::Definition {
        l3::Definition {
            v: V1,
            id: self.id,
            version: self.version,
            name: self.name,
            description: self.description,
            task_queue: self.task_queue,
            steps: self
                .steps
                .into_iter()
                .map(|s| l3::StepDef {
                    id: s.id,
                    title: s.title,
                    prompt: s.prompt,
                    task_queue: s.task_queue,
                    allowed_tools: s.allowed_tools,
                    max_turns: s.max_turns,
                    timeout_seconds: s.timeout_seconds,
                    heartbeat_timeout_seconds: s.heartbeat_timeout_seconds,
                    retry: s.retry.map(|r| l3::Retry {
                        initial_interval_seconds: r.initial_interval_seconds,
                        backoff_coefficient: r.backoff_coefficient,
                        maximum_interval_seconds: r.maximum_interval_seconds,
                        maximum_attempts: r.maximum_attempts,
                        non_retryable_error_types: r.non_retryable_error_types,
                    }),
                    require_confirmation: s.require_confirmation,
                })
                .collect(),
        }
    }
}

impl RunV2 {
    /// The run's layout-3 state row; `store` stores its definition and gives its key.
    pub(super) fn into_layout3<E>(
        self,
        store: impl FnOnce(DefinitionV2) -> Result<l3::DefinitionKey, E>,
    ) -> Result<l3::Run, E> {
        Ok(l3::Run {
            v: V1,
            namespace: self.namespace,
            run_id: self.run_id,
            workflow_id: self.workflow_id,
            definition: store(self.definition)?,
            status: match self.status {
                StatusV2::Running => l3::Status::Running,
                StatusV2::Completed => l3::Status::Completed,
                StatusV2::Failed => l3::Status::Failed,
                StatusV2::Canceled => l3::Status::Canceled,
                StatusV2::Terminated => l3::Status::Terminated,
                StatusV2::TimedOut => l3::Status::TimedOut,
            },
            goal: self.goal,
            context: self.context,
            parent_run_id: self.parent_run_id,
            request_id: self.request_id,
            callback_url: self.callback_url,
            start_ms: self.start_ms,
            close_ms: self.close_ms,
            last_event_id: self.last_event_id,
            current_step: self.current_step,
            phase: match self.phase {
                PhaseV2::Scheduled { queue, task_seq } => l3::Phase::Scheduled { queue, task_seq },
                PhaseV2::Started(l) => l3::Phase::Started {
                    lease: l3::Lease {
                        seq: l.seq,
                        worker: l.worker,
                        started_ms: l.started_ms,
                        close_deadline_ms: l.close_deadline_ms,
                        heartbeat_timeout_ms: l.heartbeat_timeout_ms,
                        heartbeat_deadline_ms: l.heartbeat_deadline_ms,
                    },
                },
                PhaseV2::BackingOff { until_ms } => l3::Phase::BackingOff { until_ms },
                PhaseV2::Closed => l3::Phase::Closed,
            },
            steps: self
                .steps
                .into_iter()
                .map(|s| l3::StepState {
                    state: s.state,
                    attempt: s.attempt,
                    notes: s.notes,
                    artifacts: s.artifacts,
                    worker: s.worker,
                    last_failure: s.last_failure,
                })
                .collect(),
            lease_counter: self.lease_counter,
            cancel_requested: self.cancel_requested,
            failure: self.failure,
            pending_signals: self
                .pending_signals
                .into_iter()
                .map(|s| l3::Signal {
                    event_id: s.event_id,
                    name: s.name,
                    payload_json: s.payload_json,
                })
                .collect(),
        })
    }
}

impl EventV2 {
    /// The event's layout-3 history row; `store` stores a `RunStarted`'s
    /// definition and gives its key.
    pub(super) fn into_layout3<E>(
        self,
        store: impl FnOnce(DefinitionV2) -> Result<l3::DefinitionKey, E>,
    ) -> Result<l3::Event, E> {
        let event = match self.kind {
            KindV2::RunStarted {
                workflow_id,
                definition,
                goal,
                context,
                request_id,
                parent_run_id,
                callback_url,
            } => l3::Kind::RunStarted {
                workflow_id,
                definition: store(definition)?,
                goal,
                context,
                request_id,
                parent_run_id,
                callback_url,
            },
            KindV2::StepScheduled {
                step_id,
                step_index,
                attempt,
                task_queue,
            } => l3::Kind::StepScheduled {
                step_id,
                step_index,
                attempt,
                task_queue,
            },
            KindV2::StepStarted {
                step_id,
                attempt,
                worker,
                lease,
            } => l3::Kind::StepStarted {
                step_id,
                attempt,
                worker,
                lease,
            },
            KindV2::StepCompleted {
                step_id,
                attempt,
                notes,
                artifacts,
                context_updates,
            } => l3::Kind::StepCompleted {
                step_id,
                attempt,
                notes,
                artifacts,
                context_updates,
            },
            KindV2::StepFailed {
                step_id,
                attempt,
                error_type,
                message,
                will_retry,
                next_attempt_at_ms,
            } => l3::Kind::StepFailed {
                step_id,
                attempt,
                error_type,
                message,
                will_retry,
                next_attempt_at_ms,
            },
            KindV2::StepTimedOut {
                step_id,
                attempt,
                timeout,
                will_retry,
                next_attempt_at_ms,
            } => l3::Kind::StepTimedOut {
                step_id,
                attempt,
                timeout: match timeout {
                    TimeoutV2::StartToClose => l3::Timeout::StartToClose,
                    TimeoutV2::Heartbeat => l3::Timeout::Heartbeat,
                    TimeoutV2::Undelivered => l3::Timeout::Undelivered,
                },
                will_retry,
                next_attempt_at_ms,
            },
            KindV2::SignalReceived { name, payload_json } => l3::Kind::SignalReceived { name, payload_json },
            KindV2::CoordinatorNote {
                step_id,
                attempt,
                kind,
                message,
            } => l3::Kind::CoordinatorNote {
                step_id,
                attempt,
                kind,
                message,
            },
            KindV2::CancelRequested { reason } => l3::Kind::CancelRequested { reason },
            KindV2::RunCompleted { context } => l3::Kind::RunCompleted { context },
            KindV2::RunFailed { reason } => l3::Kind::RunFailed { reason },
            KindV2::RunCanceled { reason } => l3::Kind::RunCanceled { reason },
            KindV2::RunTerminated { reason } => l3::Kind::RunTerminated { reason },
        };
        Ok(l3::Event {
            v: V1,
            id: self.id,
            time_ms: self.time_ms,
            identity: self.identity,
            event,
        })
    }
}

impl TimerV2 {
    /// The timer's layout-3 row.
    pub(super) fn into_layout3(self) -> l3::Timer {
        let timer = match self {
            TimerV2::Backoff {
                namespace,
                run_id,
                step_index,
                attempt,
            } => l3::TimerKind::Backoff {
                namespace,
                run_id,
                step_index,
                attempt,
            },
        };
        l3::Timer { v: V1, timer }
    }
}
