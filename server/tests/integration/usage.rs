//! Token usage over real gRPC on a real redb file: heartbeats' running totals are
//! recorded per step and run, exported as metrics, survive a restart, carry a step's
//! budget to the next attempt, and the heartbeat that passes a budget fails the step.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use railyard_proto::v1::{self, StartRunRequest, StuckReport, TokenUsage};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

const BUDGETED: &str = r#"{"id":"budgeted","version":"1","name":"Budgeted","maxCostUsd":5,
  "steps":[
    {"id":"think","title":"Think","prompt":"Think","maxTokens":10000,
     "stuck":{"repeatedCalls":4,"noProgressTurns":7}},
    {"id":"write","title":"Write","prompt":"Write"}]}"#;

async fn start_in(data: &Path, workflows: &Path) -> (RunningServer, Client) {
    crate::support::start(ServerConfig::new(data, workflows)).await
}

async fn poll(w: &StepWorker) -> v1::StepTask {
    w.poll(Duration::from_secs(5)).await.unwrap().expect("a task")
}

fn usage(input: u64, output: u64, cost_usd: f64) -> TokenUsage {
    TokenUsage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: 1000,
        cache_write_tokens: 0,
        cost_usd,
    }
}

async fn beat(
    w: &StepWorker,
    task: &v1::StepTask,
    usage: TokenUsage,
) -> Result<v1::HeartbeatStepTaskResponse, ClientError> {
    w.heartbeat(&task.task_token)
        .usage(usage, "claude-x")
        .send()
        .await
}

fn metrics_text(http_addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(http_addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    text
}

// Multi-threaded: `metrics_text` blocks on a socket the server must answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_recorded_exported_and_survives_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("budgeted.json"), BUDGETED).unwrap();
    let (server, client) = start_in(data.path(), workflows.path()).await;
    let run_id = client
        .start_run("default", "budgeted", "g", HashMap::new())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "w1");
    let think = poll(&w).await;
    // The task carries the step's budget and stuck thresholds.
    let budget = think.budget.expect("a budget");
    assert_eq!(
        (
            budget.step_max_tokens,
            budget.run_max_tokens,
            budget.run_max_cost_usd
        ),
        (10000, 0, 5.0)
    );
    let stuck = think.stuck.expect("thresholds");
    assert_eq!(
        (
            stuck.repeated_calls,
            stuck.repeated_errors,
            stuck.no_progress_turns
        ),
        (4, 0, 7)
    );

    // Running totals: the second report adds only its growth; a stuck warning is recorded.
    beat(&w, &think, usage(100, 10, 0.01)).await.unwrap();
    let stuck = StuckReport {
        signal: "repeated_call".into(),
        message: "the same list_files 4 times".into(),
        fatal: false,
    };
    let resp = w
        .heartbeat(&think.task_token)
        .usage(usage(300, 30, 0.03), "claude-x")
        .stuck(vec![stuck])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.budget_exceeded, "");
    w.complete(&think.task_token, Completion::notes("thought"))
        .await
        .unwrap();
    let text = metrics_text(server.http_addr);
    for want in [
        r#"railyard_tokens_total{workflow="budgeted",model="claude-x",kind="input"} 300"#,
        r#"railyard_tokens_total{workflow="budgeted",model="claude-x",kind="cache_read"} 1000"#,
        r#"railyard_token_cost_usd_total{workflow="budgeted",model="claude-x"} 0.03"#,
    ] {
        assert!(text.lines().any(|l| l == want), "{want:?} not in:\n{text}");
    }
    server.shutdown().await;

    // After a restart the totals, the model and the history are all there.
    let (server, client) = start_in(data.path(), workflows.path()).await;
    let run = client
        .describe_run("default", &run_id)
        .await
        .unwrap()
        .run
        .unwrap();
    let total = run.usage.expect("run usage");
    assert_eq!(
        (total.input_tokens, total.output_tokens, total.cache_read_tokens),
        (300, 30, 1000)
    );
    assert!((total.cost_usd - 0.03).abs() < 1e-12);
    assert_eq!(run.steps[0].usage, Some(total));
    assert_eq!(run.steps[0].model, "claude-x");
    assert_eq!(run.steps[1].usage, None);
    let listed = client
        .list_runs(v1::ListRunsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.runs[0].usage, Some(total), "listings carry the total");
    let history = client.full_history("default", &run_id).await.unwrap();
    let types: Vec<&str> = history.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "RunStarted",
            "StepScheduled",
            "StepStarted",
            "AgentStuckWarning",
            "StepUsage",
            "StepCompleted",
            "StepScheduled"
        ]
    );
    let attrs: serde_json::Value = serde_json::from_str(&history[4].attributes_json).unwrap();
    assert_eq!(
        (attrs["inputTokens"].as_u64(), attrs["model"].as_str()),
        (Some(300), Some("claude-x"))
    );

    // The next step's task tells the worker what the run has used of its budget.
    let w = StepWorker::new(client.clone(), "default", "default", "w2");
    let write = poll(&w).await;
    let budget = write.budget.expect("the run's budget");
    assert_eq!(budget.step_max_tokens, 0);
    assert_eq!(budget.run_used.map(|u| u.input_tokens), Some(300));
    server.shutdown().await;
}

