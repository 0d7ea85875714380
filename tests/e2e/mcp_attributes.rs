//! Search attributes through the MCP gateway (`railyard mcp` against a real server): an
//! outside agent sets them at start (`start_workflow`), mid-step
//! (`set_search_attributes`, the token staying good) and with a completion
//! (`complete_step`), sees them in `get_run` and finds the run by them in `list_runs`;
//! an undeclared one is refused naming it, and nothing is set.

use serde_json::{Value, json};

use crate::mcp::Mcp;
use crate::support::*;

const WORKFLOW: &str = r#"{"id":"two","version":"1","name":"Two","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"},
  {"id":"b","title":"B","prompt":"Then"}]}"#;

#[test]
fn an_outside_agent_sets_its_runs_search_attributes_and_sees_them() {
    let sandbox = Sandbox::new();
    sandbox.workflow("two.json", WORKFLOW);
    let server = sandbox.server();
    ok(server.ry(&["namespace", "attribute", "add", "customer", "keyword"]));
    ok(server.ry(&["namespace", "attribute", "add", "priority", "int"]));
    let mut mcp = Mcp::start(&server.url);
    mcp.initialize();

    let started = mcp.tool(
        "start_workflow",
        json!({"workflow_id": "two", "goal": "g", "search_attributes": {"customer": "acme"}}),
    );
    let step = started["structuredContent"].clone();
    let run_id = step["run_id"].as_str().unwrap().to_string();
    let token = step["continue_token"].as_str().unwrap().to_string();
    let attributes = |mcp: &mut Mcp| -> Value {
        mcp.tool("get_run", json!({"run_id": run_id}))["structuredContent"]["search_attributes"].clone()
    };
    assert_eq!(attributes(&mut mcp), json!({"customer": "acme"}));

    // Mid-step: set, then refused naming an undeclared one, with nothing set.
    let set = mcp.tool(
        "set_search_attributes",
        json!({"continue_token": token, "search_attributes": {"priority": "3"}}),
    );
    assert_eq!(set["structuredContent"]["changed"], 1, "{set}");
    let bad = mcp.tool(
        "set_search_attributes",
        json!({"continue_token": token, "search_attributes": {"priority": "4", "region": "eu"}}),
    );
    assert_eq!(bad["isError"], json!(true), "{bad}");
    let text = bad["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"region\" is not a search attribute"), "{text}");
    assert_eq!(attributes(&mut mcp), json!({"customer": "acme", "priority": 3}));

    // With the completion; the token was still good.
    let next = mcp.tool(
        "complete_step",
        json!({"continue_token": token, "notes": "done", "search_attributes": {"customer": "globex"}}),
    );
    assert_eq!(next["structuredContent"]["step"]["id"], "b", "{next}");
    assert_eq!(attributes(&mut mcp), json!({"customer": "globex", "priority": 3}));
    let listed = mcp.tool(
        "list_runs",
        json!({"query": "customer = \"globex\" AND priority >= 3"}),
    );
    let runs = listed["structuredContent"]["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(runs.len(), 1, "{listed}");
    assert_eq!(runs[0]["run_id"], json!(run_id));
    let history = json(server.ry(&["run", "history", &run_id, "-o", "json"]));
    let changes = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "SearchAttributesChanged")
        .count();
    assert_eq!(changes, 3, "start, mid-step, completion: {history}");
}
