//! A disk that fails under redb (`railyard_store::redb_backend::faults`): a failed
//! write or sync answers `UNAVAILABLE` and acknowledges nothing, and the server
//! recovers by itself when the disk does, with what it keeps in memory rebuilt from
//! the tables (a commit whose sync failed may be on disk all the same).

use std::sync::Arc;
use std::time::Duration;

use railyard_proto::v1::{PollStepTaskRequest, StartRunRequest};
use railyard_sdk::{Client, ClientError, ConnectOptions};
use railyard_server::ServerConfig;
use railyard_store::Store;
use railyard_store::redb_backend::RedbBackend;
use railyard_store::redb_backend::faults::DiskFaults;
use tonic::Code;

use crate::support;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"only","title":"Only","prompt":"Do {{goal}}"}]}"#;

fn start_request(request_id: &str) -> StartRunRequest {
    StartRunRequest {
        namespace: "default".into(),
        workflow_id: "one".into(),
        run_id: request_id.into(),
        goal: request_id.into(),
        task_queue: "disk".into(),
        request_id: request_id.into(),
        ..Default::default()
    }
}

fn poll() -> PollStepTaskRequest {
    PollStepTaskRequest {
        namespace: "default".into(),
        task_queue: "disk".into(),
        identity: "w".into(),
        wait_timeout_ms: 2_000,
        run_id: String::new(),
    }
}

/// Tries the start until the server takes it: a generous bound on a hang, not a
/// timing assertion (each try is refused at once while the database reopens).
async fn start_until_taken(client: &Client, request_id: &str) -> String {
    for _ in 0..200 {
        match client.start_run_with(start_request(request_id)).await {
            Ok(started) => return started.run_id,
            Err(e) => assert_eq!(e.code(), Some(Code::Unavailable), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server never recovered from the healed disk");
}

async fn leased_goals(client: &Client, n: usize) -> Vec<String> {
    let mut goals = Vec::new();
    for _ in 0..n {
        let task = client
            .poll_step_task(poll())
            .await
            .unwrap()
            .expect("a ready step");
        goals.push(task.goal);
    }
    goals.sort();
    goals
}

#[tokio::test]
async fn a_failed_sync_or_write_answers_unavailable_and_the_server_recovers_with_the_disk() {
    if !support::redb_only("disk_faults", "it injects faults into redb's file") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let faults = DiskFaults::default();
    let backend = RedbBackend::open_faulty(data.path(), &faults).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.store = Some(Store::new(Arc::new(backend)));
    let (server, _) = support::start(config).await;
    // No retries: each refusal is seen as it is.
    let client = Client::connect_with(
        &format!("http://{}", server.grpc_addr),
        ConnectOptions {
            max_attempts: 1,
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        client
            .start_run_with(start_request("before"))
            .await
            .unwrap()
            .run_id,
        "before"
    );

    // A sync fails: the start is not acknowledged. Its pages reached the file, so
    // the commit may be there when the database reopens.
    faults.fail_syncs(true);
    let refused = client.start_run_with(start_request("synced")).await.unwrap_err();
    assert_eq!(refused.code(), Some(Code::Unavailable), "{refused}");
    assert!(refused.to_string().contains("cannot be reached"), "{refused}");
    // Until the disk heals, every write is refused, and so are reads of the failed
    // database (redb refuses everything after an I/O error until it is reopened).
    let again: ClientError = client.start_run_with(start_request("other")).await.unwrap_err();
    assert_eq!(again.code(), Some(Code::Unavailable), "{again}");
    assert!(faults.injected() >= 1);

    // The disk heals: the server reopens the database by itself, and the start,
    // retried with its request id, is answered with the one run it made.
    faults.heal();
    assert_eq!(start_until_taken(&client, "synced").await, "synced");

    // A write fails (nothing reaches the file), then the disk heals.
    faults.fail_writes(true);
    let refused = client.start_run_with(start_request("written")).await.unwrap_err();
    assert_eq!(refused.code(), Some(Code::Unavailable), "{refused}");
    faults.heal();
    assert_eq!(start_until_taken(&client, "written").await, "written");

    // Exactly the acknowledged runs exist, once each, and every one's step is handed
    // out: matching was rebuilt from the tables, whichever way each commit went.
    let listed = client
        .list_runs(railyard_proto::v1::ListRunsRequest {
            namespace: "default".into(),
            page_size: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut ids: Vec<String> = listed.runs.iter().map(|r| r.run_id.clone()).collect();
    ids.sort();
    let other = ids.iter().any(|id| id == "other");
    let mut expected = vec!["before", "synced", "written"];
    if other {
        // Refused but on disk: its sync failed after its pages were written.
        expected.insert(1, "other");
    }
    assert_eq!(ids, expected);
    assert_eq!(leased_goals(&client, expected.len()).await, expected);
    server.shutdown().await;
}
