//! Child runs and waiting steps over real gRPC: a step starts children under its
//! task token and waits for them holding no lease; their outcomes resume it on the
//! same attempt; limits, parent-close policies, wait timeouts and a restart while
//! waiting.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::ChildLimits;
use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{ChildRunSpec, ListRunsRequest, RunInfo, RunStatus, StepTask};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

const PARENT: &str = r#"{"id":"parent","version":"1","name":"Parent","steps":[
  {"id":"plan","title":"Plan","prompt":"Plan {{goal}}","wait":{"timeoutSeconds":600}},
  {"id":"sum","title":"Sum","prompt":"Sum up"}]}"#;
const CHILD: &str = r#"{"id":"child","version":"1","name":"Child","taskQueue":"kids","steps":[
  {"id":"work","title":"Work","prompt":"Do {{goal}}"}]}"#;
/// A child whose last step has an output contract.
const JUDGE: &str = r#"{"id":"judge","version":"1","name":"Judge","taskQueue":"kids","steps":[
  {"id":"read","title":"Read","prompt":"Read {{goal}}"},
  {"id":"rule","title":"Rule","prompt":"Rule on {{goal}}","output":{"type":"object",
   "properties":{"verdict":{"enum":["ok","bad"]},"score":{"type":"integer"}},
   "required":["verdict","score"],"additionalProperties":false}}]}"#;

async fn start_at(
    clock: &ManualClock,
    data: &Path,
    workflows: &Path,
    limits: ChildLimits,
) -> (RunningServer, Client) {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(clock.clone());
    config.child_limits = limits;
    crate::support::start(config).await
}

struct Dirs {
    data: tempfile::TempDir,
    workflows: tempfile::TempDir,
}

fn dirs() -> Dirs {
    let d = Dirs {
        data: tempfile::tempdir().unwrap(),
        workflows: tempfile::tempdir().unwrap(),
    };
    std::fs::write(d.workflows.path().join("parent.json"), PARENT).unwrap();
    std::fs::write(d.workflows.path().join("child.json"), CHILD).unwrap();
    std::fs::write(d.workflows.path().join("judge.json"), JUDGE).unwrap();
    d
}

fn child(goal: &str, policy: &str) -> ChildRunSpec {
    ChildRunSpec {
        workflow_id: "child".into(),
        goal: goal.into(),
        context: HashMap::new(),
        parent_close_policy: policy.into(),
    }
}

async fn poll(w: &StepWorker) -> StepTask {
    w.poll(Duration::from_secs(10)).await.unwrap().expect("a task")
}

async fn run_info(client: &Client, run_id: &str) -> RunInfo {
    client
        .describe_run("default", run_id)
        .await
        .unwrap()
        .run
        .expect("the run")
}

async fn status(client: &Client, run_id: &str) -> RunStatus {
    run_info(client, run_id).await.status()
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

/// Starts a parent run and leases its first step.
async fn parent_leased(client: &Client) -> (String, StepTask, StepWorker) {
    let run_id = client
        .start_run("default", "parent", "the big job", HashMap::new())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "parent-worker");
    let task = poll(&w).await;
    assert_eq!(task.run_id, run_id);
    (run_id, task, w)
}

