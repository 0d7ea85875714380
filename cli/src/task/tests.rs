//! Tests of how `railyard task` shows heartbeats, signals and resume messages.

use super::*;

#[test]
fn heartbeat_rendering() {
    let resp = HeartbeatStepTaskResponse {
        cancel_requested: true,
        signals: vec![Signal {
            name: "steer".into(),
            payload_json: r#"{"text":"hi"}"#.into(),
            event_id: 9,
        }],
        ..Default::default()
    };
    assert_eq!(
        heartbeat_lines(&resp),
        vec![
            "lease extended",
            "cancellation requested",
            r#"signal steer (event 9) {"text":"hi"}"#
        ]
    );
    let v = heartbeat_json(&resp);
    assert_eq!(v["signals"][0]["payload"]["text"], "hi");
}

#[test]
fn resume_messages_follow_the_prompt_one_heading_each() {
    let task = StepTask {
        resume_messages: vec![
            "rejected: add a summary\nand a title".into(),
            "child c1 COMPLETED".into(),
        ],
        ..Default::default()
    };
    assert_eq!(
        resume_lines(&task),
        vec![
            "resume message 1 of 2",
            "  rejected: add a summary",
            "  and a title",
            "resume message 2 of 2",
            "  child c1 COMPLETED"
        ]
    );
    let v = crate::client::view::task_json(&task);
    assert_eq!(v["resume_messages"][1], "child c1 COMPLETED");
    assert!(resume_lines(&StepTask::default()).is_empty());
}
