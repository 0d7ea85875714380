//! Run-specific polls (`PollStepTaskRequest.run_id`), what the MCP gateway uses to
//! lease the step of the run it drives: only that run's step is leased, other runs'
//! tasks stay ready, and a step still leased elsewhere is taken once its lease ends.

use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{PollStepTaskRequest, StartRunRequest};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

use crate::support;

const TWO_STEPS: &str = r#"{"id":"two","version":"1","name":"Two","steps":[
  {"id":"draft","title":"Draft","prompt":"Draft {{goal}}","heartbeatTimeoutSeconds":5,
   "retry":{"maximumAttempts":3,"initialIntervalSeconds":1}},
  {"id":"review","title":"Review","prompt":"Review it"}]}"#;

async fn start(clock: &ManualClock) -> (RunningServer, Client, (tempfile::TempDir, tempfile::TempDir)) {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("two.json"), TWO_STEPS).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.clock = Arc::new(clock.clone());
    let (server, client) = support::start(config).await;
    (server, client, (data, workflows))
}

async fn start_on(client: &Client, queue: &str, goal: &str) -> String {
    client
        .start_run_with(StartRunRequest {
            namespace: "default".into(),
            workflow_id: "two".into(),
            goal: goal.into(),
            task_queue: queue.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .run_id
}

fn poll_run(queue: &str, run_id: &str, wait_ms: u32) -> PollStepTaskRequest {
    PollStepTaskRequest {
        namespace: "default".into(),
        task_queue: queue.into(),
        identity: "gateway".into(),
        wait_timeout_ms: wait_ms,
        run_id: run_id.into(),
    }
}

#[tokio::test]
async fn a_run_specific_poll_leases_only_that_run_and_leaves_the_others_ready() {
    let clock = ManualClock::new(1_700_000_000_000);
    let (server, client, _dirs) = start(&clock).await;
    let first = start_on(&client, "gw", "first").await;
    let second = start_on(&client, "gw", "second").await;

    let task = client
        .poll_step_task(poll_run("gw", &second, 5_000))
        .await
        .unwrap()
        .expect("the second run's step");
    assert_eq!(
        (task.run_id.as_str(), task.step_id.as_str()),
        (second.as_str(), "draft")
    );
    assert_eq!(task.goal, "second");
    let queue = client.describe_task_queue("default", "gw").await.unwrap();
    assert_eq!(queue.backlog, 1, "the first run's task is still ready");

    // The same run again: its step is leased, so nothing comes within the wait.
    let none = client.poll_step_task(poll_run("gw", &second, 300)).await.unwrap();
    assert!(none.is_none(), "{none:?}");
    // Another queue holds nothing of the first run.
    let elsewhere = client
        .poll_step_task(poll_run("other", &first, 100))
        .await
        .unwrap();
    assert!(elsewhere.is_none());

    // An ordinary poll of the queue gets the first run, untouched.
    let w = StepWorker::new(client.clone(), "default", "gw", "w");
    let plain = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    assert_eq!(plain.run_id, first);

    // Eager dispatch still works for the run-specific lease's holder.
    let next = w
        .complete_and_take_next(&task.task_token, Completion::notes("drafted"))
        .await
        .unwrap()
        .expect("the next step, eagerly");
    assert_eq!(
        (next.run_id.as_str(), next.step_id.as_str()),
        (second.as_str(), "review")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_run_specific_poll_waits_for_an_expired_lease_and_takes_the_retry() {
    let clock = ManualClock::new(1_700_000_000_000);
    let (server, client, _dirs) = start(&clock).await;
    let run_id = start_on(&client, "gw", "resume me").await;
    let dead = client
        .poll_step_task(poll_run("gw", &run_id, 5_000))
        .await
        .unwrap()
        .expect("leased");

    // A new gateway asks for the run while the dead one's lease still stands.
    let waiting = tokio::spawn({
        let client = client.clone();
        let run_id = run_id.clone();
        async move { client.poll_step_task(poll_run("gw", &run_id, 30_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the step is still leased");
    // Past the heartbeat deadline the step times out; after the 1 s backoff it is ready.
    clock.advance(Duration::from_secs(6));
    let mut timed_out = false;
    for _ in 0..200 {
        let events = client.full_history("default", &run_id).await.unwrap();
        if events.iter().any(|e| e.event_type == "StepTimedOut") {
            timed_out = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(timed_out);
    clock.advance(Duration::from_secs(1));
    let resumed = waiting.await.unwrap().unwrap().expect("the retry");
    assert_eq!(
        (resumed.run_id.as_str(), resumed.step_id.as_str(), resumed.attempt),
        (run_id.as_str(), "draft", 2)
    );
    let late = client
        .complete_step_task(railyard_proto::v1::CompleteStepTaskRequest {
            task_token: dead.task_token,
            notes: "late".into(),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(late, Err(ClientError::FailedPrecondition(_))),
        "{late:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn run_specific_polls_of_closed_unknown_and_malformed_runs() {
    let clock = ManualClock::new(1_700_000_000_000);
    let (server, client, _dirs) = start(&clock).await;
    let run_id = start_on(&client, "gw", "closed").await;
    client
        .terminate_run(railyard_proto::v1::TerminateRunRequest {
            namespace: "default".into(),
            run_id: run_id.clone(),
            reason: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // A closed run has nothing to lease: the answer comes at once, empty.
    let closed = client
        .poll_step_task(poll_run("gw", &run_id, 60_000))
        .await
        .unwrap();
    assert!(closed.is_none());
    let unknown = client
        .poll_step_task(poll_run("gw", "no-such-run", 1_000))
        .await
        .unwrap_err();
    assert!(matches!(unknown, ClientError::NotFound(_)), "{unknown:?}");
    let malformed = client
        .poll_step_task(poll_run("gw", "not a run id", 1_000))
        .await
        .unwrap_err();
    assert!(malformed.to_string().contains("run_id"), "{malformed}");
    server.shutdown().await;
}
