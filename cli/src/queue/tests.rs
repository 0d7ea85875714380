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
        keys: vec![],
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

#[test]
fn describes_keys_with_a_dash_for_no_limit() {
    let q = DescribeTaskQueueResponse {
        keys: vec![
            railyard_proto::v1::QueueKeyInfo {
                key: "customer:acme".into(),
                queued: 4,
                running: 2,
                limit: 2,
            },
            railyard_proto::v1::QueueKeyInfo {
                key: "b".into(),
                queued: 1,
                running: 0,
                limit: 0,
            },
        ],
        ..Default::default()
    };
    let lines = describe_lines("q", &q);
    assert_eq!(lines[4], "keys        2");
    assert_eq!(
        lines[5].split_whitespace().collect::<Vec<_>>(),
        ["KEY", "QUEUED", "RUNNING", "LIMIT"]
    );
    assert_eq!(
        lines[6].split_whitespace().collect::<Vec<_>>(),
        ["customer:acme", "4", "2", "2"]
    );
    assert_eq!(
        lines[7].split_whitespace().collect::<Vec<_>>(),
        ["b", "1", "0", "-"]
    );
}
