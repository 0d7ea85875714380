//! Reset and rerun over real gRPC (`History.ResetRun`, `History.RerunRun`): carried
//! steps are not run again, the old run is terminated in the same commit, children
//! follow their parent-close policy, a reset of a child and of a reset, the links
//! both ways, and the refusals.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{
    ApiKeyRole, ChildRunSpec, RerunRunRequest, ResetRunRequest, RunInfo, RunStatus, StepTask,
};
use railyard_sdk::{Client, ClientError, Completion, Failure, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

const THREE: &str = r#"{"id":"three","version":"1","name":"Three","steps":[
  {"id":"a","title":"A","prompt":"A {{goal}}"},
  {"id":"b","title":"B","prompt":"B {{goal}}"},
  {"id":"c","title":"C","prompt":"C {{goal}}"}]}"#;
const PARENT: &str = r#"{"id":"parent","version":"1","name":"Parent","steps":[
  {"id":"plan","title":"Plan","prompt":"Plan {{goal}}"},
  {"id":"sum","title":"Sum","prompt":"Sum up"}]}"#;
const HELD: &str = r#"{"id":"held","version":"1","name":"Held","steps":[
  {"id":"write","title":"Write","prompt":"Write {{goal}}","requireConfirmation":true},
  {"id":"post","title":"Post","prompt":"Post it"}]}"#;
const CHILD: &str = r#"{"id":"child","version":"1","name":"Child","taskQueue":"kids","steps":[
  {"id":"work","title":"Work","prompt":"Do {{goal}}"}]}"#;

