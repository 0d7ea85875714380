//! Output contracts over real gRPC: a result that breaks its step's schema or
//! required artifacts is refused with `INVALID_ARGUMENT` listing each violation,
//! recorded (bounded) in history, and changes nothing else; a good one is stored,
//! shown by `DescribeRun`, handed to later steps and rendered into their prompts.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use railyard_proto::v1::{self, HistoryEvent};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use serde_json::{Value, json};

const CONTRACT: &str = r#"{"id":"contract","version":"1","name":"Contract","steps":[
  {"id":"plan","title":"Plan","prompt":"Plan {{goal}}","requiredArtifacts":["report.md","out/*.json"],
   "output":{"type":"object","required":["title","count"],"additionalProperties":false,
     "properties":{"title":{"type":"string","minLength":1},"count":{"type":"integer","minimum":1},
       "tags":{"type":"array","items":{"type":"string"}}}}},
  {"id":"build","title":"Build","prompt":"Build {{steps.plan.result.title}} x{{steps.plan.result.count}} [{{steps.plan.result.tags.0}}]"}]}"#;

async fn start(data: &Path, workflows: &Path) -> (RunningServer, Client) {
    crate::support::start(ServerConfig::new(data, workflows)).await
}

fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("contract.json"), CONTRACT).unwrap();
    (data, workflows)
}

async fn poll(w: &StepWorker) -> v1::StepTask {
    w.poll(Duration::from_secs(5)).await.unwrap().expect("a task")
}

fn completion(result: Value, artifacts: &[&str]) -> Completion {
    Completion {
        notes: "n".into(),
        artifacts: artifacts.iter().map(|a| a.to_string()).collect(),
        result_json: result.to_string(),
        ..Default::default()
    }
}

async fn history(client: &Client, run_id: &str) -> Vec<HistoryEvent> {
    client.full_history("default", run_id).await.unwrap()
}

fn of_type(events: &[HistoryEvent], t: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.event_type == t)
        .map(|e| serde_json::from_str(&e.attributes_json).unwrap())
        .collect()
}

