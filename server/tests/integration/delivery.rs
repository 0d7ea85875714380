//! Result delivery over real gRPC, a real redb file, real HTTP to a local receiver
//! (axum on a free port) and a `ManualClock`, so backoffs need no real waiting: a
//! receiver that fails twice then succeeds, one that never answers (the retry
//! budget ends in FAILED, and a redelivery then succeeds), a subscription filtered
//! by outcome, and bad input.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use railyard_engine::clock::{Clock, ManualClock};
use railyard_engine::delivery::sign::{SIGNATURE_HEADER, verify};
use railyard_engine::delivery::{DeliverySettings, SigningSecret};
use railyard_proto::v1::{self, DeliveryState, RunStatus};
use railyard_sdk::{Client, Completion, Failure, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use serde_json::Value;
use tonic::Code;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One step","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;

/// A step with an output contract, then one without.
const JUDGED: &str = r#"{"id":"judged","version":"1","name":"Judged","steps":[
  {"id":"a","title":"A","prompt":"Judge {{goal}}","output":{"type":"object",
   "properties":{"verdict":{"type":"string"}},"required":["verdict"]}},
  {"id":"b","title":"B","prompt":"Report"}]}"#;

const T0: i64 = 1_767_225_600_000;
const SECRET: &str = "whsec-test";

/// What the receiver answers each request with, in order; `None` never answers.
/// When the script runs out, it answers 200.
pub(crate) type Script = Arc<Mutex<VecDeque<Option<u16>>>>;

/// A request the receiver got, with whether its signature verified.
#[derive(Debug, Clone)]
pub(crate) struct Got {
    body: Value,
    verified: bool,
    attempt_header: String,
}

pub(crate) struct Receiver {
    pub(crate) url: String,
    pub(crate) script: Script,
    pub(crate) got: Arc<Mutex<Vec<Got>>>,
}

