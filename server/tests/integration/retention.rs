//! Namespace retention and limits over real gRPC, a real redb file and a
//! `ManualClock`: closed runs past retention are purged whole (in bounded batches,
//! across a restart), open and younger ones kept; an old data directory opens and
//! purges; every limit refuses with RESOURCE_EXHAUSTED naming it and changing
//! nothing, and an update takes effect at once; a namespace with schedules is not
//! deleted.

use railyard_model::RunKey;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{self, CreateNamespaceRequest, UpdateNamespaceRequest};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use railyard_store::RunFilter;

use crate::support;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One step","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// What outlives a server: its data directory, its workflows and its clock.
struct Dirs {
    clock: ManualClock,
    data: tempfile::TempDir,
    workflows: PathBuf,
    _workflows_dir: Option<tempfile::TempDir>,
}

impl Dirs {
    /// A server on these directories that purges `batch` runs a command.
    async fn start(self, batch: usize) -> Harness {
        let mut config = ServerConfig::new(self.data.path(), &self.workflows);
        config.clock = Arc::new(self.clock.clone());
        config.purge.batch = batch;
        let (server, client) = support::start(config).await;
        Harness {
            server,
            client,
            dirs: self,
        }
    }
}

struct Harness {
    server: RunningServer,
    client: Client,
    dirs: Dirs,
}

async fn harness() -> Harness {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let dirs = Dirs {
        clock: ManualClock::new(T0),
        data,
        workflows: workflows.path().to_path_buf(),
        _workflows_dir: Some(workflows),
    };
    dirs.start(100).await
}

impl Harness {
    fn advance(&self, ms: i64) {
        self.dirs.clock.advance(Duration::from_millis(ms as u64));
    }

    /// Shuts the server down, keeping its directories.
    async fn stop(self) -> Dirs {
        self.server.shutdown().await;
        self.dirs
    }

    async fn restart(self, batch: usize) -> Self {
        self.stop().await.start(batch).await
    }

    async fn start(&self, ns: &str, run_id: &str) -> Result<String, ClientError> {
        self.client
            .start_run_with(v1::StartRunRequest {
                namespace: ns.into(),
                workflow_id: "one".into(),
                run_id: run_id.into(),
                goal: "g".into(),
                ..Default::default()
            })
            .await
            .map(|r| r.run_id)
    }

    async fn terminate(&self, ns: &str, run_id: &str) {
        self.client
            .terminate_run(v1::TerminateRunRequest {
                namespace: ns.into(),
                run_id: run_id.into(),
                reason: "done".into(),
                identity: "test".into(),
            })
            .await
            .unwrap();
    }

    /// Changes a namespace's settings.
    async fn update(&self, req: UpdateNamespaceRequest) {
        self.client.update_namespace_with(req).await.unwrap();
    }

    async fn signal(&self, ns: &str, run_id: &str, request_id: &str) -> Result<(), ClientError> {
        self.client
            .signal_run(v1::SignalRunRequest {
                namespace: ns.into(),
                run_id: run_id.into(),
                signal_name: "steer".into(),
                payload_json: "{}".into(),
                identity: "test".into(),
                request_id: request_id.into(),
            })
            .await
    }

