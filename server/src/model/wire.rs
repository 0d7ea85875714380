//! The public JSON of event attributes (`HistoryEvent.attributes_json`), mapped
//! field by field for each event type. The names here are the API: renaming a
//! field of [`EventKind`] cannot change them, and a test pins the JSON of every
//! event type.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{EventKind, TimeoutKind};

/// The attributes of an event as the API shows them: a JSON object whose field
/// names are camelCase.
pub fn event_attributes(kind: &EventKind) -> Value {
    match kind {
        EventKind::RunStarted {
            workflow_id,
            definition,
            goal,
            context,
            request_id,
            parent_run_id,
            callback_url,
            task_queue,
        } => {
            let mut attrs = json!({
                "workflowId": workflow_id,
                // The definition as its file format writes it (`workflow::WorkflowDef`),
                // which is public already: users write it.
                "definition": serde_json::to_value(&**definition).unwrap_or(Value::Null),
                "goal": goal,
                "context": map(context),
                "requestId": request_id,
                "parentRunId": parent_run_id,
                "callbackUrl": callback_url,
            });
            // Only when set, so the events of runs started before it existed read as they did.
            if !task_queue.is_empty()
                && let Value::Object(m) = &mut attrs
            {
                m.insert("taskQueue".into(), json!(task_queue));
            }
            attrs
        }
        EventKind::StepScheduled {
            step_id,
            step_index,
            attempt,
            task_queue,
        } => json!({
            "stepId": step_id,
            "stepIndex": step_index,
            "attempt": attempt,
            "taskQueue": task_queue,
        }),
        EventKind::StepStarted {
            step_id,
            attempt,
            worker,
            lease,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "worker": worker,
            "lease": lease,
        }),
        EventKind::StepCompleted {
            step_id,
            attempt,
            notes,
            artifacts,
            context_updates,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "notes": notes,
            "artifacts": artifacts,
            "contextUpdates": map(context_updates),
        }),
        EventKind::StepFailed {
            step_id,
            attempt,
            error_type,
            message,
            will_retry,
            next_attempt_at_ms,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "errorType": error_type,
            "message": message,
            "willRetry": will_retry,
            "nextAttemptAtMs": next_attempt_at_ms,
        }),
        EventKind::StepTimedOut {
            step_id,
            attempt,
            timeout,
            will_retry,
            next_attempt_at_ms,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "timeout": timeout_name(*timeout),
            "willRetry": will_retry,
            "nextAttemptAtMs": next_attempt_at_ms,
        }),
        EventKind::SignalReceived { name, payload_json } => json!({
            "name": name,
            "payloadJson": payload_json,
        }),
        EventKind::CoordinatorNote {
            step_id,
            attempt,
            kind,
            message,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "kind": kind,
            "message": message,
        }),
        EventKind::CancelRequested { reason } => json!({ "reason": reason }),
        EventKind::RunCompleted { context } => json!({ "context": map(context) }),
        EventKind::RunFailed { reason } => json!({ "reason": reason }),
        EventKind::RunCanceled { reason } => json!({ "reason": reason }),
        EventKind::RunTerminated { reason } => json!({ "reason": reason }),
        EventKind::DeliveryAttempted { target, url, attempt } => json!({
            "target": target,
            "url": url,
            "attempt": attempt,
        }),
        EventKind::DeliverySucceeded {
            target,
            attempt,
            http_status,
        } => json!({
            "target": target,
            "attempt": attempt,
            "httpStatus": http_status,
        }),
        EventKind::DeliveryFailed {
            target,
            attempt,
            error,
            will_retry,
            next_attempt_at_ms,
        } => json!({
            "target": target,
            "attempt": attempt,
            "error": error,
            "willRetry": will_retry,
            "nextAttemptAtMs": next_attempt_at_ms,
        }),
    }
}

/// [`event_attributes`] as JSON text.
pub fn event_attributes_json(kind: &EventKind) -> String {
    event_attributes(kind).to_string()
}

