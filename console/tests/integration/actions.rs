//! Each action's effect, its confirmation, a refusal shown word for word, and a form
//! without its CSRF token refused.

use std::time::Duration;

use railyard_proto::v1::{ApproveStepRequest, RunStatus};
use railyard_sdk::{Client, Completion, StepWorker};

use crate::support::Console;

async fn status(client: &Client, run: &str) -> (RunStatus, bool) {
    let info = client.describe_run("default", run).await.unwrap().run.unwrap();
    (RunStatus::try_from(info.status).unwrap(), info.paused)
}

async fn events(client: &Client, run: &str) -> Vec<String> {
    client
        .full_history("default", run)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

#[tokio::test]
async fn cancel_asks_for_confirmation_then_cancels() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    let run = console.start_run("one", "to be canceled").await;
    let mut b = console.browser();
    let csrf = b.csrf().await;
    let path = format!("/ui/runs/{run}/act/cancel?ns=default");
    let confirm = b
        .post(&path, &[("csrf", &csrf), ("text", "changed my mind")])
        .await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("Cancel run"), "{}", confirm.body);
    assert!(confirm.body.contains("name=\"confirmed\" value=\"1\""));
    assert_eq!(
        status(&client, &run).await.0,
        RunStatus::Running,
        "nothing happens before confirmation"
    );
    let done = b
        .post(
            &path,
            &[("csrf", &csrf), ("text", "changed my mind"), ("confirmed", "1")],
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("accepted the cancel request"));
    assert_eq!(done.calls(), 1);
    // No step was leased, so the cancel closes the run at once.
    assert_eq!(status(&client, &run).await.0, RunStatus::Canceled);
}

#[tokio::test]
async fn pause_unpause_steer_and_terminate_do_what_they_say() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    let run = console.start_run("one", "steered").await;
    let mut b = console.browser();
    let csrf = b.csrf().await;
    let act = |a: &str| format!("/ui/runs/{run}/act/{a}?ns=default");
    let paused = b
        .post(&act("pause"), &[("csrf", &csrf), ("confirmed", "1")])
        .await;
    assert!(paused.body.contains("paused the run"), "{}", paused.body);
    assert!(status(&client, &run).await.1);
    let again = b
        .post(&act("pause"), &[("csrf", &csrf), ("confirmed", "1")])
        .await;
    assert!(again.body.contains("paused already"));
    let unpaused = b
        .post(&act("unpause"), &[("csrf", &csrf), ("confirmed", "1")])
        .await;
    assert!(unpaused.body.contains("unpaused the run"));
    assert!(!status(&client, &run).await.1);
    let empty = b
        .post(
            &act("steer"),
            &[("csrf", &csrf), ("confirmed", "1"), ("text", " ")],
        )
        .await;
    assert_eq!(empty.status, 400);
    assert!(empty.body.contains("the message is required"));
    let steered = b
        .post(
            &act("steer"),
            &[("csrf", &csrf), ("confirmed", "1"), ("text", "focus on tests")],
        )
        .await;
    assert!(
        steered.body.contains("recorded the steer signal"),
        "{}",
        steered.body
    );
    assert!(
        events(&client, &run)
            .await
            .contains(&"SignalReceived".to_string())
    );
    let ended = b
        .post(&act("terminate"), &[("csrf", &csrf), ("confirmed", "1")])
        .await;
    assert!(ended.body.contains("terminated the run"));
    assert_eq!(status(&client, &run).await.0, RunStatus::Terminated);
}

#[tokio::test]
async fn a_refusal_is_shown_word_for_word() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    let run = console.start_run("one", "not held").await;
    let direct = client
        .approve_step(ApproveStepRequest {
            namespace: "default".into(),
            run_id: run.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .to_string();
    let mut b = console.browser();
    let csrf = b.csrf().await;
    let page = b
        .post(
            &format!("/ui/runs/{run}/act/approve?ns=default"),
            &[("csrf", &csrf), ("confirmed", "1")],
        )
        .await;
    assert_eq!(page.status, 409);
    let escaped = direct
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    assert!(page.body.contains(&escaped), "{direct:?} in {}", page.body);
}

#[tokio::test]
async fn a_form_without_its_csrf_token_is_refused_and_changes_nothing() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    let run = console.start_run("one", "kept").await;
    let mut b = console.browser();
    let _ = b.csrf().await;
    let path = format!("/ui/runs/{run}/act/terminate?ns=default");
    for csrf in ["", "0000", "not-the-token"] {
        let page = b.post(&path, &[("csrf", csrf), ("confirmed", "1")]).await;
        assert_eq!(page.status, 403, "{}", page.body);
        assert!(page.body.contains("CSRF token does not match"));
    }
    // A second browser's valid token is not this session's.
    let mut other = console.browser();
    let theirs = other.csrf().await;
    assert_eq!(
        b.post(&path, &[("csrf", &theirs), ("confirmed", "1")])
            .await
            .status,
        403
    );
    assert_eq!(status(&client, &run).await.0, RunStatus::Running);
    let start = b
        .post("/ui/runs/start", &[("workflow", "one"), ("goal", "x")])
        .await;
    assert_eq!(start.status, 403);
}

