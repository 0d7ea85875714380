//! Output contracts end to end: a real `railyard server`, a `railyard worker` on the
//! offline scripted provider whose model first completes with a wrong result, reads
//! the violations as `complete_step`'s error and completes correctly; the next step,
//! taken with `railyard task poll`, shows a field of the result in its prompt.

use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::json;

const WORKFLOW: &str = r#"{"id": "contract", "version": "1", "name": "Contract",
  "steps": [
    {"id": "plan", "title": "Plan", "prompt": "Plan {{goal}}", "requiredArtifacts": ["plan.md"],
     "output": {"type": "object", "required": ["title", "count"],
       "properties": {"title": {"type": "string"}, "count": {"type": "integer", "minimum": 1}}}},
    {"id": "build", "title": "Build", "taskQueue": "manual",
     "prompt": "Build {{steps.plan.result.title}} x{{steps.plan.result.count}} for {{goal}}"}
  ]}"#;

#[test]
fn a_wrong_result_is_refused_then_fixed_and_later_prompts_show_it() {
    let sandbox = Sandbox::new();
    sandbox.workflow("contract.json", WORKFLOW);
    // A bad schema in another file is reported with its file and JSON path.
    sandbox.workflow(
        "bad-schema.json",
        r#"{"id": "bad", "version": "1", "name": "Bad", "steps": [{"id": "a", "title": "A", "prompt": "p",
            "output": {"type": "object", "properties": {"n": {"type": "integr"}}}}]}"#,
    );
    let server = sandbox.server();
    let listed = ok(server.ry(&["workflow", "list"]));
    assert!(
        listed.contains("bad-schema.json: steps[0].output.properties.n.type: "),
        "{listed}"
    );

    let script = sandbox.path("contract.script.json");
    std::fs::write(
        &script,
        json!({"steps": {"plan": [
            {"tool_calls": [{"name": "write_file", "input": {"path": "plan.md", "content": "the plan for {{goal}}"}}]},
            {"tool_calls": [{"name": "complete_step", "input": {
                "notes": "planned", "artifacts": ["plan.md"], "result": {"title": 7}}}]},
            {"tool_calls": [{"name": "complete_step", "input": {
                "notes": "planned", "artifacts": ["plan.md"], "result": {"title": "Rocket", "count": 3}}}]}
        ]}})
        .to_string(),
    )
    .unwrap();
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "contract-worker",
        &["--provider", "scripted", "--script", script.to_str().unwrap()],
        &[],
    );
    ok(server.ry(&[
        "run",
        "start",
        "contract",
        "--goal",
        "the launch",
        "--run-id",
        "c1",
    ]));

    // The build step goes to a queue no worker serves: take it by hand.
    let task = eventually(std::time::Duration::from_secs(60), || {
        let task = json(server.ry(&["task", "poll", "--queue", "manual", "--wait", "5", "-o", "json"]));
        (!task.is_null()).then_some(task)
    });
    assert_eq!(task["step_id"], "build");
    assert_eq!(task["prompt"], "Build Rocket x3 for the launch");
    assert_eq!(
        task["prior_steps"][0]["result"],
        json!({"title": "Rocket", "count": 3})
    );

    // History: one refusal with its violations, then one completion with the result.
    let history = json(server.ry(&["run", "history", "c1", "-o", "json"]));
    let events = history.as_array().expect("events");
    let of =
        |t: &str| -> Vec<&serde_json::Value> { events.iter().filter(|e| e["event_type"] == t).collect() };
    let refused = of("StepResultRefused");
    assert_eq!(refused.len(), 1, "{history}");
    let violations = &refused[0]["attributes"]["violations"];
    assert_eq!(refused[0]["attributes"]["totalViolations"], 2, "{violations}");
    assert_eq!(violations[0]["path"], "result", "{violations}");
    assert_eq!(violations[0]["reason"], "\"count\" is a required property");
    assert_eq!(violations[1]["path"], "result.title");
    let completed = of("StepCompleted");
    assert_eq!(completed.len(), 1, "{history}");
    assert_eq!(completed[0]["attributes"]["result"]["title"], "Rocket");

    // `run describe` shows the result, for people and as JSON.
    let described = ok(server.ry(&["run", "describe", "c1"]));
    assert!(
        described.contains("results\n  plan  {\"count\":3,\"title\":\"Rocket\"}"),
        "{described}"
    );
    let described = json(server.ry(&["run", "describe", "c1", "-o", "json"]));
    assert_eq!(described["run"]["steps"][0]["result"]["count"], 3, "{described}");
    assert_eq!(described["run"]["steps"][0]["result_refusals"], 1, "{described}");

    // A completion by hand that breaks no contract finishes the run.
    let token = task["task_token"].as_str().unwrap();
    ok(server.ry(&[
        "task",
        "complete",
        token,
        "--notes",
        "built",
        "--result",
        r#"{"ok":true}"#,
    ]));
    let described = json(server.ry(&["run", "describe", "c1", "-o", "json"]));
    assert_eq!(described["run"]["status"], "COMPLETED", "{described}");
    assert_eq!(described["run"]["steps"][1]["result"], json!({"ok": true}));
}