struct Env {
    _server: RunningServer,
    client: Client,
    w: StepWorker,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn env() -> Env {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    write_workflows(workflows.path());
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (server, client) = crate::support::start(config).await;
    let w = StepWorker::new(client.clone(), "default", "default", "scripted");
    Env {
        _server: server,
        client,
        w,
        _dirs: (data, workflows),
    }
}

fn write_workflows(dir: &Path) {
    std::fs::write(dir.join("three.json"), THREE).unwrap();
    std::fs::write(dir.join("parent.json"), PARENT).unwrap();
    std::fs::write(dir.join("child.json"), CHILD).unwrap();
    std::fs::write(dir.join("held.json"), HELD).unwrap();
}

async fn poll(w: &StepWorker) -> StepTask {
    w.poll(Duration::from_secs(10)).await.unwrap().expect("a task")
}

/// Polls with a short wait, for a queue that must be empty.
async fn poll_none(w: &StepWorker) {
    if let Some(t) = w.poll(Duration::from_millis(300)).await.unwrap() {
        panic!("no task expected, got step {:?} of run {:?}", t.step_id, t.run_id);
    }
}

async fn info(client: &Client, run_id: &str) -> RunInfo {
    client
        .describe_run("default", run_id)
        .await
        .unwrap()
        .run
        .expect("the run")
}

async fn events(client: &Client, run_id: &str) -> Vec<String> {
    client
        .full_history("default", run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

fn done(notes: &str, key: &str) -> Completion {
    Completion {
        notes: notes.into(),
        artifacts: vec![format!("{notes}.md")],
        context_updates: HashMap::from([(key.to_string(), notes.to_string())]),
        result_json: format!(r#"{{"from":"{notes}"}}"#),
        ..Default::default()
    }
}

fn fatal(message: &str) -> Failure {
    Failure {
        error_type: "broken".into(),
        message: message.into(),
        non_retryable: true,
        checkpoint: Vec::new(),
    }
}

fn reset(run_id: &str, to_step: &str) -> ResetRunRequest {
    ResetRunRequest {
        namespace: "default".into(),
        run_id: run_id.into(),
        to_step: to_step.into(),
        reason: "fixed the tool".into(),
        ..Default::default()
    }
}

/// A run of `three` whose step a completed and step b failed for good.
async fn failed_at_b(e: &Env) -> String {
    let run = e
        .client
        .start_run(
            "default",
            "three",
            "the job",
            HashMap::from([("k".into(), "v".into())]),
        )
        .await
        .unwrap();
    let t = poll(&e.w).await;
    assert_eq!((t.run_id.as_str(), t.step_id.as_str()), (run.as_str(), "a"));
    e.w.complete(&t.task_token, done("a-notes", "ka")).await.unwrap();
    let t = poll(&e.w).await;
    assert_eq!(t.step_id, "b");
    e.w.fail(&t.task_token, fatal("the tool was down")).await.unwrap();
    assert_eq!(info(&e.client, &run).await.status(), RunStatus::Failed);
    run
}

#[tokio::test]
async fn a_reset_carries_the_steps_before_its_step_and_a_worker_sees_only_the_rest() {
    let e = env().await;
    let old = failed_at_b(&e).await;
    // No --to-step: the first step that failed.
    let mut req = reset(&old, "");
    req.goal = "the job, again".into();
    req.context = HashMap::from([("extra".into(), "1".into())]);
    let r = e.client.reset_run(req).await.unwrap();
    assert!(r.started);
    assert_eq!(
        (r.step_id.as_str(), r.carried_steps, r.terminated),
        ("b", 1, false)
    );
    let new = r.run_id;
    assert_ne!(new, old);

    // The scripted worker sees b and c of the new run, never a.
    let t = poll(&e.w).await;
    assert_eq!((t.run_id.as_str(), t.step_id.as_str()), (new.as_str(), "b"));
    assert_eq!(t.goal, "the job, again");
    assert_eq!(
        t.context.get("ka").map(String::as_str),
        Some("a-notes"),
        "carried context update"
    );
    assert_eq!(
        t.context.get("k").map(String::as_str),
        Some("v"),
        "the old run's context"
    );
    assert_eq!(
        t.context.get("extra").map(String::as_str),
        Some("1"),
        "the new entry"
    );
    e.w.complete(&t.task_token, Completion::notes("b done"))
        .await
        .unwrap();
    let t = poll(&e.w).await;
    assert_eq!((t.run_id.as_str(), t.step_id.as_str()), (new.as_str(), "c"));
    e.w.complete(&t.task_token, Completion::notes("c done"))
        .await
        .unwrap();
    poll_none(&e.w).await;

    let n = info(&e.client, &new).await;
    assert_eq!(n.status(), RunStatus::Completed);
    assert_eq!(n.reset_from, old);
    let a = &n.steps[0];
    assert!(a.carried);
    assert_eq!((a.state.as_str(), a.notes.as_str()), ("COMPLETED", "a-notes"));
    assert_eq!(a.result_json, r#"{"from":"a-notes"}"#);
    assert!(!n.steps[1].carried);
    let h = events(&e.client, &new).await;
    assert_eq!(
        &h[..4],
        ["RunStarted", "RunResetFrom", "StepCarried", "StepScheduled"]
    );
    assert_eq!(h.iter().filter(|t| *t == "StepStarted").count(), 2, "{h:?}");

    let o = info(&e.client, &old).await;
    assert_eq!(
        (o.status(), o.reset_to.as_str()),
        (RunStatus::Failed, new.as_str())
    );
    assert_eq!(
        events(&e.client, &old).await.last().map(String::as_str),
        Some("RunResetTo")
    );
}

#[tokio::test]
async fn a_reset_of_an_open_run_terminates_it_in_the_same_commit_and_a_refused_one_changes_nothing() {
    let e = env().await;
    let old = e
        .client
        .start_run("default", "three", "g", HashMap::new())
        .await
        .unwrap();
    let t = poll(&e.w).await;
    e.w.complete(&t.task_token, Completion::notes("a")).await.unwrap();
    let leased = poll(&e.w).await;
    assert_eq!(leased.step_id, "b");
    let before = events(&e.client, &old).await.len();

    // Refused: the new id is taken. The old run is left exactly as it was.
    let mut req = reset(&old, "b");
    req.new_run_id = old.clone();
    match e.client.reset_run(req).await {
        Err(ClientError::AlreadyExists(m)) => assert!(m.contains(&old), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(events(&e.client, &old).await.len(), before);
    assert_eq!(info(&e.client, &old).await.status(), RunStatus::Running);

    let mut req = reset(&old, "b");
    req.new_run_id = "fresh".into();
    let r = e.client.reset_run(req).await.unwrap();
    assert_eq!((r.run_id.as_str(), r.terminated), ("fresh", true));
    let o = info(&e.client, &old).await;
    assert_eq!((o.status(), o.failure.as_str()), (RunStatus::Terminated, ""));
    let h = e.client.full_history("default", &old).await.unwrap();
    let tail: Vec<_> = h[before..].iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(tail, ["RunResetTo", "RunTerminated"]);
    assert!(h.last().unwrap().attributes_json.contains("fixed the tool"));
    // Both in one commit: the old run's close and the new run's start at one time.
    let n = e.client.full_history("default", "fresh").await.unwrap();
    assert_eq!(n[0].time_unix_ms, h.last().unwrap().time_unix_ms);
    // The worker that held b lost its lease.
    let err =
        e.w.complete(&leased.task_token, Completion::notes("late"))
            .await
            .unwrap_err();
    assert!(matches!(err, ClientError::FailedPrecondition(_)), "{err}");
    let t = poll(&e.w).await;
    assert_eq!((t.run_id.as_str(), t.step_id.as_str()), ("fresh", "b"));

    // The same request id again: nothing new, the same run answered.
    let mut req = reset("fresh", "b");
    req.request_id = "once".into();
    let first = e.client.reset_run(req.clone()).await.unwrap();
    let again = e.client.reset_run(req).await.unwrap();
    assert!(first.started && !again.started);
    assert_eq!(first.run_id, again.run_id);
}

#[tokio::test]
async fn a_reset_of_a_parent_with_open_children_closes_them_by_their_policy() {
    let e = env().await;
    let parent = e
        .client
        .start_run("default", "parent", "big", HashMap::new())
        .await
        .unwrap();
    let t = poll(&e.w).await;
    let spec = |goal: &str, policy: &str| ChildRunSpec {
        workflow_id: "child".into(),
        goal: goal.into(),
        context: HashMap::new(),
        parent_close_policy: policy.into(),
    };
    let kids =
        e.w.spawn_children(
            &t.task_token,
            vec![
                spec("one", ""),
                spec("two", "terminate"),
                spec("three", "abandon"),
            ],
            true,
            vec![],
            b"transcript".to_vec(),
        )
        .await
        .unwrap();
    let r = e.client.reset_run(reset(&parent, "plan")).await.unwrap();
    assert!(r.terminated);
    assert_eq!(info(&e.client, &parent).await.status(), RunStatus::Terminated);
    assert_eq!(info(&e.client, &kids[0]).await.status(), RunStatus::Canceled);
    assert_eq!(info(&e.client, &kids[1]).await.status(), RunStatus::Terminated);
    assert_eq!(info(&e.client, &kids[2]).await.status(), RunStatus::Running);
    // The new parent starts at plan, with no children of its own.
    let t = poll(&e.w).await;
    assert_eq!(
        (t.run_id.as_str(), t.step_id.as_str()),
        (r.run_id.as_str(), "plan")
    );
    let tree = e.client.get_session_tree("default", &r.run_id).await.unwrap();
    assert!(tree.root.unwrap().children.is_empty());
}

#[tokio::test]
async fn a_reset_of_a_child_is_a_run_of_its_own_and_its_parent_hears_the_termination() {
    let e = env().await;
    let parent = e
        .client
        .start_run("default", "parent", "big", HashMap::new())
        .await
        .unwrap();
    let t = poll(&e.w).await;
    let kids =
        e.w.spawn_children(
            &t.task_token,
            vec![ChildRunSpec {
                workflow_id: "child".into(),
                goal: "one".into(),
                context: HashMap::new(),
                parent_close_policy: String::new(),
            }],
            true,
            vec![],
            b"transcript".to_vec(),
        )
        .await
        .unwrap();
    let r = e.client.reset_run(reset(&kids[0], "work")).await.unwrap();
    assert!(r.terminated);
    let n = info(&e.client, &r.run_id).await;
    assert_eq!(
        (n.parent_run_id.as_str(), n.depth, n.reset_from.as_str()),
        ("", 0, kids[0].as_str())
    );
    assert_eq!(info(&e.client, &kids[0]).await.status(), RunStatus::Terminated);
    // The parent heard of its child's close and resumes its step.
    let h = events(&e.client, &parent).await;
    assert!(h.iter().any(|t| t == "ChildRunCompleted"), "{h:?}");
    let t = poll(&e.w).await;
    assert_eq!((t.run_id.as_str(), t.step_id.as_str()), (parent.as_str(), "plan"));
    let kid_worker = StepWorker::new(e.client.clone(), "default", "kids", "kid");
    let t = poll(&kid_worker).await;
    assert_eq!(t.run_id, r.run_id);
}

#[tokio::test]
async fn a_reset_of_a_reset_carries_what_its_run_carried() {
    let e = env().await;
    let first = failed_at_b(&e).await;
    let second = e.client.reset_run(reset(&first, "")).await.unwrap().run_id;
    let t = poll(&e.w).await;
    assert_eq!((t.run_id.as_str(), t.step_id.as_str()), (second.as_str(), "b"));
    e.w.fail(&t.task_token, fatal("still down")).await.unwrap();
    let third = e.client.reset_run(reset(&second, "")).await.unwrap();
    assert_eq!((third.step_id.as_str(), third.carried_steps), ("b", 1));
    let t = poll(&e.w).await;
    assert_eq!(
        (t.run_id.as_str(), t.step_id.as_str()),
        (third.run_id.as_str(), "b")
    );
    assert_eq!(t.context.get("ka").map(String::as_str), Some("a-notes"));
    let n = info(&e.client, &third.run_id).await;
    assert_eq!(n.reset_from, second);
    assert_eq!(n.steps[0].notes, "a-notes");
    let s = info(&e.client, &second).await;
    assert_eq!(
        (s.reset_from.as_str(), s.reset_to.as_str()),
        (first.as_str(), third.run_id.as_str())
    );
}

#[tokio::test]
async fn a_rerun_starts_from_the_first_step_and_leaves_the_old_run_alone() {
    let e = env().await;
    let old = failed_at_b(&e).await;
    let r = e
        .client
        .rerun_run(RerunRunRequest {
            namespace: "default".into(),
            run_id: old.clone(),
            goal: "edited".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (r.step_id.as_str(), r.carried_steps, r.terminated),
        ("a", 0, false)
    );
    let t = poll(&e.w).await;
    assert_eq!(
        (t.run_id.as_str(), t.step_id.as_str(), t.goal.as_str()),
        (r.run_id.as_str(), "a", "edited")
    );
    assert_eq!(t.context.get("k").map(String::as_str), Some("v"));
    assert_eq!(t.context.get("ka"), None, "a rerun carries nothing");
    let o = info(&e.client, &old).await;
    assert_eq!(
        (o.status(), o.reset_to.as_str()),
        (RunStatus::Failed, r.run_id.as_str())
    );
    // A rerun of an open run leaves it open.
    let open = e
        .client
        .start_run("default", "three", "g", HashMap::new())
        .await
        .unwrap();
    let r = e
        .client
        .rerun_run(RerunRunRequest {
            namespace: "default".into(),
            run_id: open.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!r.terminated);
    assert_eq!(info(&e.client, &open).await.status(), RunStatus::Running);
}

#[tokio::test]
async fn refusals_name_what_is_wrong_and_change_nothing() {
    let e = env().await;
    let old = failed_at_b(&e).await;
    let before = events(&e.client, &old).await.len();
    match e.client.reset_run(reset(&old, "nope")).await {
        Err(ClientError::InvalidArgument(m)) => {
            assert!(
                m.starts_with("to_step:") && m.contains("nope") && m.contains("a, b, c"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    match e.client.reset_run(reset(&old, "c")).await {
        Err(ClientError::FailedPrecondition(m)) => {
            assert!(m.contains("\"b\"") && m.contains("FAILED"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    match e.client.reset_run(reset("missing", "a")).await {
        Err(ClientError::NotFound(m)) => assert!(m.contains("missing") && m.contains("default"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut wrong_ns = reset(&old, "b");
    wrong_ns.namespace = "elsewhere".into();
    match e.client.reset_run(wrong_ns).await {
        Err(ClientError::NotFound(m)) => assert!(m.contains("elsewhere"), "{m}"),
        other => panic!("{other:?}"),
    }
    // A completed run has no failed step to default to.
    let done_run = e
        .client
        .start_run("default", "three", "g", HashMap::new())
        .await
        .unwrap();
    for _ in 0..3 {
        let t = poll(&e.w).await;
        e.w.complete(&t.task_token, Completion::notes("ok"))
            .await
            .unwrap();
    }
    match e.client.reset_run(reset(&done_run, "")).await {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains("no failed step"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(events(&e.client, &old).await.len(), before);
    assert_eq!(info(&e.client, &old).await.reset_to, "");
    poll_none(&e.w).await;
}

#[tokio::test]
async fn a_client_key_may_reset_and_rerun_its_namespaces_runs_and_a_worker_key_may_not() {
    let s = crate::auth::secured().await;
    let admin = s.admin().await;
    let run = admin
        .start_run("default", "other", "g", HashMap::new())
        .await
        .unwrap();
    let (worker_key, _) = s.key("default", ApiKeyRole::Worker, &[], 0).await;
    let worker = s.client(Some(&worker_key)).await;
    match worker.reset_run(reset(&run, "a")).await {
        Err(ClientError::PermissionDenied(m)) => assert!(m.contains("reset runs"), "{m}"),
        other => panic!("{other:?}"),
    }
    let (client_key, _) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    let client = s.client(Some(&client_key)).await;
    let mut elsewhere = reset(&run, "a");
    elsewhere.namespace = "other-ns".into();
    assert!(matches!(
        client.reset_run(elsewhere).await,
        Err(ClientError::PermissionDenied(_) | ClientError::NotFound(_))
    ));
    let r = client.reset_run(reset(&run, "a")).await.unwrap();
    assert!(r.terminated);
    let rr = client
        .rerun_run(RerunRunRequest {
            namespace: "default".into(),
            run_id: r.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(rr.started);
}

#[tokio::test]
async fn a_reset_of_a_run_awaiting_approval_ends_the_hold_with_the_old_run() {
    let e = env().await;
    let old = e
        .client
        .start_run("default", "held", "g", HashMap::new())
        .await
        .unwrap();
    let t = poll(&e.w).await;
    e.w.complete(&t.task_token, Completion::notes("the draft"))
        .await
        .unwrap();
    let o = info(&e.client, &old).await;
    assert_eq!(o.waiting.map(|w| w.on), Some("approval".to_string()));
    let r = e.client.reset_run(reset(&old, "write")).await.unwrap();
    assert!(r.terminated);
    assert_eq!(info(&e.client, &old).await.status(), RunStatus::Terminated);
    let approve = railyard_proto::v1::ApproveStepRequest {
        namespace: "default".into(),
        run_id: old.clone(),
        ..Default::default()
    };
    let err = e.client.approve_step(approve).await.unwrap_err();
    assert!(matches!(err, ClientError::FailedPrecondition(_)), "{err}");
    let t = poll(&e.w).await;
    assert_eq!(
        (t.run_id.as_str(), t.step_id.as_str()),
        (r.run_id.as_str(), "write")
    );
}

/// Sixteen resets of one open run at once, each with its own request id, once made
/// sixteen open runs: now one starts, the old run is terminated once, and every
/// other answers that run.
#[tokio::test]
async fn concurrent_resets_of_one_run_make_one_live_run() {
    let e = env().await;
    let old = e
        .client
        .start_run("default", "three", "the job", HashMap::new())
        .await
        .unwrap();
    let mut calls = Vec::new();
    for i in 0..16 {
        let c = e.client.clone();
        let mut req = reset(&old, "a");
        req.request_id = format!("reset-{i}");
        calls.push(tokio::spawn(async move { c.reset_run(req).await.unwrap() }));
    }
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    let started: Vec<_> = answers.iter().filter(|r| r.started).collect();
    assert_eq!(started.len(), 1, "{answers:?}");
    let new = started[0].run_id.clone();
    assert!(answers.iter().all(|r| r.run_id == new), "{answers:?}");
    let open = e
        .client
        .list_runs(railyard_proto::v1::ListRunsRequest {
            namespace: "default".into(),
            status: RunStatus::Running as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    let open: Vec<_> = open.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(open, [new.as_str()]);
    // Once the reset run has closed, the old run may be reset again.
    e.client
        .terminate_run(railyard_proto::v1::TerminateRunRequest {
            namespace: "default".into(),
            run_id: new.clone(),
            reason: "done".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let again = e.client.reset_run(reset(&old, "a")).await.unwrap();
    assert!(again.started && again.run_id != new, "{again:?}");
}
