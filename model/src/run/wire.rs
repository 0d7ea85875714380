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
            parent_step_id,
            depth,
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
            if !parent_step_id.is_empty()
                && let Value::Object(m) = &mut attrs
            {
                m.insert("parentStepId".into(), json!(parent_step_id));
                m.insert("depth".into(), json!(depth));
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
            result,
        } => {
            let mut attrs = json!({
                "stepId": step_id,
                "attempt": attempt,
                "notes": notes,
                "artifacts": artifacts,
                "contextUpdates": map(context_updates),
            });
            // Only when there is one, so completions without a result read as they did.
            if !result.is_empty()
                && let Value::Object(m) = &mut attrs
            {
                m.insert("result".into(), result_value(result));
            }
            attrs
        }
        EventKind::StepResultRefused {
            step_id,
            attempt,
            violations,
            total_violations,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "violations": violations
                .iter()
                .map(|v| json!({ "path": v.path, "reason": v.reason }))
                .collect::<Vec<_>>(),
            "totalViolations": total_violations,
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
        EventKind::StepUsage {
            step_id,
            attempt,
            model,
            usage,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "model": model,
            "inputTokens": usage.input,
            "outputTokens": usage.output,
            "cacheReadTokens": usage.cache_read,
            "cacheWriteTokens": usage.cache_write,
            "costUsd": usage.cost_usd,
        }),
        EventKind::AgentStuck {
            step_id,
            attempt,
            signal,
            message,
            ..
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "signal": signal,
            "message": message,
        }),
        EventKind::RunCompleted { context } => json!({ "context": map(context) }),
        EventKind::RunFailed { reason } => json!({ "reason": reason }),
        EventKind::RunCanceled { reason } => json!({ "reason": reason }),
        EventKind::RunTerminated { reason } => json!({ "reason": reason }),
        EventKind::StepWaiting {
            step_id,
            attempt,
            on,
            run_ids,
            deadline_ms,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "on": on,
            "runIds": run_ids,
            "deadlineUnixMs": deadline_ms,
        }),
        EventKind::StepAwaitingApproval {
            step_id,
            attempt,
            notes,
            artifacts,
            context_updates,
            result,
            deadline_ms,
        } => {
            let mut attrs = json!({
                "stepId": step_id,
                "attempt": attempt,
                "notes": notes,
                "artifacts": artifacts,
                "contextUpdates": map(context_updates),
                "deadlineUnixMs": deadline_ms,
            });
            if !result.is_empty()
                && let Value::Object(m) = &mut attrs
            {
                m.insert("result".into(), result_value(result));
            }
            attrs
        }
        EventKind::StepApproved {
            step_id,
            attempt,
            note,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "note": note,
        }),
        EventKind::StepRejected {
            step_id,
            attempt,
            feedback,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "feedback": feedback,
        }),
        EventKind::StepResumed {
            step_id,
            attempt,
            reason,
            waited_ms,
        } => json!({
            "stepId": step_id,
            "attempt": attempt,
            "reason": reason,
            "waitedMs": waited_ms,
        }),
        EventKind::ChildRunStarted {
            child_run_id,
            workflow_id,
            step_id,
            parent_close_policy,
        } => json!({
            "childRunId": child_run_id,
            "workflowId": workflow_id,
            "stepId": step_id,
            "parentClosePolicy": parent_close_policy.name(),
        }),
        EventKind::RunPaused { reason } => json!({ "reason": reason }),
        EventKind::RunUnpaused {} => json!({}),
        EventKind::ChildRunCompleted {
            child_run_id,
            status,
            notes,
            artifacts,
            result,
        } => {
            let mut attrs = json!({
                "childRunId": child_run_id,
                "outcome": status.name(),
                "notes": notes,
                "artifacts": artifacts,
            });
            // As for `StepCompleted`: only when there is one.
            if !result.is_empty()
                && let Value::Object(m) = &mut attrs
            {
                m.insert(
                    "result".into(),
                    super::quoted_result(result, super::MAX_CHILD_RESULT_QUOTED),
                );
            }
            attrs
        }

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
        TimeoutKind::Wait => "WAIT",
    }
}

