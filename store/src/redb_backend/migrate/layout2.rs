//! Storage layout 2, frozen: the serde images of the model types that the release
//! before versioned records wrote (a state row holding its whole definition, events
//! adjacently tagged with camelCase attributes, timers externally tagged). Only the
//! migration reads these; nothing writes them. Do not change them to follow the
//! model: they describe files that exist.

use std::collections::BTreeMap;

use serde::Deserialize;

use railyard_model::Millis;
use railyard_model::run::{
    Event, EventKind, Lease, PendingSignal, Phase, RunState, RunStatus, StepRecord, TimeoutKind, Timer,
};
use railyard_model::workflow::{RetryPolicy, StepDef, WorkflowDef};

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
    pub(super) fn into_model(self) -> WorkflowDef {
        WorkflowDef {
            id: self.id,
            version: self.version,
            name: self.name,
            description: self.description,
            task_queue: self.task_queue,
            max_tokens: None,
            max_cost_usd: None,
            steps: self
                .steps
                .into_iter()
                .map(|s| StepDef {
                    id: s.id,
                    title: s.title,
                    prompt: s.prompt,
                    task_queue: s.task_queue,
                    allowed_tools: s.allowed_tools,
                    max_turns: s.max_turns,
                    timeout_seconds: s.timeout_seconds,
                    heartbeat_timeout_seconds: s.heartbeat_timeout_seconds,
                    retry: s.retry.map(|r| RetryPolicy {
                        initial_interval_seconds: r.initial_interval_seconds,
                        backoff_coefficient: r.backoff_coefficient,
                        maximum_interval_seconds: r.maximum_interval_seconds,
                        maximum_attempts: r.maximum_attempts,
                        non_retryable_error_types: r.non_retryable_error_types,
                    }),
                    require_confirmation: s.require_confirmation,
                    wait: None,
                    // Layout 2 had no output contracts.
                    output: None,
                    required_artifacts: Default::default(),
                    max_tokens: None,
                    stuck: None,
                    approval: None,
                })
                .collect(),
        }
    }
}

impl RunV2 {
    /// The run as the model holds it; `intern` shares its definition.
    pub(super) fn into_model<E>(
        self,
        intern: impl FnOnce(DefinitionV2) -> Result<std::sync::Arc<WorkflowDef>, E>,
    ) -> Result<RunState, E> {
        Ok(RunState {
            namespace: self.namespace,
            run_id: self.run_id,
            workflow_id: self.workflow_id,
            definition: intern(self.definition)?,
            status: match self.status {
                StatusV2::Running => RunStatus::Running,
                StatusV2::Completed => RunStatus::Completed,
                StatusV2::Failed => RunStatus::Failed,
                StatusV2::Canceled => RunStatus::Canceled,
                StatusV2::Terminated => RunStatus::Terminated,
                StatusV2::TimedOut => RunStatus::TimedOut,
            },
            goal: self.goal,
            context: self.context,
            parent_run_id: self.parent_run_id,
            request_id: self.request_id,
            callback_url: self.callback_url,
            task_queue: String::new(),
            schedule_id: String::new(),
            parent_step_id: String::new(),
            depth: 0,
            parent_close_policy: Default::default(),
            children_started: 0,
            resume_input: Vec::new(),
            paused: false,
            start_ms: self.start_ms,
            close_ms: self.close_ms,
            last_event_id: self.last_event_id,
            current_step: self.current_step,
            phase: match self.phase {
                PhaseV2::Scheduled { queue, task_seq } => Phase::Scheduled { queue, task_seq },
                PhaseV2::Started(l) => Phase::Started(Lease {
                    seq: l.seq,
                    worker: l.worker,
                    started_ms: l.started_ms,
                    close_deadline_ms: l.close_deadline_ms,
                    heartbeat_timeout_ms: l.heartbeat_timeout_ms,
                    heartbeat_deadline_ms: l.heartbeat_deadline_ms,
                }),
                PhaseV2::BackingOff { until_ms } => Phase::BackingOff { until_ms },
                PhaseV2::Closed => Phase::Closed,
            },
            steps: self
                .steps
                .into_iter()
                .map(|s| StepRecord {
                    state: s.state,
                    attempt: s.attempt,
                    notes: s.notes,
                    artifacts: s.artifacts,
                    worker: s.worker,
                    last_failure: s.last_failure,
                    ..Default::default()
                })
                .collect(),
            lease_counter: self.lease_counter,
            cancel_requested: self.cancel_requested,
            failure: self.failure,
            pending_signals: self
                .pending_signals
                .into_iter()
                .map(|s| PendingSignal {
                    event_id: s.event_id,
                    name: s.name,
                    payload_json: s.payload_json,
                })
                .collect(),
            usage: Default::default(),
            budget: Default::default(),
            deliveries: Vec::new(),
        })
    }
}

impl EventV2 {
    /// The event as the model holds it; `intern` shares a `RunStarted`'s definition.
    pub(super) fn into_model<E>(
        self,
        intern: impl FnOnce(DefinitionV2) -> Result<std::sync::Arc<WorkflowDef>, E>,
    ) -> Result<Event, E> {
        let kind = match self.kind {
            KindV2::RunStarted {
                workflow_id,
                definition,
                goal,
                context,
                request_id,
                parent_run_id,
                callback_url,
            } => EventKind::RunStarted {
                workflow_id,
                definition: intern(definition)?,
                goal,
                context,
                request_id,
                parent_run_id,
                callback_url,
                task_queue: String::new(),
                parent_step_id: String::new(),
                depth: 0,
            },
            KindV2::StepScheduled {
                step_id,
                step_index,
                attempt,
                task_queue,
            } => EventKind::StepScheduled {
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
            } => EventKind::StepStarted {
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
            } => EventKind::StepCompleted {
                step_id,
                attempt,
                notes,
                artifacts,
                context_updates,
                result: String::new(),
            },
            KindV2::StepFailed {
                step_id,
                attempt,
                error_type,
                message,
                will_retry,
                next_attempt_at_ms,
            } => EventKind::StepFailed {
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
            } => EventKind::StepTimedOut {
                step_id,
                attempt,
                timeout: match timeout {
                    TimeoutV2::StartToClose => TimeoutKind::StartToClose,
                    TimeoutV2::Heartbeat => TimeoutKind::Heartbeat,
                    TimeoutV2::Undelivered => TimeoutKind::Undelivered,
                },
                will_retry,
                next_attempt_at_ms,
            },
            KindV2::SignalReceived { name, payload_json } => EventKind::SignalReceived { name, payload_json },
            KindV2::CoordinatorNote {
                step_id,
                attempt,
                kind,
                message,
            } => EventKind::CoordinatorNote {
                step_id,
                attempt,
                kind,
                message,
            },
            KindV2::CancelRequested { reason } => EventKind::CancelRequested { reason },
            KindV2::RunCompleted { context } => EventKind::RunCompleted { context },
            KindV2::RunFailed { reason } => EventKind::RunFailed { reason },
            KindV2::RunCanceled { reason } => EventKind::RunCanceled { reason },
            KindV2::RunTerminated { reason } => EventKind::RunTerminated { reason },
        };
        Ok(Event {
            id: self.id,
            time_ms: self.time_ms,
            identity: self.identity,
            kind,
        })
    }
}

impl From<TimerV2> for Timer {
    fn from(t: TimerV2) -> Self {
        match t {
            TimerV2::Backoff {
                namespace,
                run_id,
                step_index,
                attempt,
            } => Timer::Backoff {
                namespace,
                run_id,
                step_index,
                attempt,
            },
        }
    }
}
