//! History rows: one [`EventRecord`] per event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    DefinitionKey, DefinitionRows, Definitions, Record, StatusRecord, UsageRecord, decode_record,
    encode_record, v1,
};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::contract::Violation;
use railyard_model::run::{Event, EventKind, ParentClosePolicy, RunStatus, Severity, TimeoutKind, Usage};

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
    IssueReported {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        attempt: u32,
        severity: SeverityRecord,
        #[serde(default)]
        summary: String,
        #[serde(default)]
        details: String,
    },
    SearchAttributesChanged {
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        changes: Vec<super::attributes::ChangeRecord>,
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
    RunResetFrom {
        #[serde(default)]
        from_run_id: String,
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        reason: String,
    },
    StepCarried {
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
        #[serde(default, skip_serializing_if = "String::is_empty")]
        result: String,
        #[serde(default)]
        model: String,
        #[serde(default)]
        usage: UsageRecord,
    },
    RunResetTo {
        #[serde(default)]
        to_run_id: String,
        #[serde(default)]
        step_id: String,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        reason: String,
    },
    BatchApplied {
        #[serde(default)]
        batch_id: String,
        #[serde(default)]
        action: String,
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

/// An issue's severity, by its API name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum SeverityRecord {
    Info,
    Warning,
    Error,
    Critical,
}

impl SeverityRecord {
    pub(super) fn from_model(s: Severity) -> Self {
        match s {
            Severity::Info => Self::Info,
            Severity::Warning => Self::Warning,
            Severity::Error => Self::Error,
            Severity::Critical => Self::Critical,
        }
    }

    pub(super) fn to_model(self) -> Severity {
        match self {
            Self::Info => Severity::Info,
            Self::Warning => Severity::Warning,
            Self::Error => Severity::Error,
            Self::Critical => Severity::Critical,
        }
    }
}

impl Field for Severity {
    type Record = SeverityRecord;
    fn to_record(&self) -> SeverityRecord {
        SeverityRecord::from_model(*self)
    }
    fn from_record(r: SeverityRecord) -> Result<Self, StorageError> {
        Ok(r.to_model())
    }
}

/// A model field as its record field, and back: most are plain values, the same
/// type on both sides; the others convert to the record's own type.
trait Field: Sized {
    type Record;
    fn to_record(&self) -> Self::Record;
    fn from_record(r: Self::Record) -> Result<Self, StorageError>;
}

macro_rules! plain_fields {
    ($($t:ty),* $(,)?) => {$(
        impl Field for $t {
            type Record = $t;
            fn to_record(&self) -> $t {
                Clone::clone(self)
            }
            fn from_record(r: $t) -> Result<$t, StorageError> {
                Ok(r)
            }
        }
    )*};
}

plain_fields!(
    String,
    bool,
    u16,
    u32,
    u64,
    usize,
    Millis,
    Option<Millis>,
    Vec<String>,
    BTreeMap<String, String>,
);

impl Field for Vec<railyard_model::attributes::AttributeChange> {
    type Record = Vec<super::attributes::ChangeRecord>;
    fn to_record(&self) -> Self::Record {
        self.iter()
            .map(super::attributes::ChangeRecord::from_model)
            .collect()
    }
    fn from_record(r: Self::Record) -> Result<Self, StorageError> {
        Ok(r.into_iter()
            .map(super::attributes::ChangeRecord::into_model)
            .collect())
    }
}

impl Field for TimeoutKind {
    type Record = TimeoutRecord;
    fn to_record(&self) -> TimeoutRecord {
        match self {
            Self::StartToClose => TimeoutRecord::StartToClose,
            Self::Heartbeat => TimeoutRecord::Heartbeat,
            Self::Undelivered => TimeoutRecord::Undelivered,
            Self::Wait => TimeoutRecord::Wait,
        }
    }
    fn from_record(r: TimeoutRecord) -> Result<Self, StorageError> {
        Ok(match r {
            TimeoutRecord::StartToClose => Self::StartToClose,
            TimeoutRecord::Heartbeat => Self::Heartbeat,
            TimeoutRecord::Undelivered => Self::Undelivered,
            TimeoutRecord::Wait => Self::Wait,
        })
    }
}

impl Field for RunStatus {
    type Record = StatusRecord;
    fn to_record(&self) -> StatusRecord {
        (*self).into()
    }
    fn from_record(r: StatusRecord) -> Result<Self, StorageError> {
        Ok(r.into())
    }
}

impl Field for Usage {
    type Record = UsageRecord;
    fn to_record(&self) -> UsageRecord {
        UsageRecord::from_model(self)
    }
    fn from_record(r: UsageRecord) -> Result<Self, StorageError> {
        Ok(r.to_model())
    }
}

impl Field for Vec<Violation> {
    type Record = Vec<ViolationRecord>;
    fn to_record(&self) -> Vec<ViolationRecord> {
        self.iter()
            .map(|v| ViolationRecord {
                path: v.path.clone(),
                reason: v.reason.clone(),
            })
            .collect()
    }
    fn from_record(r: Vec<ViolationRecord>) -> Result<Self, StorageError> {
        Ok(r.into_iter()
            .map(|v| Violation {
                path: v.path,
                reason: v.reason,
            })
            .collect())
    }
}

/// By its name: `cancel`, `terminate` or `abandon`.
impl Field for ParentClosePolicy {
    type Record = String;
    fn to_record(&self) -> String {
        self.name().into()
    }
    fn from_record(r: String) -> Result<Self, StorageError> {
        ParentClosePolicy::parse(&r)
            .ok_or_else(|| super::corrupt("event", format!("unknown parent close policy {r:?}")))
    }
}

/// Writes `encode_kind` and `decode_kind`: one arm each way for every event type
/// listed under `same` (its record variant has the model's fields under the same
/// names, each converted by its [`Field`]), then the arms written out for the
/// others. Both matches stay exhaustive, so a new event type does not compile
/// until it has a record. A field renamed in the model moves its event to the
/// written-out arms (or renames the record's field with `#[serde(rename)]`): the
/// stored names never follow the model, as `event_tests.rs` checks.
macro_rules! event_records {
    (
        same { $($v:ident { $($f:ident),* $(,)? }),* $(,)? }
        encode($kind:ident, $defs:ident) { $($encode:tt)* }
        decode($record:ident, $rdefs:ident, $table:ident) { $($decode:tt)* }
    ) => {
        fn encode_kind($kind: &EventKind, $defs: &Definitions) -> Result<KindRecord, StorageError> {
            Ok(match $kind {
                $(EventKind::$v { $($f),* } => KindRecord::$v { $($f: Field::to_record($f)),* },)*
                $($encode)*
            })
        }

        fn decode_kind(
            $record: KindRecord,
            $rdefs: &Definitions,
            $table: &impl DefinitionRows,
        ) -> Result<EventKind, StorageError> {
            Ok(match $record {
                $(KindRecord::$v { $($f),* } => EventKind::$v { $($f: Field::from_record($f)?),* },)*
                $($decode)*
            })
        }
    };
}

event_records! {
    same {
        StepScheduled { step_id, step_index, attempt, task_queue },
        StepStarted { step_id, attempt, worker, lease },
        StepCompleted { step_id, attempt, notes, artifacts, context_updates, result },
        StepResultRefused { step_id, attempt, violations, total_violations },
        StepFailed { step_id, attempt, error_type, message, will_retry, next_attempt_at_ms },
        StepTimedOut { step_id, attempt, timeout, will_retry, next_attempt_at_ms },
        SignalReceived { name, payload_json },
        IssueReported { step_id, attempt, severity, summary, details },
        SearchAttributesChanged { step_id, changes },
        CoordinatorNote { step_id, attempt, kind, message },
        CancelRequested { reason },
        StepUsage { step_id, attempt, model, usage },
        RunCompleted { context },
        RunFailed { reason },
        RunCanceled { reason },
        RunTerminated { reason },
        StepWaiting { step_id, attempt, on, run_ids, deadline_ms },
        StepResumed { step_id, attempt, reason, waited_ms },
        ChildRunStarted { child_run_id, workflow_id, step_id, parent_close_policy },
        ChildRunCompleted { child_run_id, status, notes, artifacts, result },
        DeliveryAttempted { target, url, attempt },
        DeliverySucceeded { target, attempt, http_status },
        DeliveryFailed { target, attempt, error, will_retry, next_attempt_at_ms },
        RunResetFrom { from_run_id, step_id, kind, reason },
        StepCarried { step_id, attempt, notes, artifacts, context_updates, result, model, usage },
        RunResetTo { to_run_id, step_id, kind, reason },
        BatchApplied { batch_id, action },
    }
    encode(kind, defs) {
        // Names its definition, which the same transaction stores.
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
        // One event type, two records (by the type name history shows).
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
    }
    decode(record, defs, definitions) {
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
        KindRecord::RunPaused(r) => EventKind::RunPaused { reason: r.reason },
        KindRecord::RunUnpaused(_) => EventKind::RunUnpaused {},
        KindRecord::StepAwaitingApproval(r) => super::approvals::decode_awaiting(r),
        KindRecord::StepApproved(r) => super::approvals::decode_answer(r, true),
        KindRecord::StepRejected(r) => super::approvals::decode_answer(r, false),
    }
}

/// Encodes one history row. A `RunStarted` names its definition, which the same
/// transaction stores (see [`Definitions::store`]).
pub fn encode_event(ev: &Event, defs: &Definitions) -> Result<Vec<u8>, StorageError> {
    encode_record(&EventRecord {
        v: EventRecord::VERSION,
        id: ev.id,
        time_ms: ev.time_ms,
        identity: ev.identity.clone(),
        event: encode_kind(&ev.kind, defs)?,
    })
}

/// Decodes one history row; a `RunStarted`'s definition comes from the cache (or
/// `definitions` once).
pub fn decode_event(
    bytes: &[u8],
    defs: &Definitions,
    definitions: &impl DefinitionRows,
) -> Result<Event, StorageError> {
    let r: EventRecord = decode_record(bytes)?;
    Ok(Event {
        id: r.id,
        time_ms: r.time_ms,
        identity: r.identity,
        kind: decode_kind(r.event, defs, definitions)?,
    })
}
