//! Batch operations over real gRPC (`Batches`): a dry run counts what the real batch
//! acts on, closed runs are skipped with the reason, each run acted on gets one
//! `BatchApplied` event naming the batch, the rate is honoured on the `ManualClock`
//! (counted, never timed), a stopped batch acts on no more runs, a batch resumes
//! after a restart of the server on the same store, and the bounds and roles.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{
    self, ApiKeyRole, BatchAction, BatchInfo, GetHistoryRequest, ListBatchesRequest, RunStatus,
    StartBatchRequest, StartBatchResponse, StopBatchRequest, TerminateRunRequest,
};
use railyard_sdk::{Client, ClientError};
use railyard_server::{RunningServer, ServerConfig};
use tonic::Code;

const ONE: &str = r#"{"id":"one","version":"1","name":"One",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;
const T0: i64 = 1_700_000_000_000;

struct Env {
    server: RunningServer,
    client: Client,
    clock: ManualClock,
    data: tempfile::TempDir,
    workflows: tempfile::TempDir,
}

async fn serve(data: &Path, workflows: &Path, clock: &ManualClock) -> (RunningServer, Client) {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(clock.clone());
    crate::support::start(config).await
}

async fn env() -> Env {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let clock = ManualClock::new(T0);
    let (server, client) = serve(data.path(), workflows.path(), &clock).await;
    Env {
        server,
        client,
        clock,
        data,
        workflows,
    }
}

async fn start_runs(client: &Client, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            client
                .start_run("default", "one", &format!("goal {i}"), HashMap::new())
                .await
                .unwrap(),
        );
    }
    ids
}

fn request(action: BatchAction, query: &str, rate: u32, dry_run: bool) -> StartBatchRequest {
    StartBatchRequest {
        namespace: "default".into(),
        action: action as i32,
        query: query.into(),
        reason: "cleanup".into(),
        rate_per_second: Some(rate),
        dry_run,
        ..Default::default()
    }
}

async fn start(client: &Client, req: StartBatchRequest) -> StartBatchResponse {
    client.start_batch(req).await.unwrap()
}

async fn describe(client: &Client, id: &str) -> v1::DescribeBatchResponse {
    client.describe_batch("default", id).await.unwrap()
}

