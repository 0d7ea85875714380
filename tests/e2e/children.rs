//! Child runs end to end: a real `railyard server` and one `railyard worker --slots 1`
//! on the offline scripted provider. A parent spawns children in parallel and waits
//! holding no slot, so one slot runs the whole tree; the depth limit reaches the model
//! as a tool error; a SIGKILLed server keeps the wait.

use std::time::Duration;

use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(90);

const ORCHESTRATOR: &str = r#"{"id":"orchestrator","version":"1","name":"Orchestrator","steps":[
  {"id":"plan","title":"Plan","prompt":"Split {{goal}} among helpers"}]}"#;
const MID: &str = r#"{"id":"mid","version":"1","name":"Mid","steps":[
  {"id":"delegate","title":"Delegate","prompt":"Delegate {{goal}}"}]}"#;
const LEAF: &str = r#"{"id":"leaf","version":"1","name":"Leaf","steps":[
  {"id":"work","title":"Work","prompt":"Do {{goal}}"}]}"#;
const LATER: &str = r#"{"id":"later","version":"1","name":"Later","taskQueue":"later","steps":[
  {"id":"work","title":"Work","prompt":"Do {{goal}}"}]}"#;
const DEEP: &str = r#"{"id":"deep","version":"1","name":"Deep","steps":[
  {"id":"dig","title":"Dig","prompt":"Dig {{goal}}"}]}"#;

const SCRIPT: &str = r#"{"steps": {
  "plan": [
    {"tool_calls": [
      {"name": "spawn_agent", "input": {"workflowId": "mid", "goal": "middle of {{goal}}"}},
      {"name": "spawn_agent", "input": {"workflowId": "leaf", "goal": "leaf of {{goal}}"}}]},
    {"tool_calls": [{"name": "complete_step", "input": {"notes": "children said: {{last_user_text}}"}}]}
  ],
  "delegate": [
    {"tool_calls": [{"name": "spawn_agent", "input": {"workflowId": "{{goal}}", "goal": "grandchild"}}]},
    {"tool_calls": [{"name": "complete_step", "input": {"notes": "delegated: {{last_user_text}}"}}]}
  ],
  "dig": [
    {"tool_calls": [{"name": "spawn_agent", "input": {"workflowId": "deep", "goal": "deeper"}}]},
    {"tool_calls": [{"name": "complete_step", "input": {"notes": "dug: {{last_user_text}}"}}]}
  ],
  "work": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "worked on {{goal}}"}}]}]
}}"#;

fn sandbox() -> Sandbox {
    let s = Sandbox::new();
    for (name, json) in [
        ("orchestrator.json", ORCHESTRATOR),
        ("mid.json", MID),
        ("leaf.json", LEAF),
        ("later.json", LATER),
        ("deep.json", DEEP),
    ] {
        s.workflow(name, json);
    }
    std::fs::write(s.path("children.script.json"), SCRIPT).unwrap();
    s
}

fn worker(server: &ServerProcess, s: &Sandbox, identity: &str, queue: &str) -> WorkerProcess {
    let script = s.path("children.script.json");
    WorkerProcess::start(
        &server.url,
        &s.path("workspace"),
        identity,
        &[
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--queue",
            queue,
            "--slots",
            "1",
        ],
        &[],
    )
}

fn start(server: &ServerProcess, workflow: &str, goal: &str) -> String {
    let v = json(server.ry(&["run", "start", workflow, "--goal", goal, "-o", "json"]));
    v["run_id"].as_str().unwrap().to_string()
}

fn describe(server: &ServerProcess, run_id: &str) -> Value {
    json(server.ry(&["run", "describe", run_id, "-o", "json"]))["run"].clone()
}

fn wait_status(server: &ServerProcess, run_id: &str, status: &str) -> Value {
    eventually(LIMIT, || {
        let run = describe(server, run_id);
        (run["status"] == status).then_some(run)
    })
}