/// The API's name of a timeout kind.
pub fn timeout_name(kind: TimeoutKind) -> &'static str {
    match kind {
        TimeoutKind::StartToClose => "START_TO_CLOSE",
        TimeoutKind::Heartbeat => "HEARTBEAT",
        TimeoutKind::Undelivered => "UNDELIVERED",
    }
}

fn map(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::workflow::parse_definition;

    fn ctx(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Every event type, and the exact attributes JSON the API has always sent
    /// for it (keys sorted, as the text has always been written).
    fn cases() -> Vec<(EventKind, &'static str)> {
        let def = parse_definition(
            r#"{"id":"wf","version":"2","name":"W","taskQueue":"q","steps":[
              {"id":"a","title":"A","prompt":"do {{goal}}","maxTurns":4,"heartbeatTimeoutSeconds":9,
               "retry":{"maximumAttempts":5,"nonRetryableErrorTypes":["fatal"]}},
              {"id":"b","title":"B","prompt":"b","taskQueue":"other","allowedTools":["bash"],
               "timeoutSeconds":60,"requireConfirmation":true}]}"#,
        )
        .unwrap();
        vec![
            (
                EventKind::RunStarted {
                    workflow_id: "wf".into(),
                    definition: Arc::new(def),
                    goal: "the goal".into(),
                    context: ctx(&[("team", "infra"), ("a", "1")]),
                    request_id: "req-1".into(),
                    parent_run_id: "parent".into(),
                    callback_url: "https://example.com/cb".into(),
                    task_queue: "run-q".into(),
                },
                r#"{"callbackUrl":"https://example.com/cb","context":{"a":"1","team":"infra"},"definition":{"description":"","id":"wf","name":"W","steps":[{"heartbeatTimeoutSeconds":9,"id":"a","maxTurns":4,"prompt":"do {{goal}}","retry":{"backoffCoefficient":2.0,"initialIntervalSeconds":1.0,"maximumAttempts":5,"maximumIntervalSeconds":60.0,"nonRetryableErrorTypes":["fatal"]},"title":"A"},{"allowedTools":["bash"],"id":"b","prompt":"b","requireConfirmation":true,"taskQueue":"other","timeoutSeconds":60,"title":"B"}],"taskQueue":"q","version":"2"},"goal":"the goal","parentRunId":"parent","requestId":"req-1","taskQueue":"run-q","workflowId":"wf"}"#,
            ),
            (
                EventKind::StepScheduled {
                    step_id: "a".into(),
                    step_index: 1,
                    attempt: 2,
                    task_queue: "q".into(),
                },
                r#"{"attempt":2,"stepId":"a","stepIndex":1,"taskQueue":"q"}"#,
            ),
            (
                EventKind::StepStarted {
                    step_id: "a".into(),
                    attempt: 1,
                    worker: "w".into(),
                    lease: 2,
                },
                r#"{"attempt":1,"lease":2,"stepId":"a","worker":"w"}"#,
            ),
            (
                EventKind::StepCompleted {
                    step_id: "a".into(),
                    attempt: 1,
                    notes: "done".into(),
                    artifacts: vec!["out.md".into()],
                    context_updates: ctx(&[("k", "v")]),
                },
                r#"{"artifacts":["out.md"],"attempt":1,"contextUpdates":{"k":"v"},"notes":"done","stepId":"a"}"#,
            ),
            (
                EventKind::StepFailed {
                    step_id: "a".into(),
                    attempt: 1,
                    error_type: "boom".into(),
                    message: "it broke".into(),
                    will_retry: true,
                    next_attempt_at_ms: Some(5_000),
                },
                r#"{"attempt":1,"errorType":"boom","message":"it broke","nextAttemptAtMs":5000,"stepId":"a","willRetry":true}"#,
            ),
            (
                EventKind::StepFailed {
                    step_id: "a".into(),
                    attempt: 3,
                    error_type: "fatal".into(),
                    message: "no".into(),
                    will_retry: false,
                    next_attempt_at_ms: None,
                },
                r#"{"attempt":3,"errorType":"fatal","message":"no","nextAttemptAtMs":null,"stepId":"a","willRetry":false}"#,
            ),
            (
                EventKind::StepTimedOut {
                    step_id: "a".into(),
                    attempt: 1,
                    timeout: TimeoutKind::Heartbeat,
                    will_retry: true,
                    next_attempt_at_ms: Some(7),
                },
                r#"{"attempt":1,"nextAttemptAtMs":7,"stepId":"a","timeout":"HEARTBEAT","willRetry":true}"#,
            ),
            (
                EventKind::StepTimedOut {
                    step_id: "a".into(),
                    attempt: 2,
                    timeout: TimeoutKind::StartToClose,
                    will_retry: false,
                    next_attempt_at_ms: None,
                },
                r#"{"attempt":2,"nextAttemptAtMs":null,"stepId":"a","timeout":"START_TO_CLOSE","willRetry":false}"#,
            ),
            (
                EventKind::StepTimedOut {
                    step_id: "a".into(),
                    attempt: 1,
                    timeout: TimeoutKind::Undelivered,
                    will_retry: true,
                    next_attempt_at_ms: Some(1),
                },
                r#"{"attempt":1,"nextAttemptAtMs":1,"stepId":"a","timeout":"UNDELIVERED","willRetry":true}"#,
            ),
            (
                EventKind::SignalReceived {
                    name: "steer".into(),
                    payload_json: r#"{"text":"hi"}"#.into(),
                },
                r#"{"name":"steer","payloadJson":"{\"text\":\"hi\"}"}"#,
            ),
            (
                EventKind::CoordinatorNote {
                    step_id: "a".into(),
                    attempt: 1,
                    kind: "progress".into(),
                    message: "half way".into(),
                },
                r#"{"attempt":1,"kind":"progress","message":"half way","stepId":"a"}"#,
            ),
            (
                EventKind::CancelRequested {
                    reason: "stop".into(),
                },
                r#"{"reason":"stop"}"#,
            ),
            (
                EventKind::RunCompleted {
                    context: ctx(&[("k", "v")]),
                },
                r#"{"context":{"k":"v"}}"#,
            ),
            (
                EventKind::RunFailed { reason: "bad".into() },
                r#"{"reason":"bad"}"#,
            ),
            (
                EventKind::RunCanceled {
                    reason: "asked".into(),
                },
                r#"{"reason":"asked"}"#,
            ),
            (
                EventKind::RunTerminated { reason: "ops".into() },
                r#"{"reason":"ops"}"#,
            ),
            (
                EventKind::DeliveryAttempted {
                    target: "callback".into(),
                    url: "https://x/y".into(),
                    attempt: 2,
                },
                r#"{"attempt":2,"target":"callback","url":"https://x/y"}"#,
            ),
            (
                EventKind::DeliverySucceeded {
                    target: "subscription:pager".into(),
                    attempt: 1,
                    http_status: 204,
                },
                r#"{"attempt":1,"httpStatus":204,"target":"subscription:pager"}"#,
            ),
            (
                EventKind::DeliveryFailed {
                    target: "callback".into(),
                    attempt: 3,
                    error: "HTTP 503".into(),
                    will_retry: true,
                    next_attempt_at_ms: Some(9),
                },
                r#"{"attempt":3,"error":"HTTP 503","nextAttemptAtMs":9,"target":"callback","willRetry":true}"#,
            ),
        ]
    }

    #[test]
    fn the_wire_json_of_every_event_type_is_pinned() {
        let cases = cases();
        let mut types: Vec<_> = cases.iter().map(|(k, _)| k.type_name()).collect();
        types.dedup();
        assert_eq!(types.len(), 16, "every event type has a case: {types:?}");
        for (kind, expected) in cases {
            assert_eq!(event_attributes_json(&kind), expected, "{}", kind.type_name());
        }
    }

    #[test]
    fn events_map_to_their_type_name_and_camel_case_attributes() {
        let kind = EventKind::StepStarted {
            step_id: "a".into(),
            attempt: 1,
            worker: "w".into(),
            lease: 2,
        };
        assert_eq!(kind.type_name(), "StepStarted");
        assert_eq!(event_attributes(&kind)["stepId"], "a");
    }
}
