//! The stored bytes of every event type, pinned: an event record is a stored
//! format of its own, so a change to the model (or to the mapping code) must not
//! change what a row holds. Each case also reads back as the event it was.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::tests::{DEFS, db};
use super::*;
use railyard_model::contract::Violation;
use railyard_model::run::{Event, EventKind, ParentClosePolicy, RunStatus, TimeoutKind, Usage};
use railyard_model::workflow::parse_definition;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every event type (and the shapes whose row differs: fields written only when
/// set, each timeout, both stuck kinds), and the row it is stored as.
fn cases() -> Vec<(EventKind, &'static str)> {
    let def = Arc::new(
        parse_definition(
            r#"{"id":"wf","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
        )
        .unwrap(),
    );
    vec![
        (
            EventKind::RunStarted {
                workflow_id: "wf".into(),
                definition: def.clone(),
                goal: "g".into(),
                context: map(&[("k", "v")]),
                request_id: "req".into(),
                parent_run_id: String::new(),
                callback_url: "https://x/cb".into(),
                task_queue: String::new(),
                parent_step_id: String::new(),
                depth: 0,
            },
            r#"{"RunStarted":{"workflow_id":"wf","definition":{"workflow_id":"wf","version":"1","hash":"f8c923beca1243bf668e839c5aed874c"},"goal":"g","context":{"k":"v"},"request_id":"req","parent_run_id":"","callback_url":"https://x/cb"}}"#,
        ),
        (
            EventKind::RunStarted {
                workflow_id: "wf".into(),
                definition: def,
                goal: String::new(),
                context: map(&[]),
                request_id: String::new(),
                parent_run_id: "p".into(),
                callback_url: String::new(),
                task_queue: "q".into(),
                parent_step_id: "a".into(),
                depth: 2,
            },
            r#"{"RunStarted":{"workflow_id":"wf","definition":{"workflow_id":"wf","version":"1","hash":"f8c923beca1243bf668e839c5aed874c"},"goal":"","context":{},"request_id":"","parent_run_id":"p","callback_url":"","task_queue":"q","parent_step_id":"a","depth":2}}"#,
        ),
        (
            EventKind::StepScheduled {
                step_id: "a".into(),
                step_index: 1,
                attempt: 2,
                task_queue: "q".into(),
            },
            r#"{"StepScheduled":{"step_id":"a","step_index":1,"attempt":2,"task_queue":"q"}}"#,
        ),
        (
            EventKind::StepStarted {
                step_id: "a".into(),
                attempt: 1,
                worker: "w".into(),
                lease: 3,
            },
            r#"{"StepStarted":{"step_id":"a","attempt":1,"worker":"w","lease":3}}"#,
        ),
        (
            EventKind::StepCompleted {
                step_id: "a".into(),
                attempt: 1,
                notes: "n".into(),
                artifacts: vec!["x.md".into()],
                context_updates: map(&[("a", "b")]),
                result: String::new(),
            },
            r#"{"StepCompleted":{"step_id":"a","attempt":1,"notes":"n","artifacts":["x.md"],"context_updates":{"a":"b"}}}"#,
        ),
        (
            EventKind::StepCompleted {
                step_id: "a".into(),
                attempt: 2,
                notes: String::new(),
                artifacts: vec![],
                context_updates: map(&[]),
                result: r#"{"n":1}"#.into(),
            },
            r#"{"StepCompleted":{"step_id":"a","attempt":2,"notes":"","artifacts":[],"context_updates":{},"result":"{\"n\":1}"}}"#,
        ),
        (
            EventKind::StepResultRefused {
                step_id: "a".into(),
                attempt: 1,
                violations: vec![Violation {
                    path: "result.n".into(),
                    reason: "not an integer".into(),
                }],
                total_violations: 2,
            },
            r#"{"StepResultRefused":{"step_id":"a","attempt":1,"violations":[{"path":"result.n","reason":"not an integer"}],"total_violations":2}}"#,
        ),
        (
            EventKind::StepFailed {
                step_id: "a".into(),
                attempt: 2,
                error_type: "e".into(),
                message: "m".into(),
                will_retry: true,
                next_attempt_at_ms: Some(9),
            },
            r#"{"StepFailed":{"step_id":"a","attempt":2,"error_type":"e","message":"m","will_retry":true,"next_attempt_at_ms":9}}"#,
        ),
        (
            EventKind::StepTimedOut {
                step_id: "a".into(),
                attempt: 1,
                timeout: TimeoutKind::StartToClose,
                will_retry: false,
                next_attempt_at_ms: None,
            },
            r#"{"StepTimedOut":{"step_id":"a","attempt":1,"timeout":"START_TO_CLOSE","will_retry":false,"next_attempt_at_ms":null}}"#,
        ),
        (
            EventKind::StepTimedOut {
                step_id: "a".into(),
                attempt: 1,
                timeout: TimeoutKind::Heartbeat,
                will_retry: true,
                next_attempt_at_ms: Some(5),
            },
            r#"{"StepTimedOut":{"step_id":"a","attempt":1,"timeout":"HEARTBEAT","will_retry":true,"next_attempt_at_ms":5}}"#,
        ),
        (
            EventKind::StepTimedOut {
                step_id: "a".into(),
                attempt: 1,
                timeout: TimeoutKind::Undelivered,
                will_retry: true,
                next_attempt_at_ms: Some(1),
            },
            r#"{"StepTimedOut":{"step_id":"a","attempt":1,"timeout":"UNDELIVERED","will_retry":true,"next_attempt_at_ms":1}}"#,
        ),
        (
            EventKind::StepTimedOut {
                step_id: "a".into(),
                attempt: 1,
                timeout: TimeoutKind::Wait,
                will_retry: false,
                next_attempt_at_ms: None,
            },
            r#"{"StepTimedOut":{"step_id":"a","attempt":1,"timeout":"WAIT","will_retry":false,"next_attempt_at_ms":null}}"#,
        ),
        (
            EventKind::SignalReceived {
                name: "steer".into(),
                payload_json: r#"{"t":1}"#.into(),
            },
            r#"{"SignalReceived":{"name":"steer","payload_json":"{\"t\":1}"}}"#,
        ),
        (
            EventKind::IssueReported {
                step_id: "a".into(),
                attempt: 1,
                severity: railyard_model::run::Severity::Critical,
                summary: "s".into(),
                details: "d".into(),
            },
            r#"{"IssueReported":{"step_id":"a","attempt":1,"severity":"critical","summary":"s","details":"d"}}"#,
        ),
        (
            EventKind::CoordinatorNote {
                step_id: "a".into(),
                attempt: 1,
                kind: "progress".into(),
                message: "m".into(),
            },
            r#"{"CoordinatorNote":{"step_id":"a","attempt":1,"kind":"progress","message":"m"}}"#,
        ),
        (
            EventKind::CancelRequested { reason: "r".into() },
            r#"{"CancelRequested":{"reason":"r"}}"#,
        ),
        (
            EventKind::StepWaiting {
                step_id: "a".into(),
                attempt: 1,
                on: "children".into(),
                run_ids: vec!["c1".into()],
                deadline_ms: Some(9),
            },
            r#"{"StepWaiting":{"step_id":"a","attempt":1,"on":"children","run_ids":["c1"],"deadline_ms":9}}"#,
        ),
        (
            EventKind::StepResumed {
                step_id: "a".into(),
                attempt: 1,
                reason: "children".into(),
                waited_ms: 7,
            },
            r#"{"StepResumed":{"step_id":"a","attempt":1,"reason":"children","waited_ms":7}}"#,
        ),
        (
            EventKind::ChildRunStarted {
                child_run_id: "c1".into(),
                workflow_id: "wf".into(),
                step_id: "a".into(),
                parent_close_policy: ParentClosePolicy::Abandon,
            },
            r#"{"ChildRunStarted":{"child_run_id":"c1","workflow_id":"wf","step_id":"a","parent_close_policy":"abandon"}}"#,
        ),
        (
            EventKind::ChildRunCompleted {
                child_run_id: "c1".into(),
                status: RunStatus::TimedOut,
                notes: "n".into(),
                artifacts: vec!["a.md".into()],
                result: String::new(),
            },
            r#"{"ChildRunCompleted":{"child_run_id":"c1","status":"TIMED_OUT","notes":"n","artifacts":["a.md"]}}"#,
        ),
        (
            EventKind::ChildRunCompleted {
                child_run_id: "c1".into(),
                status: RunStatus::Completed,
                notes: String::new(),
                artifacts: vec![],
                result: r#"{"ok":true}"#.into(),
            },
            r#"{"ChildRunCompleted":{"child_run_id":"c1","status":"COMPLETED","notes":"","artifacts":[],"result":"{\"ok\":true}"}}"#,
        ),
        (
            EventKind::RunPaused {
                reason: "night".into(),
            },
            r#"{"RunPaused":{"reason":"night"}}"#,
        ),
        (EventKind::RunUnpaused {}, r#"{"RunUnpaused":{"reason":""}}"#),
        (
            EventKind::StepAwaitingApproval {
                step_id: "a".into(),
                attempt: 1,
                notes: "draft".into(),
                artifacts: vec!["out.md".into()],
                context_updates: map(&[("k", "v")]),
                result: r#"{"ok":true}"#.into(),
                deadline_ms: Some(9),
            },
            r#"{"StepAwaitingApproval":{"step_id":"a","attempt":1,"notes":"draft","artifacts":["out.md"],"context_updates":{"k":"v"},"result":"{\"ok\":true}","deadline_ms":9}}"#,
        ),
        (
            EventKind::StepApproved {
                step_id: "a".into(),
                attempt: 1,
                note: "ship it".into(),
            },
            r#"{"StepApproved":{"step_id":"a","attempt":1,"text":"ship it"}}"#,
        ),
        (
            EventKind::StepRejected {
                step_id: "a".into(),
                attempt: 1,
                feedback: "shorter".into(),
            },
            r#"{"StepRejected":{"step_id":"a","attempt":1,"text":"shorter"}}"#,
        ),
        (
            EventKind::StepUsage {
                step_id: "a".into(),
                attempt: 2,
                model: "m".into(),
                usage: Usage {
                    input: 1,
                    output: 2,
                    cache_read: 3,
                    cache_write: 4,
                    cost_usd: 0.5,
                },
            },
            r#"{"StepUsage":{"step_id":"a","attempt":2,"model":"m","usage":{"input":1,"output":2,"cache_read":3,"cache_write":4,"cost_usd":0.5}}}"#,
        ),
        (
            EventKind::AgentStuck {
                step_id: "a".into(),
                attempt: 1,
                signal: "no_progress".into(),
                message: "m".into(),
                fatal: false,
            },
            r#"{"AgentStuckWarning":{"step_id":"a","attempt":1,"signal":"no_progress","message":"m"}}"#,
        ),
        (
            EventKind::AgentStuck {
                step_id: "a".into(),
                attempt: 1,
                signal: "repeated_call".into(),
                message: "m".into(),
                fatal: true,
            },
            r#"{"AgentStuck":{"step_id":"a","attempt":1,"signal":"repeated_call","message":"m"}}"#,
        ),
        (
            EventKind::RunCompleted {
                context: map(&[("k", "v")]),
            },
            r#"{"RunCompleted":{"context":{"k":"v"}}}"#,
        ),
        (
            EventKind::RunFailed { reason: "r".into() },
            r#"{"RunFailed":{"reason":"r"}}"#,
        ),
        (
            EventKind::RunCanceled { reason: "r".into() },
            r#"{"RunCanceled":{"reason":"r"}}"#,
        ),
        (
            EventKind::RunTerminated { reason: "r".into() },
            r#"{"RunTerminated":{"reason":"r"}}"#,
        ),
        (
            EventKind::DeliveryAttempted {
                target: "callback".into(),
                url: "https://x/y".into(),
                attempt: 2,
            },
            r#"{"DeliveryAttempted":{"target":"callback","url":"https://x/y","attempt":2}}"#,
        ),
        (
            EventKind::DeliverySucceeded {
                target: "callback".into(),
                attempt: 1,
                http_status: 204,
            },
            r#"{"DeliverySucceeded":{"target":"callback","attempt":1,"http_status":204}}"#,
        ),
        (
            EventKind::DeliveryFailed {
                target: "callback".into(),
                attempt: 3,
                error: "HTTP 503".into(),
                will_retry: true,
                next_attempt_at_ms: Some(9),
            },
            r#"{"DeliveryFailed":{"target":"callback","attempt":3,"error":"HTTP 503","will_retry":true,"next_attempt_at_ms":9}}"#,
        ),
        (
            EventKind::RunResetFrom {
                from_run_id: "old".into(),
                step_id: "b".into(),
                kind: "reset".into(),
                reason: "r".into(),
            },
            r#"{"RunResetFrom":{"from_run_id":"old","step_id":"b","kind":"reset","reason":"r"}}"#,
        ),
        (
            EventKind::StepCarried {
                step_id: "a".into(),
                attempt: 2,
                notes: "n".into(),
                artifacts: vec!["x.md".into()],
                context_updates: map(&[("k", "v")]),
                result: r#"{"n":1}"#.into(),
                model: "m".into(),
                usage: Usage {
                    input: 1,
                    output: 2,
                    cache_read: 3,
                    cache_write: 4,
                    cost_usd: 0.5,
                },
            },
            r#"{"StepCarried":{"step_id":"a","attempt":2,"notes":"n","artifacts":["x.md"],"context_updates":{"k":"v"},"result":"{\"n\":1}","model":"m","usage":{"input":1,"output":2,"cache_read":3,"cache_write":4,"cost_usd":0.5}}}"#,
        ),
        (
            EventKind::RunResetTo {
                to_run_id: "new".into(),
                step_id: "b".into(),
                kind: "rerun".into(),
                reason: "".into(),
            },
            r#"{"RunResetTo":{"to_run_id":"new","step_id":"b","kind":"rerun","reason":""}}"#,
        ),
        (
            EventKind::SearchAttributesChanged {
                step_id: "s".into(),
                changes: vec![
                    railyard_model::attributes::AttributeChange {
                        name: "customer".into(),
                        before: None,
                        after: Some(railyard_model::attributes::AttributeValue::Keyword("acme".into())),
                    },
                    railyard_model::attributes::AttributeChange {
                        name: "priority".into(),
                        before: Some(railyard_model::attributes::AttributeValue::Int(2)),
                        after: None,
                    },
                ],
            },
            r#"{"SearchAttributesChanged":{"step_id":"s","changes":[{"name":"customer","after":{"type":"keyword","value":"acme"}},{"name":"priority","before":{"type":"int","value":2}}]}}"#,
        ),
        (
            EventKind::BatchApplied {
                batch_id: "b1".into(),
                action: "terminate".into(),
            },
            r#"{"BatchApplied":{"batch_id":"b1","action":"terminate"}}"#,
        ),
    ]
}

#[test]
fn the_stored_row_of_every_event_type_is_pinned_and_reads_back() {
    let d = db();
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    let cases = cases();
    let mut types: Vec<_> = cases.iter().map(|(k, _)| k.type_name()).collect();
    types.sort();
    types.dedup();
    assert_eq!(types.len(), 35, "every event type has a case: {types:?}");
    for (kind, expected) in cases {
        if let EventKind::RunStarted { definition, .. } = &kind {
            d.defs.store(definition, &mut table).unwrap();
        }
        let ev = Event {
            id: 4,
            time_ms: 77,
            identity: "who".into(),
            kind,
        };
        let row = encode_event(&ev, &d.defs).unwrap();
        assert_eq!(
            String::from_utf8(row.clone()).unwrap(),
            format!(r#"{{"v":1,"id":4,"time_ms":77,"identity":"who","event":{expected}}}"#),
            "{}",
            ev.kind.type_name()
        );
        assert_eq!(decode_event(&row, &d.defs, &table).unwrap(), ev);
    }
}
