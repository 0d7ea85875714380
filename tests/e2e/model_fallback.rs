//! A model per step and fallbacks, end to end: a real server and worker, the mock
//! model answering 529 (`overloaded_error`) to one model and completing on another.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::{Value, json};

const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A step's `model` reaches the provider; a 529 (`overloaded_error`) on it falls back
/// to the next of `fallbackModels`, which answers: the usage and history say which.
#[test]
fn a_steps_model_falls_back_when_overloaded_and_the_answering_model_is_recorded() {
    let sandbox = Sandbox::new();
    let def = json!({
        "id": "fallback", "version": "1", "name": "Fallback",
        "model": "claude-wf-default",
        "steps": [
            {"id": "f_one", "title": "Overloaded first", "prompt": "Do {{goal}}", "taskQueue": "fb",
             "model": "claude-busy", "fallbackModels": ["claude-spare"]},
            {"id": "f_two", "title": "The workflow's model", "prompt": "Then {{goal}}", "taskQueue": "fb"}
        ]
    });
    sandbox.workflow("fallback.json", &def.to_string());
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        if r.body["model"] == "claude-busy" {
            return Reply::Error(
                529,
                vec![("retry-after", "0")],
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            );
        }
        Reply::Turn(complete("done"))
    });
    let config = sandbox.path("worker.toml");
    std::fs::write(
        &config,
        "[prices.\"claude-spare\"]\ninput = 1.0\noutput = 1.0\n[prices.\"claude-wf-default\"]\ninput = 2.0\noutput = 2.0\n",
    )
    .unwrap();
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "fb-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-worker",
            "--queue",
            "fb",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
    );
    let (rt, client) = connect(&server.url);
    let (run, status) = run_until_closed(&rt, &client, "fallback", "the work", RUN_LIMIT);
    assert_eq!(status, "COMPLETED");

    let models = |step: &str| -> Vec<String> {
        mock.requests_for(step)
            .iter()
            .map(|r| r.body["model"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let one = models("f_one");
    assert!(
        one.len() >= 2 && one[..one.len() - 1].iter().all(|m| m == "claude-busy"),
        "{one:?}"
    );
    assert_eq!(one.last().map(String::as_str), Some("claude-spare"));
    assert_eq!(
        models("f_two"),
        vec!["claude-wf-default"],
        "the workflow's model over the worker's"
    );

    let history = rt.block_on(client.full_history("default", &run)).unwrap();
    let of = |kind: &str| -> Vec<Value> {
        history
            .iter()
            .filter(|e| e.event_type == kind)
            .map(attrs)
            .collect()
    };
    let notes = of("CoordinatorNote");
    assert!(
        notes.iter().any(|n| n["kind"] == "model_fallback"
            && n["message"]
                .as_str()
                .is_some_and(|m| m.contains("claude-busy") && m.contains("claude-spare"))),
        "{notes:?}"
    );
    let usage = of("StepUsage");
    let by_step: HashMap<String, String> = usage
        .iter()
        .map(|u| {
            (
                u["stepId"].as_str().unwrap_or_default().to_string(),
                u["model"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        by_step.get("f_one").map(String::as_str),
        Some("claude-spare"),
        "{usage:?}"
    );
    assert_eq!(
        by_step.get("f_two").map(String::as_str),
        Some("claude-wf-default"),
        "{usage:?}"
    );
}
