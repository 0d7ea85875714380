//! Batch operations end to end: `railyard batch terminate` over 500 runs of a real
//! `railyard server`, which is killed with SIGKILL mid-batch and started again; the
//! batch goes on from where its last commit left it, and every run is acted on
//! exactly once (one `BatchApplied` and one `RunTerminated` in its history). The
//! dry run counts what the batch acts on; describe and list print its progress.

use std::time::Duration;

use crate::support::*;
use railyard_proto::v1::{GetHistoryRequest, RunStatus, StartRunRequest};
use railyard_sdk::{Client, ConnectOptions};

const ONE: &str = r#"{"id":"one","version":"1","name":"One",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;
const RUNS: usize = 500;
const QUERY: &str = r#"WorkflowId = "one" AND Status = "RUNNING""#;
const LIMIT: Duration = Duration::from_secs(120);

async fn connect(url: &str) -> Client {
    let opts = ConnectOptions {
        max_attempts: 1,
        ..ConnectOptions::default()
    };
    Client::connect_with(url, opts).await.expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_of_500_runs_cut_by_sigkill_acts_on_each_run_exactly_once() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let server = sandbox.server();
    let client = connect(&server.url).await;
    let mut starters = Vec::new();
    for s in 0..5 {
        let client = client.clone();
        starters.push(tokio::spawn(async move {
            for i in (s..RUNS).step_by(5) {
                let req = StartRunRequest {
                    namespace: "default".into(),
                    workflow_id: "one".into(),
                    goal: format!("goal {i}"),
                    run_id: format!("r-{i:03}"),
                    ..Default::default()
                };
                client.start_run_with(req).await.expect("start");
            }
        }));
    }
    for s in starters {
        s.await.expect("starter");
    }

    let dry = json(server.ry(&["batch", "terminate", "--query", QUERY, "--dry-run", "-o", "json"]));
    assert_eq!(dry["matched"], RUNS as u64);
    assert_eq!(dry["sample_run_ids"].as_array().map(Vec::len), Some(10));
    let human = ok(server.ry(&["batch", "terminate", "--query", QUERY, "--dry-run"]));
    assert!(human.starts_with("500 run(s) match"), "{human}");

    let started = json(server.ry(&[
        "batch",
        "terminate",
        "--query",
        QUERY,
        "--rate",
        "100/s",
        "--reason",
        "e2e cleanup",
        "-o",
        "json",
    ]));
    let id = started["batch"]["batch_id"]
        .as_str()
        .expect("batch id")
        .to_string();
    assert_eq!(
        started["batch"]["total"], dry["matched"],
        "the dry run counts what the batch acts on"
    );
    let describe = |server: &ServerProcess| json(server.ry(&["batch", "describe", &id, "-o", "json"]));

    // Killed once part of the batch is done, and well before the end.
    let before = eventually(LIMIT, || {
        let d = describe(&server);
        let reached = d["reached"].as_u64().unwrap_or(0);
        (reached >= 100).then_some(reached)
    });
    let server = server.crash_and_restart();
    let after_restart = describe(&server);
    let resumed_at = after_restart["reached"].as_u64().unwrap_or(0);
    assert!(
        resumed_at >= before,
        "a reached run is never forgotten: {resumed_at} < {before}"
    );
    eprintln!("runs reached when killed: at least {before}; found after the restart: {resumed_at}");
    assert!(resumed_at < RUNS as u64, "the kill came mid-batch");

    let done = eventually(LIMIT, || {
        let d = describe(&server);
        (d["state"] != "running").then_some(d)
    });
    assert_eq!(done["state"], "completed");
    assert_eq!(
        (
            done["reached"].as_u64(),
            done["succeeded"].as_u64(),
            done["failed"].as_u64()
        ),
        (Some(RUNS as u64), Some(RUNS as u64), Some(0))
    );

    // Exactly once: one BatchApplied naming the batch and one RunTerminated per run.
    let client = connect(&server.url).await;
    for i in 0..RUNS {
        let run_id = format!("r-{i:03}");
        let h = client
            .get_history(GetHistoryRequest {
                namespace: "default".into(),
                run_id: run_id.clone(),
                ..Default::default()
            })
            .await
            .expect("history");
        let applied: Vec<_> = h
            .events
            .iter()
            .filter(|e| e.event_type == "BatchApplied")
            .collect();
        let terminated = h
            .events
            .iter()
            .filter(|e| e.event_type == "RunTerminated")
            .count();
        assert_eq!((applied.len(), terminated), (1, 1), "run {run_id}");
        assert_eq!(attrs(applied[0])["batchId"], id.as_str());
        let run = client
            .describe_run("default", &run_id)
            .await
            .expect("describe")
            .run
            .expect("run");
        assert_eq!(run.status(), RunStatus::Terminated);
    }

    let text = ok(server.ry(&["batch", "describe", &id]));
    assert!(
        text.contains("500/500 reached: 500 done, 0 skipped, 0 failed"),
        "{text}"
    );
    assert!(text.contains("completed"), "{text}");
    let listed = ok(server.ry(&["batch", "list"]));
    assert!(listed.contains(&id) && listed.contains("terminate"), "{listed}");
    let stopped = ok(server.ry(&["batch", "stop", &id, "--reason", "late"]));
    assert!(stopped.contains("is completed"), "{stopped}");
}
