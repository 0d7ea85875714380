//! The server over real gRPC on loopback, in-process, with the client SDK.
//! Process-level tests (SIGKILL, the CLI) live in the repository's `tests/`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::{Clock, ManualClock};
use railyard_proto::v1::{self, GetHistoryRequest, ListRunsRequest, StartRunRequest};
use railyard_sdk::{Client, ClientError, Completion, Failure, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

const THREE_STEPS: &str = r#"{"id":"three","version":"1","name":"Three steps","steps":[
  {"id":"plan","title":"Plan","prompt":"Plan {{goal}} for {{context.team}}"},
  {"id":"build","title":"Build","prompt":"Build it","heartbeatTimeoutSeconds":5,
   "retry":{"maximumAttempts":3,"initialIntervalSeconds":1}},
  {"id":"ship","title":"Ship","prompt":"Ship it"}]}"#;

/// The history of a three-step run that went straight through.
const THREE_STEP_HISTORY: [&str; 11] = [
    "RunStarted",
    "StepScheduled",
    "StepStarted",
    "StepCompleted",
    "StepScheduled",
    "StepStarted",
    "StepCompleted",
    "StepScheduled",
    "StepStarted",
    "StepCompleted",
    "RunCompleted",
];

struct Harness {
    server: RunningServer,
    client: Client,
    clock: Option<ManualClock>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn start_in(data: &Path, workflows: &Path, clock: Option<ManualClock>) -> (RunningServer, Client) {
    let mut config = ServerConfig::new(data, workflows);
    if let Some(c) = &clock {
        config.clock = Arc::new(c.clone());
    }
    crate::support::start(config).await
}

async fn harness(clock: Option<ManualClock>) -> Harness {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("three.json"), THREE_STEPS).unwrap();
    std::fs::write(
        workflows.path().join("broken.json"),
        r#"{"id":"broken","version":"1","name":"B","steps":[{"id":"a"}]}"#,
    )
    .unwrap();
    let (server, client) = start_in(data.path(), workflows.path(), clock.clone()).await;
    Harness {
        server,
        client,
        clock,
        _dirs: (data, workflows),
    }
}

impl Harness {
    fn worker(&self, name: &str) -> StepWorker {
        StepWorker::new(self.client.clone(), "default", "default", name)
    }

    async fn start(&self, goal: &str) -> String {
        let ctx = HashMap::from([("team".to_string(), "infra".to_string())]);
        self.client
            .start_run("default", "three", goal, ctx)
            .await
            .unwrap()
    }

    async fn event_types(&self, run_id: &str) -> Vec<String> {
        let events = self.client.full_history("default", run_id).await.unwrap();
        events.into_iter().map(|e| e.event_type).collect()
    }
}

async fn poll(w: &StepWorker) -> v1::StepTask {
    w.poll(Duration::from_secs(5)).await.unwrap().expect("a task")
}

#[tokio::test]
async fn a_three_step_run_goes_to_completion_with_a_full_history() {
    let h = harness(None).await;
    let run_id = h.start("the launch").await;
    let w = h.worker("w1");
    let first = poll(&w).await;
    assert_eq!(
        (first.step_id.as_str(), first.attempt, first.step_count),
        ("plan", 1, 3)
    );
    assert_eq!(first.prompt, "Plan the launch for infra");
    let done = Completion {
        notes: "planned".into(),
        context_updates: HashMap::from([("plan".to_string(), "p1".to_string())]),
        ..Default::default()
    };
    w.complete(&first.task_token, done).await.unwrap();
    let second = poll(&w).await;
    assert_eq!(second.step_id, "build");
    assert_eq!(second.prior_steps[0].notes, "planned");
    assert_eq!(second.context.get("plan").map(String::as_str), Some("p1"));
    w.complete(&second.task_token, Completion::notes("built"))
        .await
        .unwrap();
    let third = poll(&w).await;
    w.complete(&third.task_token, Completion::notes("shipped"))
        .await
        .unwrap();

    let types = h.event_types(&run_id).await;
    assert_eq!(types, THREE_STEP_HISTORY);
    let events = h.client.full_history("default", &run_id).await.unwrap();
    assert!(
        events.iter().enumerate().all(|(i, e)| e.event_id == i as u64 + 1),
        "numbered from 1 without gaps"
    );
    let started: serde_json::Value = serde_json::from_str(&events[2].attributes_json).unwrap();
    assert_eq!(started["worker"], "w1");
    let run = h
        .client
        .describe_run("default", &run_id)
        .await
        .unwrap()
        .run
        .unwrap();
    assert_eq!(run.status(), v1::RunStatus::Completed);
    assert_eq!(
        run.steps.iter().map(|s| s.notes.as_str()).collect::<Vec<_>>(),
        ["planned", "built", "shipped"]
    );
    h.server.shutdown().await;
}

