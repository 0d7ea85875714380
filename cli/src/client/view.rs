//! How wire messages look to people and to programs: JSON values for `--output json`
//! (prost types are not `Serialize`) and the one-line human rendering of history events.
//!
//! JSON field names are the proto field names (snake_case); statuses are short names
//! (`RUNNING`); times come both as unix milliseconds and as RFC 3339 strings.

use base64::Engine as _;
use railyard_proto::v1::{
    DeliveryInfo, DeliveryState, DescribeTaskQueueResponse, HistoryEvent, InvalidWorkflow, RunInfo, Signal,
    StepSummary, StepTask, TokenUsage, WaitInfo, WorkflowInfo,
};
use serde_json::{Value, json};

use crate::client::output::truncate;
use crate::client::timefmt::{rfc3339_millis, rfc3339_or_null};

/// The short name of a wire status number (`UNKNOWN(9)` for one this build does not know).
pub(crate) fn status_name(status: i32) -> String {
    railyard_view::run_status(status, railyard_view::Case::Upper).into_owned()
}

/// A run as JSON.
pub(crate) fn run_json(run: &RunInfo) -> Value {
    json!({
        "namespace": run.namespace,
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "workflow_version": run.workflow_version,
        "status": status_name(run.status),
        "goal": run.goal,
        "context": run.context,
        "start_time": rfc3339_or_null(run.start_time_unix_ms),
        "start_time_unix_ms": run.start_time_unix_ms,
        "close_time": rfc3339_or_null(run.close_time_unix_ms),
        "close_time_unix_ms": run.close_time_unix_ms,
        "current_step": run.current_step,
        "history_length": run.history_length,
        "parent_run_id": run.parent_run_id,
        "failure": run.failure,
        "steps": run.steps.iter().map(step_json).collect::<Vec<_>>(),
        "parent_step_id": run.parent_step_id,
        "depth": run.depth,
        "paused": run.paused,
        "waiting": run.waiting.as_ref().map(|w| json!({
            "on": w.on,
            "run_ids": w.run_ids,
            "done_run_ids": w.done_run_ids,
            "since": rfc3339_or_null(w.since_unix_ms),
            "since_unix_ms": w.since_unix_ms,
            "deadline": rfc3339_or_null(w.deadline_unix_ms),
            "proposal": proposal_json(w),
        })),
        "usage": usage_json(run.usage.as_ref()),
        "delivery": run_delivery_json(run),
        "trace_id": run.trace_id,
        "reset_from": run.reset_from,
        "reset_to": run.reset_to,
        "carried_usage": usage_json(run.carried_usage.as_ref()),
        "issue_count": run.issue_count,
        "issues": run.issues.iter().map(issue_json).collect::<Vec<_>>(),
        "principles": run.principles,
        "search_attributes": railyard_view::attributes_json(&run.search_attributes),
        "priority": run.priority,
        "fairness_key": run.fairness_key,
        "fairness_weight": run.fairness_weight,
        "concurrency_key": run.concurrency_key,
        "flow_wait": run.flow_wait,
    })
}

