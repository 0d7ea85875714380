//! Storage layout 3's records, frozen: the rows the layout-2 migration writes, as
//! version 1 of each record had them when layout 3 began. Only the fields a layout-2
//! file can fill are here; the current records (`crate::records`) read these rows,
//! as they read every older row, by defaulting what is missing.
//!
//! Frozen: never edited when the model or the current records change. The
//! migration reads layout 2 through `layout2.rs` and writes through these types
//! alone, with no model type between, so that a change to the model cannot change
//! what the migration writes, and never needs an edit here. The field order is the
//! order of the JSON keys, as version 1 wrote them.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::StorageError;

/// Milliseconds since the Unix epoch.
pub(super) type Millis = i64;

/// The version every record here is written as.
pub(super) const V1: u32 = 1;

/// Encodes a record as its row; `what` names it in an error.
pub(super) fn encode<T: Serialize>(what: &str, record: &T) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(record)
        .map_err(|e| StorageError::Encode(format!("layout-3 {what} record: {e}").into()))
}

/// Which stored definition a run and its `RunStarted` follow: the `definitions`
/// table's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct DefinitionKey {
    pub workflow_id: String,
    pub version: String,
    /// Hex of the first 16 bytes of the SHA-256 of the stored definition record.
    pub hash: String,
}

/// A definition record, keyed by its content; the key and the row to store.
pub(super) fn definition_row(def: &Definition) -> Result<(DefinitionKey, Vec<u8>), StorageError> {
    let bytes = encode("definition", def)?;
    let digest = Sha256::digest(&bytes);
    let hash = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let key = DefinitionKey {
        workflow_id: def.id.clone(),
        version: def.version.clone(),
        hash,
    };
    Ok((key, bytes))
}

/// A row of `definitions`.
#[derive(Debug, Serialize)]
pub(super) struct Definition {
    pub v: u32,
    pub id: String,
    pub version: String,
    pub name: String,
    pub description: String,
    pub task_queue: Option<String>,
    pub steps: Vec<StepDef>,
}

#[derive(Debug, Serialize)]
pub(super) struct StepDef {
    pub id: String,
    pub title: String,
    pub prompt: String,
    pub task_queue: Option<String>,
    pub allowed_tools: Vec<String>,
    pub max_turns: Option<u32>,
    pub timeout_seconds: Option<u32>,
    pub heartbeat_timeout_seconds: Option<u32>,
    pub retry: Option<Retry>,
    pub require_confirmation: bool,
}

#[derive(Debug, Serialize)]
pub(super) struct Retry {
    pub initial_interval_seconds: f64,
    pub backoff_coefficient: f64,
    pub maximum_interval_seconds: f64,
    pub maximum_attempts: u32,
    pub non_retryable_error_types: Vec<String>,
}

/// A run's state row (slot 0 of its rows in `runs`).
#[derive(Debug, Serialize)]
pub(super) struct Run {
    pub v: u32,
    pub namespace: String,
    pub run_id: String,
    pub workflow_id: String,
    pub definition: DefinitionKey,
    pub status: Status,
    pub goal: String,
    pub context: BTreeMap<String, String>,
    pub parent_run_id: String,
    pub request_id: String,
    pub callback_url: String,
    pub start_ms: Millis,
    pub close_ms: Option<Millis>,
    pub last_event_id: u64,
    pub current_step: usize,
    pub phase: Phase,
    pub steps: Vec<StepState>,
    pub lease_counter: u64,
    pub cancel_requested: bool,
    pub failure: String,
    pub pending_signals: Vec<Signal>,
}

#[derive(Debug, Serialize)]
pub(super) enum Status {
    #[serde(rename = "RUNNING")]
    Running,
    #[serde(rename = "COMPLETED")]
    Completed,
    #[serde(rename = "FAILED")]
    Failed,
    #[serde(rename = "CANCELED")]
    Canceled,
    #[serde(rename = "TERMINATED")]
    Terminated,
    #[serde(rename = "TIMED_OUT")]
    TimedOut,
}

#[derive(Debug, Serialize)]
#[serde(tag = "kind")]
pub(super) enum Phase {
    #[serde(rename = "scheduled")]
    Scheduled { queue: String, task_seq: u64 },
    #[serde(rename = "started")]
    Started { lease: Lease },
    #[serde(rename = "backing_off")]
    BackingOff { until_ms: Millis },
    #[serde(rename = "closed")]
    Closed,
}

#[derive(Debug, Serialize)]
pub(super) struct Lease {
    pub seq: u64,
    pub worker: String,
    pub started_ms: Millis,
    pub close_deadline_ms: Millis,
    pub heartbeat_timeout_ms: Option<Millis>,
    pub heartbeat_deadline_ms: Option<Millis>,
}

#[derive(Debug, Serialize)]
pub(super) struct StepState {
    pub state: String,
    pub attempt: u32,
    pub notes: String,
    pub artifacts: Vec<String>,
    pub worker: String,
    pub last_failure: String,
}

#[derive(Debug, Serialize)]
pub(super) struct Signal {
    pub event_id: u64,
    pub name: String,
    pub payload_json: String,
}

/// One history row (slots 1.. of a run's rows in `runs`).
#[derive(Debug, Serialize)]
pub(super) struct Event {
    pub v: u32,
    pub id: u64,
    pub time_ms: Millis,
    pub identity: String,
    pub event: Kind,
}

/// The event types layout 2 had, named as the history names them.
#[derive(Debug, Serialize)]
pub(super) enum Kind {
    RunStarted {
        workflow_id: String,
        definition: DefinitionKey,
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
        timeout: Timeout,
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

#[derive(Debug, Serialize)]
pub(super) enum Timeout {
    #[serde(rename = "START_TO_CLOSE")]
    StartToClose,
    #[serde(rename = "HEARTBEAT")]
    Heartbeat,
    #[serde(rename = "UNDELIVERED")]
    Undelivered,
}

/// A row of `timers`.
#[derive(Debug, Serialize)]
pub(super) struct Timer {
    pub v: u32,
    pub timer: TimerKind,
}

#[derive(Debug, Serialize)]
pub(super) enum TimerKind {
    /// A retry backoff ends: schedule the next attempt.
    #[serde(rename = "backoff")]
    Backoff {
        namespace: String,
        run_id: String,
        step_index: usize,
        attempt: u32,
    },
}