#[tokio::test]
async fn start_is_idempotent_on_request_id_and_run_ids_are_unique() {
    let h = harness(None).await;
    let req = StartRunRequest {
        workflow_id: "three".into(),
        goal: "g".into(),
        request_id: "req-1".into(),
        run_id: "my-run".into(),
        ..Default::default()
    };
    let a = h.client.start_run_with(req.clone()).await.unwrap();
    let b = h.client.start_run_with(req.clone()).await.unwrap();
    assert_eq!((a.run_id.as_str(), a.started), ("my-run", true));
    assert_eq!((b.run_id.as_str(), b.started), ("my-run", false));
    let again = StartRunRequest {
        request_id: "req-2".into(),
        ..req
    };
    assert!(matches!(
        h.client.start_run_with(again).await,
        Err(ClientError::AlreadyExists(_))
    ));
    assert_eq!(h.event_types("my-run").await.len(), 2);
    h.server.shutdown().await;
}

#[tokio::test]
async fn a_parked_poll_is_woken_by_a_new_run_and_history_waits_and_streams() {
    let h = harness(None).await;
    let w = h.worker("w1");
    let parked = tokio::spawn(async move { w.poll(Duration::from_secs(30)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let run_id = h.start("wake").await;
    let task = parked
        .await
        .unwrap()
        .unwrap()
        .expect("the parked poll gets the new task");
    assert_eq!(task.run_id, run_id);

    let client = h.client.clone();
    let id = run_id.clone();
    let waiting = tokio::spawn(async move {
        client
            .get_history(GetHistoryRequest {
                namespace: "default".into(),
                run_id: id,
                from_event_id: 4,
                wait_timeout_ms: 30_000,
                ..Default::default()
            })
            .await
    });
    let mut stream = h.client.watch_run("default", &run_id, 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.worker("w1")
        .complete(&task.task_token, Completion::notes("n"))
        .await
        .unwrap();
    let page = waiting.await.unwrap().unwrap();
    assert_eq!(page.events[0].event_type, "StepCompleted");
    let mut seen = Vec::new();
    while seen.len() < 5 {
        seen.push(stream.message().await.unwrap().unwrap().event_type);
    }
    assert_eq!(
        seen,
        [
            "RunStarted",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "StepScheduled"
        ]
    );
    // An empty poll at its deadline.
    let empty = h.worker("w2");
    let other = StepWorker::new(h.client.clone(), "default", "nobody-polls-here", "w2");
    assert!(other.poll(Duration::from_millis(50)).await.unwrap().is_none());
    drop(empty);
    h.server.shutdown().await;
}

#[tokio::test]
async fn forged_stale_and_foreign_tokens_are_refused_and_change_nothing() {
    let h = harness(None).await;
    let run_a = h.start("a").await;
    let w = h.worker("w1");
    let task_a = poll(&w).await;
    let run_b = h.start("b").await;
    let task_b = poll(&w).await;
    assert_eq!(
        (task_a.run_id.as_str(), task_b.run_id.as_str()),
        (run_a.as_str(), run_b.as_str())
    );
    let before_a = h.event_types(&run_a).await;

    // A flipped byte anywhere in the token.
    for i in [0, task_a.task_token.len() / 2, task_a.task_token.len() - 1] {
        let mut bytes = task_a.task_token.clone().into_bytes();
        bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
        let forged = String::from_utf8(bytes).unwrap();
        let r = w.complete(&forged, Completion::notes("forged")).await;
        assert!(
            matches!(r, Err(ClientError::PermissionDenied(_))),
            "byte {i}: {r:?}"
        );
    }
    // Run B's signature on run A's payload.
    let (payload_a, _) = task_a.task_token.split_once('.').unwrap();
    let (_, sig_b) = task_b.task_token.split_once('.').unwrap();
    let spliced = format!("{payload_a}.{sig_b}");
    assert!(matches!(
        w.complete(&spliced, Completion::notes("x")).await,
        Err(ClientError::PermissionDenied(_))
    ));
    // An old attempt's token: fail attempt 1 so attempt 2 is scheduled, then reuse it.
    assert!(
        w.fail(
            &task_a.task_token,
            Failure {
                error_type: "flaky".into(),
                ..Default::default()
            }
        )
        .await
        .unwrap()
    );
    let r = w.complete(&task_a.task_token, Completion::notes("late")).await;
    assert!(matches!(r, Err(ClientError::FailedPrecondition(_))), "{r:?}");
    let r = w
        .heartbeat(&task_a.task_token)
        .checkpoint(b"cp".to_vec())
        .send()
        .await;
    assert!(matches!(r, Err(ClientError::FailedPrecondition(_))), "{r:?}");
    let mut after_a = before_a.clone();
    after_a.push("StepFailed".into());
    assert_eq!(
        h.event_types(&run_a).await,
        after_a,
        "only the genuine failure was recorded"
    );
    // Run B is untouched by all of it, and its own token still works.
    w.complete(&task_b.task_token, Completion::notes("ok"))
        .await
        .unwrap();
    assert!(matches!(
        w.complete(&task_b.task_token, Completion::notes("replay")).await,
        Err(ClientError::FailedPrecondition(_))
    ));
    h.server.shutdown().await;
}

#[tokio::test]
async fn an_expired_lease_goes_to_the_next_attempt_with_the_checkpoint() {
    let clock = ManualClock::new(1_700_000_000_000);
    let h = harness(Some(clock)).await;
    let clock = h.clock.clone().unwrap();
    let run_id = h.start("lease").await;
    let (w1, w2) = (h.worker("w1"), h.worker("w2"));
    let plan = poll(&w1).await;
    w1.complete(&plan.task_token, Completion::notes("p"))
        .await
        .unwrap();
    let build = poll(&w1).await;
    assert_eq!(
        (build.step_id.as_str(), build.heartbeat_timeout_ms),
        ("build", 5000)
    );
    w1.heartbeat(&build.task_token)
        .checkpoint(b"turn 3 transcript".to_vec())
        .send()
        .await
        .unwrap();
    // w1 goes silent. Past the heartbeat deadline, the step times out and backs off 1 s.
    clock.advance(Duration::from_secs(6));
    let mut types = Vec::new();
    for _ in 0..100 {
        types = h.event_types(&run_id).await;
        if types.last().map(String::as_str) == Some("StepTimedOut") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(types.last().map(String::as_str), Some("StepTimedOut"));
    clock.advance(Duration::from_secs(1));
    let retry = poll(&w2).await;
    assert_eq!((retry.step_id.as_str(), retry.attempt), ("build", 2));
    assert_eq!(retry.checkpoint, b"turn 3 transcript");
    assert!(retry.last_failure.contains("timed out"), "{}", retry.last_failure);
    let late = w1.complete(&build.task_token, Completion::notes("late")).await;
    assert!(
        matches!(late, Err(ClientError::FailedPrecondition(_))),
        "{late:?}"
    );
    w2.complete(&retry.task_token, Completion::notes("built"))
        .await
        .unwrap();
    let events = h.client.full_history("default", &run_id).await.unwrap();
    let completed: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == "StepCompleted")
        .collect();
    assert_eq!(completed.len(), 2);
    assert!(completed[1].attributes_json.contains("\"notes\":\"built\""));
    assert!(clock.now_ms() > 0);
    h.server.shutdown().await;
}

#[tokio::test]
async fn bad_input_gets_clear_errors() {
    let h = harness(None).await;
    let c = &h.client;
    let start = |w: &str, goal: String| StartRunRequest {
        workflow_id: w.into(),
        goal,
        ..Default::default()
    };
    let e = c.start_run_with(start("nope", "g".into())).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::NotFound(m) if m.contains("workflow \"nope\" not found")),
        "{e}"
    );
    let e = c.start_run_with(start("", "g".into())).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::InvalidArgument(m) if m.starts_with("workflow_id")),
        "{e}"
    );
    let e = c
        .start_run_with(start("three", "x".repeat(100_000)))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::InvalidArgument(m) if m.starts_with("goal")),
        "{e}"
    );
    for (policy, wanted) in [(1, "not supported yet"), (9, "unknown value 9")] {
        let req = StartRunRequest {
            id_reuse_policy: policy,
            ..start("three", "g".into())
        };
        let e = c.start_run_with(req).await.unwrap_err();
        assert!(
            matches!(&e, ClientError::InvalidArgument(m) if m.contains("id_reuse_policy") && m.contains(wanted)),
            "{e}"
        );
    }
    let bad_ns = StartRunRequest {
        namespace: "elsewhere".into(),
        ..start("three", "g".into())
    };
    assert!(
        matches!(c.start_run_with(bad_ns).await, Err(ClientError::NotFound(m)) if m.contains("namespace"))
    );
    let poller = StepWorker::new(c.clone(), "elsewhere", "default", "w");
    assert!(
        matches!(poller.poll(Duration::from_millis(10)).await, Err(ClientError::NotFound(m)) if m.contains("namespace"))
    );
    let poller = StepWorker::new(c.clone(), "default", "", "w");
    assert!(
        matches!(poller.poll(Duration::from_millis(10)).await, Err(ClientError::InvalidArgument(m)) if m.starts_with("task_queue"))
    );
    assert!(matches!(
        c.describe_run("default", "missing").await,
        Err(ClientError::NotFound(_))
    ));
    let page = ListRunsRequest {
        page_token: "garbage".into(),
        ..Default::default()
    };
    assert!(
        matches!(c.list_runs(page).await, Err(ClientError::InvalidArgument(m)) if m.starts_with("page_token"))
    );
    let w = h.worker("w");
    assert!(matches!(
        w.complete("", Completion::default()).await,
        Err(ClientError::InvalidArgument(_))
    ));
    assert!(matches!(
        w.complete("not-a-token", Completion::default()).await,
        Err(ClientError::PermissionDenied(_))
    ));
    let wf = c.list_workflows("default").await.unwrap();
    assert_eq!(
        wf.workflows.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(),
        ["three"]
    );
    assert_eq!(wf.invalid.len(), 1);
    assert!(
        wf.invalid[0]
            .error
            .contains("broken.json: steps[0]: missing field `title`"),
        "{}",
        wf.invalid[0].error
    );
    // Nothing above created a run.
    assert!(
        c.list_runs(ListRunsRequest::default())
            .await
            .unwrap()
            .runs
            .is_empty()
    );
    h.server.shutdown().await;
}

