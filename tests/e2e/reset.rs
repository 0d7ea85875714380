//! Reset end to end: a real `railyard server` killed with SIGKILL while resets are in
//! flight keeps each one whole (the new run and the old run's termination, or
//! neither), a retry with the same request id after the restart makes no second run,
//! `railyard run reset` / `run rerun` / `run describe` print the links, and the MCP
//! gateway's `reset_run` hands an outside agent the new run's step.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use railyard_proto::v1::{ResetRunRequest, RunStatus};
use railyard_sdk::{Client, Completion, ConnectOptions, StepWorker};

const PAIR: &str = r#"{"id":"pair","version":"1","name":"Pair","steps":[
    {"id":"first","title":"First","prompt":"First of {{goal}}"},
    {"id":"second","title":"Second","prompt":"Second of {{goal}}","taskQueue":"later"}]}"#;
const RUNS: usize = 60;
const SENDERS: usize = 6;
/// The server is killed once this many resets were answered.
const KILL_AFTER: usize = 10;
const LIMIT: Duration = Duration::from_secs(60);

fn reset_request(i: usize) -> ResetRunRequest {
    ResetRunRequest {
        namespace: "default".into(),
        run_id: format!("old-{i:03}"),
        to_step: "second".into(),
        reason: format!("reset {i}"),
        new_run_id: format!("new-{i:03}"),
        request_id: format!("reset-{i:03}"),
        identity: "e2e".into(),
        ..Default::default()
    }
}

async fn connect(url: &str) -> Client {
    let opts = ConnectOptions {
        max_attempts: 1,
        ..ConnectOptions::default()
    };
    Client::connect_with(url, opts).await.expect("client")
}

