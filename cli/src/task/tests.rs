//! Tests of how `railyard task` shows heartbeats and signals.

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
