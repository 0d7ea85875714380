//! Principles end to end: a real server with `--principles-file`, a workflow whose
//! `principles` extend it and one whose replace it, and a worker on a local model
//! mock. The system prompt the model receives holds the composed principles under
//! their heading; a run pins them when it starts, so a run started before the file
//! was edited (and the server restarted) still gets the old text, and a new run the
//! new one; a file past the bound stops the server naming it.

use std::process::Command;
use std::time::Duration;

use crate::support::mock_model::{MockModel, Reply, complete};
use crate::support::worker::WorkerProcess;
use crate::support::*;

const LIMIT: Duration = Duration::from_secs(90);

const EXTENDS: &str = r#"{"id":"ext","version":"1","name":"Extends","steps":[
    {"id":"e","title":"E","prompt":"Do {{goal}}"}],
    "principles": {"text": "WORKFLOW-RULE: cite every file you read.", "mode": "extend"}}"#;
const REPLACES: &str = r#"{"id":"rep","version":"1","name":"Replaces","steps":[
    {"id":"r","title":"R","prompt":"Do {{goal}}"}],
    "principles": {"text": "ONLY-RULE: be brief.", "mode": "replace"}}"#;

fn closed(server: &ServerProcess, run_id: &str) -> serde_json::Value {
    eventually(LIMIT, || {
        let run = json(server.ry(&["run", "describe", run_id, "-o", "json"]))["run"].clone();
        (run["status"] != "RUNNING").then_some(run)
    })
}

/// The system prompt of the first model call for the run whose goal is `goal`.
fn system_for(mock: &MockModel, goal: &str) -> String {
    mock.requests()
        .iter()
        .map(|r| r.system())
        .find(|s| s.contains(goal))
        .unwrap_or_else(|| panic!("no model call for {goal:?}"))
}

#[test]
fn principles_are_composed_pinned_and_reach_the_model() {
    let s = Sandbox::new();
    s.workflow("ext.json", EXTENDS);
    s.workflow("rep.json", REPLACES);
    let file = s.path("principles.md");
    std::fs::write(&file, "SERVER-RULE-ONE: test before you say done.\n").unwrap();
    let server = s.server_with(&["--principles-file", file.to_str().unwrap()]);

    // Started before any worker runs, and before the file changes.
    ok(server.ry(&[
        "run",
        "start",
        "ext",
        "--goal",
        "goal-before-edit",
        "--run-id",
        "before",
    ]));
    let pinned = json(server.ry(&["run", "describe", "before", "-o", "json"]))["run"].clone();
    assert_eq!(
        pinned["principles"],
        "SERVER-RULE-ONE: test before you say done.\n\nWORKFLOW-RULE: cite every file you read."
    );
    let human = ok(server.ry(&["run", "describe", "before"]));
    assert!(human.contains("principles (pinned at start)"), "{human}");

    // The file changes; the server reads it at start.
    std::fs::write(&file, "SERVER-RULE-TWO: ask when unsure.\n").unwrap();
    let mut server = server;
    server.kill9();
    let server = server.restart();
    // The namespace's own, between the server's and the workflow's.
    let bad = server.ry(&["namespace", "update", "default", "--principles", "a\u{1b}b"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("principles:"), "{}", stderr(&bad));
    let ns = json(server.ry(&[
        "namespace",
        "update",
        "default",
        "--principles",
        "NAMESPACE-RULE: no force pushes.",
        "-o",
        "json",
    ]));
    assert_eq!(ns["principles"], "NAMESPACE-RULE: no force pushes.", "{ns}");
    assert_eq!(ns["principles_mode"], "extend", "{ns}");
    ok(server.ry(&[
        "run",
        "start",
        "ext",
        "--goal",
        "goal-after-edit",
        "--run-id",
        "after",
    ]));
    ok(server.ry(&[
        "run",
        "start",
        "rep",
        "--goal",
        "goal-replaced",
        "--run-id",
        "replaced",
    ]));

    let mock = MockModel::start(|_| Reply::Turn(complete("done")));
    let _worker = WorkerProcess::start(
        &server.url,
        &s.path("workspace"),
        "principled",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--slots",
            "1",
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
    );
    for run in ["before", "after", "replaced"] {
        assert_eq!(closed(&server, run)["status"], "COMPLETED", "{run}");
    }

    let before = system_for(&mock, "goal-before-edit");
    let heading = before.find("## Principles").expect("the heading");
    let one = before
        .find("SERVER-RULE-ONE")
        .expect("the server's principles as pinned");
    let wf = before.find("WORKFLOW-RULE").expect("the workflow's");
    assert!(
        heading < one && one < wf,
        "server, then workflow, under the heading:\n{before}"
    );
    assert!(!before.contains("SERVER-RULE-TWO"), "{before}");
    assert!(
        !before.contains("NAMESPACE-RULE"),
        "pinned before the namespace had any:\n{before}"
    );

    let after = system_for(&mock, "goal-after-edit");
    let (two, ns, wf) = (
        after.find("SERVER-RULE-TWO").expect("the new file's"),
        after.find("NAMESPACE-RULE").expect("the namespace's"),
        after.find("WORKFLOW-RULE").expect("the workflow's"),
    );
    assert!(two < ns && ns < wf, "server, namespace, workflow:\n{after}");
    assert!(!after.contains("SERVER-RULE-ONE"), "{after}");

    let replaced = system_for(&mock, "goal-replaced");
    assert!(
        replaced.contains("## Principles") && replaced.contains("ONLY-RULE"),
        "{replaced}"
    );
    assert!(!replaced.contains("SERVER-RULE"), "{replaced}");
}

#[test]
fn a_principles_file_past_the_bound_or_not_regular_stops_the_server() {
    let s = Sandbox::new();
    let big = s.path("big.md");
    std::fs::write(&big, "x".repeat(16 * 1024 + 1)).unwrap();
    let start = |file: &std::path::Path| {
        Command::new(BIN)
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(s.path("data"))
            .arg("--principles-file")
            .arg(file)
            .output()
            .expect("run railyard server")
    };
    let out = start(&big);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("principles file") && err.contains("big.md"), "{err}");
    assert!(err.contains("more than the limit of 16384"), "{err}");

    let out = start(&s.path("workflows"));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("principles file") && err.contains("a directory"),
        "{err}"
    );
}