    /// Every run of `ns`, by id.
    async fn run_ids(&self, ns: &str) -> BTreeSet<String> {
        let mut ids = BTreeSet::new();
        let mut page_token = String::new();
        loop {
            let page = self
                .client
                .list_runs(v1::ListRunsRequest {
                    namespace: ns.into(),
                    page_size: 1000,
                    page_token: page_token.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
            ids.extend(page.runs.into_iter().map(|r| r.run_id));
            if page.next_page_token.is_empty() {
                return ids;
            }
            page_token = page.next_page_token;
        }
    }

    async fn gone(&self, ns: &str, run_id: &str) -> bool {
        match self.client.describe_run(ns, run_id).await {
            Err(ClientError::NotFound(_)) => {}
            Ok(_) => return false,
            Err(e) => panic!("{e:?}"),
        }
        let history = self.client.full_history(ns, run_id).await;
        assert!(matches!(history, Err(ClientError::NotFound(_))), "{history:?}");
        true
    }

    /// The value of the metric line starting with `series` (0 when absent).
    async fn metric(&self, series: &str) -> u64 {
        let text = support::metrics(self.server.http_addr).await;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// Waits (real time, generously) until `series` reaches `want`.
    async fn until_metric(&self, series: &str, want: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.metric(series).await;
            if got >= want {
                return;
            }
            assert!(Instant::now() < deadline, "{series} is {got}, not {want}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn purged(ns: &str) -> String {
    format!("railyard_runs_purged_total{{namespace=\"{ns}\"}} ")
}

const PURGE_COMMANDS: &str = "railyard_commands_total{command=\"purge_runs\",outcome=\"ok\"} ";

fn exhausted(r: Result<impl std::fmt::Debug, ClientError>) -> String {
    match r {
        Err(ClientError::ResourceExhausted(m)) => m,
        other => panic!("expected RESOURCE_EXHAUSTED, got {other:?}"),
    }
}

#[tokio::test]
async fn closed_runs_past_retention_are_purged_whole_and_open_and_younger_ones_kept() {
    let h = harness().await;
    let team = h
        .client
        .create_namespace_with(CreateNamespaceRequest {
            name: "team".into(),
            retention_seconds: Some(DAY / 1000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(team.retention_seconds, 86_400);
    assert_eq!(
        h.client
            .describe_namespace("default")
            .await
            .unwrap()
            .retention_seconds,
        30 * 86_400,
        "the default retention"
    );

    // "old" completes through a worker, with a signal on the way; "young" closes
    // later; "open" never does; "kept" is in `default` (30 days).
    let old = h
        .client
        .start_run_with(v1::StartRunRequest {
            namespace: "team".into(),
            workflow_id: "one".into(),
            run_id: "old".into(),
            request_id: "req-old".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(old.started);
    h.signal("team", "old", "sig-old").await.unwrap();
    let worker = StepWorker::new(h.client.clone(), "team", "default", "w");
    let task = worker
        .poll(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a task");
    worker
        .complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    h.start("team", "young").await.unwrap();
    h.start("team", "open").await.unwrap();
    // A child of the open run, closed: its parent may still want its outcome.
    h.client
        .start_run_with(v1::StartRunRequest {
            namespace: "team".into(),
            workflow_id: "one".into(),
            run_id: "child".into(),
            parent_run_id: "open".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    h.terminate("team", "child").await;
    h.start("default", "kept").await.unwrap();
    h.terminate("default", "kept").await;
    h.advance(12 * HOUR);
    h.terminate("team", "young").await;

    // A day and a bit after "old" closed, half a day after "young" did.
    h.advance(12 * HOUR + 2 * 60_000);
    h.until_metric(&purged("team"), 1).await;
    assert!(h.gone("team", "old").await);
    assert_eq!(
        h.run_ids("team").await,
        BTreeSet::from(["child".into(), "open".into(), "young".into()])
    );
    for (ns, id, events) in [
        ("team", "young", 3),
        ("team", "open", 2),
        ("team", "child", 3),
        ("default", "kept", 3),
    ] {
        let run = h.client.describe_run(ns, id).await.unwrap().run.unwrap();
        assert_eq!(run.run_id, id);
        assert_eq!(h.client.full_history(ns, id).await.unwrap().len(), events, "{id}");
    }
    // Its start's request id went with it: the same request starts a new run.
    let again = h
        .client
        .start_run_with(v1::StartRunRequest {
            namespace: "team".into(),
            workflow_id: "one".into(),
            run_id: "old-again".into(),
            request_id: "req-old".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((again.run_id.as_str(), again.started), ("old-again", true));

    // "young" goes once its day is up; "open" never, however old.
    h.advance(DAY);
    h.until_metric(&purged("team"), 2).await;
    assert!(h.gone("team", "young").await);
    h.advance(100 * DAY);
    h.until_metric(&purged("default"), 1).await;
    assert!(h.gone("default", "kept").await);
    assert!(!h.gone("team", "open").await);
    assert!(
        !h.gone("team", "child").await,
        "a closed child of an open run stays"
    );
    assert_eq!(h.metric(&purged("team")).await, 2);

    // Retention 0 keeps closed runs for good.
    h.update(UpdateNamespaceRequest {
        name: "team".into(),
        retention_seconds: Some(0),
        ..Default::default()
    })
    .await;
    h.terminate("team", "open").await;
    h.advance(1000 * DAY);
    // A sweep ran after the clock moved (the purge of another namespace shows it).
    h.start("default", "marker").await.unwrap();
    h.terminate("default", "marker").await;
    h.advance(31 * DAY);
    h.until_metric(&purged("default"), 2).await;
    assert!(!h.gone("team", "open").await);
    h.server.shutdown().await;
}

#[tokio::test]
async fn a_purge_of_many_runs_goes_in_bounded_batches() {
    let h = harness().await;
    h.update(UpdateNamespaceRequest {
        name: "default".into(),
        retention_seconds: Some(3_600),
        ..Default::default()
    })
    .await;
    for i in 0..250 {
        let id = format!("r{i:03}");
        h.start("default", &id).await.unwrap();
        h.terminate("default", &id).await;
    }
    assert_eq!(h.metric(PURGE_COMMANDS).await, 0);
    h.advance(2 * HOUR);
    h.until_metric(&purged("default"), 250).await;
    // 100 + 100 + 50: three commands, each its own commit.
    assert_eq!(h.metric(PURGE_COMMANDS).await, 3);
    assert!(h.run_ids("default").await.is_empty());
    h.server.shutdown().await;
}

/// Every run of `default` in the data directory is whole or gone: its state row,
/// its whole history and its place in the listing together, or none of them.
/// (The store is opened, on this run's backend, while no server is.)
async fn check_whole_or_gone(data: &Path, ids: &[String]) -> usize {
    let store = support::store_for(data).await;
    let (listed, _) = store
        .list_runs("default", &RunFilter::default(), None, 10_000)
        .unwrap();
    let listed: BTreeSet<String> = listed.into_iter().map(|r| r.run_id).collect();
    let mut left = 0;
    for id in ids {
        let events = store.history(&RunKey::new("default", id), 1, 1000).unwrap();
        match store.run(&RunKey::new("default", id)).unwrap() {
            Some(run) => {
                left += 1;
                assert_eq!(events.len() as u64, run.last_event_id, "{id}: history whole");
                assert!(listed.contains(id), "{id} listed");
            }
            None => {
                assert!(events.is_empty(), "{id}: no history without its run");
                assert!(!listed.contains(id), "{id} not listed");
            }
        }
    }
    left
}

#[tokio::test]
async fn a_purge_interrupted_by_a_restart_leaves_no_half_purged_run_and_finishes() {
    let h = harness().await;
    h.update(UpdateNamespaceRequest {
        name: "default".into(),
        retention_seconds: Some(3_600),
        ..Default::default()
    })
    .await;
    // Small batches, so that the restart comes while most of the work is left.
    let h = h.restart(1).await;
    let ids: Vec<String> = (0..250).map(|i| format!("r{i:03}")).collect();
    for id in &ids {
        h.start("default", id).await.unwrap();
        h.terminate("default", id).await;
    }
    h.advance(2 * HOUR);
    h.until_metric(&purged("default"), 1).await;
    let dirs = h.stop().await;
    let left = check_whole_or_gone(dirs.data.path(), &ids).await;
    eprintln!("{left} of 250 runs left when the server stopped");

    let h = dirs.start(1).await;
    // The restarted server's purge picks up where the first left off.
    h.until_metric(&purged("default"), left as u64).await;
    assert!(h.run_ids("default").await.is_empty());
    let dirs = h.stop().await;
    assert_eq!(check_whole_or_gone(dirs.data.path(), &ids).await, 0);
}

#[tokio::test]
async fn each_limit_refuses_with_resource_exhausted_changes_nothing_and_updates_take_effect() {
    let h = harness().await;
    let lim = h
        .client
        .create_namespace_with(CreateNamespaceRequest {
            name: "lim".into(),
            max_open_runs: Some(2),
            max_pending_signals: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    let limits = lim.limits.unwrap();
    assert_eq!(
        (
            limits.max_open_runs,
            limits.max_starts_per_second,
            limits.max_pending_signals
        ),
        (2, 0, 2)
    );

    // Open runs.
    h.start("lim", "a").await.unwrap();
    h.start("lim", "b").await.unwrap();
    let m = exhausted(h.start("lim", "c").await);
    assert!(m.contains("max open runs 2") && m.contains("\"lim\""), "{m}");
    assert!(matches!(
        h.client.describe_run("lim", "c").await,
        Err(ClientError::NotFound(_))
    ));
    assert_eq!(h.run_ids("lim").await.len(), 2);
    // A closed run makes room; so does a higher limit.
    h.terminate("lim", "b").await;
    h.start("lim", "c").await.unwrap();
    assert!(exhausted(h.start("lim", "d").await).contains("max open runs 2"));
    h.update(UpdateNamespaceRequest {
        name: "lim".into(),
        max_open_runs: Some(3),
        ..Default::default()
    })
    .await;
    h.start("lim", "d").await.unwrap();
    // Another namespace is not held to it.
    for i in 0..4 {
        h.start("default", &format!("free-{i}")).await.unwrap();
    }

    // Pending signals per run.
    h.signal("lim", "a", "s1").await.unwrap();
    h.signal("lim", "a", "s2").await.unwrap();
    let before = h.client.full_history("lim", "a").await.unwrap().len();
    let m = exhausted(h.signal("lim", "a", "s3").await);
    assert!(
        m.contains("max pending signals 2") && m.contains("\"lim\""),
        "{m}"
    );
    assert_eq!(h.client.full_history("lim", "a").await.unwrap().len(), before);
    // A repeated request is still answered as done, not refused.
    h.signal("lim", "a", "s2").await.unwrap();
    h.update(UpdateNamespaceRequest {
        name: "lim".into(),
        max_pending_signals: Some(3),
        ..Default::default()
    })
    .await;
    h.signal("lim", "a", "s3").await.unwrap();
    assert_eq!(h.client.full_history("lim", "a").await.unwrap().len(), before + 1);

    // Starts per second: a bucket of one second's worth, refilled by the clock.
    h.update(UpdateNamespaceRequest {
        name: "lim".into(),
        max_open_runs: Some(0),
        max_starts_per_second: Some(2),
        ..Default::default()
    })
    .await;
    h.start("lim", "e").await.unwrap();
    h.start("lim", "f").await.unwrap();
    let m = exhausted(h.start("lim", "g").await);
    assert!(
        m.contains("max starts per second 2") && m.contains("\"lim\"") && m.contains("retry in 500 ms"),
        "{m}"
    );
    assert!(matches!(
        h.client.describe_run("lim", "g").await,
        Err(ClientError::NotFound(_))
    ));
    h.advance(500);
    h.start("lim", "g").await.unwrap();
    assert!(exhausted(h.start("lim", "h").await).contains("max starts per second 2"));

    // A schedule's fire passes the same check: refused, it counts as start_failed.
    h.update(UpdateNamespaceRequest {
        name: "lim".into(),
        max_open_runs: Some(1),
        max_starts_per_second: Some(0),
        ..Default::default()
    })
    .await;
    h.client
        .create_schedule(v1::CreateScheduleRequest {
            namespace: "lim".into(),
            schedule_id: "every-minute".into(),
            spec: Some(v1::ScheduleSpec {
                interval: "every 1m".into(),
                ..Default::default()
            }),
            action: Some(v1::ScheduleAction {
                workflow_id: "one".into(),
                goal: "tick".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    h.advance(60_000);
    h.until_metric(
        "railyard_schedule_fires_total{namespace=\"lim\",schedule=\"every-minute\",reason=\"start_failed\"} ",
        1,
    )
    .await;
    let before: BTreeSet<String> = h.run_ids("lim").await;
    assert!(
        before.iter().all(|id| !id.starts_with("every-minute")),
        "{before:?}"
    );

    // Bad settings are refused by name and change nothing.
    for (req, field) in [
        (
            UpdateNamespaceRequest {
                name: "lim".into(),
                retention_seconds: Some(5),
                ..Default::default()
            },
            "retention_seconds",
        ),
        (
            UpdateNamespaceRequest {
                name: "lim".into(),
                retention_seconds: Some(-1),
                ..Default::default()
            },
            "retention_seconds",
        ),
        (
            UpdateNamespaceRequest {
                name: "lim".into(),
                max_pending_signals: Some(u64::MAX),
                ..Default::default()
            },
            "max_pending_signals",
        ),
    ] {
        match h.client.update_namespace_with(req).await {
            Err(ClientError::InvalidArgument(m)) => assert!(m.starts_with(field), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    let now = h.client.describe_namespace("lim").await.unwrap();
    assert_eq!(now.retention_seconds, 30 * 86_400);
    assert_eq!(now.limits.unwrap().max_pending_signals, 3);
    h.server.shutdown().await;
}

#[tokio::test]
async fn a_namespace_with_schedules_is_not_deleted() {
    let h = harness().await;
    h.client.create_namespace("sched", "").await.unwrap();
    for id in ["a", "b"] {
        h.client
            .create_schedule(v1::CreateScheduleRequest {
                namespace: "sched".into(),
                schedule_id: id.into(),
                spec: Some(v1::ScheduleSpec {
                    interval: "every 1h".into(),
                    ..Default::default()
                }),
                action: Some(v1::ScheduleAction {
                    workflow_id: "one".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    match h.client.delete_namespace("sched").await {
        Err(ClientError::FailedPrecondition(m)) => {
            assert!(m.contains("\"sched\" still holds 2 schedules"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.client.describe_namespace("sched").await.unwrap().name, "sched");
    h.client.delete_schedule("sched", "a").await.unwrap();
    match h.client.delete_namespace("sched").await {
        Err(ClientError::FailedPrecondition(m)) => assert!(m.contains("still holds 1 schedule;"), "{m}"),
        other => panic!("{other:?}"),
    }
    h.client.delete_schedule("sched", "b").await.unwrap();
    h.client.delete_namespace("sched").await.unwrap();
    h.server.shutdown().await;
}

/// The layout-2 fixture (`upgrade.rs`): written by a release from before the close
/// index, retention and per-run signal keys.
#[tokio::test]
async fn an_old_data_directory_opens_and_its_closed_runs_are_purged() {
    if !support::redb_only(
        "an_old_data_directory_opens_and_its_closed_runs_are_purged",
        "its fixture is an old redb file",
    ) {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/tests/fixtures/layout2");
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("fixture.json")).unwrap()).unwrap();
    let data = tempfile::tempdir().unwrap();
    for file in ["railyard.redb", "keys.json"] {
        std::fs::copy(fixture.join("data").join(file), data.path().join(file)).unwrap();
    }
    let dirs = Dirs {
        clock: ManualClock::new(recorded["left_at_ms"].as_i64().unwrap()),
        data,
        workflows: fixture.join("workflows"),
        _workflows_dir: None,
    };
    let h = dirs.start(100).await;
    let all = h.run_ids("default").await;
    assert_eq!(all.len(), 5, "{all:?}");
    assert_eq!(h.metric(&purged("default")).await, 0);
    // "done" closed before the fixture was left; the other four are open.
    h.advance(31 * DAY);
    h.until_metric(&purged("default"), 1).await;
    assert!(h.gone("default", "done").await);
    let left = h.run_ids("default").await;
    assert_eq!(
        left,
        ["backoff", "leased", "queued", "signalled"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    // Its start's request id went with it.
    let again = h
        .client
        .start_run_with(v1::StartRunRequest {
            namespace: "default".into(),
            workflow_id: "fixture".into(),
            run_id: "done-again".into(),
            request_id: "req-done".into(),
            context: HashMap::new(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(again.started);
    h.server.shutdown().await;
}
