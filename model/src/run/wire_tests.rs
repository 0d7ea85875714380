//! The event attributes JSON, pinned for every event type and every shape users
//! see: the derived view ([`EventKind`]'s `Serialize`) must write exactly what the
//! API has always sent.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::wire::{event_attributes, event_attributes_json};
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
            EventKind::IssueReported {
                step_id: "a".into(),
                attempt: 1,
                severity: crate::run::Severity::Error,
                summary: "tests fail".into(),
                details: "3 of 40".into(),
            },
            r#"{"attempt":1,"details":"3 of 40","severity":"error","stepId":"a","summary":"tests fail"}"#,
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
                usage: super::Usage {
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
        (
            EventKind::RunResetFrom {
                from_run_id: "old".into(),
                step_id: "b".into(),
                kind: "reset".into(),
                reason: "bad prompt".into(),
            },
            r#"{"fromRunId":"old","kind":"reset","reason":"bad prompt","stepId":"b"}"#,
        ),
        (
            EventKind::StepCarried {
                step_id: "a".into(),
                attempt: 2,
                notes: "done".into(),
                artifacts: vec!["out.md".into()],
                context_updates: ctx(&[("k", "v")]),
                result: r#"{"ok":true}"#.into(),
                model: "claude-x".into(),
                usage: super::Usage {
                    input: 10,
                    output: 2,
                    cache_read: 0,
                    cache_write: 0,
                    cost_usd: 0.5,
                },
            },
            r#"{"artifacts":["out.md"],"attempt":2,"cacheReadTokens":0,"cacheWriteTokens":0,"contextUpdates":{"k":"v"},"costUsd":0.5,"inputTokens":10,"model":"claude-x","notes":"done","outputTokens":2,"result":{"ok":true},"stepId":"a"}"#,
        ),
        (
            EventKind::RunResetTo {
                to_run_id: "new".into(),
                step_id: "b".into(),
                kind: "rerun".into(),
                reason: "".into(),
            },
            r#"{"kind":"rerun","reason":"","stepId":"b","toRunId":"new"}"#,
        ),
        (
            EventKind::SearchAttributesChanged {
                step_id: "s".into(),
                changes: vec![
                    crate::attributes::AttributeChange {
                        name: "customer".into(),
                        before: None,
                        after: Some(crate::attributes::AttributeValue::Keyword("acme".into())),
                    },
                    crate::attributes::AttributeChange {
                        name: "priority".into(),
                        before: Some(crate::attributes::AttributeValue::Int(2)),
                        after: None,
                    },
                ],
            },
            r#"{"changes":[{"after":"acme","before":null,"name":"customer"},{"after":null,"before":2,"name":"priority"}],"stepId":"s"}"#,
        ),
        (
            EventKind::BatchApplied {
                batch_id: "b1".into(),
                action: "terminate".into(),
            },
            r#"{"action":"terminate","batchId":"b1"}"#,
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
                usage: super::Usage {
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
    assert_eq!(types.len(), 35, "every event type has a case: {types:?}");
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