#[tokio::test]
async fn a_run_started_from_the_page_runs() {
    let console = Console::start(false).await;
    let mut b = console.browser();
    let csrf = b.csrf().await;
    let page = b
        .post(
            "/ui/runs/start?ns=default",
            &[
                ("csrf", &csrf),
                ("workflow", "one"),
                ("goal", "from the page"),
                ("context", "repo=x\nbranch = main"),
            ],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("The server started run"));
    let listed = b.get("/ui/runs?workflow=one").await;
    assert!(listed.body.contains("from the page"));
    let bad = b
        .post(
            "/ui/runs/start?ns=default",
            &[("csrf", &csrf), ("workflow", "nope"), ("goal", "x")],
        )
        .await;
    assert!(bad.status >= 400);
    assert!(bad.body.contains("refused"), "{}", bad.body);
}

#[tokio::test]
async fn approvals_inbox_approves_and_rejects_with_feedback() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    let worker = StepWorker::new(client.clone(), "default", "default", "writer-1");
    let mut runs = Vec::new();
    for goal in ["first draft", "second draft"] {
        let run = console.start_run("draft", goal).await;
        let task = worker
            .poll(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("a task");
        let reply = worker
            .complete_with_checkpoint(
                &task.task_token,
                Completion::notes(format!("proposal for {goal}")),
                b"t".to_vec(),
                true,
            )
            .await
            .unwrap();
        assert!(reply.held_for_approval);
        runs.push(run);
    }
    let mut b = console.browser();
    let inbox = b.get("/ui/approvals").await;
    assert_eq!(inbox.status, 200);
    assert!(inbox.calls() <= railyard_console::api::APPROVALS.calls);
    let first = inbox
        .body
        .find("proposal for first draft")
        .expect("the first proposal");
    let second = inbox
        .body
        .find("proposal for second draft")
        .expect("the second proposal");
    assert!(first < second, "oldest first");
    let csrf = inbox.csrf();
    let rejected = b
        .post(
            &format!("/ui/runs/{}/act/reject?ns=default", runs[0]),
            &[
                ("csrf", &csrf),
                ("confirmed", "1"),
                ("step", "write"),
                ("text", "shorter, please"),
            ],
        )
        .await;
    assert!(rejected.body.contains("rejected the step"), "{}", rejected.body);
    assert!(
        events(&client, &runs[0])
            .await
            .contains(&"StepRejected".to_string())
    );
    let approved = b
        .post(
            &format!("/ui/runs/{}/act/approve?ns=default", runs[1]),
            &[
                ("csrf", &csrf),
                ("confirmed", "1"),
                ("step", "write"),
                ("text", "good"),
            ],
        )
        .await;
    assert!(approved.body.contains("approved the step"), "{}", approved.body);
    assert!(
        events(&client, &runs[1])
            .await
            .contains(&"StepApproved".to_string())
    );
    let empty = b.get("/ui/approvals").await;
    assert!(empty.body.contains("No step awaits approval."), "{}", empty.body);
}

#[tokio::test]
async fn a_schedule_is_paused_unpaused_and_triggered_from_its_page() {
    use railyard_proto::v1::{CreateScheduleRequest, ScheduleAction, ScheduleSpec};
    let console = Console::start(false).await;
    let client = console.admin().await;
    client
        .create_schedule(CreateScheduleRequest {
            namespace: "default".into(),
            schedule_id: "nightly".into(),
            spec: Some(ScheduleSpec {
                interval: "every 24h".into(),
                ..Default::default()
            }),
            action: Some(ScheduleAction {
                workflow_id: "one".into(),
                goal: "nightly report".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut b = console.browser();
    let page = b.get("/ui/schedules").await;
    assert!(
        page.body.contains("nightly") && page.body.contains("/ui/schedules/nightly/pause"),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let confirm = b
        .post("/ui/schedules/nightly/pause?ns=default", &[("csrf", &csrf)])
        .await;
    assert!(confirm.body.contains("Pause schedule nightly?"));
    let paused = b
        .post(
            "/ui/schedules/nightly/pause?ns=default",
            &[("csrf", &csrf), ("confirmed", "1")],
        )
        .await;
    assert!(paused.body.contains("paused the schedule"), "{}", paused.body);
    let described = client.describe_schedule("default", "nightly", 0).await.unwrap();
    assert!(described.state.unwrap().paused);
    let unpaused = b
        .post(
            "/ui/schedules/nightly/unpause?ns=default",
            &[("csrf", &csrf), ("confirmed", "1")],
        )
        .await;
    assert!(unpaused.body.contains("unpaused the schedule"));
    let triggered = b
        .post(
            "/ui/schedules/nightly/trigger?ns=default",
            &[("csrf", &csrf), ("confirmed", "1")],
        )
        .await;
    assert!(
        triggered.body.contains("triggered the schedule"),
        "{}",
        triggered.body
    );
    // The fire starts its run on the scheduler's next turn; the deadline bounds a hang.
    let mut listed = false;
    for _ in 0..200 {
        if b.get("/ui/runs?workflow=one")
            .await
            .body
            .contains("nightly report")
        {
            listed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed, "the triggered run is listed");
    let refused = b
        .post(
            "/ui/schedules/nope/pause?ns=default",
            &[("csrf", &csrf), ("confirmed", "1")],
        )
        .await;
    assert_eq!(refused.status, 404);
    assert!(refused.body.contains("not found"), "{}", refused.body);
}