#[tokio::test]
async fn a_parent_waits_for_two_children_without_a_lease_and_resumes_with_their_outcomes_after_a_restart() {
    let clock = ManualClock::new(1_700_000_000_000);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let (parent, task, w) = parent_leased(&client).await;
    let ids = w
        .spawn_children(
            &task.task_token,
            vec![child("left", ""), child("right", "abandon")],
            true,
            vec![],
            b"transcript so far".to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    // The lease is over: the old token reports nothing.
    let err = w
        .complete(&task.task_token, Completion::notes("too late"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::FailedPrecondition(_)), "{err}");
    let info = run_info(&client, &parent).await;
    assert_eq!(info.steps[0].state, "WAITING");
    let waiting = info.waiting.expect("the wait");
    assert_eq!((waiting.on.as_str(), &waiting.run_ids), ("children", &ids));
    assert_eq!(waiting.since_unix_ms, 1_700_000_000_000);
    assert_eq!(waiting.deadline_unix_ms, 1_700_000_000_000 + 600_000);
    let kid = run_info(&client, &ids[0]).await;
    assert_eq!(
        (kid.parent_run_id.as_str(), kid.parent_step_id.as_str(), kid.depth),
        (parent.as_str(), "plan", 1)
    );
    let tree = client.get_session_tree("default", &parent).await.unwrap();
    assert_eq!(tree.root.expect("the root").children.len(), 2);

    // The server dies while the parent waits; the wait is intact after the restart.
    server.shutdown().await;
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let info = run_info(&client, &parent).await;
    assert!(info.waiting.is_some(), "still waiting after a restart");

    let kids = StepWorker::new(client.clone(), "default", "kids", "kid-worker");
    let first = poll(&kids).await;
    let mut done = Completion::notes(format!("did {}", first.goal));
    done.artifacts = vec![format!("{}.md", first.goal)];
    kids.complete(&first.task_token, done).await.unwrap();
    assert!(run_info(&client, &parent).await.waiting.is_some());
    let second = poll(&kids).await;
    // A failed child is an outcome, not a crash of the parent.
    let failure = railyard_sdk::Failure {
        error_type: "fatal".into(),
        message: "no can do".into(),
        non_retryable: true,
        checkpoint: vec![],
    };
    kids.fail(&second.task_token, failure).await.unwrap();

    let w = StepWorker::new(client.clone(), "default", "default", "another-worker");
    let resumed = poll(&w).await;
    assert_eq!(
        (resumed.run_id.as_str(), resumed.step_id.as_str()),
        (parent.as_str(), "plan")
    );
    assert_eq!(resumed.attempt, 1, "a resume is not a new attempt");
    assert_eq!(resumed.checkpoint, b"transcript so far");
    assert_eq!(resumed.resume_messages.len(), 1);
    let msg = &resumed.resume_messages[0];
    let body: serde_json::Value = serde_json::from_str(msg.split_once('\n').unwrap().1).unwrap();
    let children = body["children"].as_array().unwrap();
    assert_eq!(children.len(), 2);
    assert_eq!(
        children[0]["childRunId"],
        ids[0].as_str(),
        "in the order started: {msg}"
    );
    assert_eq!(children[0]["outcome"], "COMPLETED");
    assert_eq!(children[0]["notes"], "did left");
    assert_eq!(children[0]["artifacts"][0], "left.md");
    assert_eq!(children[1]["outcome"], "FAILED");
    assert!(children[1]["notes"].as_str().unwrap().contains("no can do"));

    let history = events(&client, &parent).await;
    let wanted = [
        "ChildRunStarted",
        "ChildRunStarted",
        "StepWaiting",
        "ChildRunCompleted",
        "ChildRunCompleted",
        "StepResumed",
        "StepScheduled",
        "StepStarted",
    ];
    assert!(history.ends_with(&wanted.map(String::from)), "{history:?}");
    let kid_history = client.full_history("default", &ids[0]).await.unwrap();
    let started: serde_json::Value = serde_json::from_str(&kid_history[0].attributes_json).unwrap();
    assert_eq!(
        (
            started["parentRunId"].as_str(),
            started["parentStepId"].as_str(),
            started["depth"].as_u64()
        ),
        (Some(parent.as_str()), Some("plan"), Some(1))
    );

    // The resumed step finishes the run as usual.
    let next = w
        .complete_and_take_next(&resumed.task_token, Completion::notes("planned"))
        .await
        .unwrap()
        .expect("the next step");
    w.complete(&next.task_token, Completion::notes("summed"))
        .await
        .unwrap();
    assert_eq!(status(&client, &parent).await, RunStatus::Completed);
    server.shutdown().await;
}

#[tokio::test]
async fn past_the_depth_or_child_count_limit_a_spawn_is_refused_readably_and_starts_nothing() {
    let clock = ManualClock::new(1_700_000_000_000);
    let d = dirs();
    let limits = ChildLimits {
        max_depth: 1,
        max_children: 2,
    };
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), limits).await;
    let (parent, task, w) = parent_leased(&client).await;
    let err = w
        .spawn_children(
            &task.task_token,
            vec![child("a", ""), child("b", ""), child("c", "")],
            true,
            vec![],
            vec![],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::ResourceExhausted(_)), "{err}");
    assert!(err.to_string().contains("limit of 2 per run"), "{err}");
    let none = client
        .list_runs(ListRunsRequest {
            namespace: "default".into(),
            parent_run_id: parent.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.runs.is_empty(), "a refused spawn starts nothing");
    assert!(
        !events(&client, &parent)
            .await
            .contains(&"ChildRunStarted".to_string())
    );

    // Two are fine, without waiting: their ids come back and the lease stays.
    let ids = w
        .spawn_children(
            &task.task_token,
            vec![child("a", ""), child("b", "")],
            false,
            vec![],
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    w.heartbeat(&task.task_token).send().await.unwrap();
    // A child may not spawn past depth 1.
    let kids = StepWorker::new(client.clone(), "default", "kids", "kid-worker");
    let kid = poll(&kids).await;
    let err = kids
        .spawn_children(
            &kid.task_token,
            vec![child("grandchild", "")],
            true,
            vec![],
            vec![],
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("depth 2") && err.to_string().contains("limit of 1"),
        "{err}"
    );
    // Waiting on a run that is not one's child is refused, naming it.
    let err = w
        .spawn_children(&task.task_token, vec![], true, vec![parent.clone()], vec![])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::InvalidArgument(_)) && err.to_string().contains("await_run_ids"),
        "{err}"
    );
    // await_runs on the two: one closed already, the other later.
    kids.complete(&kid.task_token, Completion::notes("first done"))
        .await
        .unwrap();
    w.spawn_children(&task.task_token, vec![], true, ids.clone(), vec![])
        .await
        .unwrap();
    assert!(run_info(&client, &parent).await.waiting.is_some());
    let kid = poll(&kids).await;
    kids.complete(&kid.task_token, Completion::notes("second done"))
        .await
        .unwrap();
    let resumed = poll(&w).await;
    assert!(
        resumed.resume_messages[0].contains("first done")
            && resumed.resume_messages[0].contains("second done")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn closing_a_parent_cancels_or_terminates_its_children_and_leaves_abandoned_ones() {
    let clock = ManualClock::new(1_700_000_000_000);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let (parent, task, w) = parent_leased(&client).await;
    let ids = w
        .spawn_children(
            &task.task_token,
            vec![
                child("c", "cancel"),
                child("t", "terminate"),
                child("a", "abandon"),
                child("busy", "cancel"),
            ],
            false,
            vec![],
            vec![],
        )
        .await
        .unwrap();
    // The last child's step is leased: a cancel only asks its worker to stop.
    let kids = StepWorker::new(client.clone(), "default", "kids", "kid-worker");
    let mut busy = None;
    for _ in 0..4 {
        let t = poll(&kids).await;
        if t.goal == "busy" {
            busy = Some(t);
            break;
        }
        // The others go back to backing off (the clock stands still), unleased.
        kids.fail(
            &t.task_token,
            railyard_sdk::Failure {
                error_type: "again".into(),
                message: "later".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    let busy = busy.expect("the busy child leased");
    w.spawn_children(&task.task_token, vec![], true, ids.clone(), vec![])
        .await
        .unwrap();
    client
        .cancel_run(railyard_proto::v1::CancelRunRequest {
            namespace: "default".into(),
            run_id: parent.clone(),
            reason: "enough".into(),
            identity: "ops".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        status(&client, &parent).await,
        RunStatus::Canceled,
        "a waiting run closes at once"
    );
    assert_eq!(status(&client, &ids[0]).await, RunStatus::Canceled);
    assert_eq!(status(&client, &ids[1]).await, RunStatus::Terminated);
    assert_eq!(status(&client, &ids[2]).await, RunStatus::Running, "abandoned");
    assert_eq!(
        status(&client, &ids[3]).await,
        RunStatus::Running,
        "canceled when its worker stops"
    );
    let hb = kids.heartbeat(&busy.task_token).send().await.unwrap();
    assert!(hb.cancel_requested);
    assert!(
        !events(&client, &parent)
            .await
            .contains(&"ChildRunCompleted".to_string()),
        "a closed parent records nothing more"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_wait_that_times_out_fails_the_step_by_its_policy() {
    let clock = ManualClock::new(1_700_000_000_000);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let (parent, task, w) = parent_leased(&client).await;
    let ids = w
        .spawn_children(&task.task_token, vec![child("slow", "")], true, vec![], vec![])
        .await
        .unwrap();
    clock.advance(Duration::from_secs(599));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(status(&client, &parent).await, RunStatus::Running);
    clock.advance(Duration::from_secs(2));
    let mut failed = false;
    for _ in 0..200 {
        if status(&client, &parent).await == RunStatus::Failed {
            failed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(failed, "the wait timed out: {:?}", events(&client, &parent).await);
    let history = client.full_history("default", &parent).await.unwrap();
    let timed_out = history.iter().find(|e| e.event_type == "StepTimedOut").unwrap();
    assert!(
        timed_out.attributes_json.contains(r#""timeout":"WAIT""#),
        "{}",
        timed_out.attributes_json
    );
    // Its child had the default policy: canceled with it.
    assert_eq!(status(&client, &ids[0]).await, RunStatus::Canceled);
    server.shutdown().await;
}

#[tokio::test]
async fn a_paused_run_suspends_its_step_at_the_next_heartbeat_and_resumes_from_the_checkpoint() {
    use railyard_proto::v1::{PauseRunRequest, UnpauseRunRequest};
    let clock = ManualClock::new(1_700_000_000_000);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let (parent, task, w) = parent_leased(&client).await;
    // A child that is still queued is paused with its parent.
    let ids = w
        .spawn_children(&task.task_token, vec![child("queued", "")], false, vec![], vec![])
        .await
        .unwrap();
    let pause = PauseRunRequest {
        namespace: "default".into(),
        run_id: parent.clone(),
        reason: "overnight".into(),
        identity: "ops".into(),
    };
    assert!(client.pause_run(pause.clone()).await.unwrap());
    assert!(!client.pause_run(pause).await.unwrap(), "already paused");
    let kid = run_info(&client, &ids[0]).await;
    assert!(
        kid.paused && kid.waiting.as_ref().is_some_and(|w| w.on == "unpause"),
        "{kid:?}"
    );
    let kids = StepWorker::new(client.clone(), "default", "kids", "kid-worker");
    assert!(
        kids.poll(Duration::from_millis(200)).await.unwrap().is_none(),
        "nothing dispatched"
    );

    // The step in flight learns of it on its heartbeat, and suspends with its checkpoint.
    let hb = w
        .heartbeat(&task.task_token)
        .checkpoint(b"turn 3".to_vec())
        .send()
        .await
        .unwrap();
    assert!(hb.pause_requested && !hb.cancel_requested);
    let suspended = railyard_sdk::Failure {
        error_type: "paused".into(),
        message: "paused".into(),
        non_retryable: false,
        checkpoint: b"turn 4".to_vec(),
    };
    assert!(
        !w.fail(&task.task_token, suspended).await.unwrap(),
        "no retry: a suspension"
    );
    let info = run_info(&client, &parent).await;
    assert_eq!(
        (info.status(), info.paused, info.steps[0].state.as_str()),
        (RunStatus::Running, true, "WAITING")
    );
    assert!(w.poll(Duration::from_millis(200)).await.unwrap().is_none());

    let unpause = UnpauseRunRequest {
        namespace: "default".into(),
        run_id: parent.clone(),
        identity: "ops".into(),
    };
    assert!(client.unpause_run(unpause).await.unwrap());
    let resumed = poll(&w).await;
    assert_eq!((resumed.run_id.as_str(), resumed.attempt), (parent.as_str(), 1));
    assert_eq!(
        resumed.checkpoint, b"turn 4",
        "from the checkpoint, not from scratch"
    );
    assert!(resumed.resume_messages[0].contains("unpaused"));
    assert_eq!(poll(&kids).await.run_id, ids[0], "the child was unpaused too");
    let history = events(&client, &parent).await;
    for t in ["RunPaused", "StepWaiting", "RunUnpaused", "StepResumed"] {
        assert!(history.contains(&t.to_string()), "{t} in {history:?}");
    }
    assert!(!history.contains(&"StepFailed".to_string()), "{history:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_childs_structured_result_reaches_its_parents_resume_message_and_history() {
    let clock = ManualClock::new(1_700_000_000_000);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let (parent, task, w) = parent_leased(&client).await;
    let mut judge = child("the case", "");
    judge.workflow_id = "judge".into();
    let ids = w
        .spawn_children(
            &task.task_token,
            vec![judge, child("plain", "")],
            true,
            vec![],
            vec![],
        )
        .await
        .unwrap();
    let kids = StepWorker::new(client.clone(), "default", "kids", "kid-worker");
    for _ in 0..2 {
        let t = poll(&kids).await;
        let mut done = Completion::notes(format!("{} done", t.step_id));
        if t.step_id == "read" {
            // An earlier step's result is not the child's result: its last step's is.
            done.result_json = r#"{"pages":3}"#.into();
        }
        let next = kids.complete_and_take_next(&t.task_token, done).await.unwrap();
        if let Some(rule) = next {
            assert_eq!(rule.step_id, "rule");
            let mut done = Completion::notes("ruled");
            done.result_json = r#"{"verdict":"ok","score":7}"#.into();
            kids.complete(&rule.task_token, done).await.unwrap();
        }
    }

    let resumed = poll(&w).await;
    assert_eq!(resumed.run_id, parent);
    let msg = &resumed.resume_messages[0];
    let body: serde_json::Value = serde_json::from_str(msg.split_once('\n').unwrap().1).unwrap();
    let children = body["children"].as_array().unwrap();
    assert_eq!(children[0]["childRunId"], ids[0].as_str());
    assert_eq!(children[0]["notes"], "ruled");
    assert_eq!(
        children[0]["result"],
        serde_json::json!({"verdict":"ok","score":7}),
        "{msg}"
    );
    assert_eq!(children[1]["result"], serde_json::Value::Null, "no result: null");

    let history = client.full_history("default", &parent).await.unwrap();
    let completed: Vec<serde_json::Value> = history
        .iter()
        .filter(|e| e.event_type == "ChildRunCompleted")
        .map(|e| serde_json::from_str(&e.attributes_json).unwrap())
        .collect();
    assert_eq!(completed.len(), 2);
    let judged = completed
        .iter()
        .find(|c| c["childRunId"] == ids[0].as_str())
        .unwrap();
    assert_eq!(judged["result"], serde_json::json!({"verdict":"ok","score":7}));
    let plain = completed
        .iter()
        .find(|c| c["childRunId"] == ids[1].as_str())
        .unwrap();
    assert!(plain.get("result").is_none(), "{plain}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_keyed_spawn_repeated_answers_the_same_children_and_starts_none() {
    let clock = ManualClock::new(1_700_000_000_000);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let (parent, task, w) = parent_leased(&client).await;
    let two = || vec![child("a", ""), child("b", "")];
    let first = w.spawn_keyed(&task.task_token, two(), "k1".into()).await.unwrap();
    // The same request again (a lost answer, or a step resumed before it journaled
    // the ids): the same run ids, and no new child.
    let again = w.spawn_keyed(&task.task_token, two(), "k1".into()).await.unwrap();
    assert_eq!(first, again);
    let started = |evs: Vec<String>| evs.iter().filter(|e| *e == "ChildRunStarted").count();
    let kids_of = |parent: String| {
        let client = client.clone();
        async move {
            client
                .list_runs(ListRunsRequest {
                    namespace: "default".into(),
                    parent_run_id: parent,
                    ..Default::default()
                })
                .await
                .unwrap()
                .runs
                .len()
        }
    };
    assert_eq!(kids_of(parent.clone()).await, 2);
    let once = started(events(&client, &parent).await);
    // Another request id starts other children.
    let other = w.spawn_keyed(&task.task_token, two(), "k2".into()).await.unwrap();
    assert!(other.iter().all(|id| !first.contains(id)), "{other:?} {first:?}");
    assert_eq!(kids_of(parent.clone()).await, 4);
    assert!(started(events(&client, &parent).await) > once);
    // A repeat naming more children than the first is refused, naming the field.
    let err = w
        .spawn_keyed(
            &task.task_token,
            vec![child("a", ""), child("b", ""), child("c", "")],
            "k1".into(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::InvalidArgument(_)) && err.to_string().contains("request_id"),
        "{err}"
    );
    assert_eq!(kids_of(parent.clone()).await, 4);
    // A repeat after a restart answers the same children too.
    server.shutdown().await;
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path(), ChildLimits::default()).await;
    let w = StepWorker::new(client.clone(), "default", "default", "parent-worker");
    let after = w.spawn_keyed(&task.task_token, two(), "k1".into()).await.unwrap();
    assert_eq!(after, first);
    server.shutdown().await;
}
