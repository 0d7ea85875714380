//! Upgrading in place: a data directory written by the release before versioned
//! records (storage layout 2; `store/tests/fixtures/layout2`, made by its `make.sh`) is
//! migrated when this server first starts on it, and its runs go on to completion
//! through the real gRPC API, their histories continuing where they stopped.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{self, SignalRunRequest, StartRunRequest};
use railyard_sdk::{Client, Completion, Failure, StepWorker};
use railyard_server::ServerConfig;

use crate::support;

const RUNS: [&str; 5] = ["done", "backoff", "leased", "signalled", "queued"];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/tests/fixtures/layout2")
}

/// What `make.sh` recorded next to the database.
struct Recorded {
    left_at_ms: i64,
    tokens: HashMap<String, String>,
    /// Each run's events as the old release served them.
    histories: HashMap<String, Vec<serde_json::Value>>,
}

fn recorded() -> Recorded {
    let text = std::fs::read_to_string(fixture_dir().join("fixture.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["layout"], 2);
    Recorded {
        left_at_ms: v["left_at_ms"].as_i64().unwrap(),
        tokens: serde_json::from_value(v["tokens"].clone()).unwrap(),
        histories: serde_json::from_value(v["histories"].clone()).unwrap(),
    }
}

/// `jq` wrote `3.0` as `3` in fixture.json: compare numbers by value.
fn numbers_as_f64(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(a) => Value::Array(a.into_iter().map(numbers_as_f64).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, numbers_as_f64(v))).collect()),
        other => other,
    }
}

async fn events(client: &Client, run_id: &str) -> Vec<v1::HistoryEvent> {
    client.full_history("default", run_id).await.unwrap()
}

async fn status(client: &Client, run_id: &str) -> v1::RunStatus {
    let run = client.describe_run("default", run_id).await.unwrap().run.unwrap();
    run.status()
}

