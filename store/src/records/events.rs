//! History rows: one [`EventRecord`] per event.

use std::collections::BTreeMap;

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::{
    DefinitionKey, DefinitionTableKey, Definitions, Record, StatusRecord, UsageRecord, decode_record,
    encode_record, v1,
};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::run::{Event, EventKind, ParentClosePolicy, TimeoutKind};

#[derive(Debug, Serialize, Deserialize)]
struct EventRecord {
    #[serde(default = "v1")]
    v: u32,
    #[serde(default)]
    id: u64,
    #[serde(default)]
    time_ms: Millis,
    #[serde(default)]
    identity: String,
    event: KindRecord,
}

impl Record for EventRecord {
    const WHAT: &'static str = "event";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// One violation of an output contract.
#[derive(Debug, Serialize, Deserialize)]
struct ViolationRecord {
    #[serde(default)]
    path: String,
    #[serde(default)]
    reason: String,
}

/// One variant per event type, named as the history names it.
#[derive(Debug, Serialize, Deserialize)]
enum KindRecord {
    RunStarted {
        #[serde(default)]
        workflow_id: String,
        /// The definition as stored in `definitions`, not a copy of it.
        definition: DefinitionKey,
        #[serde(default)]
        goal: String,
        #[serde(default)]
        context: BTreeMap<String, String>,
        #[serde(default)]
        request_id: String,
        #[serde(default)]
        parent_run_id: String,
        #[serde(default)]
        callback_url: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        task_queue: String,
        /// Absent in older rows and for roots.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        parent_step_id: String,
        #[serde(default, skip_serializing_if = "is_zero")]
        depth: u32,
    },
    StepScheduled {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        step_index: usize,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        task_queue: String,
    },
    StepStarted {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        worker: String,
        #[serde(default)]
        lease: u64,
    },
    StepCompleted {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        notes: String,
        #[serde(default)]
        artifacts: Vec<String>,
        #[serde(default)]
        context_updates: BTreeMap<String, String>,
        /// The structured result as JSON text (absent in older rows: none).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        result: String,
    },
    StepResultRefused {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        violations: Vec<ViolationRecord>,
        #[serde(default)]
        total_violations: u32,
    },
    StepFailed {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        error_type: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        will_retry: bool,
        #[serde(default)]
        next_attempt_at_ms: Option<Millis>,
    },
    StepTimedOut {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        timeout: TimeoutRecord,
        #[serde(default)]
        will_retry: bool,
        #[serde(default)]
        next_attempt_at_ms: Option<Millis>,
    },
    SignalReceived {
        #[serde(default)]
        name: String,
        #[serde(default)]
        payload_json: String,
    },
    CoordinatorNote {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        message: String,
    },
    CancelRequested {
        #[serde(default)]
        reason: String,
    },
    StepUsage {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        model: String,
        #[serde(default)]
        usage: UsageRecord,
    },
    AgentStuckWarning {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        signal: String,
        #[serde(default)]
        message: String,
    },
    AgentStuck {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        signal: String,
        #[serde(default)]
        message: String,
    },
    RunCompleted {
        #[serde(default)]
        context: BTreeMap<String, String>,
    },
    RunFailed {
        #[serde(default)]
        reason: String,
    },
    RunCanceled {
        #[serde(default)]
        reason: String,
    },
    RunTerminated {
        #[serde(default)]
        reason: String,
    },
    StepWaiting {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        on: String,
        #[serde(default)]
        run_ids: Vec<String>,
        #[serde(default)]
        deadline_ms: Option<Millis>,
    },
    StepResumed {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        waited_ms: Millis,
    },
    ChildRunStarted {
        #[serde(default)]
        child_run_id: String,
        #[serde(default)]
        workflow_id: String,
        #[serde(default)]
        step_id: String,
        /// `cancel`, `terminate` or `abandon`.
        #[serde(default)]
        parent_close_policy: String,
    },
    RunPaused(#[serde(default)] PauseRecord),
    StepAwaitingApproval(#[serde(default)] super::approvals::AwaitingRecord),
    StepApproved(#[serde(default)] super::approvals::AnswerRecord),
    StepRejected(#[serde(default)] super::approvals::AnswerRecord),
    RunUnpaused(#[serde(default)] PauseRecord),
    ChildRunCompleted {
        #[serde(default)]
        child_run_id: String,
        status: StatusRecord,
        #[serde(default)]
        notes: String,
        #[serde(default)]
        artifacts: Vec<String>,
        /// The child's structured result as JSON text (absent in older rows: none).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        result: String,
    },
    DeliveryAttempted {
        #[serde(default)]
        target: String,
        #[serde(default)]
        url: String,
        #[serde(default)]
        attempt: u32,
    },
    DeliverySucceeded {
        #[serde(default)]
        target: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        http_status: u16,
    },
    DeliveryFailed {
        #[serde(default)]
        target: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default)]
        error: String,
        #[serde(default)]
        will_retry: bool,
        #[serde(default)]
        next_attempt_at_ms: Option<Millis>,
    },
}

/// Records of `RunPaused` / `RunUnpaused`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PauseRecord {
    #[serde(default)]
    reason: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum TimeoutRecord {
    #[serde(rename = "START_TO_CLOSE")]
    StartToClose,
    #[serde(rename = "HEARTBEAT")]
    Heartbeat,
    #[serde(rename = "UNDELIVERED")]
    Undelivered,
    #[serde(rename = "WAIT")]
    Wait,
}

/// Encodes one history row. A `RunStarted` names its definition, which the same
/// transaction stores (see [`Definitions::store`]).
pub(crate) fn encode_event(ev: &Event, defs: &Definitions) -> Result<Vec<u8>, StorageError> {
    let event = match &ev.kind {
        EventKind::RunStarted {
            workflow_id,
            definition,
            goal,
            context,
            request_id,
            parent_run_id,
            callback_url,
            task_queue,
            parent_step_id,
            depth,
        } => KindRecord::RunStarted {
            workflow_id: workflow_id.clone(),
            definition: defs.key_of(definition)?,
            goal: goal.clone(),
            context: context.clone(),
            request_id: request_id.clone(),
            parent_run_id: parent_run_id.clone(),
            callback_url: callback_url.clone(),
            task_queue: task_queue.clone(),
            parent_step_id: parent_step_id.clone(),
            depth: *depth,
        },
        EventKind::StepScheduled {
            step_id,
            step_index,
            attempt,
            task_queue,
        } => KindRecord::StepScheduled {
            step_id: step_id.clone(),
            step_index: *step_index,
            attempt: *attempt,
            task_queue: task_queue.clone(),
        },
        EventKind::StepStarted {
            step_id,
            attempt,
            worker,
            lease,
        } => KindRecord::StepStarted {
            step_id: step_id.clone(),
            attempt: *attempt,
            worker: worker.clone(),
            lease: *lease,
        },
        EventKind::StepCompleted {
            step_id,
            attempt,
            notes,
            artifacts,
            context_updates,
            result,
        } => KindRecord::StepCompleted {
            step_id: step_id.clone(),
            attempt: *attempt,
            notes: notes.clone(),
            artifacts: artifacts.clone(),
            context_updates: context_updates.clone(),
            result: result.clone(),
        },
        EventKind::StepResultRefused {
            step_id,
            attempt,
            violations,
            total_violations,
        } => KindRecord::StepResultRefused {
            step_id: step_id.clone(),
            attempt: *attempt,
            violations: violations
                .iter()
                .map(|v| ViolationRecord {
                    path: v.path.clone(),
                    reason: v.reason.clone(),
                })
                .collect(),
            total_violations: *total_violations,
        },
        EventKind::StepFailed {
            step_id,
            attempt,
            error_type,
            message,
            will_retry,
            next_attempt_at_ms,
        } => KindRecord::StepFailed {
            step_id: step_id.clone(),
            attempt: *attempt,
            error_type: error_type.clone(),
            message: message.clone(),
            will_retry: *will_retry,
            next_attempt_at_ms: *next_attempt_at_ms,
        },
        EventKind::StepTimedOut {
            step_id,
            attempt,
            timeout,
            will_retry,
            next_attempt_at_ms,
        } => KindRecord::StepTimedOut {
            step_id: step_id.clone(),
            attempt: *attempt,
            timeout: match timeout {
                TimeoutKind::StartToClose => TimeoutRecord::StartToClose,
                TimeoutKind::Heartbeat => TimeoutRecord::Heartbeat,
                TimeoutKind::Undelivered => TimeoutRecord::Undelivered,
                TimeoutKind::Wait => TimeoutRecord::Wait,
            },
            will_retry: *will_retry,
            next_attempt_at_ms: *next_attempt_at_ms,
        },
        EventKind::SignalReceived { name, payload_json } => KindRecord::SignalReceived {
            name: name.clone(),
            payload_json: payload_json.clone(),
        },
        EventKind::CoordinatorNote {
            step_id,
            attempt,
            kind,
            message,
        } => KindRecord::CoordinatorNote {
            step_id: step_id.clone(),
            attempt: *attempt,
            kind: kind.clone(),
            message: message.clone(),
        },
        EventKind::CancelRequested { reason } => KindRecord::CancelRequested {
            reason: reason.clone(),
        },
        EventKind::StepUsage {
            step_id,
            attempt,
            model,
            usage,
        } => KindRecord::StepUsage {
            step_id: step_id.clone(),
            attempt: *attempt,
            model: model.clone(),
            usage: UsageRecord::from_model(usage),
        },
        EventKind::AgentStuck {
            step_id,
            attempt,
            signal,
            message,
            fatal,
        } => {
            let (step_id, attempt, signal, message) =
                (step_id.clone(), *attempt, signal.clone(), message.clone());
            if *fatal {
                KindRecord::AgentStuck {
                    step_id,
                    attempt,
                    signal,
                    message,
                }
            } else {
                KindRecord::AgentStuckWarning {
                    step_id,
                    attempt,
                    signal,
                    message,
                }
            }
        }
        EventKind::RunCompleted { context } => KindRecord::RunCompleted {
            context: context.clone(),
        },
        EventKind::RunFailed { reason } => KindRecord::RunFailed {
            reason: reason.clone(),
        },
        EventKind::RunCanceled { reason } => KindRecord::RunCanceled {
            reason: reason.clone(),
        },
        EventKind::RunTerminated { reason } => KindRecord::RunTerminated {
            reason: reason.clone(),
        },
        EventKind::StepWaiting {
            step_id,
            attempt,
            on,
            run_ids,
            deadline_ms,
        } => KindRecord::StepWaiting {
            step_id: step_id.clone(),
            attempt: *attempt,
            on: on.clone(),
            run_ids: run_ids.clone(),
            deadline_ms: *deadline_ms,
        },
        EventKind::StepResumed {
            step_id,
            attempt,
            reason,
            waited_ms,
        } => KindRecord::StepResumed {
            step_id: step_id.clone(),
            attempt: *attempt,
            reason: reason.clone(),
            waited_ms: *waited_ms,
        },
        EventKind::ChildRunStarted {
            child_run_id,
            workflow_id,
            step_id,
            parent_close_policy,
        } => KindRecord::ChildRunStarted {
            child_run_id: child_run_id.clone(),
            workflow_id: workflow_id.clone(),
            step_id: step_id.clone(),
            parent_close_policy: parent_close_policy.name().into(),
        },
        EventKind::RunPaused { reason } => KindRecord::RunPaused(PauseRecord {
            reason: reason.clone(),
        }),
        EventKind::RunUnpaused {} => KindRecord::RunUnpaused(PauseRecord::default()),
        kind @ (EventKind::StepAwaitingApproval { .. }
        | EventKind::StepApproved { .. }
        | EventKind::StepRejected { .. }) => {
            use super::approvals::ApprovalRecord as A;
            match super::approvals::encode(kind) {
                Some(A::Awaiting(r)) => KindRecord::StepAwaitingApproval(r),
                Some(A::Approved(r)) => KindRecord::StepApproved(r),
                Some(A::Rejected(r)) => KindRecord::StepRejected(r),
                None => {
                    return Err(StorageError::Encode(
                        "an approval event without its record".into(),
                    ));
                }
            }
        }
        EventKind::ChildRunCompleted {
            child_run_id,
            status,
            notes,
            artifacts,
            result,
        } => KindRecord::ChildRunCompleted {
            child_run_id: child_run_id.clone(),
            status: (*status).into(),
            notes: notes.clone(),
            artifacts: artifacts.clone(),
            result: result.clone(),
        },

        EventKind::DeliveryAttempted { target, url, attempt } => KindRecord::DeliveryAttempted {
            target: target.clone(),
            url: url.clone(),
            attempt: *attempt,
        },
        EventKind::DeliverySucceeded {
            target,
            attempt,
            http_status,
        } => KindRecord::DeliverySucceeded {
            target: target.clone(),
            attempt: *attempt,
            http_status: *http_status,
        },
        EventKind::DeliveryFailed {
            target,
            attempt,
            error,
            will_retry,
            next_attempt_at_ms,
        } => KindRecord::DeliveryFailed {
            target: target.clone(),
            attempt: *attempt,
            error: error.clone(),
            will_retry: *will_retry,
            next_attempt_at_ms: *next_attempt_at_ms,
        },
    };
    encode_record(&EventRecord {
        v: EventRecord::VERSION,
        id: ev.id,
        time_ms: ev.time_ms,
        identity: ev.identity.clone(),
        event,
    })
}

/// Decodes one history row; a `RunStarted`'s definition comes from the cache (or
/// `definitions` once).
pub(crate) fn decode_event(
    bytes: &[u8],
    defs: &Definitions,
    definitions: &impl ReadableTable<DefinitionTableKey, &'static [u8]>,
) -> Result<Event, StorageError> {
    let r: EventRecord = decode_record(bytes)?;
    let kind = match r.event {
        KindRecord::RunStarted {
            workflow_id,
            definition,
            goal,
            context,
            request_id,
            parent_run_id,
            callback_url,
            task_queue,
            parent_step_id,
            depth,
        } => EventKind::RunStarted {
            workflow_id,
            definition: defs.resolve(&definition, definitions)?,
            goal,
            context,
            request_id,
            parent_run_id,
            callback_url,
            task_queue,
            parent_step_id,
            depth,
        },
        KindRecord::StepScheduled {
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
        KindRecord::StepStarted {
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
        KindRecord::StepCompleted {
            step_id,
            attempt,
            notes,
            artifacts,
            context_updates,
            result,
        } => EventKind::StepCompleted {
            step_id,
            attempt,
            notes,
            artifacts,
            context_updates,
            result,
        },
        KindRecord::StepResultRefused {
            step_id,
            attempt,
            violations,
            total_violations,
        } => EventKind::StepResultRefused {
            step_id,
            attempt,
            violations: violations
                .into_iter()
                .map(|v| railyard_model::contract::Violation {
                    path: v.path,
                    reason: v.reason,
                })
                .collect(),
            total_violations,
        },
        KindRecord::StepFailed {
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
        KindRecord::StepTimedOut {
            step_id,
            attempt,
            timeout,
            will_retry,
            next_attempt_at_ms,
        } => EventKind::StepTimedOut {
            step_id,
            attempt,
            timeout: match timeout {
                TimeoutRecord::StartToClose => TimeoutKind::StartToClose,
                TimeoutRecord::Heartbeat => TimeoutKind::Heartbeat,
                TimeoutRecord::Undelivered => TimeoutKind::Undelivered,
                TimeoutRecord::Wait => TimeoutKind::Wait,
            },
            will_retry,
            next_attempt_at_ms,
        },
        KindRecord::SignalReceived { name, payload_json } => EventKind::SignalReceived { name, payload_json },
        KindRecord::CoordinatorNote {
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
        KindRecord::CancelRequested { reason } => EventKind::CancelRequested { reason },
        KindRecord::StepUsage {
            step_id,
            attempt,
            model,
            usage,
        } => EventKind::StepUsage {
            step_id,
            attempt,
            model,
            usage: usage.to_model(),
        },
        KindRecord::AgentStuckWarning {
            step_id,
            attempt,
            signal,
            message,
        } => EventKind::AgentStuck {
            step_id,
            attempt,
            signal,
            message,
            fatal: false,
        },
        KindRecord::AgentStuck {
            step_id,
            attempt,
            signal,
            message,
        } => EventKind::AgentStuck {
            step_id,
            attempt,
            signal,
            message,
            fatal: true,
        },
        KindRecord::RunCompleted { context } => EventKind::RunCompleted { context },
        KindRecord::RunFailed { reason } => EventKind::RunFailed { reason },
        KindRecord::RunCanceled { reason } => EventKind::RunCanceled { reason },
        KindRecord::RunTerminated { reason } => EventKind::RunTerminated { reason },
        KindRecord::StepWaiting {
            step_id,
            attempt,
            on,
            run_ids,
            deadline_ms,
        } => EventKind::StepWaiting {
            step_id,
            attempt,
            on,
            run_ids,
            deadline_ms,
        },
        KindRecord::StepResumed {
            step_id,
            attempt,
            reason,
            waited_ms,
        } => EventKind::StepResumed {
            step_id,
            attempt,
            reason,
            waited_ms,
        },
        KindRecord::ChildRunStarted {
            child_run_id,
            workflow_id,
            step_id,
            parent_close_policy,
        } => EventKind::ChildRunStarted {
            child_run_id,
            workflow_id,
            step_id,
            parent_close_policy: ParentClosePolicy::parse(&parent_close_policy).ok_or_else(|| {
                super::corrupt(
                    "event",
                    format!("unknown parent close policy {parent_close_policy:?}"),
                )
            })?,
        },
        KindRecord::RunPaused(r) => EventKind::RunPaused { reason: r.reason },
        KindRecord::RunUnpaused(_) => EventKind::RunUnpaused {},
        KindRecord::StepAwaitingApproval(r) => super::approvals::decode_awaiting(r),
        KindRecord::StepApproved(r) => super::approvals::decode_answer(r, true),
        KindRecord::StepRejected(r) => super::approvals::decode_answer(r, false),
        KindRecord::ChildRunCompleted {
            child_run_id,
            status,
            notes,
            artifacts,
            result,
        } => EventKind::ChildRunCompleted {
            child_run_id,
            status: status.into(),
            notes,
            artifacts,
            result,
        },

        KindRecord::DeliveryAttempted { target, url, attempt } => {
            EventKind::DeliveryAttempted { target, url, attempt }
        }
        KindRecord::DeliverySucceeded {
            target,
            attempt,
            http_status,
        } => EventKind::DeliverySucceeded {
            target,
            attempt,
            http_status,
        },
        KindRecord::DeliveryFailed {
            target,
            attempt,
            error,
            will_retry,
            next_attempt_at_ms,
        } => EventKind::DeliveryFailed {
            target,
            attempt,
            error,
            will_retry,
            next_attempt_at_ms,
        },
    };
    Ok(Event {
        id: r.id,
        time_ms: r.time_ms,
        identity: r.identity,
        kind,
    })
}