/// A run's search attributes for people: `customer=acme, priority=2`.
pub(crate) fn attributes_text(attrs: &[railyard_proto::v1::SearchAttribute]) -> String {
    attrs
        .iter()
        .map(|a| format!("{}={}", a.name, a.value))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One issue as JSON.
pub(crate) fn issue_json(i: &railyard_proto::v1::ReportedIssue) -> Value {
    json!({
        "step_id": i.step_id,
        "attempt": i.attempt,
        "severity": i.severity,
        "summary": i.summary,
        "details": i.details,
        "time": crate::client::timefmt::rfc3339(i.time_unix_ms),
        "time_unix_ms": i.time_unix_ms,
    })
}

/// Token usage as JSON (zeros when none was reported).
pub(crate) fn usage_json(u: Option<&TokenUsage>) -> Value {
    let u = u.cloned().unwrap_or_default();
    let total = u
        .input_tokens
        .saturating_add(u.output_tokens)
        .saturating_add(u.cache_read_tokens)
        .saturating_add(u.cache_write_tokens);
    json!({
        "total_tokens": total,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "cost_usd": u.cost_usd,
    })
}

/// A wait for people: `waiting on children 1/2 done since 2026-...`, or
/// `AWAITING_APPROVAL since 2026-...`.
pub(crate) fn waiting_text(w: &railyard_proto::v1::WaitInfo) -> String {
    let mut text = if w.on == "approval" {
        format!(
            "AWAITING_APPROVAL since {}",
            crate::client::timefmt::rfc3339(w.since_unix_ms)
        )
    } else {
        format!(
            "waiting on {} {}/{} done since {}",
            w.on,
            w.done_run_ids.len(),
            w.run_ids.len(),
            crate::client::timefmt::rfc3339(w.since_unix_ms)
        )
    };
    if w.deadline_unix_ms > 0 {
        text.push_str(&format!(
            ", times out {}",
            crate::client::timefmt::rfc3339(w.deadline_unix_ms)
        ));
    }
    text
}

/// A step summary as JSON.
pub(crate) fn step_json(step: &StepSummary) -> Value {
    json!({
        "step_id": step.step_id,
        "title": step.title,
        "state": step.state,
        "attempt": step.attempt,
        "notes": step.notes,
        "task_queue": step.task_queue,
        "worker_identity": step.worker_identity,
        "last_failure": step.last_failure,
        "result": json_or_null(&step.result_json),
        "result_refusals": step.result_refusals,
        "usage": usage_json(step.usage.as_ref()),
        "model": step.model,
        "carried": step.carried,
        "issues": step.issues,
    })
}

/// JSON text a server sent as a value: null when empty, the text itself when it
/// does not parse.
fn json_or_null(text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// A history event as JSON; its attributes are parsed (kept as a string if they are
/// not valid JSON).
pub(crate) fn event_json(event: &HistoryEvent) -> Value {
    json!({
        "event_id": event.event_id,
        "time": rfc3339_or_null(event.time_unix_ms),
        "time_unix_ms": event.time_unix_ms,
        "event_type": event.event_type,
        "identity": event.identity,
        "attributes": parse_attributes(&event.attributes_json),
    })
}

fn parse_attributes(text: &str) -> Value {
    if text.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// A leased step task as JSON. The checkpoint is text when it is UTF-8, otherwise it
/// is given base64-encoded as `checkpoint_base64`.
pub(crate) fn task_json(task: &StepTask) -> Value {
    let mut value = json!({
        "task_token": task.task_token,
        "namespace": task.namespace,
        "run_id": task.run_id,
        "workflow_id": task.workflow_id,
        "workflow_name": task.workflow_name,
        "workflow_description": task.workflow_description,
        "step_id": task.step_id,
        "step_title": task.step_title,
        "step_index": task.step_index,
        "step_count": task.step_count,
        "attempt": task.attempt,
        "prompt": task.prompt,
        "goal": task.goal,
        "context": task.context,
        "prior_steps": task.prior_steps.iter().map(|p| json!({
            "step_id": p.step_id,
            "title": p.title,
            "notes": p.notes,
            "artifacts": p.artifacts,
            "result": json_or_null(&p.result_json),
        })).collect::<Vec<_>>(),
        "output_schema": json_or_null(&task.output_schema_json),
        "required_artifacts": task.required_artifacts,
        "allowed_tools": task.allowed_tools,
        "max_turns": task.max_turns,
        "start_to_close_timeout_ms": task.start_to_close_timeout_ms,
        "heartbeat_timeout_ms": task.heartbeat_timeout_ms,
        "require_confirmation": task.require_confirmation,
        "last_failure": task.last_failure,
        "signals": task.signals.iter().map(signal_json).collect::<Vec<_>>(),
        "resume_messages": task.resume_messages,
        "scheduled_time": rfc3339_or_null(task.scheduled_time_unix_ms),
        "scheduled_time_unix_ms": task.scheduled_time_unix_ms,
    });
    if let Value::Object(map) = &mut value {
        match std::str::from_utf8(&task.checkpoint) {
            Ok(text) => map.insert("checkpoint".into(), text.into()),
            Err(_) => map.insert(
                "checkpoint_base64".into(),
                base64::engine::general_purpose::STANDARD
                    .encode(&task.checkpoint)
                    .into(),
            ),
        };
    }
    value
}

/// A delivered signal as JSON; its payload is parsed (kept as a string if it is not JSON).
pub(crate) fn signal_json(signal: &Signal) -> Value {
    json!({
        "name": signal.name,
        "payload": parse_payload(&signal.payload_json),
        "event_id": signal.event_id,
    })
}

fn parse_payload(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// A workflow definition summary as JSON.
pub(crate) fn workflow_json(wf: &WorkflowInfo) -> Value {
    json!({
        "id": wf.id,
        "version": wf.version,
        "name": wf.name,
        "description": wf.description,
        "step_ids": wf.step_ids,
        "source_file": wf.source_file,
        "registered": wf.registered,
        "content_hash": wf.content_hash,
        "register_time_unix_ms": wf.register_time_unix_ms,
        "register_time": crate::client::timefmt::rfc3339_or_null(wf.register_time_unix_ms),
    })
}

/// A definition file that failed validation, as JSON.
pub(crate) fn invalid_workflow_json(wf: &InvalidWorkflow) -> Value {
    json!({ "source_file": wf.source_file, "error": wf.error })
}

/// A task queue's state as JSON.
pub(crate) fn queue_json(queue: &str, q: &DescribeTaskQueueResponse) -> Value {
    json!({
        "task_queue": queue,
        "backlog": q.backlog,
        "dispatched_total": q.dispatched_total,
        "pollers": q.pollers.iter().map(|p| json!({
            "identity": p.identity,
            "last_access": rfc3339_or_null(p.last_access_unix_ms),
            "last_access_unix_ms": p.last_access_unix_ms,
        })).collect::<Vec<_>>(),
        "keys": q.keys.iter().map(|k| json!({
            "key": k.key,
            "queued": k.queued,
            "running": k.running,
            "limit": (k.limit != 0).then_some(k.limit),
        })).collect::<Vec<_>>(),
    })
}

/// Attributes worth showing first, in this order (both spellings a server may use).
const KEY_ATTRIBUTES: &[&str] = &[
    "workflowId",
    "workflow_id",
    "stepId",
    "step_id",
    "attempt",
    "worker",
    "status",
    "name",
    "payloadJson",
    "payload_json",
    "signalName",
    "signal_name",
    "kind",
    "timeout",
    "errorType",
    "error_type",
    "message",
    "reason",
    "willRetry",
    "will_retry",
    "nextAttemptAtMs",
    "next_attempt_at_ms",
    "childRunId",
    "child_run_id",
    "goal",
    "notes",
];

/// Attributes too large or too noisy for a one-line view (they stay in `--output json`).
const HIDDEN_ATTRIBUTES: &[&str] = &[
    "definition",
    "definition_json",
    "definitionJson",
    "checkpoint",
    "transcript",
    "prompt",
    "request_id",
    "requestId",
];

/// Longest rendering of one attribute value in a human event line.
const MAX_VALUE_CHARS: usize = 60;

/// One human line for an event: `   7  2024-05-01T12:00:00.250Z  StepCompleted  step_id=plan attempt=1 by=w1`.
pub(crate) fn event_line(event: &HistoryEvent) -> String {
    let mut line = format!(
        "{:>4}  {}  {:<17}",
        event.event_id,
        rfc3339_millis(event.time_unix_ms),
        event.event_type
    );
    let attrs = key_attributes(&event.attributes_json);
    if !attrs.is_empty() {
        line.push_str("  ");
        line.push_str(&attrs);
    }
    if !event.identity.is_empty() {
        line.push_str("  by=");
        line.push_str(&event.identity);
    }
    line.trim_end().to_string()
}

/// The event's attributes as `key=value` pairs: the [`KEY_ATTRIBUTES`] first, then the
/// rest in name order, without the [`HIDDEN_ATTRIBUTES`].
pub(crate) fn key_attributes(attributes_json: &str) -> String {
    let value = parse_attributes(attributes_json);
    let map = match value {
        Value::Object(map) => map,
        Value::String(text) => return truncate(&text, MAX_VALUE_CHARS),
        other => return truncate(&other.to_string(), MAX_VALUE_CHARS),
    };
    let mut keys: Vec<&String> = map
        .keys()
        .filter(|k| !HIDDEN_ATTRIBUTES.contains(&k.as_str()))
        .collect();
    keys.sort_by_key(|k| {
        (
            KEY_ATTRIBUTES.iter().position(|p| p == k).unwrap_or(usize::MAX),
            k.as_str(),
        )
    });
    keys.into_iter()
        .filter_map(|k| {
            let text = if is_time_key(k) {
                map[k.as_str()].as_i64().map(rfc3339_millis)?
            } else if let Some(json) = embedded_json(k, &map[k.as_str()]) {
                truncate(&json, MAX_VALUE_CHARS)
            } else {
                attribute_text(&map[k.as_str()])?
            };
            Some(format!("{k}={text}"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether an attribute holds a unix-millisecond time (`nextAttemptAtMs`, `due_at_ms`).
fn is_time_key(key: &str) -> bool {
    key.ends_with("AtMs") || key.ends_with("_at_ms")
}

/// The compact text of a JSON document carried as a string (`payloadJson`), if it is one.
fn embedded_json(key: &str, value: &Value) -> Option<String> {
    if !(key.ends_with("Json") || key.ends_with("_json")) {
        return None;
    }
    serde_json::from_str::<Value>(value.as_str()?)
        .ok()
        .map(|v| v.to_string())
}

fn attribute_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => {
            let cut = truncate(s, MAX_VALUE_CHARS);
            let plain = !cut.is_empty() && !cut.contains(|c: char| c.is_whitespace() || c == '"' || c == '=');
            Some(if plain { cut } else { format!("{cut:?}") })
        }
        Value::Object(m) if m.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        other => Some(truncate(&other.to_string(), MAX_VALUE_CHARS)),
    }
}

/// A delivery state's short name: NONE, PENDING, SUCCEEDED, FAILED.
pub(crate) fn delivery_state_name(state: i32) -> String {
    match DeliveryState::try_from(state) {
        Ok(s) => s.as_str_name().trim_start_matches("DELIVERY_STATE_").to_string(),
        Err(_) => format!("UNKNOWN({state})"),
    }
}

/// The run's delivery as JSON (`run_json`'s `delivery`).
pub(crate) fn run_delivery_json(run: &RunInfo) -> Value {
    json!({
        "state": delivery_state_name(run.delivery_state),
        "targets": run.deliveries.iter().map(target_json).collect::<Vec<_>>(),
    })
}

fn target_json(d: &DeliveryInfo) -> Value {
    json!({
        "target": d.target,
        "url": d.url,
        "state": delivery_state_name(d.state),
        "attempts": d.attempts,
        "last_error": d.last_error,
        "last_attempt_time": rfc3339_or_null(d.last_attempt_unix_ms),
        "next_attempt_time": rfc3339_or_null(d.next_attempt_unix_ms),
        "in_flight": d.in_flight,
    })
}

/// The proposal as JSON fields of a `waiting` object (empty for other waits).
pub(crate) fn proposal_json(w: &WaitInfo) -> Value {
    if w.on != "approval" {
        return Value::Null;
    }
    let result = if w.proposed_result_json.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&w.proposed_result_json).unwrap_or_else(|_| json!(w.proposed_result_json))
    };
    json!({
        "notes": w.proposed_notes,
        "artifacts": w.proposed_artifacts,
        "context_updates": w.proposed_context_updates,
        "result": result,
        "proposed_by": w.proposed_by,
    })
}

#[cfg(test)]
mod tests {
    use railyard_proto::v1::RunStatus;

    use super::*;

    fn event(id: u64, ty: &str, identity: &str, attrs: &str) -> HistoryEvent {
        HistoryEvent {
            event_id: id,
            time_unix_ms: 1_714_564_800_250,
            event_type: ty.into(),
            identity: identity.into(),
            attributes_json: attrs.into(),
        }
    }

    #[test]
    fn event_line_puts_key_attributes_first() {
        let e = event(
            7,
            "StepCompleted",
            "w1",
            r#"{"notes":"all done","step_id":"plan","attempt":1,"zeta":true}"#,
        );
        assert_eq!(
            event_line(&e),
            r#"   7  2024-05-01T12:00:00.250Z  StepCompleted      step_id=plan attempt=1 notes="all done" zeta=true  by=w1"#
        );
    }

    #[test]
    fn event_line_hides_bulky_and_empty_attributes() {
        let attrs = r#"{"workflow_id":"demo","goal":"g","definition":{"steps":[]},"context":{},"parent":"","x":null}"#;
        let e = event(1, "RunStarted", "cli", attrs);
        assert_eq!(
            event_line(&e),
            "   1  2024-05-01T12:00:00.250Z  RunStarted         workflow_id=demo goal=g  by=cli"
        );
    }

    #[test]
    fn event_line_without_attributes_or_identity() {
        let e = event(12, "RunCompleted", "", "");
        assert_eq!(event_line(&e), "  12  2024-05-01T12:00:00.250Z  RunCompleted");
        let e = event(3, "Odd", "", "not json");
        assert_eq!(
            event_line(&e),
            "   3  2024-05-01T12:00:00.250Z  Odd                not json"
        );
    }

    #[test]
    fn event_line_for_camel_case_server_attributes() {
        let attrs = r#"{"stepId":"write","attempt":2,"errorType":"Tool","message":"bash failed","willRetry":true,"nextAttemptAtMs":1714564801000}"#;
        let e = event(9, "StepFailed", "w2", attrs);
        assert_eq!(
            event_line(&e),
            "   9  2024-05-01T12:00:00.250Z  StepFailed         stepId=write attempt=2 errorType=Tool \
             message=\"bash failed\" willRetry=true nextAttemptAtMs=2024-05-01T12:00:01.000Z  by=w2"
        );
    }

    #[test]
    fn event_line_shows_embedded_json_raw() {
        let e = event(
            4,
            "SignalReceived",
            "cli",
            r#"{"name":"steer","payloadJson":"{\"text\": \"be brief\"}"}"#,
        );
        assert_eq!(
            event_line(&e),
            r#"   4  2024-05-01T12:00:00.250Z  SignalReceived     name=steer payloadJson={"text":"be brief"}  by=cli"#
        );
    }

    #[test]
    fn long_values_are_cut() {
        let long = "x".repeat(200);
        let text = key_attributes(&format!(r#"{{"message":"{long}","list":[1,2]}}"#));
        assert!(
            text.starts_with(&format!("message={}…", "x".repeat(59))),
            "{text}"
        );
        assert!(text.ends_with("list=[1,2]"), "{text}");
    }

    #[test]
    fn event_json_parses_attributes() {
        let e = event(2, "StepScheduled", "server", r#"{"step_id":"a"}"#);
        let v = event_json(&e);
        assert_eq!(v["attributes"]["step_id"], "a");
        assert_eq!(v["time"], "2024-05-01T12:00:00.250Z");
        assert_eq!(event_json(&event(2, "X", "", "{bad"))["attributes"], "{bad");
    }

    #[test]
    fn run_json_uses_short_status_names() {
        let run = RunInfo {
            run_id: "r1".into(),
            status: RunStatus::TimedOut as i32,
            ..Default::default()
        };
        let v = run_json(&run);
        assert_eq!(v["status"], "TIMED_OUT");
        assert_eq!(v["close_time"], Value::Null);
        assert_eq!(status_name(99), "UNKNOWN(99)");
    }

    #[test]
    fn task_json_checkpoint() {
        let mut task = StepTask {
            checkpoint: b"turn 3".to_vec(),
            ..Default::default()
        };
        assert_eq!(task_json(&task)["checkpoint"], "turn 3");
        task.checkpoint = vec![0xff, 0x00];
        let v = task_json(&task);
        assert_eq!(v["checkpoint_base64"], "/wA=");
        assert!(v.get("checkpoint").is_none());
    }
}