#[test]
fn one_slot_runs_a_parent_two_parallel_children_and_a_grandchild() {
    let s = sandbox();
    // "mid" spawns the workflow its goal names: here a leaf, its grandchild.
    let mid_goal_is_leaf = SCRIPT.replace("middle of {{goal}}", "leaf");
    std::fs::write(s.path("children.script.json"), mid_goal_is_leaf).unwrap();
    let server = s.server();
    let _w = worker(&server, &s, "solo", "default");
    let root = start(&server, "orchestrator", "the report");
    let run = wait_status(&server, &root, "COMPLETED");
    let notes = run["steps"][0]["notes"].as_str().unwrap();
    assert!(notes.contains("children said"), "{notes}");
    assert!(
        notes.contains("worked on leaf of the report"),
        "the leaf child's outcome: {notes}"
    );
    assert!(notes.contains("delegated:"), "the mid child's outcome: {notes}");

    let tree = json(server.ry(&["run", "tree", &root, "-o", "json"]));
    assert_eq!(tree["run_id"], root.as_str());
    assert_eq!(tree["status"], "COMPLETED");
    let children = tree["children"].as_array().unwrap();
    assert_eq!(children.len(), 2);
    let mid = children.iter().find(|c| c["workflow_id"] == "mid").expect("mid");
    assert_eq!(mid["depth"], 1);
    assert_eq!(mid["parent_step_id"], "plan");
    let grand = mid["children"].as_array().unwrap();
    assert_eq!(grand.len(), 1);
    assert_eq!(
        (grand[0]["workflow_id"].as_str(), grand[0]["depth"].as_u64()),
        (Some("leaf"), Some(2))
    );
    assert!(grand[0]["duration_ms"].as_i64().unwrap() >= 0);

    let human = ok(server.ry(&["run", "tree", &root]));
    assert_eq!(human.lines().count(), 4, "{human}");
    assert!(human.lines().all(|l| l.contains("COMPLETED")), "{human}");
    assert!(human.contains("├─ ") && human.contains("└─ "), "{human}");

    let history = json(server.ry(&["run", "history", &root, "-o", "json"]));
    let types: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    for t in [
        "ChildRunStarted",
        "StepWaiting",
        "ChildRunCompleted",
        "StepResumed",
    ] {
        assert!(types.contains(&t), "{t} in {types:?}");
    }
}

#[test]
fn past_the_depth_limit_the_model_reads_the_refusal_as_a_tool_error() {
    let s = sandbox();
    let server = s.server();
    let _w = worker(&server, &s, "solo", "default");
    let root = start(&server, "deep", "down");
    wait_status(&server, &root, "COMPLETED");
    // Depths 0..=3 ran; the run at depth 3 was refused a child and finished anyway.
    let mut run_id = root.clone();
    for depth in 1..=3 {
        let tree = json(server.ry(&["run", "tree", &run_id, "-o", "json"]));
        let kids = tree["children"].as_array().unwrap();
        assert_eq!(kids.len(), 1, "depth {depth}: {tree}");
        assert_eq!(kids[0]["depth"], depth);
        run_id = kids[0]["run_id"].as_str().unwrap().to_string();
    }
    let deepest = describe(&server, &run_id);
    let notes = deepest["steps"][0]["notes"].as_str().unwrap();
    assert!(
        notes.contains("spawn_agent refused") && notes.contains("limit of 3"),
        "{notes}"
    );
}

#[test]
fn lowered_child_limits_from_the_servers_flags_are_refused_readably() {
    let s = sandbox();
    let server = s.server_with(&["--max-child-depth", "1", "--max-children-per-run", "1"]);
    let _w = worker(&server, &s, "solo", "default");
    // Two children in one turn: past one per run.
    let root = start(&server, "orchestrator", "the report");
    let run = wait_status(&server, &root, "COMPLETED");
    let notes = run["steps"][0]["notes"].as_str().unwrap();
    assert!(
        notes.contains("spawn_agent refused") && notes.contains("limit of 1 per run"),
        "{notes}"
    );
    let tree = json(server.ry(&["run", "tree", &root, "-o", "json"]));
    assert!(
        tree["children"].as_array().is_none_or(|c| c.is_empty()),
        "nothing started: {tree}"
    );
    // A child at depth 1 may start; its own child, at depth 2, may not.
    let root = start(&server, "deep", "down");
    wait_status(&server, &root, "COMPLETED");
    let tree = json(server.ry(&["run", "tree", &root, "-o", "json"]));
    let kids = tree["children"].as_array().unwrap();
    assert_eq!(kids.len(), 1, "{tree}");
    let child = describe(&server, kids[0]["run_id"].as_str().unwrap());
    let notes = child["steps"][0]["notes"].as_str().unwrap();
    assert!(
        notes.contains("spawn_agent refused") && notes.contains("depth 2") && notes.contains("limit of 1"),
        "{notes}"
    );
}

