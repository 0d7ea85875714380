//! Output contracts through the whole worker, against a real server in process: the
//! scripted model completes with a wrong result, reads the violations as
//! `complete_step`'s error, completes again correctly, and the next step's prompt
//! shows a field of the result.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use railyard_sdk::Client;
use railyard_server::{RunningServer, ServerConfig};
use railyard_worker::provider::{Block, ScriptSource, ScriptedProvider};
use railyard_worker::{ProviderConfig, Worker, WorkerConfig};
use serde_json::{Value, json};

use crate::common::Recording;

const WORKFLOW: &str = r#"{"id":"contract","version":"1","name":"Contract","steps":[
  {"id":"plan","title":"Plan","prompt":"Plan {{goal}}","requiredArtifacts":["plan.md"],
   "output":{"type":"object","required":["title","count"],
     "properties":{"title":{"type":"string"},"count":{"type":"integer","minimum":1}}}},
  {"id":"build","title":"Build","prompt":"Build {{steps.plan.result.title}} times {{steps.plan.result.count}}"}]}"#;

fn script() -> Value {
    json!({"steps": {
        "plan": [
            {"tool_calls": [{"name": "write_file", "input": {"path": "plan.md", "content": "the plan"}}]},
            {"tool_calls": [{"name": "complete_step", "input": {
                "notes": "planned", "result": {"title": 7, "count": 0}}}]},
            {"tool_calls": [{"name": "complete_step", "input": {
                "notes": "planned", "artifacts": ["plan.md"], "result": {"title": "Rocket", "count": 3}}}]}
        ],
        "build": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "built"}}]}]
    }})
}

#[tokio::test]
async fn a_refused_result_goes_back_to_the_model_which_completes_correctly() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("contract.json"), WORKFLOW).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    let server = RunningServer::start(config).await.unwrap();
    let url = format!("http://{}", server.grpc_addr);
    let client = Client::connect(&url).await.unwrap();
    let run_id = client
        .start_run("default", "contract", "the launch", HashMap::new())
        .await
        .unwrap();

    let ws = tempfile::tempdir().unwrap();
    let script: railyard_worker::provider::Script = serde_json::from_value(script()).unwrap();
    let provider = Arc::new(Recording::new(ScriptedProvider::new(script.clone())));
    let config = WorkerConfig {
        server_url: url,
        api_key: None,
        namespace: "default".into(),
        queues: vec!["default".into()],
        slots: 1,
        workspace: ws.path().to_path_buf(),
        identity: "contract-worker".into(),
        provider: ProviderConfig::Scripted {
            script: ScriptSource::Inline(script),
        },
        shutdown_grace: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        bash_env: Vec::new(),
        tls: Default::default(),
        prices: Default::default(),
        mcp: Default::default(),
        web_fetch_allow_networks: Vec::new(),
        rate_limit_key: None,
        providers: Vec::new(),
    };
    let worker = Worker::new(config).with_provider(provider.clone());
    let watcher = client.clone();
    let watched = run_id.clone();
    let done = async move {
        loop {
            let run = watcher
                .describe_run("default", &watched)
                .await
                .unwrap()
                .run
                .unwrap();
            if run.close_time_unix_ms != 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), worker.run(done))
        .await
        .expect("the run finishes")
        .unwrap();

    // History: one refusal, then the completion; the run completed.
    let events = client.full_history("default", &run_id).await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types.iter().filter(|t| **t == "StepResultRefused").count(),
        1,
        "{types:?}"
    );
    assert_eq!(types.last(), Some(&"RunCompleted"), "{types:?}");
    let refused = events
        .iter()
        .position(|e| e.event_type == "StepResultRefused")
        .unwrap();
    let completed = events
        .iter()
        .position(|e| e.event_type == "StepCompleted")
        .unwrap();
    assert!(refused < completed, "{types:?}");
    let attrs: Value = serde_json::from_str(&events[refused].attributes_json).unwrap();
    assert_eq!(attrs["totalViolations"], 3, "{attrs}");
    let attrs: Value = serde_json::from_str(&events[completed].attributes_json).unwrap();
    assert_eq!(attrs["result"], json!({"title": "Rocket", "count": 3}));

    // The model read the violations as complete_step's error, on its next turn.
    let requests = provider.requests();
    let plan: Vec<_> = requests.iter().filter(|r| r.metadata.step_id == "plan").collect();
    assert_eq!(plan.len(), 3, "plan took three turns");
    assert!(plan[0].system.contains("output contract"), "{}", plan[0].system);
    let complete_spec = plan[0].tools.iter().find(|t| t.name == "complete_step").unwrap();
    assert_eq!(
        complete_spec.input_schema["properties"]["result"]["required"],
        json!(["title", "count"])
    );
    let last = plan[2].messages.last().unwrap();
    let Some(Block::ToolResult {
        content,
        is_error: true,
        ..
    }) = last.content.first()
    else {
        panic!("{:?}", last.content)
    };
    for line in [
        "result refused: 3 violations of the output contract of step \"plan\"",
        "- result.title: value is not of type \"string\"",
        "- result.count: value is less than the minimum of 1",
        "- artifacts: no artifact matches the required \"plan.md\"",
    ] {
        assert!(content.contains(line), "{line:?} not in {content}");
    }

    // The next step's prompt shows the result's fields.
    let build = requests.iter().find(|r| r.metadata.step_id == "build").unwrap();
    let Some(Block::Text { text }) = build.messages[0].content.first() else {
        panic!("{:?}", build.messages[0])
    };
    assert_eq!(text, "Build Rocket times 3");
    assert!(
        build.system.contains(r#"Result: {"count":3,"title":"Rocket"}"#),
        "{}",
        build.system
    );
    server.shutdown().await;
}
