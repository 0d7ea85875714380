//! A workflow registered from code with the real binary: `railyard workflow apply`
//! registers a file the server never reads, a run of it goes through a SIGKILL and
//! restart of the server (the registration, and the run's pinned definition,
//! survive), and a bad file or one that is not a regular file is refused.

use crate::support::*;

const CODED: &str = r#"{"id":"coded","version":"1","name":"Coded","steps":[
    {"id":"plan","title":"Plan","prompt":"Plan {{goal}}"},
    {"id":"ship","title":"Ship","prompt":"Ship {{goal}}"}]}"#;

fn poll(server: &ServerProcess) -> serde_json::Value {
    let task = json(server.ry(&["task", "poll", "--wait", "10", "-o", "json"]));
    assert!(task.is_object(), "no task within 10s");
    task
}

#[test]
fn an_applied_workflow_runs_to_completion_across_a_sigkill() {
    let sandbox = Sandbox::new();
    let file = sandbox.path("workspace").join("coded.json");
    std::fs::write(&file, CODED).unwrap();
    let file = file.to_str().unwrap();
    let server = sandbox.server();

    let out = ok(server.ry(&["workflow", "apply", file]));
    assert!(
        out.starts_with("registered workflow coded version 1 in namespace default (content "),
        "{out}"
    );
    let again = json(server.ry(&["workflow", "apply", file, "-o", "json"]));
    assert_eq!(again["changed"], false);
    assert_eq!(again["workflow"]["source_file"], "<registered>/default/coded");
    assert_eq!(again["workflow"]["registered"], true);
    let out = ok(server.ry(&["workflow", "apply", file]));
    assert!(out.starts_with("workflow coded unchanged: version 1"), "{out}");

    ok(server.ry(&["run", "start", "coded", "--goal", "it", "--run-id", "c1"]));
    let plan = poll(&server);
    assert_eq!(plan["prompt"], "Plan it");
    ok(server.ry(&[
        "task",
        "complete",
        plan["task_token"].as_str().unwrap(),
        "--notes",
        "planned",
    ]));

    let server = server.crash_and_restart();
    let list = ok(server.ry(&["workflow", "list"]));
    assert!(list.contains("<registered>/default/coded"), "{list}");
    let ship = poll(&server);
    assert_eq!(
        (ship["run_id"].as_str(), ship["prompt"].as_str()),
        (Some("c1"), Some("Ship it"))
    );
    ok(server.ry(&[
        "task",
        "complete",
        ship["task_token"].as_str().unwrap(),
        "--notes",
        "shipped",
    ]));
    let run = json(server.ry(&["run", "describe", "c1", "-o", "json"]))["run"].clone();
    assert_eq!(run["status"], "COMPLETED", "{run}");

    // A bad definition names its JSON path; a directory is no definition file.
    let bad = sandbox.path("workspace").join("bad.json");
    std::fs::write(
        &bad,
        CODED.replace(r#""title":"Ship","#, r#""title":"Ship","maxTurns":0,"#),
    )
    .unwrap();
    let out = server.ry(&["workflow", "apply", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("definition_json: steps[1].maxTurns: "),
        "{}",
        stderr(&out)
    );
    let dir = sandbox.path("workspace");
    let out = server.ry(&["workflow", "apply", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not a regular file"), "{}", stderr(&out));
    let list = ok(server.ry(&["workflow", "list"]));
    assert!(list.contains("coded  1"), "the refusals changed nothing: {list}");
    server.stop();
}
