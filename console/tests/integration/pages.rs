//! Each page's HTML.

use std::time::Duration;

use railyard_sdk::{Completion, StepWorker};

use crate::support::Console;

#[tokio::test]
async fn the_runs_page_lists_filters_and_pages() {
    let console = Console::start(false).await;
    for i in 0..55 {
        console.start_run("one", &format!("goal {i}")).await;
    }
    let draft = console.start_run("draft", "a draft").await;
    let mut b = console.browser();
    let page = b.get("/ui/runs").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.calls(), 1);
    assert!(
        page.body.contains("hx-trigger=\"every 3s\""),
        "the first page refreshes itself"
    );
    assert!(page.body.contains("Next page"));
    assert_eq!(
        page.body.matches("<tr>").count(),
        1 + 50,
        "a header and a page of runs"
    );
    // The next page, by the server's token.
    let at = page.body.find("&amp;page=").unwrap() + 10;
    let token = page.body[at..].split('"').next().unwrap();
    let second = b.get(&format!("/ui/runs?ns=default&page={token}")).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body.matches("<tr>").count(), 1 + 6);
    assert!(!second.body.contains("hx-trigger"), "later pages stay put");
    // Filters in the URL.
    let filtered = b.get("/ui/runs?ns=default&workflow=draft&status=running").await;
    assert_eq!(filtered.body.matches("<tr>").count(), 2);
    assert!(filtered.body.contains(&draft));
    let queried = b
        .get("/ui/runs?ns=default&q=WorkflowId%20%3D%20%22draft%22%20AND%20Status%20%3D%20%22RUNNING%22")
        .await;
    assert_eq!(queried.body.matches("<tr>").count(), 2, "{}", queried.body);
    assert!(queried.body.contains(&draft));
    let with_issues = b.get("/ui/runs?ns=default&issues=1").await;
    assert!(
        with_issues.body.contains("No runs match."),
        "no agent reported an issue"
    );
    let unparsed = b.get("/ui/runs?ns=default&q=Status%20%3D%3D").await;
    assert_ne!(unparsed.status, 200, "{}", unparsed.body);
    assert!(unparsed.body.contains("column"), "{}", unparsed.body);
    let none = b.get("/ui/runs?ns=default&status=completed").await;
    assert!(none.body.contains("No runs match."));
    let after = b.get("/ui/runs?ns=default&after=2100-01-01T00:00").await;
    assert!(after.body.contains("No runs match."));
    let bad = b.get("/ui/runs?ns=default&status=sleeping").await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body.contains("status &quot;sleeping&quot; is not one of"),
        "{}",
        bad.body
    );
    let bad = b.get("/ui/runs?ns=default&before=yesterday").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("before &quot;yesterday&quot; is not a time"));
    // The fragment htmx polls is the table alone.
    let fragment = b.get("/ui/runs?ns=default&fragment=1").await;
    assert!(
        fragment.body.starts_with("<div id=\"runs\""),
        "{}",
        &fragment.body[..80]
    );
}

#[tokio::test]
async fn the_runs_page_filters_by_words_of_the_goal_kept_in_the_url() {
    let console = Console::start(false).await;
    let flaky = console.start_run("one", "Fix the flaky test in CI").await;
    let docs = console.start_run("draft", "Review the docs").await;
    console.start_run("one", "Review PR #42").await;
    let mut b = console.browser();
    let page = b.get("/ui/runs?ns=default&goal=FLAKY").await;
    assert_eq!((page.status, page.calls()), (200, 1));
    assert_eq!(page.body.matches("<tr>").count(), 2, "{}", page.body);
    assert!(page.body.contains(&flaky));
    assert!(
        page.body.contains(r#"name="goal" value="FLAKY""#),
        "the form shows the filter"
    );
    // Kept in the refresh's URL, with the other filters and a query ANDed.
    assert!(page.body.contains("goal=FLAKY"), "{}", page.body);
    let both = b
        .get("/ui/runs?ns=default&goal=the&q=WorkflowId%20%3D%20%22draft%22%20ORDER%20BY%20StartTime%20DESC")
        .await;
    assert_eq!(both.body.matches("<tr>").count(), 2, "{}", both.body);
    assert!(both.body.contains(&docs));
    let words = b
        .get("/ui/runs?ns=default&goal=review%2C%20docs&status=running")
        .await;
    assert_eq!(
        words.body.matches("<tr>").count(),
        2,
        "every word: {}",
        words.body
    );
    assert!(words.body.contains(&docs));
    let none = b.get("/ui/runs?ns=default&goal=flak").await;
    assert!(none.body.contains("No runs match."), "a word matches whole");
    let bad = b.get("/ui/runs?ns=default&goal=%3F%21").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("holds no word"), "{}", bad.body);
}