#[test]
fn a_wait_survives_a_sigkilled_server_and_finishes_after_restart() {
    let s = sandbox();
    let script = SCRIPT.replace(
        "\"mid\", \"goal\": \"middle of {{goal}}\"",
        "\"later\", \"goal\": \"afterwards\"",
    );
    std::fs::write(s.path("children.script.json"), script).unwrap();
    let server = s.server();
    let _w = worker(&server, &s, "solo", "default");
    let root = start(&server, "orchestrator", "the job");
    // The leaf child finishes; the "later" child has no worker yet, so the parent waits.
    let run = eventually(LIMIT, || {
        let run = describe(&server, &root);
        let done = run["waiting"]["done_run_ids"].as_array().map_or(0, Vec::len);
        (done == 1).then_some(run)
    });
    assert_eq!(run["steps"][0]["state"], "WAITING");
    let human = ok(server.ry(&["run", "describe", &root]));
    assert!(human.contains("waiting on children 1/2 done"), "{human}");

    let server = server.crash_and_restart();
    let run = describe(&server, &root);
    assert_eq!(
        run["waiting"]["run_ids"].as_array().unwrap().len(),
        2,
        "intact: {run}"
    );
    let _later = worker(&server, &s, "later-worker", "later");
    let run = wait_status(&server, &root, "COMPLETED");
    let notes = run["steps"][0]["notes"].as_str().unwrap();
    assert!(notes.contains("worked on afterwards"), "{notes}");
}

const LONG: &str = r#"{"id":"long","version":"1","name":"Long","steps":[
  {"id":"grind","title":"Grind","prompt":"Grind {{goal}}"}]}"#;
const LONG_SCRIPT: &str = r#"{"steps": {"grind": [
  {"tool_calls": [{"name": "bash", "input": {"command": "echo turn >> turns.txt; while [ ! -e go ]; do sleep 0.05; done"}}]},
  {"tool_calls": [{"name": "bash", "input": {"command": "echo turn >> turns.txt"}}]},
  {"tool_calls": [{"name": "complete_step", "input": {"notes": "ground after {{last_user_text}}"}}]}
]}}"#;

#[test]
fn a_paused_step_suspends_at_its_next_turn_and_unpause_resumes_it_from_the_checkpoint() {
    let s = Sandbox::new();
    s.workflow("long.json", LONG);
    std::fs::write(s.path("long.script.json"), LONG_SCRIPT).unwrap();
    let server = s.server();
    let script = s.path("long.script.json");
    let _w = WorkerProcess::start(
        &server.url,
        &s.path("workspace"),
        "solo",
        &[
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--slots",
            "1",
        ],
        &[],
    );
    let root = start(&server, "long", "the ore");
    let ws = s.path("workspace").join(&root);
    // The first turn's command runs until the test lets it go.
    eventually(LIMIT, || ws.join("turns.txt").exists().then_some(()));
    ok(server.ry(&["run", "pause", &root, "--reason", "overnight"]));
    assert_eq!(describe(&server, &root)["paused"], true);
    std::fs::write(ws.join("go"), "").unwrap();
    // At the end of that turn the step suspends: the lease is released, the step waits.
    let run = eventually(LIMIT, || {
        let run = describe(&server, &root);
        (run["waiting"]["on"] == "unpause").then_some(run)
    });
    assert_eq!(run["status"], "RUNNING");
    assert_eq!(run["steps"][0]["state"], "WAITING");
    assert!(ok(server.ry(&["run", "describe", &root])).contains("waiting on unpause"));
    ok(server.ry(&["run", "unpause", &root]));
    let run = wait_status(&server, &root, "COMPLETED");
    let turns = std::fs::read_to_string(ws.join("turns.txt")).unwrap();
    assert_eq!(
        turns.lines().count(),
        2,
        "resumed at turn 2, not from scratch: {turns:?}"
    );
    assert_eq!(run["steps"][0]["attempt"], 1, "a suspension uses up no attempt");
    let history = json(server.ry(&["run", "history", &root, "-o", "json"]));
    let types: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    for t in ["RunPaused", "StepWaiting", "RunUnpaused", "StepResumed"] {
        assert!(types.contains(&t), "{t} in {types:?}");
    }
    assert!(!types.contains(&"StepFailed"), "{types:?}");
}