#[tokio::test]
async fn a_layout_2_data_directory_is_migrated_and_its_runs_go_on_to_completion() {
    if !crate::support::redb_only("upgrade", "it migrates an old redb file") {
        return;
    }
    let rec = recorded();
    let data = tempfile::tempdir().unwrap();
    for file in ["railyard.redb", "keys.json"] {
        std::fs::copy(fixture_dir().join("data").join(file), data.path().join(file)).unwrap();
    }
    // The clock resumes where the old server left off, so its leases are still current.
    let clock = ManualClock::new(rec.left_at_ms);
    let mut config = ServerConfig::new(data.path(), fixture_dir().join("workflows"));
    config.clock = Arc::new(clock.clone());
    let (server, client) = support::start(config).await;

    // Everything the old release served is served the same: ids, types, identities,
    // times and attributes, event by event.
    let mut before = HashMap::new();
    for id in RUNS {
        let old = &rec.histories[id];
        let new = events(&client, id).await;
        assert_eq!(new.len(), old.len(), "{id}");
        for (n, o) in new.iter().zip(old) {
            let attributes: serde_json::Value = serde_json::from_str(&n.attributes_json).unwrap();
            let shown = serde_json::json!({
                "event_id": n.event_id,
                "event_type": n.event_type,
                "identity": n.identity,
                "time_unix_ms": n.time_unix_ms,
                "attributes": attributes,
            });
            assert_eq!(
                numbers_as_f64(shown),
                numbers_as_f64(o.clone()),
                "{id} event {}",
                n.event_id
            );
        }
        before.insert(id, new.len());
    }
    assert_eq!(status(&client, "done").await, v1::RunStatus::Completed);

    // The indexes came along: a repeated start or signal finds the old request id.
    let again = client
        .start_run_with(StartRunRequest {
            workflow_id: "fixture".into(),
            goal: "the weather".into(),
            request_id: "req-done".into(),
            run_id: "done".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((again.run_id.as_str(), again.started), ("done", false));
    client
        .signal_run(SignalRunRequest {
            namespace: "default".into(),
            run_id: "signalled".into(),
            signal_name: "steer".into(),
            payload_json: r#"{"text":"make it rhyme"}"#.into(),
            request_id: "sig-1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        events(&client, "signalled").await.len(),
        before["signalled"],
        "a repeat"
    );
    // The list queries' index was built at open: a query by status or workflow finds
    // what a listing of every run, filtered here, finds.
    let all = client
        .list_runs(v1::ListRunsRequest::default())
        .await
        .unwrap()
        .runs;
    for (query, keep) in [
        (
            "Status = 'COMPLETED'",
            &(|r: &v1::RunInfo| r.status == v1::RunStatus::Completed as i32) as &dyn Fn(&v1::RunInfo) -> bool,
        ),
        ("Status = 'RUNNING'", &|r: &v1::RunInfo| {
            r.status == v1::RunStatus::Running as i32
        }),
        ("WorkflowId = 'fixture'", &|r: &v1::RunInfo| {
            r.workflow_id == "fixture"
        }),
    ] {
        let got = client
            .list_runs(v1::ListRunsRequest {
                query: query.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .runs;
        let ids = |runs: &[&v1::RunInfo]| runs.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>();
        let want: Vec<&v1::RunInfo> = all.iter().filter(|r| keep(r)).collect();
        assert!(!want.is_empty(), "{query}");
        assert_eq!(ids(&got.iter().collect::<Vec<_>>()), ids(&want), "{query}");
    }

    let demo = StepWorker::new(client.clone(), "default", "default", "w-new");
    let fixture = StepWorker::new(client.clone(), "default", "fixture", "w-new");

    // The leases the old server handed out are still current, tokens and all.
    let hb = demo.heartbeat(&rec.tokens["signalled"]).send().await.unwrap();
    let signals: Vec<_> = hb
        .signals
        .iter()
        .map(|s| (s.name.as_str(), s.payload_json.as_str()))
        .collect();
    assert_eq!(signals, [("steer", r#"{"text":"make it rhyme"}"#)]);
    demo.heartbeat(&rec.tokens["leased"]).send().await.unwrap();
    demo.complete(
        &rec.tokens["signalled"],
        Completion::notes("researched after all"),
    )
    .await
    .unwrap();
    // The leased step fails once; its next attempt gets the checkpoint the old
    // server stored.
    let retry = demo
        .fail(
            &rec.tokens["leased"],
            Failure {
                error_type: "flaky".into(),
                message: "try again".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(retry);

    // Past every backoff: the migrated timer row (60 s) and the new one (1 s).
    clock.advance(Duration::from_secs(61));

    let mut polled: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
    for (worker, runs) in [
        (&demo, &["leased", "signalled", "queued"][..]),
        (&fixture, &["backoff"][..]),
    ] {
        loop {
            let mut open = Vec::new();
            for id in runs {
                if status(&client, id).await == v1::RunStatus::Running {
                    open.push(*id);
                }
            }
            if open.is_empty() {
                break;
            }
            let task = worker
                .poll(Duration::from_secs(30))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("no task came for {open:?}"));
            if (task.run_id.as_str(), task.step_id.as_str()) == ("leased", "draft") {
                assert_eq!(task.attempt, 2);
                assert_eq!(task.checkpoint, br#"{"turn":3,"transcript":["draft v1"]}"#);
                assert!(task.last_failure.contains("flaky"), "{}", task.last_failure);
                // A checkpoint stored before digests (whole, in one row) is handed with
                // the digest of its bytes, so the new attempt appends to it at once.
                let digest = railyard_proto::checkpoint::full(&task.checkpoint);
                assert_eq!(task.checkpoint_digest, digest.to_vec());
                let mut sync = railyard_sdk::CheckpointSync::from_task(&task);
                let grown = [task.checkpoint.as_slice(), b" and more"].concat();
                let resp = worker
                    .heartbeat(&task.task_token)
                    .checkpoint(&grown)
                    .sync(&mut sync)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.checkpoint_length, grown.len() as u64);
                assert_eq!((sync.stats.appends, sync.stats.whole), (1, 0));
            }
            if (task.run_id.as_str(), task.step_id.as_str()) == ("backoff", "summarise") {
                assert_eq!(task.prompt, "Summarise the tides for sailors");
            }
            polled
                .entry(task.run_id.clone())
                .or_default()
                .push((task.step_id.clone(), task.attempt));
            worker
                .complete(&task.task_token, Completion::notes("done now"))
                .await
                .unwrap();
        }
    }
    let steps = |s: &[(&str, u32)]| s.iter().map(|(a, n)| (a.to_string(), *n)).collect::<Vec<_>>();
    assert_eq!(polled["backoff"], steps(&[("fetch", 2), ("summarise", 1)]));
    assert_eq!(polled["leased"], steps(&[("draft", 2), ("review", 1)]));
    assert_eq!(polled["signalled"], steps(&[("draft", 1), ("review", 1)]));
    assert_eq!(
        polled["queued"],
        steps(&[("research", 1), ("draft", 1), ("review", 1)])
    );

    // Each history goes on from where it stopped, numbered without a gap.
    for id in RUNS {
        assert_eq!(status(&client, id).await, v1::RunStatus::Completed, "{id}");
        let all = events(&client, id).await;
        assert!(
            all.iter().enumerate().all(|(i, e)| e.event_id == i as u64 + 1),
            "{id}: {:?}",
            all.iter().map(|e| e.event_id).collect::<Vec<_>>()
        );
        assert_eq!(all.last().unwrap().event_type, "RunCompleted", "{id}");
        let run = client.describe_run("default", id).await.unwrap().run.unwrap();
        assert_eq!(run.history_length, all.len() as u64, "{id}");
    }
    let types = |evs: Vec<v1::HistoryEvent>, from: usize| {
        evs.into_iter()
            .skip(from)
            .map(|e| e.event_type)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        types(events(&client, "backoff").await, before["backoff"]),
        [
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "RunCompleted"
        ]
    );
    assert_eq!(
        types(events(&client, "leased").await, before["leased"]),
        [
            "StepFailed",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "RunCompleted"
        ]
    );

    // A new run of a migrated definition starts and runs like any other.
    let fresh = client
        .start_run(
            "default",
            "fixture",
            "the stars",
            HashMap::from([("audience".into(), "poets".into())]),
        )
        .await
        .unwrap();
    for _ in 0..2 {
        let task = fixture.poll(Duration::from_secs(30)).await.unwrap().unwrap();
        assert_eq!(task.run_id, fresh);
        fixture
            .complete(&task.task_token, Completion::default())
            .await
            .unwrap();
    }
    assert_eq!(status(&client, &fresh).await, v1::RunStatus::Completed);
    server.shutdown().await;

    // And the directory opens again as it is now, without migrating twice.
    let mut config = ServerConfig::new(data.path(), fixture_dir().join("workflows"));
    config.clock = Arc::new(clock);
    let (server, client) = support::start(config).await;
    assert_eq!(status(&client, "queued").await, v1::RunStatus::Completed);
    assert_eq!(events(&client, "done").await.len(), before["done"]);
    server.shutdown().await;
}