#[tokio::test]
async fn the_run_page_shows_the_header_waterfall_steps_and_history() {
    let console = Console::start(false).await;
    let run = console.start_run("one", "count the stars").await;
    let client = console.admin().await;
    let worker = StepWorker::new(client.clone(), "default", "default", "worker-1");
    let task = worker
        .poll(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a task");
    let mut b = console.browser();
    let open = b.get(&format!("/ui/runs/{run}")).await;
    assert_eq!(open.status, 200, "{}", open.body);
    assert!(open.calls() <= railyard_console::api::RUN.calls);
    assert!(open.body.contains("count the stars"));
    assert!(
        open.body.contains("class=\"running\""),
        "the waterfall shows the running attempt"
    );
    assert!(
        open.body.contains("hx-trigger=\"every 3s\""),
        "an open run refreshes itself"
    );
    assert!(open.body.contains("/act/cancel"));
    worker
        .complete(
            &task.task_token,
            Completion {
                notes: "found 12 stars".into(),
                result_json: r#"{"stars":12}"#.into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let done = b.get(&format!("/ui/runs/{run}")).await;
    assert!(done.body.contains("status-completed"));
    assert!(done.body.contains("found 12 stars"));
    assert!(done.body.contains("&quot;stars&quot;:12") || done.body.contains("{&quot;stars&quot;:12}"));
    assert!(done.body.contains("StepCompleted"));
    assert!(done.body.contains("RunCompleted"));
    assert!(!done.body.contains("hx-trigger"), "a closed run stays put");
    assert!(!done.body.contains("/act/cancel"), "no actions on a closed run");
    let fragment = b.get(&format!("/ui/runs/{run}?fragment=1")).await;
    assert!(fragment.body.starts_with("<div id=\"live\""));
    assert_eq!(fragment.calls(), 2);
    let missing = b.get("/ui/runs/no-such-run").await;
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("not found"), "{}", missing.body);
}

#[tokio::test]
async fn the_system_pages_render() {
    let console = Console::start(false).await;
    console.start_run("one", "x").await;
    let mut b = console.browser();
    for (path, expect) in [
        ("/ui/workflows", "draft"),
        ("/ui/queues", "default"),
        ("/ui/schedules", "Schedules"),
        ("/ui/triggers", "Triggers"),
        ("/ui/namespaces", "default"),
        ("/ui/keys", "API keys"),
        ("/ui/approvals", "No step awaits approval."),
    ] {
        let page = b.get(path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(page.body.contains(expect), "{path}: {}", page.body);
    }
    let root = b.get("/ui").await;
    assert_eq!(root.status, 303);
    let asset = b.get("/ui/assets/htmx.min.js").await;
    assert_eq!(asset.status, 200);
    assert!(asset.body.starts_with("/*! htmx.org"));
    assert_eq!(b.get("/ui/assets/nope.js").await.status, 404);
    assert_eq!(b.get("/ui/nowhere").await.status, 404);
}

/// A schedule's page: its spec, next fires in its zone and UTC, the run it started
/// and the fire skipped for overlap with its reason, all escaped.
#[tokio::test]
async fn a_schedules_page_shows_its_recent_actions_and_skipped_fires() {
    use railyard_proto::v1::{
        CreateScheduleRequest, OverlapPolicy, PatchScheduleRequest, ScheduleAction, SchedulePolicies,
        ScheduleSpec, ScheduleTrigger,
    };
    let console = Console::start(false).await;
    let client = console.admin().await;
    client
        .create_schedule(CreateScheduleRequest {
            namespace: "default".into(),
            schedule_id: "morning".into(),
            spec: Some(ScheduleSpec {
                cron: vec!["0 9 * * *".into()],
                time_zone: "Europe/Berlin".into(),
                ..Default::default()
            }),
            action: Some(ScheduleAction {
                workflow_id: "one".into(),
                goal: "<script>alert(1)</script> report".into(),
                ..Default::default()
            }),
            policies: Some(SchedulePolicies {
                overlap: OverlapPolicy::Skip as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let trigger = || PatchScheduleRequest {
        namespace: "default".into(),
        schedule_id: "morning".into(),
        trigger: Some(ScheduleTrigger::default()),
        ..Default::default()
    };
    // The first fire starts a run (no worker: it stays open); once it is started, the
    // second is skipped for the overlap. The deadlines bound a hang, not a time.
    client.patch_schedule(trigger()).await.unwrap();
    let mut info = None;
    for _ in 0..200 {
        let s = client.describe_schedule("default", "morning", 0).await.unwrap();
        if !s.recent_actions.is_empty() {
            info = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = info.expect("the first fire started a run").recent_actions[0]
        .run_id
        .clone();
    client.patch_schedule(trigger()).await.unwrap();
    for _ in 0..200 {
        let s = client.describe_schedule("default", "morning", 0).await.unwrap();
        if !s.recent_missed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut b = console.browser();
    let list = b.get("/ui/schedules").await;
    assert!(list.body.contains("href=\"/ui/schedules/morning?ns=default\""));
    let page = b.get("/ui/schedules/morning?ns=default").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.calls(), 1);
    let body = &page.body;
    assert!(
        body.contains("<code>0 9 * * *</code>") && body.contains("in Europe/Berlin"),
        "{body}"
    );
    assert!(body.contains("In Europe/Berlin"), "next fires in the zone");
    assert!(body.contains(" 09:00:00 +0"), "9 o'clock in Berlin: {body}");
    assert!(
        body.contains(" 07:00:00") || body.contains(" 08:00:00"),
        "and in UTC"
    );
    assert!(
        body.contains(&format!(">{run}</a>")),
        "the run it started: {body}"
    );
    assert!(
        body.contains("skipped: the last run was still open (overlap policy)"),
        "{body}"
    );
    assert!(body.contains("1 skipped (overlap)"));
    assert!(!body.contains("<script>alert"));
    assert!(body.contains("&lt;script&gt;alert(1)&lt;/script&gt; report"));
    let missing = b.get("/ui/schedules/nope?ns=default").await;
    assert_eq!(missing.status, 404);
}

/// The triggers page shows each trigger's latest deliveries with their runs, newest
/// first, escaped; a repeated delivery id starts nothing and is not listed again.
#[tokio::test]
async fn the_triggers_page_shows_recent_deliveries() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    console.create_hook_trigger().await;
    let mut runs = Vec::new();
    for id in ["d-1", "<script>alert(1)</script>", "d-1"] {
        let r = reqwest::Client::new()
            .post(format!("http://{}/hooks/default/hook", console.server.http_addr))
            .header("content-type", "application/json")
            .header("x-github-delivery", id)
            .body(r#"{"title":"t"}"#)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        runs.push(v["runId"].as_str().unwrap().to_string());
    }
    assert_eq!(runs[0], runs[2], "the repeated delivery answers its first run");
    let described = client.describe_trigger("default", "hook").await.unwrap();
    let kept: Vec<_> = described
        .recent_deliveries
        .iter()
        .map(|d| (d.delivery_id.as_str(), d.outcome.as_str()))
        .collect();
    assert_eq!(
        kept,
        [("d-1", "started"), ("<script>alert(1)</script>", "started")]
    );
    let mut b = console.browser();
    let page = b.get("/ui/triggers").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.calls(), 1);
    let body = &page.body;
    let (first, second) = (
        body.find(&format!(">{}</a> started", runs[1]))
            .expect("the newer delivery"),
        body.find(&format!(">{}</a> started", runs[0]))
            .expect("the older delivery"),
    );
    assert!(first < second, "newest first");
    assert!(body.contains("(&lt;script&gt;alert(1)&lt;/script&gt;)"));
    assert!(!body.contains("<script>alert"));
}
