//! Tests of how a run's result delivery is shown apart from its status.

use super::*;
use crate::client::view::run_delivery_json;
use railyard_proto::v1::DeliveryInfo;

#[test]
fn delivery_is_shown_apart_from_status() {
    let run = RunInfo {
        run_id: "r".into(),
        status: RunStatus::Completed as i32,
        delivery_state: DeliveryState::Failed as i32,
        deliveries: vec![DeliveryInfo {
            target: "callback".into(),
            url: "https://x.example/…".into(),
            state: DeliveryState::Failed as i32,
            attempts: 8,
            last_error: "HTTP 503".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(list_cell(&run), "FAILED");
    assert_eq!(
        describe_lines(&run),
        vec![
            "delivery  FAILED",
            "  callback  https://x.example/…  FAILED  attempts 8  last error: HTTP 503"
        ]
    );
    let j = run_delivery_json(&run);
    assert_eq!(j["state"], "FAILED");
    assert_eq!(j["targets"][0]["attempts"], 8);
    assert_eq!(list_cell(&RunInfo::default()), "-");
}