#[tokio::test]
async fn the_heartbeat_past_a_budget_fails_the_step_and_refuses_the_lease() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("budgeted.json"), BUDGETED).unwrap();
    let (server, client) = start_in(data.path(), workflows.path()).await;
    // A start's own cap overrides the definition's (none for tokens there).
    let run_id = client
        .start_run_with(StartRunRequest {
            namespace: "default".into(),
            workflow_id: "budgeted".into(),
            goal: "g".into(),
            max_tokens: 1500,
            ..Default::default()
        })
        .await
        .unwrap()
        .run_id;
    let w = StepWorker::new(client.clone(), "default", "default", "w1");
    let think = poll(&w).await;
    assert_eq!(think.budget.as_ref().map(|b| b.run_max_tokens), Some(1500));
    let resp = beat(&w, &think, usage(100, 10, 0.0)).await.unwrap();
    assert_eq!(resp.budget_exceeded, "");
    let resp = beat(&w, &think, usage(400, 200, 0.0)).await.unwrap();
    assert!(
        resp.budget_exceeded.contains("the run used 1600 tokens") && resp.budget_exceeded.contains("1500"),
        "{}",
        resp.budget_exceeded
    );
    // The lease is gone: a further report is refused, and nothing more is recorded.
    let refused = w.complete(&think.task_token, Completion::notes("late")).await;
    assert!(
        matches!(refused, Err(ClientError::FailedPrecondition(_))),
        "{refused:?}"
    );
    let run = client
        .describe_run("default", &run_id)
        .await
        .unwrap()
        .run
        .unwrap();
    assert_eq!(run.status, v1::RunStatus::Failed as i32);
    assert!(run.failure.contains("token_budget_exceeded"), "{}", run.failure);
    let history = client.full_history("default", &run_id).await.unwrap();
    let failed = history.iter().find(|e| e.event_type == "StepFailed").unwrap();
    let attrs: serde_json::Value = serde_json::from_str(&failed.attributes_json).unwrap();
    assert_eq!(
        (attrs["errorType"].as_str(), attrs["willRetry"].as_bool()),
        (Some("token_budget_exceeded"), Some(false))
    );

    // Bad StartRun budgets are refused by field.
    let bad = client
        .start_run_with(StartRunRequest {
            namespace: "default".into(),
            workflow_id: "budgeted".into(),
            max_cost_usd: f64::NAN,
            ..Default::default()
        })
        .await;
    assert!(
        matches!(&bad, Err(ClientError::InvalidArgument(m)) if m.starts_with("max_cost_usd")),
        "{bad:?}"
    );
    server.shutdown().await;
}