/// Whether the reset of run `i` is in storage: the new run exists, and the old run is
/// terminated and names it. Panics if only one of the two is there.
async fn applied(client: &Client, i: usize) -> bool {
    let old = client
        .describe_run("default", &format!("old-{i:03}"))
        .await
        .expect("the old run")
        .run
        .expect("run");
    let new = client.describe_run("default", &format!("new-{i:03}")).await;
    let linked = old.reset_to == format!("new-{i:03}");
    let terminated = old.status() == RunStatus::Terminated;
    match new {
        Ok(new) => {
            let new = new.run.expect("run");
            assert!(
                linked && terminated,
                "run new-{i:03} exists but old-{i:03} is {:?} linked to {:?}",
                old.status(),
                old.reset_to
            );
            assert_eq!(new.reset_from, format!("old-{i:03}"));
            assert!(new.steps[0].carried);
            true
        }
        Err(railyard_sdk::ClientError::NotFound(_)) => {
            assert!(
                !linked && !terminated,
                "run new-{i:03} is missing but old-{i:03} is {:?} linked to {:?}",
                old.status(),
                old.reset_to
            );
            false
        }
        Err(e) => panic!("describe new-{i:03}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reset_cut_by_sigkill_leaves_both_changes_or_neither() {
    let sandbox = Sandbox::new();
    sandbox.workflow("pair.json", PAIR);
    let server = sandbox.server();
    let client = connect(&server.url).await;
    // Each old run has its first step completed and its second scheduled.
    let w = StepWorker::new(client.clone(), "default", "default", "e2e-worker");
    for i in 0..RUNS {
        let req = railyard_proto::v1::StartRunRequest {
            namespace: "default".into(),
            workflow_id: "pair".into(),
            goal: format!("goal {i}"),
            run_id: format!("old-{i:03}"),
            ..Default::default()
        };
        client.start_run_with(req).await.expect("start");
        let t = w
            .poll(Duration::from_secs(10))
            .await
            .expect("poll")
            .expect("a task");
        assert_eq!(t.step_id, "first");
        w.complete(&t.task_token, Completion::notes(format!("first of {i}")))
            .await
            .expect("complete");
    }

    let answered = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let (client, answered, count) = (connect(&server.url).await, answered.clone(), count.clone());
        senders.push(tokio::spawn(async move {
            for i in (s..RUNS).step_by(SENDERS) {
                match client.reset_run(reset_request(i)).await {
                    Ok(r) => {
                        assert_eq!(r.run_id, format!("new-{i:03}"));
                        answered.lock().unwrap().push(i);
                        count.fetch_add(1, SeqCst);
                    }
                    // The server was killed: the outcome of this one is unknown.
                    Err(_) => return,
                }
            }
        }));
    }
    let deadline = std::time::Instant::now() + LIMIT;
    while count.load(SeqCst) < KILL_AFTER {
        assert!(std::time::Instant::now() < deadline, "resets were not answered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let server = server.crash_and_restart();
    for s in senders {
        s.await.expect("sender");
    }
    let answered: Vec<usize> = answered.lock().unwrap().clone();
    let client = connect(&server.url).await;
    let mut applied_before = 0;
    for i in 0..RUNS {
        let done = applied(&client, i).await;
        assert!(
            done || !answered.contains(&i),
            "reset {i} was answered but is not in storage"
        );
        applied_before += usize::from(done);
    }
    assert!(applied_before >= KILL_AFTER);
    eprintln!(
        "resets answered before the kill: {}, in storage after it: {applied_before} of {RUNS}",
        answered.len()
    );

    // Sent again with the same request ids: the applied ones answer their run and make
    // nothing new; the others are applied now.
    for i in 0..RUNS {
        let was = applied(&client, i).await;
        let r = client.reset_run(reset_request(i)).await.expect("reset again");
        assert_eq!(
            (r.run_id.as_str(), r.started),
            (format!("new-{i:03}").as_str(), !was)
        );
        assert!(applied(&client, i).await);
    }
    let listed = client
        .list_runs(railyard_proto::v1::ListRunsRequest {
            namespace: "default".into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.runs.len(), 2 * RUNS, "no run made twice");
    // The new runs start at the second step: a worker sees only that.
    let w = StepWorker::new(client.clone(), "default", "later", "e2e-worker-2");
    for _ in 0..RUNS {
        let t = w
            .poll(Duration::from_secs(10))
            .await
            .expect("poll")
            .expect("a task");
        assert!(t.run_id.starts_with("new-"), "{}", t.run_id);
        assert_eq!(t.step_id, "second");
        w.complete(&t.task_token, Completion::notes("second"))
            .await
            .expect("complete");
    }
    assert!(w.poll(Duration::from_millis(300)).await.expect("poll").is_none());
}

#[test]
fn run_reset_and_rerun_print_the_new_run_and_describe_shows_the_links() {
    let sandbox = Sandbox::new();
    sandbox.workflow("pair.json", PAIR);
    let server = sandbox.server();
    ok(server.ry(&[
        "run",
        "start",
        "pair",
        "--goal",
        "g",
        "--run-id",
        "r1",
        "--context",
        "k=v",
    ]));
    // Step first is leased and completed by hand, then second fails for good.
    let task = json(server.ry(&["task", "poll", "--queue", "default", "--wait", "10", "-o", "json"]));
    let token = task["task_token"].as_str().expect("token").to_string();
    ok(server.ry(&[
        "task",
        "complete",
        &token,
        "--notes",
        "first done",
        "--context",
        "found=yes",
    ]));
    let task = json(server.ry(&["task", "poll", "--queue", "later", "--wait", "10", "-o", "json"]));
    let token = task["task_token"].as_str().expect("token").to_string();
    ok(server.ry(&[
        "task",
        "fail",
        &token,
        "--error-type",
        "broken",
        "--message",
        "down",
        "--non-retryable",
    ]));

    let out = ok(server.ry(&[
        "run",
        "reset",
        "r1",
        "--reason",
        "tool fixed",
        "--new-run-id",
        "r2",
    ]));
    assert_eq!(
        out.trim(),
        "reset run r1 as run r2: starts at step second, 1 step(s) carried over"
    );
    let described = ok(server.ry(&["run", "describe", "r2"]));
    assert!(described.contains("reset from  r1"), "{described}");
    assert!(described.contains("COMPLETED (carried)"), "{described}");
    let described = ok(server.ry(&["run", "describe", "r1"]));
    assert!(described.contains("reset to  r2"), "{described}");

    let v = json(server.ry(&[
        "run",
        "rerun",
        "r2",
        "--goal",
        "again",
        "--new-run-id",
        "r3",
        "-o",
        "json",
    ]));
    assert_eq!(v["run_id"], "r3");
    assert_eq!(v["kind"], "rerun");
    assert_eq!(v["step_id"], "first");
    assert_eq!(v["carried_steps"], 0);
    assert_eq!(v["terminated"], false, "a rerun leaves r2 open: {v}");
    let r2 = json(server.ry(&["run", "describe", "r2", "-o", "json"]));
    assert_eq!(r2["run"]["status"], "RUNNING");
    assert_eq!(r2["run"]["reset_from"], "r1");
    assert_eq!(r2["run"]["reset_to"], "r3");
    assert_eq!(r2["run"]["steps"][0]["carried"], true);
}

#[test]
fn the_mcp_gateway_resets_a_run_and_hands_over_the_new_runs_step() {
    let sandbox = Sandbox::new();
    sandbox.workflow("demo.json", include_str!("../../workflows/demo.json"));
    let server = sandbox.server();
    let mut mcp = crate::mcp::Mcp::start(&server.url);
    mcp.initialize();
    let first = mcp.tool(
        "start_workflow",
        serde_json::json!({"workflow_id": "demo", "goal": "a"}),
    );
    let first = &first["structuredContent"];
    let old = first["run_id"].as_str().expect("run id").to_string();
    let token = first["continue_token"].as_str().expect("token").to_string();
    let next = mcp.tool(
        "complete_step",
        serde_json::json!({"continue_token": token, "notes": "researched"}),
    );
    assert_eq!(next["structuredContent"]["step"]["id"], "draft", "{next}");

    let reset = mcp.tool(
        "reset_run",
        serde_json::json!({"run_id": old, "to_step": "draft", "reason": "bad prompt", "goal": "b"}),
    );
    assert_ne!(reset["isError"], serde_json::json!(true), "{reset}");
    let v = &reset["structuredContent"];
    assert_eq!(v["step"]["id"], "draft", "{v}");
    assert_eq!(v["reset"]["carried_steps"], 1);
    assert_eq!(v["reset"]["old_run_terminated"], true);
    let new = v["run_id"].as_str().expect("run id").to_string();
    assert_ne!(new, old);
    let done = mcp.tool(
        "complete_step",
        serde_json::json!({"continue_token": v["continue_token"], "notes": "drafted"}),
    );
    assert_eq!(done["structuredContent"]["step"]["id"], "review", "{done}");
    let described = json(server.ry(&["run", "describe", &old, "-o", "json"]));
    assert_eq!(described["run"]["status"], "TERMINATED");
    assert_eq!(described["run"]["reset_to"], new.as_str());
    // An unknown step is a tool error the agent can read.
    let refused = mcp.tool("reset_run", serde_json::json!({"run_id": new, "to_step": "nope"}));
    assert_eq!(refused["isError"], serde_json::json!(true), "{refused}");
    let text = refused["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("to_step") && text.contains("nope"), "{text}");
    let (status, logs) = mcp.close();
    assert!(status.success(), "{status}: {logs}");
}