async fn plan_step(client: &Client, run_id: &str) -> v1::StepSummary {
    let run = client.describe_run("default", run_id).await.unwrap().run.unwrap();
    run.steps.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_wrong_result_is_refused_with_each_violation_then_a_right_one_completes() {
    let (data, workflows) = dirs();
    let (server, client) = start(data.path(), workflows.path()).await;
    let run_id = client
        .start_run("default", "contract", "the launch", HashMap::new())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "w1");
    let task = poll(&w).await;
    // The task carries its contract, so an agent can be told what is expected.
    let schema: Value = serde_json::from_str(&task.output_schema_json).unwrap();
    assert_eq!(schema["required"], json!(["title", "count"]));
    assert_eq!(task.required_artifacts, ["report.md", "out/*.json"]);

    let bad = completion(json!({"count": "three", "extra": 1}), &["report.md"]);
    let Err(ClientError::InvalidArgument(message)) = w.complete(&task.task_token, bad).await else {
        panic!("a wrong result must be refused with INVALID_ARGUMENT");
    };
    for line in [
        "result refused: 4 violations of the output contract of step \"plan\":",
        "\n- result: \"title\" is a required property",
        "\n- result.count: value is not of type \"integer\"",
        "\n- result: Additional properties are not allowed ('extra' was unexpected)",
        "\n- artifacts: no artifact matches the required \"out/*.json\"",
        "\nFix them and call complete_step again.",
    ] {
        assert!(message.contains(line), "{line:?} not in {message}");
    }
    assert!(
        !message.contains("three"),
        "the client's values are not echoed: {message}"
    );

    // Nothing moved but the count and the history.
    let step = plan_step(&client, &run_id).await;
    assert_eq!(
        (step.state.as_str(), step.attempt, step.result_refusals),
        ("STARTED", 1, 1)
    );
    assert_eq!(step.result_json, "");
    let events = history(&client, &run_id).await;
    let refused = of_type(&events, "StepResultRefused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["stepId"], "plan");
    assert_eq!(refused[0]["attempt"], 1);
    assert_eq!(refused[0]["totalViolations"], 4);
    let paths: Vec<&str> = refused[0]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"result.count") && paths.contains(&"artifacts"),
        "{paths:?}"
    );
    assert!(of_type(&events, "StepCompleted").is_empty());

    // Not an object, not JSON, too large: refused before the contract, recorded nowhere.
    for (result, why) in [
        ("[1,2]".to_string(), "result_json: must be a JSON object"),
        ("{\"title\":".to_string(), "result_json: is not JSON"),
        (
            format!("{{\"title\":\"{}\"}}", "x".repeat(256 * 1024)),
            "result_json: is 262156 bytes, more than the limit of 262144",
        ),
    ] {
        let c = Completion {
            result_json: result,
            ..Default::default()
        };
        let Err(ClientError::InvalidArgument(m)) = w.complete(&task.task_token, c).await else {
            panic!("{why}");
        };
        assert!(m.starts_with(why), "{m}");
    }
    assert_eq!(history(&client, &run_id).await.len(), events.len());

    // The right result completes the step; the next prompt shows its fields.
    let good = completion(
        json!({"title": "Rocket", "count": 3, "tags": ["fast"]}),
        &["report.md", "./out/summary.json"],
    );
    let next = w
        .complete_and_take_next(&task.task_token, good)
        .await
        .unwrap()
        .expect("eager next");
    assert_eq!(next.step_id, "build");
    assert_eq!(next.prompt, "Build Rocket x3 [fast]");
    let prior: Value = serde_json::from_str(&next.prior_steps[0].result_json).unwrap();
    assert_eq!(prior, json!({"title": "Rocket", "count": 3, "tags": ["fast"]}));
    assert_eq!(next.output_schema_json, "", "build has no contract");
    let events = history(&client, &run_id).await;
    let completed = of_type(&events, "StepCompleted");
    assert_eq!(completed[0]["result"]["title"], "Rocket");
    assert_eq!(of_type(&events, "StepResultRefused").len(), 1);

    // Stored durably: a restarted server still has it.
    server.shutdown().await;
    let (server, client) = start(data.path(), workflows.path()).await;
    let step = plan_step(&client, &run_id).await;
    assert_eq!(step.state, "COMPLETED");
    let stored: Value = serde_json::from_str(&step.result_json).unwrap();
    assert_eq!(stored["count"], 3);
    // A list summary leaves the result out, like notes.
    let listed = client
        .list_runs(v1::ListRunsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.runs[0].steps[0].result_json, "");
    server.shutdown().await;
}

#[tokio::test]
async fn refusals_recorded_per_attempt_are_capped_and_a_stale_lease_is_refused_first() {
    let (data, workflows) = dirs();
    let (server, client) = start(data.path(), workflows.path()).await;
    let run_id = client
        .start_run("default", "contract", "g", HashMap::new())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "w1");
    let task = poll(&w).await;
    for i in 0..13 {
        let r = w.complete(&task.task_token, completion(json!({}), &[])).await;
        assert!(
            matches!(r, Err(ClientError::InvalidArgument(_))),
            "refusal {i}: {r:?}"
        );
    }
    let events = history(&client, &run_id).await;
    assert_eq!(
        of_type(&events, "StepResultRefused").len(),
        10,
        "at most 10 per attempt"
    );
    assert_eq!(plan_step(&client, &run_id).await.result_refusals, 10);

    // Still completes once right; then the same token with a bad result: the lease
    // is what is wrong, and nothing is recorded.
    let good = completion(json!({"title": "t", "count": 1}), &["report.md", "out/a.json"]);
    w.complete(&task.task_token, good).await.unwrap();
    let r = w.complete(&task.task_token, completion(json!({}), &[])).await;
    assert!(matches!(r, Err(ClientError::FailedPrecondition(_))), "{r:?}");
    assert_eq!(
        of_type(&history(&client, &run_id).await, "StepResultRefused").len(),
        10
    );
    server.shutdown().await;
}
