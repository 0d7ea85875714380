//! Tests of `railyard namespace`: how namespaces are listed, and retention as a duration.

use super::*;

#[test]
fn namespaces_are_listed() {
    let ns = NamespaceInfo {
        name: "team".into(),
        description: "the team's runs".into(),
        create_time_unix_ms: 1_714_564_800_000,
        update_time_unix_ms: 1_714_564_800_000,
        retention_seconds: 30 * 86_400,
        limits: Some(railyard_proto::v1::NamespaceLimits {
            max_open_runs: 100_000,
            max_starts_per_second: 0,
            max_pending_signals: 1_000,
        }),
        subscriptions: Vec::new(),
        ..Default::default()
    };
    assert_eq!(
        list_lines(std::slice::from_ref(&ns)),
        vec![
            "NAMESPACE  CREATED               RETENTION  DESCRIPTION",
            "team       2024-05-01T12:00:00Z  30d        the team's runs",
        ]
    );
    assert_eq!(namespace_json(&ns)["create_time"], "2024-05-01T12:00:00.000Z");
    assert_eq!(namespace_json(&ns)["retention_seconds"], 2_592_000);
    assert_eq!(namespace_json(&ns)["limits"]["max_pending_signals"], 1_000);
    let lines = describe_lines(&ns);
    assert_eq!(lines[4], "retention    30d");
    assert_eq!(
        lines[5],
        "limits       open runs 100000, starts per second none, pending signals per run 1000"
    );
}

#[test]
fn retention_reads_and_prints_as_a_duration() {
    assert_eq!(parse_retention("30d"), Ok(2_592_000));
    assert_eq!(parse_retention("1h30m"), Ok(5_400));
    assert_eq!(parse_retention("0"), Ok(0));
    assert!(
        parse_retention("1500ms")
            .unwrap_err()
            .contains("whole number of seconds")
    );
    assert!(parse_retention("soon").is_err());
    assert_eq!(retention_text(2_592_000), "30d");
    assert_eq!(retention_text(129_600), "1d12h");
    assert_eq!(retention_text(90), "1m30s");
    assert_eq!(retention_text(0), "forever");
}
