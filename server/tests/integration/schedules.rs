//! Schedules over real gRPC, a real redb file and a `ManualClock`: the operations,
//! each overlap policy through real runs worked by a `StepWorker`, restarts (with
//! catch-up inside and outside the window), and bad input.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::schedules_client::SchedulesClient;
use railyard_proto::v1::{self, OverlapPolicy};
use railyard_sdk::{Client, Completion, Failure, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use tonic::Code;
use tonic::transport::Channel;

use crate::support;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One step","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;
const MIN: i64 = 60_000;

struct Server {
    server: RunningServer,
    client: Client,
    sched: SchedulesClient<Channel>,
}

async fn start_in(data: &Path, workflows: &Path, clock: &ManualClock) -> Server {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(clock.clone());
    let (server, client) = support::start(config).await;
    let url = format!("http://{}", server.grpc_addr);
    let sched = SchedulesClient::new(Channel::from_shared(url).unwrap().connect_lazy());
    Server {
        server,
        client,
        sched,
    }
}

struct Harness {
    s: Server,
    clock: ManualClock,
    data: tempfile::TempDir,
    workflows: tempfile::TempDir,
}

async fn harness() -> Harness {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let clock = ManualClock::new(T0);
    let s = start_in(data.path(), workflows.path(), &clock).await;
    Harness {
        s,
        clock,
        data,
        workflows,
    }
}

fn request(id: &str, interval: &str, overlap: OverlapPolicy) -> v1::CreateScheduleRequest {
    v1::CreateScheduleRequest {
        namespace: "default".into(),
        schedule_id: id.into(),
        spec: Some(v1::ScheduleSpec {
            interval: interval.into(),
            ..Default::default()
        }),
        action: Some(v1::ScheduleAction {
            workflow_id: "one".into(),
            goal: "report for {{scheduledTime}} by {{scheduleId}}".into(),
            context: HashMap::from([("when".to_string(), "{{scheduledTime}}".to_string())]),
            ..Default::default()
        }),
        policies: Some(v1::SchedulePolicies {
            overlap: overlap as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The run id of `id`'s fire due at `ms`.
fn run_id(id: &str, ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    format!("{id}-{}", t.format("%Y-%m-%dT%H:%M:%S%.3fZ"))
}

impl Harness {
    async fn create(&self, req: v1::CreateScheduleRequest) {
        self.s.sched.clone().create_schedule(req).await.unwrap();
    }

    async fn describe(&self, id: &str) -> v1::ScheduleInfo {
        self.s
            .sched
            .clone()
            .describe_schedule(v1::DescribeScheduleRequest {
                namespace: "default".into(),
                schedule_id: id.into(),
                next_fire_count: 3,
            })
            .await
            .unwrap()
            .into_inner()
            .schedule
            .unwrap()
    }

    /// Waits (in real time, generously) until the schedule satisfies `ok`.
    async fn until(&self, id: &str, what: &str, ok: impl Fn(&v1::ScheduleInfo) -> bool) -> v1::ScheduleInfo {
        for _ in 0..1000 {
            let info = self.describe(id).await;
            if ok(&info) {
                return info;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{id}: {what}: {:#?}", self.describe(id).await);
    }

    fn state(info: &v1::ScheduleInfo) -> v1::ScheduleState {
        info.state.clone().unwrap()
    }

    async fn patch(
        &self,
        id: &str,
        f: impl FnOnce(&mut v1::PatchScheduleRequest),
    ) -> Result<v1::PatchScheduleResponse, tonic::Status> {
        let mut req = v1::PatchScheduleRequest {
            namespace: "default".into(),
            schedule_id: id.into(),
            ..Default::default()
        };
        f(&mut req);
        self.s
            .sched
            .clone()
            .patch_schedule(req)
            .await
            .map(|r| r.into_inner())
    }

    async fn status(&self, run_id: &str) -> v1::RunStatus {
        self.s
            .client
            .describe_run("default", run_id)
            .await
            .unwrap()
            .run
            .unwrap()
            .status()
    }

    fn worker(&self) -> StepWorker {
        StepWorker::new(self.s.client.clone(), "default", "default", "w")
    }

    fn advance(&self, ms: i64) {
        self.clock.advance(Duration::from_millis(ms as u64));
    }

    async fn restart(self, jump: i64) -> Self {
        let Harness {
            s,
            clock,
            data,
            workflows,
        } = self;
        s.server.shutdown().await;
        clock.advance(Duration::from_millis(jump as u64));
        let s = start_in(data.path(), workflows.path(), &clock).await;
        Harness {
            s,
            clock,
            data,
            workflows,
        }
    }

    /// Every run in the namespace, by id.
    async fn run_ids(&self) -> BTreeSet<String> {
        let runs = self
            .s
            .client
            .list_runs(v1::ListRunsRequest {
                namespace: "default".into(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        runs.runs.into_iter().map(|r| r.run_id).collect()
    }
}

async fn poll(w: &StepWorker) -> v1::StepTask {
    w.poll(Duration::from_secs(10)).await.unwrap().expect("a task")
}

#[tokio::test]
async fn create_describe_list_update_pause_and_delete() {
    let h = harness().await;
    let mut req = request("nightly", "every 1m", OverlapPolicy::Unspecified);
    req.request_id = "req-1".into();
    req.memo = "the nightly report".into();
    h.create(req.clone()).await;
    // The same request again is a success that changes nothing; another is a duplicate.
    h.create(req.clone()).await;
    req.request_id = "req-2".into();
    let dup = h.s.sched.clone().create_schedule(req).await.unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists, "{dup:?}");
    assert!(dup.message().contains("\"nightly\""), "{}", dup.message());

    let info = h.describe("nightly").await;
    assert_eq!(
        info.next_fire_times_unix_ms,
        vec![T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]
    );
    assert_eq!(info.spec.unwrap().interval, "every 1m");
    assert_eq!(info.policies.unwrap().overlap(), OverlapPolicy::Skip);
    assert_eq!(info.memo, "the nightly report");
    assert_eq!(info.create_time_unix_ms, T0);

    let list =
        h.s.sched
            .clone()
            .list_schedules(v1::ListSchedulesRequest {
                namespace: "default".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(list.schedules.len(), 1);
    let row = &list.schedules[0];
    assert_eq!(
        (
            row.schedule_id.as_str(),
            row.workflow_id.as_str(),
            row.spec_summary.as_str()
        ),
        ("nightly", "one", "every 1m")
    );
    assert_eq!(row.next_fire_time_unix_ms, T0 + MIN);

    // Update: a new spec from now on, the state kept.
    let mut up = request("nightly", "every 5m", OverlapPolicy::BufferOne);
    let update = v1::UpdateScheduleRequest {
        namespace: "default".into(),
        schedule_id: "nightly".into(),
        spec: up.spec.take(),
        action: up.action.take(),
        policies: up.policies.take(),
        remaining_actions: 2,
        ..Default::default()
    };
    h.s.sched.clone().update_schedule(update).await.unwrap();
    let info = h.describe("nightly").await;
    assert_eq!(info.next_fire_times_unix_ms, vec![T0 + 5 * MIN, T0 + 10 * MIN]);
    assert_eq!(Harness::state(&info).remaining_actions, 2);

    h.patch("nightly", |p| {
        p.pause = true;
        p.note = "holiday".into();
    })
    .await
    .unwrap();
    let info = h.describe("nightly").await;
    assert!(Harness::state(&info).paused);
    assert_eq!(Harness::state(&info).note, "holiday");
    assert!(info.next_fire_times_unix_ms.is_empty());
    h.advance(30 * MIN);
    h.patch("nightly", |p| p.unpause = true).await.unwrap();
    let info = h.describe("nightly").await;
    assert_eq!(info.next_fire_times_unix_ms, vec![T0 + 35 * MIN, T0 + 40 * MIN]);
    assert_eq!(
        Harness::state(&info).total_actions,
        0,
        "nothing fired while paused"
    );

    h.s.sched
        .clone()
        .delete_schedule(v1::DeleteScheduleRequest {
            namespace: "default".into(),
            schedule_id: "nightly".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let gone =
        h.s.sched
            .clone()
            .describe_schedule(v1::DescribeScheduleRequest {
                namespace: "default".into(),
                schedule_id: "nightly".into(),
                next_fire_count: 0,
            })
            .await
            .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    h.advance(10 * MIN);
    assert!(h.run_ids().await.is_empty(), "a deleted schedule fires nothing");
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn skip_fires_real_runs_exactly_once_across_restarts() {
    let h = harness().await;
    h.create(request("hourly", "every 1m", OverlapPolicy::Skip)).await;
    h.advance(MIN);
    let first = run_id("hourly", T0 + MIN);
    h.until("hourly", "first fire", |i| {
        Harness::state(i).running_run_ids == vec![first.clone()]
    })
    .await;
    let run =
        h.s.client
            .describe_run("default", &first)
            .await
            .unwrap()
            .run
            .unwrap();
    assert_eq!(run.goal, "report for 2026-01-01T00:01:00Z by hourly");
    // The worker holds the step past the next due time: that fire is skipped.
    let w = h.worker();
    let task = poll(&w).await;
    assert_eq!(task.run_id, first);
    h.advance(MIN);
    let info = h
        .until("hourly", "skip", |i| Harness::state(i).skipped_overlap == 1)
        .await;
    assert_eq!(info.recent_missed[0].scheduled_time_unix_ms, T0 + 2 * MIN);
    assert_eq!(info.recent_missed[0].reason, "skipped_overlap");
    w.complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    let info = h
        .until("hourly", "completion seen", |i| {
            Harness::state(i).running_run_ids.is_empty()
        })
        .await;
    assert_eq!(info.recent_actions[0].status(), v1::RunStatus::Completed);

    // Restart twice, the clock moving on; every due time is started once.
    let h = h.restart(MIN).await;
    h.until("hourly", "fire after restart", |i| {
        Harness::state(i).total_actions == 2
    })
    .await;
    let h = h.restart(0).await;
    let w = h.worker();
    let task = poll(&w).await;
    w.complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    h.advance(MIN);
    h.until("hourly", "fourth minute", |i| {
        Harness::state(i).total_actions == 3
    })
    .await;
    let h = h.restart(0).await;
    let info = h.describe("hourly").await;
    assert_eq!(Harness::state(&info).total_actions, 3);
    assert_eq!(
        h.run_ids().await,
        [1, 3, 4].map(|m| run_id("hourly", T0 + m * MIN)).into()
    );
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn catch_up_after_downtime_inside_and_outside_the_window() {
    let h = harness().await;
    let mut narrow = request("narrow", "every 1m", OverlapPolicy::AllowAll);
    narrow.policies.as_mut().unwrap().catchup_window_ms = 150_000;
    h.create(narrow).await;
    h.create(request("wide", "every 1m", OverlapPolicy::Skip)).await;
    // Down for ten minutes.
    let h = h.restart(10 * MIN + 5_000).await;
    let info = h
        .until("narrow", "catch-up", |i| Harness::state(i).total_actions == 3)
        .await;
    assert_eq!(Harness::state(&info).missed_catchup_window, 7);
    assert!(
        info.recent_missed
            .iter()
            .all(|m| m.reason == "missed_catchup_window")
    );
    let info = h
        .until("wide", "catch-up", |i| Harness::state(i).skipped_overlap == 9)
        .await;
    assert_eq!(Harness::state(&info).total_actions, 1);
    assert_eq!(info.recent_actions[0].scheduled_time_unix_ms, T0 + MIN);
    let runs = h.run_ids().await;
    let mut want: BTreeSet<String> = (8..=10).map(|m| run_id("narrow", T0 + m * MIN)).collect();
    want.insert(run_id("wide", T0 + MIN));
    assert_eq!(runs, want);
    // Counted where an alert can see them.
    let text = support::metrics(h.s.server.http_addr).await;
    for want in [
        r#"railyard_schedule_fires_total{namespace="default",schedule="narrow",reason="taken"} 3"#,
        r#"railyard_schedule_fires_total{namespace="default",schedule="narrow",reason="missed_catchup_window"} 7"#,
        r#"railyard_schedule_fires_total{namespace="default",schedule="wide",reason="taken"} 1"#,
        r#"railyard_schedule_fires_total{namespace="default",schedule="wide",reason="skipped_overlap"} 9"#,
        r#"railyard_schedule_fires_total{namespace="default",schedule="wide",reason="buffer_overflow"} 0"#,
        r#"railyard_schedules{namespace="default"} 2"#,
    ] {
        assert!(text.lines().any(|l| l == want), "{want} not in:\n{text}");
    }
    // Another restart changes nothing.
    let h = h.restart(0).await;
    assert_eq!(h.run_ids().await, want);
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn terminate_other_and_cancel_other_through_real_runs() {
    let h = harness().await;
    h.create(request("term", "every 1m", OverlapPolicy::TerminateOther))
        .await;
    h.advance(MIN);
    let first = run_id("term", T0 + MIN);
    h.until("term", "first", |i| Harness::state(i).total_actions == 1)
        .await;
    h.advance(MIN);
    let second = run_id("term", T0 + 2 * MIN);
    h.until("term", "second", |i| {
        Harness::state(i).running_run_ids == vec![second.clone()]
    })
    .await;
    assert_eq!(h.status(&first).await, v1::RunStatus::Terminated);
    assert_eq!(h.status(&second).await, v1::RunStatus::Running);
    h.s.sched
        .clone()
        .delete_schedule(v1::DeleteScheduleRequest {
            namespace: "default".into(),
            schedule_id: "term".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    h.s.client
        .terminate_run(v1::TerminateRunRequest {
            run_id: second,
            ..Default::default()
        })
        .await
        .unwrap();

    h.create(request("cancel", "every 1m", OverlapPolicy::CancelOther))
        .await;
    h.advance(MIN);
    let first = run_id("cancel", T0 + 3 * MIN);
    h.until("cancel", "first", |i| Harness::state(i).total_actions == 1)
        .await;
    let w = h.worker();
    let task = poll(&w).await;
    assert_eq!(task.run_id, first);
    h.advance(MIN);
    let info = h.until("cancel", "buffered", |i| i.buffered.len() == 1).await;
    assert_eq!(info.buffered[0].scheduled_time_unix_ms, T0 + 4 * MIN);
    let hb = w.heartbeat(&task.task_token).send().await.unwrap();
    assert!(hb.cancel_requested, "the open run was asked to cancel");
    assert_eq!(h.status(&first).await, v1::RunStatus::Running);
    let f = Failure {
        error_type: "canceled".into(),
        ..Default::default()
    };
    w.fail(&task.task_token, f).await.unwrap();
    let second = run_id("cancel", T0 + 4 * MIN);
    h.until("cancel", "started after the close", |i| {
        Harness::state(i).running_run_ids == vec![second.clone()]
    })
    .await;
    assert_eq!(h.status(&first).await, v1::RunStatus::Canceled);
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn buffer_all_drains_in_order_and_allow_all_overlaps() {
    let h = harness().await;
    h.create(request("buf", "every 1m", OverlapPolicy::BufferAll))
        .await;
    h.advance(3 * MIN);
    let info = h.until("buf", "buffered", |i| i.buffered.len() == 2).await;
    assert_eq!(
        info.buffered
            .iter()
            .map(|b| b.scheduled_time_unix_ms)
            .collect::<Vec<_>>(),
        vec![T0 + 2 * MIN, T0 + 3 * MIN]
    );
    let w = h.worker();
    for m in 1..=3 {
        let task = poll(&w).await;
        assert_eq!(task.run_id, run_id("buf", T0 + m * MIN));
        w.complete(&task.task_token, Completion::notes("ok"))
            .await
            .unwrap();
    }
    let info = h
        .until("buf", "drained", |i| Harness::state(i).running_run_ids.is_empty())
        .await;
    assert!(info.buffered.is_empty());
    h.s.sched
        .clone()
        .delete_schedule(v1::DeleteScheduleRequest {
            namespace: "default".into(),
            schedule_id: "buf".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    h.create(request("all", "every 1m", OverlapPolicy::AllowAll))
        .await;
    h.advance(3 * MIN);
    let info = h
        .until("all", "overlapping", |i| {
            Harness::state(i).running_run_ids.len() == 3
        })
        .await;
    assert_eq!(Harness::state(&info).skipped_overlap, 0);
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn pause_on_failure_trigger_and_backfill() {
    let h = harness().await;
    let mut req = request("fragile", "every 1h", OverlapPolicy::Skip);
    req.policies.as_mut().unwrap().pause_on_failure = true;
    h.create(req).await;
    // Trigger now: a run at once, named by the trigger's time.
    let now = T0 + 5_000;
    h.advance(5_000);
    let triggered = h
        .patch("fragile", |p| p.trigger = Some(v1::ScheduleTrigger::default()))
        .await
        .unwrap();
    assert_eq!(triggered.triggered_run_id, run_id("fragile", now));
    let w = h.worker();
    let task = poll(&w).await;
    let failure = Failure {
        error_type: "tool_error".into(),
        message: "bash exited 2".into(),
        non_retryable: true,
        ..Default::default()
    };
    w.fail(&task.task_token, failure).await.unwrap();
    let info = h.until("fragile", "paused", |i| Harness::state(i).paused).await;
    let note = Harness::state(&info).note;
    assert!(
        note.contains(&triggered.triggered_run_id) && note.contains("FAILED"),
        "{note}"
    );
    assert!(note.contains("bash exited 2"), "{note}");
    assert_eq!(info.recent_actions[0].origin, "trigger");
    assert!(info.next_fire_times_unix_ms.is_empty());

    // Backfill the last hours: buffered behind each other by default, even paused.
    h.advance(3 * 60 * MIN);
    let err = h
        .patch("fragile", |p| {
            p.backfill = vec![v1::ScheduleBackfill {
                start_time_unix_ms: T0,
                end_time_unix_ms: T0 + 10 * 60 * MIN,
                ..Default::default()
            }]
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("future"), "{}", err.message());
    h.patch("fragile", |p| {
        p.unpause = true;
        p.backfill = vec![v1::ScheduleBackfill {
            start_time_unix_ms: T0 + 1,
            end_time_unix_ms: T0 + 2 * 60 * MIN,
            ..Default::default()
        }];
    })
    .await
    .unwrap();
    for h_ in 1..=2 {
        let task = poll(&w).await;
        assert_eq!(task.run_id, run_id("fragile", T0 + h_ * 60 * MIN));
        w.complete(&task.task_token, Completion::notes("ok"))
            .await
            .unwrap();
    }
    let info = h
        .until("fragile", "backfilled", |i| {
            Harness::state(i).running_run_ids.is_empty()
        })
        .await;
    assert_eq!(
        info.recent_actions
            .iter()
            .filter(|a| a.origin == "backfill")
            .count(),
        2
    );
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn lists_page_and_a_repeated_patch_is_applied_once() {
    let h = harness().await;
    for id in ["c", "a", "b"] {
        h.create(request(id, "every 1h", OverlapPolicy::AllowAll)).await;
    }
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let page =
            h.s.sched
                .clone()
                .list_schedules(v1::ListSchedulesRequest {
                    namespace: "default".into(),
                    page_size: 2,
                    page_token: token,
                })
                .await
                .unwrap()
                .into_inner();
        assert!(page.schedules.len() <= 2);
        ids.extend(page.schedules.into_iter().map(|s| s.schedule_id));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(ids, ["a", "b", "c"]);

    let trigger = |p: &mut v1::PatchScheduleRequest| {
        p.trigger = Some(v1::ScheduleTrigger::default());
        p.request_id = "once".into();
    };
    let first = h.patch("a", trigger).await.unwrap();
    assert_eq!(first.triggered_run_id, run_id("a", T0));
    h.advance(1);
    let again = h.patch("a", trigger).await.unwrap();
    assert_eq!(again.triggered_run_id, "", "a retried patch changes nothing");
    let info = h.describe("a").await;
    assert_eq!(Harness::state(&info).total_actions, 1);
    assert_eq!(h.run_ids().await, [run_id("a", T0)].into());
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn bad_specs_unknown_workflows_and_bad_patches_get_clear_errors() {
    let h = harness().await;
    let refused = |req: v1::CreateScheduleRequest| {
        let mut c = h.s.sched.clone();
        async move { c.create_schedule(req).await.unwrap_err() }
    };
    let mut bad_cron = request("bad", "", OverlapPolicy::Skip);
    bad_cron.spec = Some(v1::ScheduleSpec {
        cron: vec!["0 9 * * *".into(), "0 25 * * *".into()],
        ..Default::default()
    });
    let e = refused(bad_cron).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.message(),
        r#"spec: cron[1] "0 25 * * *": hour field: 25 is out of range 0-23"#
    );

    let mut zone = request("bad", "", OverlapPolicy::Skip);
    zone.spec = Some(v1::ScheduleSpec {
        cron: vec!["0 9 * * *".into()],
        time_zone: "Mars/Olympus".into(),
        ..Default::default()
    });
    assert!(refused(zone).await.message().contains("Mars/Olympus"));

    let e = refused(request("bad", "every 0m", OverlapPolicy::Skip)).await;
    assert!(e.message().starts_with("spec: interval"), "{}", e.message());

    let mut unknown = request("bad", "every 1m", OverlapPolicy::Skip);
    unknown.action.as_mut().unwrap().workflow_id = "nope".into();
    let e = refused(unknown).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().starts_with(
            "action.workflow_id: workflow \"nope\" is neither loaded nor registered (known: one)"
        ),
        "{}",
        e.message()
    );

    let mut policy = request("bad", "every 1m", OverlapPolicy::Skip);
    policy.policies.as_mut().unwrap().overlap = 42;
    assert!(refused(policy).await.message().starts_with("policies.overlap"));
    let mut window = request("bad", "every 1m", OverlapPolicy::Skip);
    window.policies.as_mut().unwrap().catchup_window_ms = 10;
    assert!(
        refused(window)
            .await
            .message()
            .starts_with("policies.catchup_window_ms")
    );
    let mut jitter = request("bad", "every 1m", OverlapPolicy::Skip);
    jitter.spec.as_mut().unwrap().jitter_ms = 1500;
    assert!(refused(jitter).await.message().starts_with("spec.jitter_ms"));
    let e = refused(request(&"x".repeat(200), "every 1m", OverlapPolicy::Skip)).await;
    assert!(e.message().starts_with("schedule_id"), "{}", e.message());
    let mut big = request("bad", "every 1m", OverlapPolicy::Skip);
    big.action.as_mut().unwrap().goal = "{{scheduleId}}".repeat(5000);
    assert!(refused(big).await.message().starts_with("action"));
    let mut missing = request("bad", "every 1m", OverlapPolicy::Skip);
    missing.spec = None;
    assert_eq!(refused(missing).await.message(), "spec: missing");

    h.create(request("ok", "every 1m", OverlapPolicy::Skip)).await;
    let e = h.patch("ok", |_| {}).await.unwrap_err();
    assert!(e.message().starts_with("nothing to do"), "{}", e.message());
    let e = h
        .patch("ok", |p| {
            p.pause = true;
            p.unpause = true;
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = h.patch("missing", |p| p.pause = true).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // Nothing was written by any of them.
    let list =
        h.s.sched
            .clone()
            .list_schedules(v1::ListSchedulesRequest {
                namespace: "default".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(list.schedules.len(), 1);
    assert!(!Harness::state(&h.describe("ok").await).paused);
    h.s.server.shutdown().await;
}

#[tokio::test]
async fn a_schedules_search_attributes_are_set_on_each_run_it_starts() {
    let h = harness().await;
    let mut req = request("tagged", "every 1m", OverlapPolicy::AllowAll);
    let action = req.action.as_mut().unwrap();
    action.search_attributes.insert("team".into(), "infra".into());
    // Undeclared: refused naming it, and no schedule made.
    match h.s.sched.clone().create_schedule(req.clone()).await {
        Err(status) => assert!(status.message().contains("action.attributes"), "{status:?}"),
        Ok(_) => panic!("an undeclared attribute was accepted"),
    }
    h.s.client
        .add_search_attribute("default", "team", "keyword")
        .await
        .unwrap();
    h.create(req).await;
    h.advance(MIN);
    let first = run_id("tagged", T0 + MIN);
    h.until("tagged", "first fire", |i| {
        Harness::state(i).running_run_ids == vec![first.clone()]
    })
    .await;
    let run =
        h.s.client
            .describe_run("default", &first)
            .await
            .unwrap()
            .run
            .unwrap();
    let attrs: Vec<_> = run
        .search_attributes
        .iter()
        .map(|a| (a.name.as_str(), a.value.as_str()))
        .collect();
    assert_eq!(attrs, [("team", "infra")]);
}
