//! The gRPC front end: one module per service. Handlers convert wire types to the
//! service layer's ([`railyard_engine::service`]) and back, and map its errors onto status
//! codes ([`status`]); the request logic lives in the service layer.

pub mod admin;
pub mod batches;
pub mod capacity;
pub mod history;
pub mod output;
pub mod peer;
pub mod schedules;
pub mod tasks;
pub mod triggers;

use railyard_model::Rejection;
use railyard_proto::v1;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use railyard_engine::error::ApiError;
use railyard_engine::service::{Caller, CallerInput, Credentials, Operation, caller};
use railyard_model::run::size::SUMMARY_TEXT_BYTES;
use railyard_model::run::{Event, RunState, RunStatus};
use railyard_model::text;

pub(crate) use railyard_engine::service::Core;

/// An API error as a gRPC status: the one place codes are chosen.
pub fn status(e: ApiError) -> Status {
    let code = match &e {
        ApiError::Rejected(r) => match r {
            Rejection::InvalidArgument(_) => Code::InvalidArgument,
            Rejection::NotFound(_) => Code::NotFound,
            Rejection::AlreadyExists(_) => Code::AlreadyExists,
            Rejection::FailedPrecondition(_) => Code::FailedPrecondition,
            Rejection::PermissionDenied(_) => Code::PermissionDenied,
            Rejection::ResourceExhausted(_) => Code::ResourceExhausted,
        },
        ApiError::Unauthenticated(_) => Code::Unauthenticated,
        ApiError::Internal(_) | ApiError::Storage(_) => Code::Internal,
        ApiError::Unavailable(_) => Code::Unavailable,
    };
    if let ApiError::Storage(s) = &e {
        tracing::error!(error = %s, "a request failed in storage");
    }
    Status::new(code, bounded_message(e.client_message()))
}

/// Longest status message sent. Messages quote client input through
/// [`railyard_model::echo`]; this is the backstop for any that does not.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 2048;

fn bounded_message(message: String) -> String {
    if message.len() <= MAX_STATUS_MESSAGE_BYTES {
        return message;
    }
    text::cut(&message, MAX_STATUS_MESSAGE_BYTES, "…")
}

/// The credentials in a request's `authorization` metadata.
pub fn credentials(metadata: &MetadataMap) -> Credentials {
    Credentials::from_header(metadata.get("authorization").map(|v| v.to_str().map_err(|_| ())))
}

