//! Output contracts through the MCP gateway (`railyard mcp` against a real server): a
//! step's contract is handed to the agent, a wrong `result` comes back as a tool error
//! listing each violation with the token still good, and the fixed one completes.

use serde_json::{Value, json};

use crate::mcp::Mcp;
use crate::support::*;

const WORKFLOW: &str = r#"{"id":"contract","version":"1","name":"Contract","steps":[
  {"id":"plan","title":"Plan","prompt":"Plan {{goal}}",
   "output":{"type":"object","required":["title","count"],
     "properties":{"title":{"type":"string"},"count":{"type":"integer"}}}},
  {"id":"build","title":"Build","prompt":"Build {{steps.plan.result.title}} x{{steps.plan.result.count}}"}]}"#;

#[test]
fn the_gateway_hands_violations_back_and_keeps_the_step() {
    let sandbox = Sandbox::new();
    sandbox.workflow("contract.json", WORKFLOW);
    let server = sandbox.server();
    let mut mcp = Mcp::start(&server.url);
    mcp.initialize();

    let started = mcp.tool("start_workflow", json!({"workflow_id": "contract", "goal": "g"}));
    let step = started["structuredContent"].clone();
    assert_eq!(step["step"]["id"], "plan", "{started}");
    assert_eq!(
        step["output_schema"]["required"],
        json!(["title", "count"]),
        "{step}"
    );
    assert!(
        step["contract"].as_str().unwrap().contains("output contract"),
        "{step}"
    );
    let run_id = step["run_id"].as_str().unwrap().to_string();
    let token = step["continue_token"].as_str().unwrap().to_string();

    let refused = mcp.tool(
        "complete_step",
        json!({"continue_token": token, "notes": "n", "result": {"title": 1}}),
    );
    assert_eq!(refused["isError"], json!(true), "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap();
    for line in [
        "result refused: 2 violations of the output contract of step \"plan\"",
        "- result: \"count\" is a required property",
        "- result.title: value is not of type \"string\"",
        "same continue_token",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    let history = json(server.ry(&["run", "history", &run_id, "-o", "json"]));
    let refusals = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "StepResultRefused")
        .count();
    assert_eq!(refusals, 1, "{history}");

    // The same token, a fixed result: the next step's prompt shows it.
    let next = mcp.tool(
        "complete_step",
        json!({"continue_token": token, "notes": "n", "result": {"title": "Rocket", "count": 3}}),
    );
    let next: &Value = &next["structuredContent"];
    assert_eq!(next["step"]["id"], "build", "{next}");
    assert_eq!(next["prompt"], "Build Rocket x3");
    assert_eq!(
        next["prior_steps"][0]["result"],
        json!({"title": "Rocket", "count": 3})
    );
}