pub(crate) async fn receiver(clock: ManualClock) -> Receiver {
    let script: Script = Arc::default();
    let got: Arc<Mutex<Vec<Got>>> = Arc::default();
    let (s, g) = (script.clone(), got.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (s, g, clock) = (s.clone(), g.clone(), clock.clone());
            async move {
                let secret = SigningSecret::new(SECRET).unwrap();
                let sig = headers
                    .get(SIGNATURE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let verified = verify(&secret, sig, &body, clock.now_ms() / 1000, 300).is_ok();
                g.lock().unwrap().push(Got {
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    verified,
                    attempt_header: headers
                        .get("railyard-delivery-attempt")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string(),
                });
                let next = s.lock().unwrap().pop_front().unwrap_or(Some(200));
                match next {
                    Some(code) => StatusCode::from_u16(code).unwrap(),
                    None => std::future::pending().await,
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver { url, script, got }
}

pub(crate) struct Harness {
    pub(crate) server: RunningServer,
    pub(crate) client: Client,
    pub(crate) clock: ManualClock,
    _data: tempfile::TempDir,
    _workflows: tempfile::TempDir,
}

pub(crate) fn settings(secret: bool) -> DeliverySettings {
    DeliverySettings {
        signing_secret: if secret { SigningSecret::new(SECRET) } else { None },
        max_attempts: 3,
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(20),
        request_timeout: Duration::from_millis(400),
        // The receivers are on loopback, which is refused unless listed.
        allow_networks: vec!["127.0.0.0/8".parse().unwrap()],
        ..Default::default()
    }
}

async fn start(
    data: &Path,
    workflows: &Path,
    clock: &ManualClock,
    delivery: DeliverySettings,
) -> RunningServer {
    let mut config = ServerConfig::new(data, workflows);
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.clock = Arc::new(clock.clone());
    config.delivery = delivery;
    crate::support::serve(config).await
}

pub(crate) async fn harness_with(delivery: DeliverySettings) -> Harness {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    std::fs::write(workflows.path().join("judged.json"), JUDGED).unwrap();
    let clock = ManualClock::new(T0);
    let server = start(data.path(), workflows.path(), &clock, delivery).await;
    let client = Client::connect(&format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    Harness {
        server,
        client,
        clock,
        _data: data,
        _workflows: workflows,
    }
}

impl Harness {
    /// Starts a run of `one` and works its step: completes it, or fails it for good.
    pub(crate) async fn run(&self, run_id: &str, callback: &str, complete: bool) {
        self.client
            .start_run_with(v1::StartRunRequest {
                namespace: "default".into(),
                workflow_id: "one".into(),
                goal: "ship it".into(),
                run_id: run_id.into(),
                callback_url: callback.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let w = StepWorker::new(self.client.clone(), "default", "default", "w");
        let task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
        assert_eq!(task.run_id, run_id);
        if complete {
            let done = Completion {
                notes: "shipped v1".into(),
                artifacts: vec!["CHANGELOG.md".into()],
                ..Default::default()
            };
            w.complete(&task.task_token, done).await.unwrap();
        } else {
            let failure = Failure {
                error_type: "broken".into(),
                message: "it broke".into(),
                non_retryable: true,
                ..Default::default()
            };
            w.fail(&task.task_token, failure).await.unwrap();
        }
    }

    pub(crate) async fn history(&self, run_id: &str) -> Vec<v1::HistoryEvent> {
        self.client.full_history("default", run_id).await.unwrap()
    }

    pub(crate) async fn count(&self, run_id: &str, event_type: &str) -> usize {
        self.history(run_id)
            .await
            .iter()
            .filter(|e| e.event_type == event_type)
            .count()
    }

    /// Waits (real time, bounded) until the run's history has `n` events of `event_type`.
    pub(crate) async fn wait_for(&self, run_id: &str, event_type: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let have = self.count(run_id, event_type).await;
            if have >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "run {run_id}: {have} {event_type} events, waited for {n}: {:#?}",
                self.history(run_id).await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn describe(&self, run_id: &str) -> v1::RunInfo {
        self.client
            .describe_run("default", run_id)
            .await
            .unwrap()
            .run
            .unwrap()
    }

    pub(crate) async fn redeliver(&self, run_id: &str) -> Result<Vec<String>, railyard_sdk::ClientError> {
        self.client
            .redeliver_result(v1::RedeliverResultRequest {
                namespace: "default".into(),
                run_id: run_id.into(),
                ..Default::default()
            })
            .await
    }
}

pub(crate) fn attrs(e: &v1::HistoryEvent) -> Value {
    serde_json::from_str(&e.attributes_json).unwrap()
}

#[tokio::test]
async fn a_receiver_that_fails_twice_then_succeeds_gets_three_signed_attempts() {
    let h = harness_with(settings(true)).await;
    let r = receiver(h.clock.clone()).await;
    r.script.lock().unwrap().extend([Some(503), Some(500)]);
    h.run("r1", &r.url, true).await;
    for failures in 1..=2 {
        h.wait_for("r1", "DeliveryFailed", failures).await;
        // The backoff is on the server's clock: nothing happens until it moves.
        h.clock.advance(Duration::from_secs(30));
    }
    h.wait_for("r1", "DeliverySucceeded", 1).await;

    let got = r.got.lock().unwrap().clone();
    assert_eq!(got.len(), 3, "{got:#?}");
    assert!(
        got.iter().all(|g| g.verified),
        "every attempt is signed: {got:#?}"
    );
    assert_eq!(
        got.iter().map(|g| g.attempt_header.as_str()).collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
    let body = &got[2].body;
    assert_eq!(body["runId"], "r1");
    assert_eq!(body["namespace"], "default");
    assert_eq!(body["workflowId"], "one");
    assert_eq!(body["status"], "COMPLETED");
    assert_eq!(body["steps"][0]["notes"], "shipped v1");
    assert_eq!(body["artifacts"][0], "CHANGELOG.md");
    assert_eq!(body["delivery"]["attempt"], 3);
    assert_eq!(body["delivery"]["target"], "callback");

    let history = h.history("r1").await;
    let types: Vec<&str> = history
        .iter()
        .map(|e| e.event_type.as_str())
        .filter(|t| t.starts_with("Delivery"))
        .collect();
    assert_eq!(
        types,
        [
            "DeliveryAttempted",
            "DeliveryFailed",
            "DeliveryAttempted",
            "DeliveryFailed",
            "DeliveryAttempted",
            "DeliverySucceeded"
        ]
    );
    let failed = history.iter().find(|e| e.event_type == "DeliveryFailed").unwrap();
    assert_eq!(attrs(failed)["error"], "HTTP 503");
    assert_eq!(attrs(failed)["willRetry"], true);
    let ok = history
        .iter()
        .find(|e| e.event_type == "DeliverySucceeded")
        .unwrap();
    assert_eq!(attrs(ok)["httpStatus"], 200);
    assert_eq!(attrs(ok)["attempt"], 3);

    let run = h.describe("r1").await;
    assert_eq!(run.status, RunStatus::Completed as i32);
    assert_eq!(run.delivery_state, DeliveryState::Succeeded as i32);
    assert_eq!(run.deliveries.len(), 1);
    let d = &run.deliveries[0];
    assert_eq!(
        (d.target.as_str(), d.attempts, d.in_flight),
        ("callback", 3, false)
    );
    // Listings show the delivery state too, without the path of the URL.
    let listed = h
        .client
        .list_runs(v1::ListRunsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.runs[0].delivery_state, DeliveryState::Succeeded as i32);
    assert!(listed.runs[0].deliveries[0].url.ends_with("/…"));
    // Nothing left to redeliver.
    let e = h.redeliver("r1").await.unwrap_err();
    assert_eq!(e.code(), Some(Code::FailedPrecondition));
    assert!(e.to_string().contains("callback is SUCCEEDED"), "{e}");
    h.server.shutdown().await;
}

#[tokio::test]
async fn a_receiver_that_never_answers_ends_failed_after_the_budget_and_redeliver_succeeds() {
    let h = harness_with(settings(true)).await;
    let r = receiver(h.clock.clone()).await;
    r.script.lock().unwrap().extend([None, None, None]);
    h.run("r2", &r.url, true).await;
    for failures in 1..=3 {
        h.wait_for("r2", "DeliveryFailed", failures).await;
        h.clock.advance(Duration::from_secs(30));
    }
    let history = h.history("r2").await;
    let last = history
        .iter()
        .rev()
        .find(|e| e.event_type == "DeliveryFailed")
        .unwrap();
    assert_eq!(attrs(last)["willRetry"], false);
    assert_eq!(attrs(last)["attempt"], 3);
    assert_eq!(
        h.count("r2", "DeliveryAttempted").await,
        3,
        "the budget is 3 attempts"
    );

    let run = h.describe("r2").await;
    assert_eq!(
        run.status,
        RunStatus::Completed as i32,
        "delivery never changes the outcome"
    );
    assert_eq!(run.delivery_state, DeliveryState::Failed as i32);
    let d = &run.deliveries[0];
    assert_eq!(d.attempts, 3);
    assert!(!d.last_error.is_empty());
    assert_eq!(d.next_attempt_unix_ms, 0);

    // The receiver is fixed (the script is empty: 200 from now on); redeliver.
    assert_eq!(h.redeliver("r2").await.unwrap(), vec!["callback".to_string()]);
    h.wait_for("r2", "DeliverySucceeded", 1).await;
    let run = h.describe("r2").await;
    assert_eq!(run.delivery_state, DeliveryState::Succeeded as i32);
    assert_eq!(run.deliveries[0].attempts, 4);
    assert_eq!(r.got.lock().unwrap().len(), 4);

    // A run with nothing to deliver, and one still running, are refused by name.
    h.run("plain", "", true).await;
    let e = h.redeliver("plain").await.unwrap_err();
    assert_eq!(e.code(), Some(Code::FailedPrecondition));
    assert!(e.to_string().contains("nothing to deliver"), "{e}");
    h.server.shutdown().await;
}

#[tokio::test]
async fn a_subscription_filtered_by_outcome_gets_only_matching_runs() {
    let h = harness_with(settings(true)).await;
    let r = receiver(h.clock.clone()).await;
    let ns = h
        .client
        .subscribe_namespace(
            "default",
            v1::Subscription {
                id: "failures".into(),
                url: r.url.clone(),
                outcomes: vec![RunStatus::Failed as i32],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ns.subscriptions.len(), 1);
    assert_eq!(ns.subscriptions[0].id, "failures");
    let dup = h
        .client
        .subscribe_namespace(
            "default",
            v1::Subscription {
                id: "failures".into(),
                url: r.url.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Some(Code::AlreadyExists));

    h.run("good", "", true).await;
    h.run("bad", "", false).await;
    h.wait_for("bad", "DeliverySucceeded", 1).await;
    let got = r.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].body["runId"], "bad");
    assert_eq!(got[0].body["status"], "FAILED");
    assert!(got[0].verified);
    assert_eq!(got[0].body["delivery"]["target"], "subscription:failures");
    let good = h.describe("good").await;
    assert_eq!(good.delivery_state, DeliveryState::None as i32);
    assert!(good.deliveries.is_empty());
    let bad = h.describe("bad").await;
    assert_eq!(bad.deliveries[0].target, "subscription:failures");
    let attempted = h.history("bad").await;
    let a = attempted
        .iter()
        .find(|e| e.event_type == "DeliveryAttempted")
        .unwrap();
    assert_eq!(attrs(a)["target"], "subscription:failures");

    // Unsubscribed, later failures go nowhere.
    let ns = h
        .client
        .unsubscribe_namespace("default", "failures")
        .await
        .unwrap();
    assert!(ns.subscriptions.is_empty());
    h.run("bad2", "", false).await;
    assert!(h.describe("bad2").await.deliveries.is_empty());
    let gone = h
        .client
        .unsubscribe_namespace("default", "failures")
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Some(Code::NotFound));
    h.server.shutdown().await;
}

#[tokio::test]
async fn the_payload_carries_each_steps_result_and_usage_and_the_runs_total() {
    let h = harness_with(settings(true)).await;
    let r = receiver(h.clock.clone()).await;
    h.client
        .start_run_with(v1::StartRunRequest {
            namespace: "default".into(),
            workflow_id: "judged".into(),
            goal: "the case".into(),
            run_id: "j1".into(),
            callback_url: r.url.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let w = StepWorker::new(h.client.clone(), "default", "default", "w");
    let a = w.poll(Duration::from_secs(10)).await.unwrap().expect("step a");
    let used = v1::TokenUsage {
        input_tokens: 1200,
        output_tokens: 300,
        cache_read_tokens: 50,
        cache_write_tokens: 7,
        cost_usd: 0.25,
    };
    w.heartbeat(&a.task_token)
        .usage(used, "claude-x")
        .send()
        .await
        .unwrap();
    let done = Completion {
        notes: "judged".into(),
        result_json: r#"{"verdict":"fine","why":["short"]}"#.into(),
        ..Default::default()
    };
    let b = w
        .complete_and_take_next(&a.task_token, done)
        .await
        .unwrap()
        .expect("step b");
    w.complete(&b.task_token, Completion::notes("reported"))
        .await
        .unwrap();
    h.wait_for("j1", "DeliverySucceeded", 1).await;

    let got = r.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].verified);
    let body = &got[0].body;
    let a_usage = serde_json::json!({"inputTokens": 1200, "outputTokens": 300,
        "cacheReadTokens": 50, "cacheWriteTokens": 7, "costUsd": 0.25});
    assert_eq!(
        body["steps"][0]["result"],
        serde_json::json!({"verdict":"fine","why":["short"]}),
        "{body:#}"
    );
    assert_eq!(body["steps"][0]["usage"], a_usage);
    assert_eq!(body["steps"][1]["result"], Value::Null, "no result: null");
    assert_eq!(
        body["steps"][1]["usage"],
        serde_json::json!({"inputTokens": 0, "outputTokens": 0,
            "cacheReadTokens": 0, "cacheWriteTokens": 0, "costUsd": 0.0})
    );
    assert_eq!(body["usage"], a_usage, "the run's total");
    h.server.shutdown().await;
}

#[tokio::test]
async fn bad_delivery_input_is_refused_by_name_and_changes_nothing() {
    let h = harness_with(settings(false)).await;
    let start = |url: &str| v1::StartRunRequest {
        namespace: "default".into(),
        workflow_id: "one".into(),
        goal: "g".into(),
        callback_url: url.into(),
        ..Default::default()
    };
    let e = h
        .client
        .start_run_with(start("https://alice:hunter2@example.com/cb"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument));
    let msg = e.to_string();
    assert!(
        msg.contains("callback_url") && msg.contains("credentials"),
        "{msg}"
    );
    assert!(
        !msg.contains("hunter2"),
        "the URL's password is never echoed: {msg}"
    );
    let e = h
        .client
        .start_run_with(start("ftp://example.com/"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument));
    // No signing secret: a callback could not be signed, so it is refused.
    let e = h
        .client
        .start_run_with(start("https://example.com/cb"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::FailedPrecondition));
    assert!(e.to_string().contains("delivery.signing_secret"), "{e}");
    let e = h
        .client
        .subscribe_namespace(
            "default",
            v1::Subscription {
                id: "x".into(),
                url: "https://example.com/".into(),
                outcomes: vec![RunStatus::Running as i32],
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument));
    assert!(e.to_string().contains("subscription.outcomes[0]"), "{e}");
    let listed = h
        .client
        .list_runs(v1::ListRunsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(listed.runs.is_empty(), "nothing was started");
    assert!(
        h.client
            .describe_namespace("default")
            .await
            .unwrap()
            .subscriptions
            .is_empty()
    );
    h.server.shutdown().await;
}
