//! `railyard namespace` with retention and limits against a real server process:
//! the flags are stored and shown, a limit refuses a start with one error line
//! naming it, an update changes only what it names.

use crate::support::*;

const ONE: &str = r#"{"id":"one","version":"1","name":"One",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

/// The first line of a failed command's stderr, which must be its one error line.
fn error_line(o: std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    let first = err.lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("error: "), "{err}");
    first
}

#[test]
fn retention_and_limits_are_set_shown_and_enforced_from_the_cli() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let server = sandbox.server();

    let made = ok(server.ry(&[
        "namespace",
        "create",
        "team",
        "--description",
        "the team's runs",
        "--retention",
        "7d",
        "--max-open-runs",
        "1",
    ]));
    assert!(made.contains("\nretention    7d\n"), "{made}");
    assert!(
        made.contains("limits       open runs 1, starts per second none, pending signals per run 1000"),
        "{made}"
    );

    ok(server.ry(&[
        "run", "start", "one", "--goal", "g", "-n", "team", "--run-id", "first",
    ]));
    let line = error_line(server.ry(&[
        "run", "start", "one", "--goal", "g", "-n", "team", "--run-id", "second",
    ]));
    assert!(
        line.contains("max open runs 1") && line.contains("\"team\""),
        "{line}"
    );

    // An update names what it changes; the rest stays.
    ok(server.ry(&["namespace", "update", "team", "--max-open-runs", "2"]));
    ok(server.ry(&[
        "run", "start", "one", "--goal", "g", "-n", "team", "--run-id", "second",
    ]));
    let shown = json(server.ry(&["namespace", "describe", "team", "-o", "json"]));
    assert_eq!(shown["description"], "the team's runs");
    assert_eq!(shown["retention_seconds"], 7 * 86_400);
    assert_eq!(shown["limits"]["max_open_runs"], 2);

    let listed = ok(server.ry(&["namespace", "list"]));
    assert!(listed.lines().next().unwrap().contains("RETENTION"), "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["default", "-", "30d"]),
        "{listed}"
    );

    // A retention that is not whole seconds is refused before anything is sent.
    let bad = server.ry(&["namespace", "update", "team", "--retention", "500ms"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("whole number of seconds"),
        "{}",
        stderr(&bad)
    );
    let too_short = error_line(server.ry(&["namespace", "update", "team", "--retention", "10s"]));
    assert!(too_short.contains("retention_seconds"), "{too_short}");
    let shown = json(server.ry(&["namespace", "describe", "team", "-o", "json"]));
    assert_eq!(shown["retention_seconds"], 7 * 86_400);
}
