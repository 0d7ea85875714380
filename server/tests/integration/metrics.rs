//! `/metrics` over the real HTTP listener after real gRPC traffic: the RPC histograms
//! by method and code, the commit histograms, the counters under their names, and
//! the state gauges by namespace and queue matching what happened.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_sdk::{ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

use crate::support;

/// One step on queue `q`: a run is open until its step completes.
const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One step","taskQueue":"q",
  "steps":[{"id":"only","title":"Only","prompt":"Do {{goal}}"}]}"#;

struct Scrape {
    content_type: String,
    /// Series (name and labels, as printed) → value.
    series: BTreeMap<String, f64>,
    text: String,
}

impl Scrape {
    fn get(&self, series: &str) -> f64 {
        *self
            .series
            .get(series)
            .unwrap_or_else(|| panic!("{series} not in /metrics:\n{}", self.text))
    }
}

/// `GET /metrics` over HTTP/1.0 on the server's HTTP listener.
async fn scrape(server: &RunningServer) -> Scrape {
    let response = support::metrics(server.http_addr).await;
    let (head, text) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    let content_type = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').expect("a series line");
            (key.to_string(), value.parse().expect("a number"))
        })
        .collect();
    Scrape {
        content_type,
        series,
        text: text.to_string(),
    }
}

/// Scrapes until `series` reads `want`: for state another task is about to reach
/// (a poll parking). Bounded; not a timing assertion.
async fn scrape_until(server: &RunningServer, series: &str, want: f64) -> Scrape {
    for _ in 0..600 {
        let s = scrape(server).await;
        if s.series.get(series) == Some(&want) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{series} never reached {want}:\n{}", scrape(server).await.text);
}

fn rpc_count(s: &Scrape, service: &str, method: &str, code: &str) -> f64 {
    s.get(&format!(
        r#"railyard_rpc_duration_seconds_count{{service="{service}",method="{method}",code="{code}"}}"#
    ))
}

const BACKLOG: &str = r#"railyard_queue_backlog{namespace="default",queue="q"}"#;
const PARKED: &str = r#"railyard_parked_polls{namespace="default",queue="q"}"#;
const LEASES: &str = r#"railyard_active_leases{namespace="default"}"#;
const OPEN: &str = r#"railyard_open_runs{namespace="default"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_real_traffic() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    // The clock stands still, so no lease times out however slow the machine.
    config.clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (server, client) = support::start(config).await;
    let worker = StepWorker::new(client.clone(), "default", "q", "w1");

    let s = scrape(&server).await;
    assert!(
        s.content_type.starts_with("application/openmetrics-text"),
        "{}",
        s.content_type
    );
    assert!(s.text.trim_end().ends_with("# EOF"), "{}", s.text);
    assert_eq!(s.get(OPEN), 0.0);
    assert_eq!(s.get(LEASES), 0.0);

    // Two starts nobody has polled: a backlog of two, two open runs, no lease.
    for goal in ["a", "b"] {
        client
            .start_run("default", "one", goal, Default::default())
            .await
            .unwrap();
    }
    let s = scrape(&server).await;
    assert_eq!(s.get(BACKLOG), 2.0);
    assert_eq!(s.get(PARKED), 0.0);
    assert_eq!(s.get(OPEN), 2.0);
    assert_eq!(s.get(LEASES), 0.0);
    assert_eq!(s.get("railyard_runs_started_total"), 2.0);
    assert_eq!(rpc_count(&s, "railyard.v1.History", "StartRun", "OK"), 2.0);

    // One polled: one left in the backlog, one lease. Completed: the run closes.
    let task = worker
        .poll(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a task");
    let s = scrape(&server).await;
    assert_eq!((s.get(BACKLOG), s.get(LEASES), s.get(OPEN)), (1.0, 1.0, 2.0));
    worker
        .complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    let s = scrape(&server).await;
    assert_eq!((s.get(BACKLOG), s.get(LEASES), s.get(OPEN)), (1.0, 0.0, 1.0));
    assert_eq!(s.get("railyard_steps_completed_total"), 1.0);

    // The second, then a poll that finds nothing and parks.
    let task = worker
        .poll(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a task");
    worker
        .complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    let parked_worker = worker.clone();
    let parked = tokio::spawn(async move { parked_worker.poll(Duration::from_secs(30)).await });
    let s = scrape_until(&server, PARKED, 1.0).await;
    assert_eq!((s.get(BACKLOG), s.get(OPEN)), (0.0, 0.0));
    // A start hands its step straight to the parked poll.
    client
        .start_run("default", "one", "c", Default::default())
        .await
        .unwrap();
    let task = parked
        .await
        .unwrap()
        .unwrap()
        .expect("the parked poll got the step");
    let s = scrape(&server).await;
    assert_eq!(
        (s.get(BACKLOG), s.get(PARKED), s.get(LEASES), s.get(OPEN)),
        (0.0, 0.0, 1.0, 1.0)
    );
    assert_eq!(task.goal, "c");

    // A refused request is counted under its code.
    let missing = client.describe_run("default", "no-such-run").await;
    assert!(matches!(missing, Err(ClientError::NotFound(_))), "{missing:?}");
    // A poll that waits out its time answers empty; one whose client gives up is
    // counted as cancelled once the server sees the request go.
    assert!(worker.poll(Duration::from_millis(50)).await.unwrap().is_none());
    let gone_worker = worker.clone();
    let gone = tokio::spawn(async move { gone_worker.poll(Duration::from_secs(30)).await });
    scrape_until(&server, PARKED, 1.0).await;
    gone.abort();
    let cancelled = r#"railyard_rpc_duration_seconds_count{service="railyard.v1.Tasks",method="PollStepTask",code="CANCELLED"}"#;
    scrape_until(&server, cancelled, 1.0).await;
    scrape_until(&server, PARKED, 0.0).await;

    let s = scrape(&server).await;
    assert_eq!(rpc_count(&s, "railyard.v1.History", "StartRun", "OK"), 3.0);
    assert_eq!(rpc_count(&s, "railyard.v1.Tasks", "PollStepTask", "OK"), 4.0);
    assert_eq!(rpc_count(&s, "railyard.v1.Tasks", "CompleteStepTask", "OK"), 2.0);
    assert_eq!(
        rpc_count(&s, "railyard.v1.History", "DescribeRun", "NOT_FOUND"),
        1.0
    );
    assert_eq!(s.get("railyard_polls_total"), 5.0);
    assert_eq!(s.get("railyard_polls_empty_total"), 1.0);
    // Every commit is in both commit histograms, and the batch sizes add up.
    let commits = s.get("railyard_commits_total");
    assert!(commits >= 1.0);
    assert_eq!(s.get("railyard_commit_duration_seconds_count"), commits);
    assert_eq!(s.get("railyard_commit_batch_commands_count"), commits);
    assert_eq!(
        s.get("railyard_commit_batch_commands_sum"),
        s.get("railyard_commands_committed_total")
    );
    assert_eq!(
        s.get(r#"railyard_commit_batch_commands_bucket{le="+Inf"}"#),
        commits
    );
    server.shutdown().await;
}
