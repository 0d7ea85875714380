//! Polled triggers against a local mock of GitHub's and GitLab's REST APIs
//! (`poll_mock.rs`), on a real store with a `ManualClock`: pages and `Link`
//! headers, `ETag`s answering `304`, filters, the events counted, rate limits and
//! errors shown by describe and `/metrics`, a serial key, and nothing started
//! twice across a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_engine::poller::PollLimits;
use railyard_proto::v1::{self, RunStatus};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

use crate::poll_mock::{Fail, Mock, issue, merge_request};
use crate::support;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One step","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;

/// 2026-01-01T00:00:00Z: the server's clock when the triggers are made.
const T0: i64 = 1_767_225_600_000;
/// Before T0 (an item that was there before polling began).
const BEFORE: &str = "2025-12-31T00:00:00Z";

/// T0 plus `secs`, as the APIs write times.
fn at(secs: i64) -> String {
    chrono::DateTime::from_timestamp_millis(T0 + secs * 1000)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

struct Harness {
    server: RunningServer,
    client: Client,
    clock: ManualClock,
    data: tempfile::TempDir,
    workflows: tempfile::TempDir,
}

async fn start_in(data: &Path, workflows: &Path, clock: &ManualClock) -> (RunningServer, Client) {
    start_limited(data, workflows, clock, PollLimits::default()).await
}

async fn start_limited(
    data: &Path,
    workflows: &Path,
    clock: &ManualClock,
    limits: PollLimits,
) -> (RunningServer, Client) {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(clock.clone());
    config.triggers.poll = limits;
    // The mock is on loopback, which a poll reaches only when the server allows it.
    config.delivery.allow_networks = vec!["127.0.0.0/8".parse().unwrap()];
    config.triggers.secrets = support::secrets(&["POLL_TEST_GH_TOKEN", "POLL_TEST_UNSET_TOKEN"]);
    support::start(config).await
}

async fn harness() -> Harness {
    harness_limited(PollLimits::default()).await
}

async fn harness_limited(limits: PollLimits) -> Harness {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let clock = ManualClock::new(T0);
    let (server, client) = start_limited(data.path(), workflows.path(), &clock, limits).await;
    Harness {
        server,
        client,
        clock,
        data,
        workflows,
    }
}

fn source(mock: &Mock, kind: &str, repo: &str) -> v1::TriggerPollSource {
    v1::TriggerPollSource {
        source: kind.into(),
        repo: repo.into(),
        base_url: mock.base_url(),
        labels: vec!["agent".into()],
        every: "60s".into(),
        ..Default::default()
    }
}

fn spec(goal: &str, poll: v1::TriggerPollSource) -> v1::TriggerSpec {
    v1::TriggerSpec {
        workflow_id: "one".into(),
        goal: goal.into(),
        poll: Some(poll),
        ..Default::default()
    }
}

/// Sets a test's own environment variable (the server reads tokens from it).
fn set_env(name: &str, value: &str) {
    // SAFETY: each test uses variables of its own name; nothing else writes them.
    unsafe { std::env::set_var(name, value) };
}

impl Harness {
    async fn restart(self) -> Self {
        self.server.shutdown().await;
        let (server, client) = start_in(self.data.path(), self.workflows.path(), &self.clock).await;
        Harness {
            server,
            client,
            ..self
        }
    }

    async fn try_create(&self, id: &str, spec: v1::TriggerSpec) -> Result<v1::TriggerInfo, ClientError> {
        self.client
            .create_trigger(v1::CreateTriggerRequest {
                namespace: "default".into(),
                trigger_id: id.into(),
                spec: Some(spec),
                identity: "test".into(),
            })
            .await
    }

    async fn status(&self, id: &str) -> v1::TriggerPollStatus {
        let t = self.client.describe_trigger("default", id).await.unwrap();
        t.poll_status.expect("a polled trigger has a status")
    }

    /// Waits until trigger `id` has been polled `n` times (a bound on a hang only).
    async fn polled(&self, id: &str, n: u64) -> v1::TriggerPollStatus {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status(id).await;
            if s.polls >= n {
                assert_eq!(s.polls, n, "polled more often than expected");
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "trigger {id} not polled {n} times: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Moves the clock by `secs` and waits for poll number `n` of `id`.
    async fn tick(&self, id: &str, secs: u64, n: u64) -> v1::TriggerPollStatus {
        self.clock.advance(Duration::from_secs(secs));
        self.polled(id, n).await
    }

    async fn goals(&self) -> Vec<String> {
        let mut goals: Vec<String> = self
            .client
            .list_runs(v1::ListRunsRequest {
                namespace: "default".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .runs
            .into_iter()
            .map(|r| r.goal)
            .collect();
        goals.sort();
        goals
    }
}

#[tokio::test]
async fn github_issues_are_polled_page_by_page_and_each_new_item_starts_one_run() {
    set_env("POLL_TEST_GH_TOKEN", "tok-1");
    let mock = Mock::start(2, Some("tok-1")).await;
    mock.put(issue(1, &at(10), &at(10), "ann", &["agent"]));
    mock.put(issue(2, &at(11), &at(12), "bob", &["agent", "bug"]));
    mock.put(issue(3, &at(12), &at(13), "ann", &["bug"])); // not labelled
    let mut pr = issue(4, &at(13), &at(14), "ann", &["agent"]);
    pr["pull_request"] = serde_json::json!({"url": "x"}); // a pull request
    mock.put(pr);
    mock.put(issue(5, BEFORE, &at(15), "ann", &["agent"])); // there before polling
    let mut closed = issue(6, &at(14), &at(16), "ann", &["agent"]);
    closed["state"] = "closed".into();
    mock.put(closed);
    mock.put(issue(7, &at(15), &at(17), "cat", &["agent"]));

    let h = harness().await;
    let mut src = source(&mock, "github-issues", "acme/app");
    src.token = "$POLL_TEST_GH_TOKEN".into();
    let info = h
        .try_create("triage", spec("Triage #{{$.number}}: {{$.title}}", src))
        .await
        .unwrap();
    assert_eq!(info.hook_path, "", "a polled trigger has no webhook");
    let s = h.polled("triage", 1).await;
    assert_eq!(
        h.goals().await,
        ["Triage #1: Issue 1", "Triage #2: Issue 2", "Triage #7: Issue 7"]
    );
    assert_eq!((s.runs_started, s.items_seen), (3, 4), "{s:?}");
    assert_eq!(s.cursor, at(17));
    assert_eq!(s.last_error, "");
    assert_eq!(s.next_poll_unix_ms, T0 + 60_000);
    let seen = mock.take_seen();
    assert_eq!(seen.len(), 4, "seven items, two a page: {seen:?}");
    let first = &seen[0];
    assert_eq!(first.path, "/repos/acme/app/issues");
    assert_eq!(
        (
            first.param("labels"),
            first.param("state"),
            first.param("sort"),
            first.param("direction")
        ),
        (Some("agent"), Some("open"), Some("updated"), Some("asc"))
    );
    assert_eq!(first.param("since"), None, "the first poll asks for everything");
    assert_eq!(first.authorization.as_deref(), Some("Bearer tok-1"));
    assert_eq!(seen[3].param("page"), Some("4"), "Link rel=next followed");

    // The next poll asks from the cursor: the last item again, which starts nothing.
    let s = h.tick("triage", 60, 2).await;
    assert_eq!(s.runs_started, 3);
    let seen = mock.take_seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].param("since"), Some(at(17).as_str()));
    assert_eq!(seen[0].if_none_match, None, "a new URL has no ETag yet");

    // Unchanged: the ETag answers 304.
    let h = h.restart().await;
    let s = h.tick("triage", 60, 3).await;
    let seen = mock.take_seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].if_none_match.is_some(), "the ETag outlives a restart");
    assert_eq!(seen[0].status, 304);
    assert_eq!(s.runs_started, 3);

    // A new item starts one run; an old one changing starts nothing (events: new).
    mock.put(issue(8, &at(200), &at(200), "ann", &["agent"]));
    mock.put(issue(1, &at(10), &at(201), "ann", &["agent"]));
    let s = h.tick("triage", 60, 4).await;
    assert_eq!(s.runs_started, 4);
    assert_eq!(h.goals().await.len(), 4);
    assert!(h.goals().await.contains(&"Triage #8: Issue 8".to_string()));
    assert_eq!(s.cursor, at(201));

    let metrics = support::metrics(h.server.http_addr).await;
    for line in [
        // Counted since the restart.
        r#"railyard_trigger_polls_total{namespace="default",trigger="triage",outcome="ok"} 1"#,
        r#"railyard_trigger_polls_total{namespace="default",trigger="triage",outcome="not_modified"} 1"#,
        r#"railyard_trigger_poll_items_total{namespace="default",trigger="triage"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // It takes no webhooks.
    let resp = reqwest::Client::new()
        .post(format!("http://{}/hooks/default/triage", h.server.http_addr))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert_eq!(h.goals().await.len(), 4);
}

#[tokio::test]
async fn rate_limits_and_errors_put_off_the_next_poll_and_describe_shows_them() {
    let mock = Mock::start(10, None).await;
    mock.put(issue(1, &at(10), &at(10), "ann", &["agent"]));
    mock.fail_next(Fail::RateLimited403 {
        retry_after_secs: 300,
    });
    mock.fail_next(Fail::TooMany429 { retry_after_secs: 30 });
    mock.fail_next(Fail::Error500);
    let h = harness().await;
    h.try_create(
        "rl",
        spec("#{{$.number}}", source(&mock, "github-issues", "acme/app")),
    )
    .await
    .unwrap();
    let s = h.polled("rl", 1).await;
    assert!(s.last_error.contains("rate limited (HTTP 403)"), "{s:?}");
    assert_eq!(
        (s.errors_in_row, s.next_poll_unix_ms),
        (1, T0 + 300_000),
        "Retry-After is honoured"
    );
    assert!(h.goals().await.is_empty());

    // Not due yet: another trigger's poll (a scan of them all) leaves it alone.
    h.clock.advance(Duration::from_secs(200));
    let other = Mock::start(10, None).await;
    h.try_create("other", spec("x", source(&other, "github-issues", "acme/other")))
        .await
        .unwrap();
    h.polled("other", 1).await;
    assert_eq!(h.status("rl").await.polls, 1);

    let now = T0 + 300_000;
    let s = h.tick("rl", 100, 2).await;
    assert!(s.last_error.contains("HTTP 429"), "{s:?}");
    // The backoff (60 s doubled twice) is longer than the Retry-After of 30 s.
    assert_eq!((s.errors_in_row, s.next_poll_unix_ms), (2, now + 240_000));

    let s = h.tick("rl", 240, 3).await;
    assert!(
        s.last_error.starts_with("HTTP 500 from /repos/acme/app/issues"),
        "{s:?}"
    );
    assert_eq!(s.errors_in_row, 3);
    let failed_at = s.last_error_unix_ms;

    let s = h.tick("rl", 480, 4).await;
    assert_eq!(s.errors_in_row, 0, "{s:?}");
    assert_eq!(s.last_error_unix_ms, failed_at, "the last error stays in view");
    assert_eq!(h.goals().await, ["#1"]);
    let metrics = support::metrics(h.server.http_addr).await;
    for line in [
        r#"railyard_trigger_poll_errors_total{namespace="default",trigger="rl"} 3"#,
        r#"railyard_trigger_polls_total{namespace="default",trigger="rl",outcome="rate_limited"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    // A listing that spends the limit: the next poll waits for its reset.
    let now = T0 + 1_080_000;
    mock.exhaust_next(now / 1000 + 900);
    let s = h.tick("rl", 60, 5).await;
    assert_eq!(
        (s.errors_in_row, s.next_poll_unix_ms),
        (0, now + 900_000),
        "{s:?}"
    );

    // A token the server's environment lacks is an error naming it.
    let mut src = source(&mock, "github-issues", "acme/app");
    src.token = "$POLL_TEST_UNSET_TOKEN".into();
    h.try_create("unset", spec("x", src)).await.unwrap();
    let s = h.polled("unset", 1).await;
    assert!(s.last_error.contains("POLL_TEST_UNSET_TOKEN is not set"), "{s:?}");
}

#[tokio::test]
async fn gitlab_merge_requests_count_labels_and_updates_once_each() {
    let mock = Mock::start(10, None).await;
    mock.put(merge_request(1, BEFORE, &at(5), "ann", &["agent"]));
    mock.put(merge_request(2, &at(6), &at(6), "ann", &[]));
    mock.put(merge_request(3, &at(7), &at(7), "bob", &["agent"])); // another author
    let h = harness().await;
    let mut src = source(&mock, "gitlab-merge-requests", "grp/sub/app");
    src.events = vec!["labeled".into(), "updated".into()];
    src.author = "ann".into();
    h.try_create("mr", spec("Review !{{$.iid}} ({{$.author.username}})", src))
        .await
        .unwrap();
    let s = h.polled("mr", 1).await;
    // !1 was there before, but it carries the label: that counts.
    assert_eq!(h.goals().await, ["Review !1 (ann)"]);
    assert_eq!(s.items_seen, 1);
    let seen = mock.take_seen();
    assert_eq!(seen[0].path, "/api/v4/projects/grp%2Fsub%2Fapp/merge_requests");
    assert_eq!(
        (
            seen[0].param("author_username"),
            seen[0].param("order_by"),
            seen[0].param("sort")
        ),
        (Some("ann"), Some("updated_at"), Some("asc"))
    );

    // Unchanged: nothing. Then !1 changes (an update) and !2 gets the label (one run,
    // though it is both labelled and updated).
    h.tick("mr", 60, 2).await;
    assert_eq!(mock.take_seen()[0].param("updated_after"), Some(at(7).as_str()));
    assert_eq!(h.goals().await.len(), 1);
    mock.put(merge_request(1, BEFORE, &at(100), "ann", &["agent"]));
    mock.put(merge_request(2, &at(6), &at(101), "ann", &["agent"]));
    let s = h.tick("mr", 60, 3).await;
    assert_eq!(
        h.goals().await,
        ["Review !1 (ann)", "Review !1 (ann)", "Review !2 (ann)"]
    );
    assert_eq!(s.runs_started, 3);
    // Listed again unchanged (the cursor's edge): nothing.
    let s = h.tick("mr", 60, 4).await;
    assert_eq!(s.runs_started, 3);
}

#[tokio::test]
async fn a_serial_key_runs_one_item_of_the_key_at_a_time() {
    let mock = Mock::start(10, None).await;
    mock.put(issue(1, &at(1), &at(1), "ann", &["agent"]));
    mock.put(issue(2, &at(2), &at(2), "ann", &["agent"]));
    mock.put(issue(3, &at(3), &at(3), "bob", &["agent"]));
    let h = harness().await;
    let mut s = spec("#{{$.number}}", source(&mock, "github-issues", "acme/app"));
    s.concurrency_key = "{{$.user.login}}".into();
    s.mode = v1::TriggerMode::Serial.into();
    h.try_create("serial", s).await.unwrap();
    let st = h.polled("serial", 1).await;
    assert_eq!(st.runs_started, 3, "started or queued");
    assert_eq!(h.goals().await, ["#1", "#3"], "#2 waits for #1 (same author)");
    let w = StepWorker::new(h.client.clone(), "default", "default", "w");
    loop {
        let task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
        let goal = h
            .client
            .describe_run("default", &task.run_id)
            .await
            .unwrap()
            .run
            .unwrap()
            .goal;
        w.complete(&task.task_token, Completion::notes("done"))
            .await
            .unwrap();
        if goal == "#1" {
            break;
        }
    }
    assert_eq!(h.goals().await, ["#1", "#2", "#3"]);
    let runs = h
        .client
        .list_runs(v1::ListRunsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .runs;
    let two = runs.iter().find(|r| r.goal == "#2").unwrap();
    assert_eq!(two.status(), RunStatus::Running);
}

#[tokio::test]
async fn bad_sources_are_refused_naming_the_field_and_start_nothing() {
    let mock = Mock::start(10, None).await;
    let h = harness().await;
    let ok = || source(&mock, "github-issues", "acme/app");
    let cases: Vec<(v1::TriggerSpec, &str)> = vec![
        (
            spec(
                "g",
                v1::TriggerPollSource {
                    source: "bitbucket".into(),
                    ..ok()
                },
            ),
            "poll.source",
        ),
        (
            spec(
                "g",
                v1::TriggerPollSource {
                    repo: "acme".into(),
                    ..ok()
                },
            ),
            "poll.repo",
        ),
        (
            spec(
                "g",
                v1::TriggerPollSource {
                    token: "ghp_literal".into(),
                    ..ok()
                },
            ),
            "poll.token",
        ),
        (
            spec(
                "g",
                v1::TriggerPollSource {
                    every: "10ms".into(),
                    ..ok()
                },
            ),
            "poll.every",
        ),
        (
            spec(
                "g",
                v1::TriggerPollSource {
                    every: "soon".into(),
                    ..ok()
                },
            ),
            "poll.every",
        ),
        (
            spec(
                "g",
                v1::TriggerPollSource {
                    base_url: "file:///etc".into(),
                    ..ok()
                },
            ),
            "poll.base_url",
        ),
        (
            spec(
                "g",
                v1::TriggerPollSource {
                    labels: vec![],
                    events: vec!["labeled".into()],
                    ..ok()
                },
            ),
            "poll.events",
        ),
        (
            v1::TriggerSpec {
                signature_secret: "$X".into(),
                ..spec("g", ok())
            },
            "signature_secret",
        ),
        (spec(&"x".repeat(20_000), ok()), "goal"),
    ];
    for (s, field) in cases {
        match h.try_create("bad", s).await {
            Err(ClientError::InvalidArgument(m)) => assert!(m.starts_with(field), "{field}: {m}"),
            other => panic!("{field}: {other:?}"),
        }
    }
    assert!(mock.take_seen().is_empty(), "nothing was polled");
}

#[tokio::test]
async fn a_poll_takes_at_most_its_items_and_pages_and_the_next_goes_on_from_there() {
    let mock = Mock::start(2, None).await;
    for n in 1..=7 {
        mock.put(issue(n, &at(n as i64), &at(n as i64), "ann", &["agent"]));
    }
    let h = harness_limited(PollLimits {
        items_per_poll: 3,
        pages_per_poll: 2,
        ..PollLimits::default()
    })
    .await;
    h.try_create(
        "bounded",
        spec("#{{$.number}}", source(&mock, "github-issues", "acme/app")),
    )
    .await
    .unwrap();
    let s = h.polled("bounded", 1).await;
    assert_eq!((s.runs_started, s.cursor.as_str()), (3, at(3).as_str()));
    assert_eq!(mock.take_seen().len(), 2, "two pages at most");
    let s = h.tick("bounded", 60, 2).await;
    assert_eq!((s.runs_started, s.cursor.as_str()), (5, at(5).as_str()));
    let s = h.tick("bounded", 60, 3).await;
    assert_eq!((s.runs_started, s.cursor.as_str()), (7, at(7).as_str()));
    assert_eq!(h.goals().await, ["#1", "#2", "#3", "#4", "#5", "#6", "#7"]);
    assert!(
        mock.take_seen()
            .iter()
            .all(|r| r.param("page").unwrap_or("1") <= "2")
    );
}

#[tokio::test]
async fn a_trigger_made_through_a_follower_node_is_polled_by_the_leader_alone() {
    use railyard_server::follower::{FixedLeader, FollowerConfig, Leader, RunningFollower};
    let mock = Mock::start(10, None).await;
    mock.put(issue(1, &at(1), &at(1), "ann", &["agent"]));
    let h = harness().await;
    let leader = Leader {
        node: "leader".into(),
        epoch: 1,
        grpc: h.server.grpc_addr.to_string(),
        http: h.server.http_addr.to_string(),
        tls: false,
    };
    let mut config = FollowerConfig::new("follower", Arc::new(FixedLeader(Some(leader))));
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    let follower = RunningFollower::start(config).await.unwrap();
    let through = Client::connect(&format!("http://{}", follower.grpc_addr))
        .await
        .unwrap();
    through
        .create_trigger(v1::CreateTriggerRequest {
            namespace: "default".into(),
            trigger_id: "f".into(),
            spec: Some(spec("#{{$.number}}", source(&mock, "github-issues", "acme/app"))),
            identity: "test".into(),
        })
        .await
        .unwrap();
    // The follower has no store and no poller: the one poll is the leader's.
    let s = h.polled("f", 1).await;
    assert_eq!(s.runs_started, 1);
    assert_eq!(mock.take_seen().len(), 1);
    assert_eq!(h.goals().await, ["#1"]);
}
