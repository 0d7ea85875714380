//! The gRPC front end: one module per service. Handlers validate input (naming the
//! field), read through [`Store`] or mutate through the [`Writer`], and convert
//! to wire types here.

pub mod history;
pub mod tasks;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use railyard_proto::v1;

use crate::clock::Clock;
use crate::error::ApiError;
use crate::matching::Matching;
use crate::metrics::Metrics;
use crate::model::{Event, RunState, RunStatus};
use crate::store::Store;
use crate::store::writer::Writer;
use crate::token::TokenKeys;
use crate::watch::Watchers;
use crate::workflow::WorkflowRegistry;

/// Size limits on what clients send. Past them a request gets `INVALID_ARGUMENT`.
pub mod limits {
    pub const NAME: usize = 128;
    pub const REQUEST_ID: usize = 256;
    pub const GOAL: usize = 64 * 1024;
    pub const CONTEXT_ENTRIES: usize = 256;
    pub const CONTEXT_VALUE: usize = 64 * 1024;
    pub const NOTES: usize = 1024 * 1024;
    pub const ARTIFACTS: usize = 256;
    pub const ARTIFACT: usize = 4096;
    pub const CHECKPOINT: usize = 8 * 1024 * 1024;
    pub const MESSAGE: usize = 64 * 1024;
    pub const SIGNAL_PAYLOAD: usize = 256 * 1024;
    pub const COORDINATOR_NOTES: usize = 64;
    pub const URL: usize = 2048;
}

/// What every handler shares.
pub struct Core {
    pub store: Store,
    pub writer: Writer,
    pub matching: Arc<Matching>,
    pub watchers: Arc<Watchers>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
    pub keys: TokenKeys,
    pub workflows: Arc<WorkflowRegistry>,
    pub namespaces: HashSet<String>,
    /// Turns true when the server shuts down; long waits end early on it.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Core {
    /// Resolves when the server starts shutting down.
    pub async fn shutting_down(&self) {
        let mut rx = self.shutdown.clone();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The namespace a request names (`default` when empty), if it exists.
    pub fn namespace(&self, ns: &str) -> Result<String, ApiError> {
        let ns = if ns.is_empty() {
            railyard_proto::DEFAULT_NAMESPACE
        } else {
            ns
        };
        if self.namespaces.contains(ns) {
            Ok(ns.to_string())
        } else {
            Err(ApiError::NotFound(format!("namespace {ns:?} does not exist")))
        }
    }
}

/// Checks an identifier-like field: non-empty, short, no control characters.
pub fn check_name(field: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() {
        return Err(ApiError::field(field, "must not be empty"));
    }
    check_len(field, value, limits::NAME)?;
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(c))
    {
        return Err(ApiError::field(
            field,
            format!("{value:?} may hold only letters, digits and - _ . : @"),
        ));
    }
    Ok(())
}

pub fn check_len(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    check_bytes(field, value.as_bytes(), max)
}

pub fn check_bytes(field: &str, value: &[u8], max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(ApiError::field(
            field,
            format!("is {} bytes, more than the limit of {max}", value.len()),
        ));
    }
    Ok(())
}

pub fn check_count(field: &str, count: usize, max: usize) -> Result<(), ApiError> {
    if count > max {
        return Err(ApiError::field(
            field,
            format!("has {count} entries, more than {max}"),
        ));
    }
    Ok(())
}

/// The caller's identity (checked), or `default` when it gave none.
pub fn identity(given: String, default: &str) -> Result<String, ApiError> {
    check_len("identity", &given, limits::NAME * 2)?;
    Ok(if given.is_empty() {
        default.to_string()
    } else {
        given
    })
}

/// Checks a context map (or context updates) and converts it.
pub fn check_context(
    field: &str,
    ctx: HashMap<String, String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    check_count(field, ctx.len(), limits::CONTEXT_ENTRIES)?;
    for (k, v) in &ctx {
        if k.is_empty() || k.len() > limits::NAME {
            return Err(ApiError::field(
                field,
                format!("key {k:?} must be 1 to {} bytes", limits::NAME),
            ));
        }
        check_len(&format!("{field}[{k:?}]"), v, limits::CONTEXT_VALUE)?;
    }
    Ok(ctx.into_iter().collect())
}

pub fn status_to_proto(s: RunStatus) -> v1::RunStatus {
    match s {
        RunStatus::Running => v1::RunStatus::Running,
        RunStatus::Completed => v1::RunStatus::Completed,
        RunStatus::Failed => v1::RunStatus::Failed,
        RunStatus::Canceled => v1::RunStatus::Canceled,
        RunStatus::Terminated => v1::RunStatus::Terminated,
        RunStatus::TimedOut => v1::RunStatus::TimedOut,
    }
}

pub fn status_from_proto(s: i32) -> Result<Option<RunStatus>, ApiError> {
    Ok(
        match v1::RunStatus::try_from(s)
            .map_err(|_| ApiError::field("status", format!("unknown status {s}")))?
        {
            v1::RunStatus::Unspecified => None,
            v1::RunStatus::Running => Some(RunStatus::Running),
            v1::RunStatus::Completed => Some(RunStatus::Completed),
            v1::RunStatus::Failed => Some(RunStatus::Failed),
            v1::RunStatus::Canceled => Some(RunStatus::Canceled),
            v1::RunStatus::Terminated => Some(RunStatus::Terminated),
            v1::RunStatus::TimedOut => Some(RunStatus::TimedOut),
        },
    )
}

/// A run's summary on the wire.
pub fn run_info(run: &RunState) -> v1::RunInfo {
    let steps = run
        .definition
        .steps
        .iter()
        .zip(&run.steps)
        .map(|(def, rec)| v1::StepSummary {
            step_id: def.id.clone(),
            title: def.title.clone(),
            state: rec.state.clone(),
            attempt: rec.attempt,
            notes: rec.notes.clone(),
            task_queue: def.queue(&run.definition).to_string(),
            worker_identity: rec.worker.clone(),
            last_failure: rec.last_failure.clone(),
        })
        .collect();
    v1::RunInfo {
        namespace: run.namespace.clone(),
        run_id: run.run_id.clone(),
        workflow_id: run.workflow_id.clone(),
        workflow_version: run.definition.version.clone(),
        status: status_to_proto(run.status) as i32,
        goal: run.goal.clone(),
        context: run.context.clone().into_iter().collect(),
        start_time_unix_ms: run.start_ms,
        close_time_unix_ms: run.close_ms.unwrap_or(0),
        current_step: run.current_step as u32,
        history_length: run.last_event_id,
        parent_run_id: run.parent_run_id.clone(),
        failure: run.failure.clone(),
        steps,
    }
}

/// An event on the wire: its type, and its attributes as a JSON object.
pub fn event_to_proto(ev: &Event) -> v1::HistoryEvent {
    v1::HistoryEvent {
        event_id: ev.id,
        time_unix_ms: ev.time_ms,
        event_type: ev.kind.type_name().to_string(),
        identity: ev.identity.clone(),
        attributes_json: crate::model::wire::event_attributes_json(&ev.kind),
    }
}
