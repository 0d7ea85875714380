//! Tests of how `railyard queue describe` shows a task queue.

use super::*;
use railyard_proto::v1::PollerInfo;

#[test]
fn describes_queue() {
    let q = DescribeTaskQueueResponse {
        backlog: 3,
        pollers: vec![PollerInfo {
            identity: "w1".into(),
            last_access_unix_ms: 1_714_564_800_000,
        }],
        dispatched_total: 42,
    };
    assert_eq!(
        describe_lines("default", &q),
        vec![
            "queue       default",
            "backlog     3",
            "dispatched  42 since the server started",
            "pollers     1",
            "  IDENTITY  LAST SEEN",
            "  w1        2024-05-01T12:00:00Z",
        ]
    );
}
