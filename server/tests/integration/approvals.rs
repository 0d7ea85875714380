//! Approvals over real gRPC with a `ManualClock`: a `requireConfirmation` step's
//! accepted completion is held (no lease, no task), `ApproveStep` completes it,
//! `RejectStep` re-opens it on the same transcript with the feedback, each approval
//! timeout policy, refusals that change nothing, and a hold across a restart.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{ApproveStepRequest, RejectStepRequest, RunInfo, RunStatus, StepTask};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

const DRAFT: &str = r#"{"id":"draft","version":"1","name":"Draft","steps":[
  {"id":"write","title":"Write","prompt":"Write {{goal}}","requireConfirmation":true},
  {"id":"send","title":"Send","prompt":"Send it"}]}"#;
const TIMED: &str = r#"{"id":"timed-POLICY","version":"1","name":"Timed","steps":[
  {"id":"write","title":"Write","prompt":"Write","requireConfirmation":true,
   "approval":{"timeoutSeconds":600,"onTimeout":"POLICY"FEEDBACK}}]}"#;

const T0: i64 = 1_700_000_000_000;

async fn start_at(clock: &ManualClock, data: &Path, workflows: &Path) -> (RunningServer, Client) {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(clock.clone());
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
    std::fs::write(d.workflows.path().join("draft.json"), DRAFT).unwrap();
    for (policy, feedback) in [
        ("fail", ""),
        ("approve", ""),
        ("reject", r#","feedback":"nobody looked: tighten it"#),
    ] {
        let text = TIMED.replace("POLICY", policy).replace(
            "FEEDBACK",
            &if feedback.is_empty() {
                String::new()
            } else {
                format!("{feedback}\"")
            },
        );
        std::fs::write(d.workflows.path().join(format!("timed-{policy}.json")), text).unwrap();
    }
    d
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

async fn events(client: &Client, run_id: &str) -> Vec<String> {
    client
        .full_history("default", run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

fn proposal() -> Completion {
    Completion {
        notes: "the draft".into(),
        artifacts: vec!["draft.md".into()],
        context_updates: HashMap::from([("tone".into(), "dry".into())]),
        result_json: r#"{"words":120}"#.into(),
        ..Default::default()
    }
}

/// Starts a run of `workflow`, leases its first step and holds its completion.
async fn held(client: &Client, workflow: &str) -> (String, StepWorker) {
    let run_id = client
        .start_run("default", workflow, "a note", HashMap::new())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "writer-1");
    let task = poll(&w).await;
    assert!(task.require_confirmation);
    let reply = w
        .complete_with_checkpoint(&task.task_token, proposal(), b"turn 3 transcript".to_vec(), true)
        .await
        .unwrap();
    assert!(reply.held_for_approval, "held, not completed");
    assert!(
        reply.next_task.is_none(),
        "eager dispatch hands out nothing while held"
    );
    (run_id, w)
}

fn approve(run_id: &str, step_id: &str, note: &str) -> ApproveStepRequest {
    ApproveStepRequest {
        namespace: "default".into(),
        run_id: run_id.into(),
        step_id: step_id.into(),
        note: note.into(),
        identity: "alice".into(),
    }
}

fn reject(run_id: &str, feedback: &str) -> RejectStepRequest {
    RejectStepRequest {
        namespace: "default".into(),
        run_id: run_id.into(),
        step_id: String::new(),
        feedback: feedback.into(),
        identity: "bob".into(),
    }
}

async fn until(client: &Client, run_id: &str, what: impl Fn(&RunInfo) -> bool) -> RunInfo {
    for _ in 0..250 {
        let info = run_info(client, run_id).await;
        if what(&info) {
            return info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("run {run_id} never got there: {:?}", events(client, run_id).await);
}

#[tokio::test]
async fn a_held_result_is_shown_survives_a_restart_and_an_approval_completes_the_step() {
    let clock = ManualClock::new(T0);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path()).await;
    let (run_id, w) = held(&client, "draft").await;
    let info = run_info(&client, &run_id).await;
    assert_eq!(info.status(), RunStatus::Running);
    assert_eq!(info.steps[0].state, "AWAITING_APPROVAL");
    assert_eq!(info.steps[0].notes, "", "not completed yet");
    let waiting = info.waiting.expect("waiting for approval");
    assert_eq!(waiting.on, "approval");
    assert_eq!(waiting.proposed_notes, "the draft");
    assert_eq!(waiting.proposed_artifacts, ["draft.md"]);
    assert_eq!(waiting.proposed_result_json, r#"{"words":120}"#);
    assert_eq!(
        waiting.proposed_context_updates.get("tone").map(String::as_str),
        Some("dry")
    );
    assert_eq!(waiting.proposed_by, "writer-1");
    assert_eq!((waiting.since_unix_ms, waiting.deadline_unix_ms), (T0, 0));
    // Nothing is dispatched while it waits.
    assert!(w.poll(Duration::from_millis(300)).await.unwrap().is_none());
    // Listings show the wait, without the proposal's text.
    let listed = client
        .list_runs(railyard_proto::v1::ListRunsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let summary = listed.runs[0].waiting.clone().expect("the wait in the listing");
    assert_eq!(
        (summary.on.as_str(), summary.proposed_notes.as_str()),
        ("approval", "")
    );

    // SIGKILL-like: the server goes away and comes back; the hold is intact.
    server.shutdown().await;
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path()).await;
    let info = run_info(&client, &run_id).await;
    assert_eq!(
        info.waiting.map(|w| w.proposed_notes),
        Some("the draft".to_string())
    );

    client
        .approve_step(approve(&run_id, "write", "ship it"))
        .await
        .unwrap();
    let info = run_info(&client, &run_id).await;
    assert_eq!(info.steps[0].state, "COMPLETED");
    assert_eq!(info.steps[0].notes, "the draft");
    assert_eq!(info.steps[0].result_json, r#"{"words":120}"#);
    assert_eq!(info.context.get("tone").map(String::as_str), Some("dry"));
    assert_eq!(info.current_step, 1);
    let history = client.full_history("default", &run_id).await.unwrap();
    let approved = history.iter().find(|e| e.event_type == "StepApproved").unwrap();
    assert_eq!(approved.identity, "alice");
    assert!(
        approved.attributes_json.contains(r#""note":"ship it""#),
        "{}",
        approved.attributes_json
    );
    let kinds: Vec<&str> = history.iter().map(|e| e.event_type.as_str()).collect();
    assert!(
        kinds.ends_with(&[
            "StepAwaitingApproval",
            "StepApproved",
            "StepCompleted",
            "StepScheduled"
        ]),
        "{kinds:?}"
    );
    // The next step goes on as usual and the run completes.
    let w = StepWorker::new(client.clone(), "default", "default", "writer-2");
    let next = poll(&w).await;
    assert_eq!(next.step_id, "send");
    assert_eq!(next.prior_steps[0].notes, "the draft");
    w.complete(&next.task_token, Completion::notes("sent"))
        .await
        .unwrap();
    assert_eq!(run_info(&client, &run_id).await.status(), RunStatus::Completed);
    server.shutdown().await;
}

#[tokio::test]
async fn a_rejection_reopens_the_step_on_its_transcript_with_the_feedback() {
    let clock = ManualClock::new(T0);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path()).await;
    let (run_id, w) = held(&client, "draft").await;
    clock.advance(Duration::from_secs(30));
    client
        .reject_step(reject(&run_id, "cite your sources"))
        .await
        .unwrap();
    let again = poll(&w).await;
    assert_eq!(
        (again.step_id.as_str(), again.attempt),
        ("write", 1),
        "same attempt"
    );
    assert_eq!(
        again.checkpoint, b"turn 3 transcript",
        "the transcript that proposed it"
    );
    assert_eq!(again.resume_messages.len(), 1, "{:?}", again.resume_messages);
    assert!(again.resume_messages[0].contains("cite your sources"));
    assert!(again.resume_messages[0].contains("bob"));
    let history = client.full_history("default", &run_id).await.unwrap();
    let rejected = history.iter().find(|e| e.event_type == "StepRejected").unwrap();
    assert_eq!(rejected.identity, "bob");
    let resumed = history.iter().find(|e| e.event_type == "StepResumed").unwrap();
    assert!(
        resumed.attributes_json.contains(r#""waitedMs":30000"#),
        "{}",
        resumed.attributes_json
    );
    // The revised result is held again, then approved.
    let mut revised = proposal();
    revised.notes = "the draft, with sources".into();
    let reply = w
        .complete_with_checkpoint(&again.task_token, revised, Vec::new(), false)
        .await
        .unwrap();
    assert!(reply.held_for_approval);
    client.approve_step(approve(&run_id, "", "")).await.unwrap();
    let info = run_info(&client, &run_id).await;
    assert_eq!(info.steps[0].notes, "the draft, with sources");
    assert_eq!(info.steps[0].attempt, 1);
    server.shutdown().await;
}

#[tokio::test]
async fn answers_out_of_place_are_refused_by_code_and_change_nothing() {
    let clock = ManualClock::new(T0);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path()).await;
    let run_id = client
        .start_run("default", "draft", "a note", HashMap::new())
        .await
        .unwrap();
    // Not awaiting approval yet: FAILED_PRECONDITION naming the state.
    match client.approve_step(approve(&run_id, "", "")).await {
        Err(ClientError::FailedPrecondition(m)) => {
            assert!(
                m.contains("not awaiting approval") && m.contains("SCHEDULED"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    let w = StepWorker::new(client.clone(), "default", "default", "writer-1");
    let task = poll(&w).await;
    w.complete(&task.task_token, proposal()).await.unwrap();
    let before = events(&client, &run_id).await;
    // The wrong step: INVALID_ARGUMENT.
    match client.approve_step(approve(&run_id, "send", "")).await {
        Err(ClientError::InvalidArgument(m)) => {
            assert!(m.contains("step_id") && m.contains("\"write\""), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // A rejection without feedback, a bad run id: INVALID_ARGUMENT; an unknown run: NOT_FOUND.
    match client.reject_step(reject(&run_id, "  ")).await {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains("feedback"), "{m}"),
        other => panic!("{other:?}"),
    }
    match client.reject_step(reject("no/such", "x")).await {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains("run_id"), "{m}"),
        other => panic!("{other:?}"),
    }
    match client.approve_step(approve("nobody", "", "")).await {
        Err(ClientError::NotFound(m)) => assert!(m.contains("nobody"), "{m}"),
        other => panic!("{other:?}"),
    }
    match client
        .approve_step(approve(&run_id, "", &"n".repeat(20_000)))
        .await
    {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains("note"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(events(&client, &run_id).await, before, "nothing recorded");
    // Cancel while awaiting approval closes the run at once.
    client
        .cancel_run(railyard_proto::v1::CancelRunRequest {
            namespace: "default".into(),
            run_id: run_id.clone(),
            reason: "changed my mind".into(),
            identity: "ops".into(),
        })
        .await
        .unwrap();
    assert_eq!(run_info(&client, &run_id).await.status(), RunStatus::Canceled);
    match client.approve_step(approve(&run_id, "", "")).await {
        Err(ClientError::FailedPrecondition(m)) => assert!(m.contains("CANCELED"), "{m}"),
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn each_approval_timeout_policy_is_applied_and_recorded_by_the_server() {
    let clock = ManualClock::new(T0);
    let d = dirs();
    let (server, client) = start_at(&clock, d.data.path(), d.workflows.path()).await;
    let (failing, _) = held(&client, "timed-fail").await;
    let (approving, _) = held(&client, "timed-approve").await;
    let (rejecting, w) = held(&client, "timed-reject").await;
    let info = run_info(&client, &failing).await;
    assert_eq!(info.waiting.unwrap().deadline_unix_ms, T0 + 600_000);
    clock.advance(Duration::from_secs(599));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        run_info(&client, &failing).await.steps[0].state,
        "AWAITING_APPROVAL"
    );
    clock.advance(Duration::from_secs(2));

    let info = until(&client, &failing, |r| r.status() == RunStatus::Failed).await;
    assert!(info.failure.contains("awaiting approval"), "{}", info.failure);
    let history = client.full_history("default", &failing).await.unwrap();
    let timed_out = history.iter().find(|e| e.event_type == "StepTimedOut").unwrap();
    assert_eq!(timed_out.identity, "server");
    assert!(timed_out.attributes_json.contains(r#""timeout":"WAIT""#));

    let info = until(&client, &approving, |r| r.status() == RunStatus::Completed).await;
    assert_eq!(info.steps[0].notes, "the draft");
    let history = client.full_history("default", &approving).await.unwrap();
    let approved = history.iter().find(|e| e.event_type == "StepApproved").unwrap();
    assert_eq!(approved.identity, "server");

    let info = until(&client, &rejecting, |r| r.steps[0].state == "SCHEDULED").await;
    assert_eq!(info.status(), RunStatus::Running);
    let history = client.full_history("default", &rejecting).await.unwrap();
    let rejected = history.iter().find(|e| e.event_type == "StepRejected").unwrap();
    assert_eq!(rejected.identity, "server");
    let again = poll(&w).await;
    assert!(
        again.resume_messages[0].contains("nobody looked: tighten it"),
        "{:?}",
        again.resume_messages
    );
    server.shutdown().await;
}