/// A stored result (JSON text) as a JSON value; text that does not parse (never
/// written by this server) is shown as a string rather than lost.
pub fn result_value(result: &str) -> Value {
    serde_json::from_str(result).unwrap_or_else(|_| Value::String(result.to_string()))
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
                    parent_step_id: String::new(),
                    depth: 0,
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
                    result: String::new(),
                },
                r#"{"artifacts":["out.md"],"attempt":1,"contextUpdates":{"k":"v"},"notes":"done","stepId":"a"}"#,
            ),
            (
                EventKind::StepCompleted {
                    step_id: "a".into(),
                    attempt: 2,
                    notes: "done".into(),
                    artifacts: vec![],
                    context_updates: ctx(&[]),
                    result: r#"{"n":3,"tags":["x"]}"#.into(),
                },
                r#"{"artifacts":[],"attempt":2,"contextUpdates":{},"notes":"done","result":{"n":3,"tags":["x"]},"stepId":"a"}"#,
            ),
            (
                EventKind::StepResultRefused {
                    step_id: "a".into(),
                    attempt: 1,
                    violations: vec![crate::contract::Violation {
                        path: "result.n".into(),
                        reason: r#"value is not of type "integer""#.into(),
                    }],
                    total_violations: 3,
                },
                r#"{"attempt":1,"stepId":"a","totalViolations":3,"violations":[{"path":"result.n","reason":"value is not of type \"integer\""}]}"#,
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
                EventKind::StepUsage {
                    step_id: "a".into(),
                    attempt: 1,
                    model: "claude-x".into(),
                    usage: super::super::Usage {
                        input: 10,
                        output: 2,
                        cache_read: 300,
                        cache_write: 40,
                        cost_usd: 0.25,
                    },
                },
                r#"{"attempt":1,"cacheReadTokens":300,"cacheWriteTokens":40,"costUsd":0.25,"inputTokens":10,"model":"claude-x","outputTokens":2,"stepId":"a"}"#,
            ),
            (
                EventKind::AgentStuck {
                    step_id: "a".into(),
                    attempt: 1,
                    signal: "repeated_call".into(),
                    message: "warned".into(),
                    fatal: false,
                },
                r#"{"attempt":1,"message":"warned","signal":"repeated_call","stepId":"a"}"#,
            ),
            (
                EventKind::AgentStuck {
                    step_id: "a".into(),
                    attempt: 1,
                    signal: "no_progress".into(),
                    message: "failed".into(),
                    fatal: true,
                },
                r#"{"attempt":1,"message":"failed","signal":"no_progress","stepId":"a"}"#,
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
                EventKind::StepWaiting {
                    step_id: "a".into(),
                    attempt: 1,
                    on: "children".into(),
                    run_ids: vec!["c1".into()],
                    deadline_ms: Some(9),
                },
                r#"{"attempt":1,"deadlineUnixMs":9,"on":"children","runIds":["c1"],"stepId":"a"}"#,
            ),
            (
                EventKind::StepAwaitingApproval {
                    step_id: "a".into(),
                    attempt: 1,
                    notes: "draft".into(),
                    artifacts: vec!["out.md".into()],
                    context_updates: ctx(&[("k", "v")]),
                    result: r#"{"ok":true}"#.into(),
                    deadline_ms: Some(9),
                },
                r#"{"artifacts":["out.md"],"attempt":1,"contextUpdates":{"k":"v"},"deadlineUnixMs":9,"notes":"draft","result":{"ok":true},"stepId":"a"}"#,
            ),
            (
                EventKind::StepApproved {
                    step_id: "a".into(),
                    attempt: 1,
                    note: "ship it".into(),
                },
                r#"{"attempt":1,"note":"ship it","stepId":"a"}"#,
            ),
            (
                EventKind::StepRejected {
                    step_id: "a".into(),
                    attempt: 1,
                    feedback: "shorter".into(),
                },
                r#"{"attempt":1,"feedback":"shorter","stepId":"a"}"#,
            ),
            (
                EventKind::StepResumed {
                    step_id: "a".into(),
                    attempt: 1,
                    reason: "children".into(),
                    waited_ms: 7,
                },
                r#"{"attempt":1,"reason":"children","stepId":"a","waitedMs":7}"#,
            ),
            (
                EventKind::ChildRunStarted {
                    child_run_id: "c1".into(),
                    workflow_id: "wf".into(),
                    step_id: "a".into(),
                    parent_close_policy: crate::run::ParentClosePolicy::Abandon,
                },
                r#"{"childRunId":"c1","parentClosePolicy":"abandon","stepId":"a","workflowId":"wf"}"#,
            ),
            (
                EventKind::ChildRunCompleted {
                    child_run_id: "c1".into(),
                    status: crate::run::RunStatus::Failed,
                    notes: "n".into(),
                    artifacts: vec!["a.md".into()],
                    result: String::new(),
                },
                r#"{"artifacts":["a.md"],"childRunId":"c1","notes":"n","outcome":"FAILED"}"#,
            ),
            (
                EventKind::ChildRunCompleted {
                    child_run_id: "c1".into(),
                    status: crate::run::RunStatus::Completed,
                    notes: "n".into(),
                    artifacts: vec![],
                    result: r#"{"ok":true}"#.into(),
                },
                r#"{"artifacts":[],"childRunId":"c1","notes":"n","outcome":"COMPLETED","result":{"ok":true}}"#,
            ),
            (
                EventKind::RunPaused {
                    reason: "night".into(),
                },
                r#"{"reason":"night"}"#,
            ),
            (EventKind::RunUnpaused {}, r#"{}"#),
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

    /// The other shapes users see: fields shown only when set, results that are
    /// not JSON or are cut, a child's `RunStarted`, the timeouts not above.
    fn more_cases() -> Vec<(EventKind, String)> {
        let long = format!(
            r#"{{"text":"{}"}}"#,
            "x".repeat(crate::run::MAX_CHILD_RESULT_QUOTED)
        );
        // Cut to its first MAX_CHILD_RESULT_QUOTED bytes of text, shown as a string.
        let cut = format!(
            r#"{{"artifacts":[],"childRunId":"c2","notes":"","outcome":"COMPLETED","result":"{{\"text\":\"{}…"}}"#,
            "x".repeat(crate::run::MAX_CHILD_RESULT_QUOTED - 9)
        );
        vec![
            (
                EventKind::RunStarted {
                    workflow_id: "wf".into(),
                    definition: Arc::new(
                        parse_definition(
                            r#"{"id":"wf","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
                        )
                        .unwrap(),
                    ),
                    goal: String::new(),
                    context: ctx(&[]),
                    request_id: String::new(),
                    parent_run_id: "parent".into(),
                    callback_url: String::new(),
                    task_queue: String::new(),
                    parent_step_id: "a".into(),
                    depth: 2,
                },
                r#"{"callbackUrl":"","context":{},"definition":{"description":"","id":"wf","name":"W","steps":[{"id":"a","prompt":"p","title":"A"}],"version":"1"},"depth":2,"goal":"","parentRunId":"parent","parentStepId":"a","requestId":"","workflowId":"wf"}"#.into(),
            ),
            (
                EventKind::StepCompleted {
                    step_id: "a".into(),
                    attempt: 1,
                    notes: String::new(),
                    artifacts: vec![],
                    context_updates: ctx(&[]),
                    result: "not json".into(),
                },
                r#"{"artifacts":[],"attempt":1,"contextUpdates":{},"notes":"","result":"not json","stepId":"a"}"#.into(),
            ),
            (
                EventKind::StepTimedOut {
                    step_id: "a".into(),
                    attempt: 1,
                    timeout: TimeoutKind::Wait,
                    will_retry: false,
                    next_attempt_at_ms: None,
                },
                r#"{"attempt":1,"nextAttemptAtMs":null,"stepId":"a","timeout":"WAIT","willRetry":false}"#.into(),
            ),
            (
                EventKind::StepUsage {
                    step_id: "a".into(),
                    attempt: 2,
                    model: String::new(),
                    usage: super::super::Usage {
                        cost_usd: f64::NAN,
                        ..Default::default()
                    },
                },
                r#"{"attempt":2,"cacheReadTokens":0,"cacheWriteTokens":0,"costUsd":null,"inputTokens":0,"model":"","outputTokens":0,"stepId":"a"}"#.into(),
            ),
            (
                EventKind::StepWaiting {
                    step_id: "a".into(),
                    attempt: 1,
                    on: "children".into(),
                    run_ids: vec![],
                    deadline_ms: None,
                },
                r#"{"attempt":1,"deadlineUnixMs":null,"on":"children","runIds":[],"stepId":"a"}"#.into(),
            ),
            (
                EventKind::StepAwaitingApproval {
                    step_id: "a".into(),
                    attempt: 1,
                    notes: String::new(),
                    artifacts: vec![],
                    context_updates: ctx(&[]),
                    result: String::new(),
                    deadline_ms: None,
                },
                r#"{"artifacts":[],"attempt":1,"contextUpdates":{},"deadlineUnixMs":null,"notes":"","stepId":"a"}"#.into(),
            ),
            (
                EventKind::ChildRunStarted {
                    child_run_id: "c1".into(),
                    workflow_id: "wf".into(),
                    step_id: "a".into(),
                    parent_close_policy: crate::run::ParentClosePolicy::Cancel,
                },
                r#"{"childRunId":"c1","parentClosePolicy":"cancel","stepId":"a","workflowId":"wf"}"#.into(),
            ),
            (
                EventKind::ChildRunCompleted {
                    child_run_id: "c2".into(),
                    status: crate::run::RunStatus::TimedOut,
                    notes: String::new(),
                    artifacts: vec![],
                    result: "[1,".into(),
                },
                r#"{"artifacts":[],"childRunId":"c2","notes":"","outcome":"TIMED_OUT","result":"[1,"}"#.into(),
            ),
            (
                EventKind::ChildRunCompleted {
                    child_run_id: "c2".into(),
                    status: crate::run::RunStatus::Completed,
                    notes: String::new(),
                    artifacts: vec![],
                    result: long,
                },
                cut,
            ),
        ]
    }

    #[test]
    fn the_wire_json_of_other_shapes_is_pinned() {
        for (kind, expected) in more_cases() {
            let got = event_attributes_json(&kind);
            // Not assert_eq: one case is 16 KiB long.
            assert!(got == expected, "{}: {:.300}", kind.type_name(), got);
        }
    }

    #[test]
    fn the_wire_json_of_every_event_type_is_pinned() {
        let cases = cases();
        let mut types: Vec<_> = cases.iter().map(|(k, _)| k.type_name()).collect();
        types.dedup();
        assert_eq!(types.len(), 29, "every event type has a case: {types:?}");
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