/// The subject of the request's verified client certificate under mutual TLS
/// ([`peer::PEER_SUBJECT`], set only by the server's own [`peer::PeerLayer`]).
pub fn peer_subject(metadata: &MetadataMap) -> Option<String> {
    metadata
        .get(peer::PEER_SUBJECT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The caller of a request that names its namespace and identity, doing `op`:
/// authenticated from its metadata and authorized ([`caller::resolve`]).
fn caller_of(
    core: &Core,
    metadata: &MetadataMap,
    namespace: String,
    identity: String,
    op: Operation,
) -> Result<Caller, Status> {
    let input = CallerInput {
        namespace,
        identity,
        credentials: credentials(metadata),
        peer_subject: peer_subject(metadata),
    };
    caller::resolve(core, input, op).map_err(status)
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

/// A run on the wire, whole (`DescribeRun`).
pub fn run_info(run: &RunState) -> v1::RunInfo {
    run_info_with(run, true)
}

fn run_info_with(run: &RunState, whole: bool) -> v1::RunInfo {
    let text = |s: &String| if whole { s.clone() } else { String::new() };
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
            notes: text(&rec.notes),
            task_queue: def.queue(&run.definition, &run.task_queue).to_string(),
            worker_identity: rec.worker.clone(),
            last_failure: text(&rec.last_failure),
            result_json: text(&rec.result),
            result_refusals: rec.result_refusals,
            usage: usage_to_proto(&rec.usage),
            model: rec.model.clone(),
            issues: rec.issues,
            carried: rec.carried,
        })
        .collect();
    v1::RunInfo {
        search_attributes: run
            .attributes
            .iter()
            .map(|(name, v)| v1::SearchAttribute {
                name: name.clone(),
                r#type: v.value_type().name().to_string(),
                value: v.text(),
            })
            .collect(),
        namespace: run.namespace.clone(),
        run_id: run.run_id.clone(),
        workflow_id: run.workflow_id.clone(),
        workflow_version: run.definition.version.clone(),
        status: status_to_proto(run.status) as i32,
        goal: run.goal.clone(),
        context: if whole {
            run.context.clone().into_iter().collect()
        } else {
            Default::default()
        },
        start_time_unix_ms: run.start_ms,
        close_time_unix_ms: run.close_ms.unwrap_or(0),
        current_step: run.current_step as u32,
        history_length: run.last_event_id,
        parent_run_id: run.parent_run_id.clone(),
        failure: run.failure.clone(),
        steps,
        usage: usage_to_proto(&run.usage),
        parent_step_id: run.parent_step_id.clone(),
        depth: run.depth,
        waiting: run.waiting().map(|w| wait_info(w, whole)),
        paused: run.paused,
        delivery_state: delivery_state(&run.deliveries) as i32,
        deliveries: run.deliveries.iter().map(delivery_info).collect(),
        trace_id: run.trace.trace_id_hex(),
        reset_from: run.reset_from.clone(),
        reset_to: run.reset_to.clone(),
        carried_usage: usage_to_proto(&run.carried_usage()),
        issue_count: run.issue_count(),
        issues: if whole {
            run.issues.iter().map(issue_info).collect()
        } else {
            Vec::new()
        },
        principles: text(&run.principles),
        children_started: run.children_started,
        priority: run.flow.priority.into(),
        fairness_key: run.flow.fairness_key.clone(),
        fairness_weight: run.flow.weight,
        concurrency_key: run.flow.concurrency_key.clone(),
        flow_wait: String::new(),
    }
}

/// An issue a run keeps, on the wire.
fn issue_info(i: &railyard_model::run::Issue) -> v1::ReportedIssue {
    v1::ReportedIssue {
        step_id: i.step_id.clone(),
        attempt: i.attempt,
        severity: i.severity.name().to_string(),
        summary: i.summary.clone(),
        details: i.details.clone(),
        time_unix_ms: i.time_ms,
    }
}

/// A run's delivery over all its targets: FAILED if any failed, else PENDING if any
/// is still trying, else SUCCEEDED; NONE without targets.
pub fn delivery_state(ds: &[railyard_model::run::Delivery]) -> v1::DeliveryState {
    use railyard_model::run::DeliveryStatus as S;
    if ds.is_empty() {
        v1::DeliveryState::None
    } else if ds.iter().any(|d| d.status == S::Failed) {
        v1::DeliveryState::Failed
    } else if ds.iter().any(|d| d.status == S::Pending) {
        v1::DeliveryState::Pending
    } else {
        v1::DeliveryState::Succeeded
    }
}

/// One target's delivery on the wire; the URL without its path and query.
pub fn delivery_info(d: &railyard_model::run::Delivery) -> v1::DeliveryInfo {
    use railyard_model::run::DeliveryStatus as S;
    v1::DeliveryInfo {
        target: d.target.name(),
        url: railyard_model::run::delivery::url::redacted(&d.url),
        state: match d.status {
            S::Pending => v1::DeliveryState::Pending,
            S::Succeeded => v1::DeliveryState::Succeeded,
            S::Failed => v1::DeliveryState::Failed,
        } as i32,
        attempts: d.attempts,
        last_error: d.last_error.clone(),
        last_attempt_unix_ms: d.last_attempt_ms.unwrap_or(0),
        next_attempt_unix_ms: d.next_attempt_ms.unwrap_or(0),
        in_flight: d.in_flight,
    }
}

/// A waiting step's wait on the wire; a held proposal only when `whole` (not in
/// list summaries, like notes).
fn wait_info(w: &railyard_model::run::Waiting, whole: bool) -> v1::WaitInfo {
    let (run_ids, done_run_ids) = match &w.on {
        railyard_model::run::WaitOn::Children { run_ids, done } => {
            (run_ids.clone(), done.iter().map(|d| d.run_id.clone()).collect())
        }
        railyard_model::run::WaitOn::Unpause
        | railyard_model::run::WaitOn::Approval(_)
        | railyard_model::run::WaitOn::RateLimit { .. } => (Vec::new(), Vec::new()),
    };
    let mut info = v1::WaitInfo {
        on: w.on.kind().to_string(),
        run_ids,
        done_run_ids,
        since_unix_ms: w.since_ms,
        deadline_unix_ms: w.deadline_ms.unwrap_or(0),
        ..Default::default()
    };
    if let railyard_model::run::WaitOn::RateLimit { key } = &w.on {
        info.rate_limit_key = key.clone();
    }
    if let railyard_model::run::WaitOn::Approval(p) = &w.on {
        info.proposed_by = p.proposed_by.clone();
        if whole {
            info.proposed_notes = p.done.notes.clone();
            info.proposed_artifacts = p.done.artifacts.clone();
            info.proposed_context_updates = p.done.context_updates.clone().into_iter().collect();
            info.proposed_result_json = p.done.result.clone();
        }
    }
    info
}

/// Token usage on the wire; absent when nothing was used.
pub fn usage_to_proto(u: &railyard_model::run::Usage) -> Option<v1::TokenUsage> {
    (!u.is_zero()).then_some(v1::TokenUsage {
        input_tokens: u.input,
        output_tokens: u.output,
        cache_read_tokens: u.cache_read,
        cache_write_tokens: u.cache_write,
        cost_usd: u.cost_usd,
    })
}

/// Token usage from the wire: `None` when absent; a cost that is not a finite,
/// non-negative number counts as 0.
pub fn usage_from_proto(u: Option<&v1::TokenUsage>) -> Option<railyard_model::run::Usage> {
    u.map(|u| railyard_model::run::Usage {
        input: u.input_tokens,
        output: u.output_tokens,
        cache_read: u.cache_read_tokens,
        cache_write: u.cache_write_tokens,
        cost_usd: if u.cost_usd.is_finite() {
            u.cost_usd.max(0.0)
        } else {
            0.0
        },
    })
}

/// A run's list summary on the wire (`ListRuns`, `GetSessionTree`): like
/// [`run_info`] without the large fields, so one large run cannot break a listing.
/// The context and each step's notes and last failure are left empty; the goal and
/// the failure are cut to [`SUMMARY_TEXT_BYTES`] (`DescribeRun` has them whole).
pub fn run_summary(run: &RunState) -> v1::RunInfo {
    let mut info = run_info_with(run, false);
    info.goal = text::cut(&run.goal, SUMMARY_TEXT_BYTES, "…");
    info.failure = text::cut(&run.failure, SUMMARY_TEXT_BYTES, "…");
    info
}

/// An event on the wire: its type, and its attributes as a JSON object.
pub fn event_to_proto(ev: &Event) -> v1::HistoryEvent {
    v1::HistoryEvent {
        event_id: ev.id,
        time_unix_ms: ev.time_ms,
        event_type: ev.kind.type_name().to_string(),
        identity: ev.identity.clone(),
        attributes_json: railyard_model::run::wire::event_attributes_json(&ev.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_error_has_its_own_code_and_keeps_its_message() {
        let cases = [
            (
                ApiError::Rejected(Rejection::InvalidArgument("a".into())),
                Code::InvalidArgument,
            ),
            (
                ApiError::Rejected(Rejection::NotFound("a".into())),
                Code::NotFound,
            ),
            (
                ApiError::Rejected(Rejection::AlreadyExists("a".into())),
                Code::AlreadyExists,
            ),
            (
                ApiError::Rejected(Rejection::FailedPrecondition("a".into())),
                Code::FailedPrecondition,
            ),
            (
                ApiError::Rejected(Rejection::PermissionDenied("a".into())),
                Code::PermissionDenied,
            ),
            (ApiError::Unauthenticated("a".into()), Code::Unauthenticated),
            (
                ApiError::Rejected(Rejection::ResourceExhausted("a".into())),
                Code::ResourceExhausted,
            ),
            (ApiError::Internal("a".into()), Code::Internal),
            (ApiError::Unavailable("a".into()), Code::Unavailable),
        ];
        for (e, code) in cases {
            let s = status(e);
            assert_eq!((s.code(), s.message()), (code, "a"));
        }
    }

    #[test]
    fn a_storage_failure_never_shows_the_databases_words() {
        let raw = "db error: ERROR: invalid byte sequence for encoding \"UTF8\": 0x00";
        let e = ApiError::from(railyard_store::StorageError::Backend(raw.into()));
        let s = status(e);
        assert_eq!(s.code(), Code::Internal);
        assert_eq!(s.message(), railyard_engine::error::STORAGE_FAILED);
    }

    #[test]
    fn long_messages_are_cut() {
        let s = status(ApiError::Internal("é".repeat(10_000)));
        assert!(s.message().len() <= MAX_STATUS_MESSAGE_BYTES + '…'.len_utf8());
        assert!(s.message().ends_with('…'));
    }
}