/// Waits (in real time, without asserting on it) until the batch has reached at
/// least `n` runs or ended; answers it as it is then.
async fn reached(client: &Client, id: &str, n: u64) -> BatchInfo {
    for _ in 0..2000 {
        let b = describe(client, id).await.batch.unwrap();
        if b.reached >= n || b.state != "running" {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("batch {id} did not reach {n} runs");
}

/// The `BatchApplied` events of a run, as (batch id, action).
async fn batch_events(client: &Client, run_id: &str) -> Vec<(String, String)> {
    let h = client
        .get_history(GetHistoryRequest {
            namespace: "default".into(),
            run_id: run_id.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    h.events
        .iter()
        .filter(|e| e.event_type == "BatchApplied")
        .map(|e| {
            let v: serde_json::Value = serde_json::from_str(&e.attributes_json).unwrap();
            (
                v["batchId"].as_str().unwrap().to_string(),
                v["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn status(client: &Client, run_id: &str) -> RunStatus {
    client
        .describe_run("default", run_id)
        .await
        .unwrap()
        .run
        .unwrap()
        .status()
}

fn code(e: ClientError) -> (Code, String) {
    let c = e.code().expect("a status from the server");
    // The message after the variant's prefix (`invalid argument: `).
    let text = e.to_string();
    let message = text.split_once(": ").map_or(text.clone(), |(_, m)| m.to_string());
    (c, message)
}

#[tokio::test]
async fn a_dry_run_counts_what_the_batch_acts_on_and_closed_runs_are_skipped_with_the_reason() {
    let e = env().await;
    let ids = start_runs(&e.client, 30).await;
    for id in &ids[..5] {
        e.client
            .terminate_run(TerminateRunRequest {
                namespace: "default".into(),
                run_id: id.clone(),
                reason: "by hand".into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let query = r#"WorkflowId = "one""#;
    let dry = start(&e.client, request(BatchAction::Terminate, query, 1000, true)).await;
    assert_eq!(
        (dry.matched, dry.over_limit, dry.batch.is_none()),
        (30, false, true)
    );
    assert_eq!(dry.sample_run_ids.len(), 10);
    assert!(dry.sample_run_ids.iter().all(|id| ids.contains(id)));
    let listed = e
        .client
        .list_batches(ListBatchesRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(listed.batches.is_empty(), "a dry run stores nothing");

    let real = start(&e.client, request(BatchAction::Terminate, query, 1000, false)).await;
    let b = real.batch.unwrap();
    assert!(real.created);
    assert_eq!(
        (b.total, dry.matched),
        (30, 30),
        "the dry run counts what the batch acts on"
    );
    assert_eq!((b.state.as_str(), b.reached), ("running", 0));
    e.clock.advance(Duration::from_secs(1));
    let done = reached(&e.client, &b.batch_id, 30).await;
    assert_eq!(
        (
            done.state.as_str(),
            done.reached,
            done.succeeded,
            done.skipped,
            done.failed
        ),
        ("completed", 30, 25, 5, 0)
    );
    let d = describe(&e.client, &b.batch_id).await;
    assert_eq!(d.problems.len(), 5);
    for p in &d.problems {
        assert!(ids[..5].contains(&p.run_id));
        assert_eq!(p.outcome, "skipped");
        assert!(p.reason.contains("already TERMINATED"), "{}", p.reason);
    }
    for id in &ids[..5] {
        assert!(
            batch_events(&e.client, id).await.is_empty(),
            "a skipped run gets no event"
        );
    }
    for id in &ids[5..] {
        assert_eq!(status(&e.client, id).await, RunStatus::Terminated);
        assert_eq!(
            batch_events(&e.client, id).await,
            [(b.batch_id.clone(), "terminate".to_string())]
        );
    }
    // Starting it again (a client's retry) answers the same batch and does nothing.
    let again = start(
        &e.client,
        StartBatchRequest {
            batch_id: b.batch_id.clone(),
            ..request(BatchAction::Terminate, query, 1000, false)
        },
    )
    .await;
    assert!(!again.created);
    assert_eq!(again.batch.unwrap().succeeded, 25);
    e.server.shutdown().await;
}

#[tokio::test]
async fn the_rate_bounds_the_runs_acted_on_by_the_clock() {
    let e = env().await;
    start_runs(&e.client, 50).await;
    let b = start(
        &e.client,
        request(BatchAction::Cancel, r#"Status = "RUNNING""#, 10, false),
    )
    .await
    .batch
    .unwrap();
    assert_eq!(b.total, 50);
    // Nothing is due until the clock moves; then at most rate × elapsed runs.
    assert_eq!(describe(&e.client, &b.batch_id).await.batch.unwrap().reached, 0);
    let mut elapsed_ms = 0u64;
    for step_ms in [250u64, 750, 1000, 1500, 500, 1000] {
        e.clock.advance(Duration::from_millis(step_ms));
        elapsed_ms += step_ms;
        let allowed = (elapsed_ms * 10 / 1000).min(50);
        let now = reached(&e.client, &b.batch_id, allowed).await;
        assert_eq!(
            now.reached, allowed,
            "after {elapsed_ms} ms at 10 runs/s, exactly {allowed} runs acted on"
        );
        // Asked again: the task does not run ahead of the clock.
        let again = describe(&e.client, &b.batch_id).await.batch.unwrap();
        assert_eq!(again.reached, allowed);
    }
    let end = describe(&e.client, &b.batch_id).await.batch.unwrap();
    assert_eq!((end.state.as_str(), end.succeeded), ("completed", 50));
    e.server.shutdown().await;
}

#[tokio::test]
async fn a_stopped_batch_acts_on_no_more_runs() {
    let e = env().await;
    let ids = start_runs(&e.client, 20).await;
    let b = start(
        &e.client,
        request(BatchAction::Terminate, r#"WorkflowId = "one""#, 5, false),
    )
    .await
    .batch
    .unwrap();
    e.clock.advance(Duration::from_secs(1));
    assert_eq!(reached(&e.client, &b.batch_id, 5).await.reached, 5);
    let stop = |reason: &str| StopBatchRequest {
        namespace: "default".into(),
        batch_id: b.batch_id.clone(),
        identity: "ops".into(),
        reason: reason.into(),
    };
    let stopped = e
        .client
        .stop_batch(stop("wrong query"))
        .await
        .unwrap()
        .batch
        .unwrap();
    assert_eq!(
        (
            stopped.state.as_str(),
            stopped.reached,
            stopped.stop_reason.as_str()
        ),
        ("stopped", 5, "wrong query")
    );
    assert!(stopped.close_time_unix_ms > 0);
    e.clock.advance(Duration::from_secs(10));
    // A batch ended is answered as it is.
    let again = e.client.stop_batch(stop("twice")).await.unwrap().batch.unwrap();
    assert_eq!(
        (again.state.as_str(), again.stop_reason.as_str()),
        ("stopped", "wrong query")
    );
    let d = describe(&e.client, &b.batch_id).await.batch.unwrap();
    assert_eq!((d.reached, d.succeeded), (5, 5));
    let mut running = 0;
    for id in &ids {
        if status(&e.client, id).await == RunStatus::Running {
            running += 1;
            assert!(batch_events(&e.client, id).await.is_empty());
        }
    }
    assert_eq!(running, 15, "the runs not reached are left as they are");
    // It no longer counts against the namespace's running batches.
    let listed = e
        .client
        .list_batches(ListBatchesRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.batches.len(), 1);
    assert_eq!(listed.batches[0].state, "stopped");
    e.server.shutdown().await;
}

#[tokio::test]
async fn a_batch_goes_on_after_a_restart_and_acts_on_each_run_once() {
    let e = env().await;
    let ids = start_runs(&e.client, 40).await;
    let b = start(
        &e.client,
        request(BatchAction::Terminate, r#"WorkflowId = "one""#, 10, false),
    )
    .await
    .batch
    .unwrap();
    e.clock.advance(Duration::from_secs(2));
    assert_eq!(reached(&e.client, &b.batch_id, 20).await.reached, 20);
    e.server.shutdown().await;

    let (server, client) = serve(e.data.path(), e.workflows.path(), &e.clock).await;
    let resumed = describe(&client, &b.batch_id).await.batch.unwrap();
    assert_eq!((resumed.state.as_str(), resumed.reached), ("running", 20));
    e.clock.advance(Duration::from_secs(1));
    assert_eq!(reached(&client, &b.batch_id, 30).await.reached, 30);
    e.clock.advance(Duration::from_secs(1));
    let done = reached(&client, &b.batch_id, 40).await;
    assert_eq!((done.state.as_str(), done.succeeded), ("completed", 40));
    for id in &ids {
        assert_eq!(batch_events(&client, id).await.len(), 1, "run {id} acted on once");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn signal_rerun_and_reset_batches_record_their_outcomes() {
    let e = env().await;
    let ids = start_runs(&e.client, 3).await;
    let sig = start(
        &e.client,
        StartBatchRequest {
            signal_name: "nudge".into(),
            signal_payload_json: r#"{"n":1}"#.into(),
            ..request(BatchAction::Signal, r#"WorkflowId = "one""#, 100, false)
        },
    )
    .await
    .batch
    .unwrap();
    assert_eq!(sig.signal_name, "nudge");
    e.clock.advance(Duration::from_secs(1));
    assert_eq!(reached(&e.client, &sig.batch_id, 3).await.succeeded, 3);
    for id in &ids {
        let h = e
            .client
            .get_history(GetHistoryRequest {
                namespace: "default".into(),
                run_id: id.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let types: Vec<&str> = h.events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(&types[types.len() - 2..], ["SignalReceived", "BatchApplied"]);
    }
    // A rerun acts on closed runs too, each outcome naming its new run.
    e.client
        .terminate_run(TerminateRunRequest {
            namespace: "default".into(),
            run_id: ids[0].clone(),
            reason: "done".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let query = format!("RunId IN (\"{}\", \"{}\")", ids[0], ids[1]);
    let dry = start(&e.client, request(BatchAction::Rerun, &query, 100, true)).await;
    let rerun = start(&e.client, request(BatchAction::Rerun, &query, 100, false))
        .await
        .batch
        .unwrap();
    assert_eq!(rerun.total, dry.matched);
    e.clock.advance(Duration::from_secs(1));
    let done = reached(&e.client, &rerun.batch_id, 2).await;
    assert_eq!((done.succeeded, done.failed), (2, 0));
    for id in &ids[..2] {
        let events = batch_events(&e.client, id).await;
        assert_eq!(
            events.last(),
            Some(&(rerun.batch_id.clone(), "rerun".to_string()))
        );
        let info = e.client.describe_run("default", id).await.unwrap().run.unwrap();
        assert!(!info.reset_to.is_empty(), "linked to its rerun");
        assert_eq!(status(&e.client, &info.reset_to).await, RunStatus::Running);
    }
    // A reset to a step the workflow lacks is refused per run: failed, with the reason.
    let reset = start(
        &e.client,
        StartBatchRequest {
            to_step: "nope".into(),
            ..request(BatchAction::Reset, &format!("RunId = \"{}\"", ids[2]), 100, false)
        },
    )
    .await
    .batch
    .unwrap();
    e.clock.advance(Duration::from_secs(1));
    let failed = reached(&e.client, &reset.batch_id, 1).await;
    assert_eq!((failed.state.as_str(), failed.failed), ("completed", 1));
    let d = describe(&e.client, &reset.batch_id).await;
    assert_eq!(d.problems.len(), 1);
    assert_eq!(d.problems[0].outcome, "failed");
    assert!(d.problems[0].reason.contains("nope"), "{}", d.problems[0].reason);
    let events = batch_events(&e.client, &ids[2]).await;
    assert_eq!(events.len(), 1, "only the signal batch's: {events:?}");
    assert_eq!(status(&e.client, &ids[2]).await, RunStatus::Running);
    e.server.shutdown().await;
}

#[tokio::test]
async fn batch_requests_are_bounded_and_refusals_name_the_field() {
    let e = env().await;
    start_runs(&e.client, 2).await;
    let q = r#"WorkflowId = "one""#;
    let refused = |r: Result<StartBatchResponse, ClientError>| code(r.unwrap_err());
    let (c, m) = refused(
        e.client
            .start_batch(request(BatchAction::Cancel, q, 5000, false))
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.starts_with("rate:"), "{m}");
    // An explicit 0 is refused too (it once meant the default); unset is the default.
    let (c, m) = refused(
        e.client
            .start_batch(request(BatchAction::Cancel, q, 0, true))
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.starts_with("rate:") && m.contains("1..=1000"), "{m}");
    let unset = StartBatchRequest {
        rate_per_second: None,
        ..request(BatchAction::Cancel, q, 0, true)
    };
    assert_eq!(e.client.start_batch(unset).await.unwrap().matched, 2);
    let (c, m) = refused(
        e.client
            .start_batch(request(BatchAction::Cancel, "  ", 5, false))
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.starts_with("query:"), "{m}");
    let (c, m) = refused(
        e.client
            .start_batch(request(BatchAction::Cancel, "WorkflowId = ", 5, true))
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.starts_with("query:"), "{m}");
    let (c, m) = refused(
        e.client
            .start_batch(request(BatchAction::Unspecified, q, 5, false))
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.starts_with("action:"), "{m}");
    // At most four running at once in a namespace.
    for _ in 0..4 {
        start(&e.client, request(BatchAction::Cancel, q, 1, false)).await;
    }
    let (c, m) = refused(
        e.client
            .start_batch(request(BatchAction::Cancel, q, 1, false))
            .await,
    );
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    let (c, _) = code(e.client.describe_batch("default", "no-such").await.unwrap_err());
    assert_eq!(c, Code::NotFound);
    let listed = e
        .client
        .list_batches(ListBatchesRequest {
            namespace: "default".into(),
            page_size: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.batches.len(), 3);
    let rest = e
        .client
        .list_batches(ListBatchesRequest {
            namespace: "default".into(),
            page_size: 3,
            page_token: listed.next_page_token,
        })
        .await
        .unwrap();
    assert_eq!((rest.batches.len(), rest.next_page_token.as_str()), (1, ""));
    e.server.shutdown().await;
}

#[tokio::test]
async fn batches_need_an_admin_key_of_the_namespace() {
    let s = crate::auth::secured().await;
    let (client_key, _) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    let client = s.client(Some(&client_key)).await;
    let (c, m) = code(
        client
            .start_batch(request(BatchAction::Cancel, r#"WorkflowId = "one""#, 5, true))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, Code::PermissionDenied, "{m}");
    let (c, _) = code(client.describe_batch("default", "b").await.unwrap_err());
    assert_eq!(c, Code::PermissionDenied);
    let (ns_admin, _) = s.key("default", ApiKeyRole::Admin, &[], 0).await;
    let admin = s.client(Some(&ns_admin)).await;
    let dry = admin
        .start_batch(request(BatchAction::Cancel, r#"WorkflowId = "one""#, 5, true))
        .await
        .unwrap();
    assert_eq!(dry.matched, 0);
    s.server.shutdown().await;
}

/// A signal batch (it leaves the runs open) over `query` at `rate`.
fn signal(query: &str, rate: u32) -> StartBatchRequest {
    StartBatchRequest {
        signal_name: "nudge".into(),
        ..request(BatchAction::Signal, query, rate, false)
    }
}

#[tokio::test]
async fn a_finished_batch_past_the_batch_retention_is_purged_and_running_and_recent_ones_stay() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let clock = ManualClock::new(T0);
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.clock = Arc::new(clock.clone());
    config.purge.batch_retention_ms = 60_000;
    let (server, client) = crate::support::start(config).await;
    let ids = start_runs(&client, 100).await;
    let one = |id: &str| format!("RunId = \"{id}\"");
    let batch_id = |r: StartBatchResponse| r.batch.unwrap().batch_id;

    // Finished at T0+1s: past the retention at T0+61s.
    let old = batch_id(start(&client, signal(&one(&ids[0]), 1000)).await);
    clock.advance(Duration::from_secs(1));
    assert_eq!(reached(&client, &old, 1).await.state, "completed");
    // At one run a second, 100 runs keep it running past T0+62s.
    let running = batch_id(start(&client, signal(r#"WorkflowId = "one""#, 1)).await);
    clock.advance(Duration::from_secs(30));
    // Finished at T0+32s: within the retention at T0+62s.
    let recent = batch_id(start(&client, signal(&one(&ids[1]), 1000)).await);
    clock.advance(Duration::from_secs(1));
    assert_eq!(reached(&client, &recent, 1).await.state, "completed");

    // The purge's next sweep comes due at T0+60s.
    clock.advance(Duration::from_secs(30));
    let mut gone = false;
    for _ in 0..2000 {
        match client.describe_batch("default", &old).await {
            Err(e) => {
                assert_eq!(e.code(), Some(Code::NotFound), "{e}");
                gone = true;
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    assert!(gone, "the finished batch past the retention is purged");
    // The sweep that purged it read every batch: the others were kept on purpose.
    let listed = client
        .list_batches(ListBatchesRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut kept: Vec<(String, String)> = listed
        .batches
        .iter()
        .map(|b| (b.batch_id.clone(), b.state.clone()))
        .collect();
    kept.sort();
    let mut want = vec![
        (running.clone(), "running".to_string()),
        (recent.clone(), "completed".to_string()),
    ];
    want.sort();
    assert_eq!(kept, want);
    let r = describe(&client, &running).await.batch.unwrap();
    assert!(r.reached < r.total, "still running: {r:?}");
    server.shutdown().await;
}