#[tokio::test]
async fn list_runs_filters_and_pages() {
    let h = harness(None).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(h.start(&format!("g{i}")).await);
    }
    h.client
        .terminate_run(v1::TerminateRunRequest {
            run_id: ids[0].clone(),
            reason: "r".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = h
            .client
            .list_runs(ListRunsRequest {
                page_size: 2,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        seen.extend(page.runs.into_iter().map(|r| r.run_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected, "newest first, every run once");
    let running = ListRunsRequest {
        status: v1::RunStatus::Running as i32,
        ..Default::default()
    };
    assert_eq!(h.client.list_runs(running).await.unwrap().runs.len(), 4);
    let terminated = ListRunsRequest {
        status: v1::RunStatus::Terminated as i32,
        ..Default::default()
    };
    assert_eq!(
        h.client.list_runs(terminated).await.unwrap().runs[0].run_id,
        ids[0]
    );
    let other = ListRunsRequest {
        workflow_id: "other".into(),
        ..Default::default()
    };
    assert!(h.client.list_runs(other).await.unwrap().runs.is_empty());
    h.server.shutdown().await;
}

#[tokio::test]
async fn signals_and_cancellation_reach_the_worker() {
    let h = harness(None).await;
    let run_id = h.start("steerable").await;
    let w = h.worker("w1");
    let task = poll(&w).await;
    let signal = v1::SignalRunRequest {
        run_id: run_id.clone(),
        signal_name: "steer".into(),
        payload_json: "\"focus on tests\"".into(),
        ..Default::default()
    };
    h.client.signal_run(signal.clone()).await.unwrap();
    let bad = v1::SignalRunRequest {
        payload_json: "{nope".into(),
        ..signal
    };
    assert!(
        matches!(h.client.signal_run(bad).await, Err(ClientError::InvalidArgument(m)) if m.starts_with("payload_json"))
    );
    let hb = w.heartbeat(&task.task_token).send().await.unwrap();
    assert_eq!(hb.signals.len(), 1);
    assert_eq!(hb.signals[0].payload_json, "\"focus on tests\"");
    let hb = w
        .heartbeat(&task.task_token)
        .ack_signals(hb.signals[0].event_id)
        .send()
        .await
        .unwrap();
    assert!(hb.signals.is_empty() && !hb.cancel_requested);
    h.client
        .cancel_run(v1::CancelRunRequest {
            run_id: run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let hb = w.heartbeat(&task.task_token).send().await.unwrap();
    assert!(hb.cancel_requested);
    let f = Failure {
        error_type: "canceled".into(),
        ..Default::default()
    };
    assert!(!w.fail(&task.task_token, f).await.unwrap());
    let run = h
        .client
        .describe_run("default", &run_id)
        .await
        .unwrap()
        .run
        .unwrap();
    assert_eq!(run.status(), v1::RunStatus::Canceled);
    h.server.shutdown().await;
}

#[tokio::test]
async fn ready_tasks_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("three.json"), THREE_STEPS).unwrap();
    let (server, client) = start_in(data.path(), workflows.path(), None).await;
    let run_id = client
        .start_run("default", "three", "g", HashMap::new())
        .await
        .unwrap();
    server.shutdown().await;
    let (server, client) = start_in(data.path(), workflows.path(), None).await;
    let w = StepWorker::new(client, "default", "default", "w");
    let task = poll(&w).await;
    assert_eq!(task.run_id, run_id);
    w.complete(&task.task_token, Completion::notes("after restart"))
        .await
        .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_run_started_on_a_queue_is_served_there_and_keeps_it_over_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("three.json"), THREE_STEPS).unwrap();
    let (server, client) = start_in(data.path(), workflows.path(), None).await;
    let bad = client
        .start_run_with(StartRunRequest {
            namespace: "default".into(),
            workflow_id: "three".into(),
            task_queue: "no spaces".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("task_queue"), "{bad}");
    let run_id = client
        .start_run_with(StartRunRequest {
            namespace: "default".into(),
            workflow_id: "three".into(),
            task_queue: "gateway-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .run_id;
    let on_default = StepWorker::new(client.clone(), "default", "default", "w");
    assert!(
        on_default
            .poll(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none()
    );
    let w = StepWorker::new(client, "default", "gateway-1", "w");
    let task = poll(&w).await;
    assert_eq!(
        (task.run_id.as_str(), task.step_id.as_str()),
        (run_id.as_str(), "plan")
    );
    w.complete(&task.task_token, Completion::notes("planned"))
        .await
        .unwrap();
    server.shutdown().await;
    let (server, client) = start_in(data.path(), workflows.path(), None).await;
    let w = StepWorker::new(client.clone(), "default", "gateway-1", "w");
    let task = poll(&w).await;
    assert_eq!(
        (task.run_id.as_str(), task.step_id.as_str()),
        (run_id.as_str(), "build")
    );
    let run = client
        .describe_run("default", &run_id)
        .await
        .unwrap()
        .run
        .unwrap();
    assert!(
        run.steps.iter().all(|s| s.task_queue == "gateway-1"),
        "{:?}",
        run.steps
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_backlog_counts_only_tasks_still_ready() {
    let h = harness(None).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(h.start(&format!("queued {n}")).await);
    }
    let backlog = || async {
        h.client
            .describe_task_queue("default", "default")
            .await
            .unwrap()
            .backlog
    };
    assert_eq!(backlog().await, 3);
    h.client
        .cancel_run(v1::CancelRunRequest {
            run_id: ids[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    h.client
        .terminate_run(v1::TerminateRunRequest {
            run_id: ids[1].clone(),
            reason: "not needed".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(backlog().await, 1);
    let task = poll(&h.worker("w")).await;
    assert_eq!(task.run_id, ids[2]);
    assert_eq!(backlog().await, 0);
    h.server.shutdown().await;
}

/// Lease deadlines are kept in memory and derived again from the open runs at start:
/// a lease taken before a restart still expires after it.
#[tokio::test]
async fn a_lease_taken_before_a_restart_still_expires() {
    let clock = ManualClock::new(1_700_000_000_000);
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("three.json"), THREE_STEPS).unwrap();
    let (server, client) = start_in(data.path(), workflows.path(), Some(clock.clone())).await;
    let run_id = client
        .start_run("default", "three", "g", HashMap::new())
        .await
        .unwrap();
    let w1 = StepWorker::new(client, "default", "default", "w1");
    let plan = poll(&w1).await;
    w1.complete(&plan.task_token, Completion::notes("p"))
        .await
        .unwrap();
    let build = poll(&w1).await;
    w1.heartbeat(&build.task_token)
        .checkpoint(b"before restart".to_vec())
        .send()
        .await
        .unwrap();
    server.shutdown().await;

    let (server, client) = start_in(data.path(), workflows.path(), Some(clock.clone())).await;
    clock.advance(Duration::from_secs(6));
    let w2 = StepWorker::new(client.clone(), "default", "default", "w2");
    let poll_retry = tokio::spawn(async move { poll(&w2).await });
    // Give the timer loop time to fire the deadline; its 1 s backoff then passes too.
    let mut types = Vec::new();
    for _ in 0..100 {
        let events = client.full_history("default", &run_id).await.unwrap();
        types = events.into_iter().map(|e| e.event_type).collect();
        if types.iter().any(|t| t == "StepTimedOut") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        types.last().map(String::as_str),
        Some("StepTimedOut"),
        "{types:?}"
    );
    clock.advance(Duration::from_secs(1));
    let retry = poll_retry.await.unwrap();
    assert_eq!((retry.step_id.as_str(), retry.attempt), ("build", 2));
    assert_eq!(retry.checkpoint, b"before restart");
    server.shutdown().await;
}

#[tokio::test]
async fn eager_dispatch_hands_the_next_step_to_the_completing_worker() {
    let h = harness(None).await;
    let run_id = h.start("eager").await;
    let w = h.worker("w1");
    let plan = poll(&w).await;
    let build = w
        .complete_and_take_next(&plan.task_token, Completion::notes("p"))
        .await
        .unwrap()
        .expect("next step");
    assert_eq!(
        (build.step_id.as_str(), build.attempt, build.run_id.as_str()),
        ("build", 1, run_id.as_str())
    );
    assert_eq!(build.prior_steps[0].notes, "p");
    // The eagerly leased step never sat in the queue: nobody else can poll it.
    let other = h.worker("w2");
    assert!(other.poll(Duration::from_millis(50)).await.unwrap().is_none());
    assert_eq!(
        h.client
            .describe_task_queue("default", "default")
            .await
            .unwrap()
            .backlog,
        0
    );
    let ship = w
        .complete_and_take_next(&build.task_token, Completion::notes("b"))
        .await
        .unwrap()
        .expect("next step");
    assert!(
        w.complete_and_take_next(&ship.task_token, Completion::notes("s"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(h.event_types(&run_id).await, THREE_STEP_HISTORY);
    h.server.shutdown().await;
}

#[tokio::test]
async fn health_and_reflection_are_served() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
    };

    let h = harness(None).await;
    let url = format!("http://{}", h.server.grpc_addr);
    let channel = tonic::transport::Channel::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["railyard.v1.History", "railyard.v1.Tasks"] {
        let req = tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        };
        let status = health.check(req).await.unwrap().into_inner().status();
        assert_eq!(status, ServingStatus::Serving, "{service}");
    }
    let mut reflection = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer {answer:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for service in ["History", "Tasks", "Schedules", "Batches", "Triggers", "Admin"] {
        assert!(
            names.contains(&format!("railyard.v1.{service}").as_str()),
            "{names:?}"
        );
    }
    // A service's file names the file of the shared messages it imports, and that
    // one is served by its name too: a client can resolve every type of its methods.
    let mut files = async |request: MessageRequest| {
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        };
        let mut answers = reflection
            .server_reflection_info(tokio_stream::iter([req]))
            .await
            .unwrap()
            .into_inner();
        let answer = answers.message().await.unwrap().unwrap();
        let Some(MessageResponse::FileDescriptorResponse(files)) = answer.message_response else {
            panic!("unexpected reflection answer {answer:?}");
        };
        files
            .file_descriptor_proto
            .iter()
            .map(|bytes| {
                <prost_types::FileDescriptorProto as prost::Message>::decode(bytes.as_slice()).unwrap()
            })
            .collect::<Vec<_>>()
    };
    let admin = files(MessageRequest::FileContainingSymbol("railyard.v1.Admin".into())).await;
    assert_eq!(admin[0].name(), "railyard/v1/admin.proto");
    assert_eq!(admin[0].dependency, ["railyard/v1/common.proto"]);
    let common = files(MessageRequest::FileByFilename("railyard/v1/common.proto".into())).await;
    assert!(common[0].message_type.iter().any(|m| m.name() == "RunInfo"));
    let run_info = files(MessageRequest::FileContainingSymbol("railyard.v1.RunInfo".into())).await;
    assert_eq!(run_info[0].name(), "railyard/v1/common.proto");
    h.server.shutdown().await;
}

#[tokio::test]
async fn a_run_keeps_the_definition_it_started_with() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("three.json"), THREE_STEPS).unwrap();
    let (server, client) = start_in(data.path(), workflows.path(), None).await;
    let ctx = HashMap::from([("team".to_string(), "infra".to_string())]);
    let run_id = client.start_run("default", "three", "g", ctx).await.unwrap();
    server.shutdown().await;
    // Edit the file: one step, another prompt. The run in flight must not notice.
    let edited = THREE_STEPS.replace("Plan {{goal}} for {{context.team}}", "Something else entirely");
    let edited = edited.replace(r#""version":"1""#, r#""version":"2""#);
    std::fs::write(workflows.path().join("three.json"), edited).unwrap();
    let (server, client) = start_in(data.path(), workflows.path(), None).await;
    let w = StepWorker::new(client.clone(), "default", "default", "w");
    let task = poll(&w).await;
    assert_eq!(
        (task.run_id.as_str(), task.prompt.as_str()),
        (run_id.as_str(), "Plan g for infra")
    );
    let described = client.describe_run("default", &run_id).await.unwrap();
    assert_eq!(described.run.unwrap().workflow_version, "1");
    let fresh = client
        .start_run("default", "three", "g", HashMap::new())
        .await
        .unwrap();
    assert_eq!(
        client
            .describe_run("default", &fresh)
            .await
            .unwrap()
            .run
            .unwrap()
            .workflow_version,
        "2"
    );
    server.shutdown().await;
}

/// Reads a counter from `/metrics` over a plain HTTP/1.0 request.
fn metric(http_addr: std::net::SocketAddr, name: &str) -> f64 {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(http_addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
}

// Multi-threaded: `metric` blocks on a socket the server must answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_share_commits() {
    let h = harness(None).await;
    let commits_before = metric(h.server.http_addr, "railyard_commits_total");
    let mut starts = tokio::task::JoinSet::new();
    for i in 0..300 {
        let client = h.client.clone();
        starts.spawn(async move {
            client
                .start_run("default", "three", &format!("g{i}"), HashMap::new())
                .await
        });
    }
    while let Some(r) = starts.join_next().await {
        r.unwrap().unwrap();
    }
    let commits = metric(h.server.http_addr, "railyard_commits_total") - commits_before;
    let started = metric(h.server.http_addr, "railyard_runs_started_total");
    assert_eq!(started, 300.0);
    assert!(
        commits < 300.0,
        "300 acknowledged starts took {commits} commits: no group commit"
    );
    h.server.shutdown().await;
}

#[tokio::test]
async fn odd_ranges_and_cursors_do_not_upset_the_server() {
    let h = harness(None).await;
    let run_id = h.start("g").await;
    let inverted = ListRunsRequest {
        started_after_unix_ms: 200,
        started_before_unix_ms: 100,
        ..Default::default()
    };
    let r = h.client.list_runs(inverted).await;
    assert!(
        matches!(&r, Err(ClientError::InvalidArgument(m)) if m.starts_with("started_before_unix_ms")),
        "{r:?}"
    );
    let old_cursor = ListRunsRequest {
        page_token: "5:zzz".into(),
        started_after_unix_ms: 10,
        ..Default::default()
    };
    assert!(h.client.list_runs(old_cursor).await.unwrap().runs.is_empty());
    let far = GetHistoryRequest {
        namespace: "default".into(),
        run_id: run_id.clone(),
        from_event_id: u64::MAX,
        ..Default::default()
    };
    assert!(h.client.get_history(far).await.unwrap().events.is_empty());
    assert!(
        h.client.describe_run("default", &run_id).await.is_ok(),
        "the server still answers"
    );
    h.server.shutdown().await;
}
