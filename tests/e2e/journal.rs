//! The Rust SDK's step journal against a real server: a worker journals three calls
//! and stops without completing (its task dropped, the lease left to time out); a
//! second worker leases the step's next attempt, replays the three from the
//! checkpoint and runs the rest. Each call's counter proves none ran twice.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use railyard_proto::v1::{GetStepCheckpointRequest, RunStatus};
use railyard_sdk::journal::HEADER;
use railyard_sdk::{Client, Completion, Step, StepWorker};

use crate::support::*;

/// The calls the step makes, in order: names repeat, so replay goes by name and seq.
const CALLS: [&str; 5] = ["fetch", "fetch", "sum", "fetch", "sum"];

/// Works the step: each call journals its index times ten, counted in `calls`; stops
/// after `stop_after` calls, answering what they returned.
async fn work(step: &mut Step, calls: &[AtomicU32; 5], stop_after: usize) -> Vec<u32> {
    let mut got = Vec::new();
    for (i, name) in CALLS.iter().enumerate().take(stop_after) {
        let value: u32 = step
            .run(name, || async move {
                calls[i].fetch_add(1, Ordering::SeqCst);
                i as u32 * 10
            })
            .await
            .expect("journaled");
        got.push(value);
    }
    got
}

#[test]
fn a_resumed_attempt_replays_what_was_journaled_and_runs_the_rest() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "journaled.json",
        r#"{"id": "journaled", "version": "1", "name": "Journaled", "taskQueue": "journal",
          "steps": [{"id": "calls", "title": "Calls", "prompt": "Call {{goal}}",
                     "heartbeatTimeoutSeconds": 1,
                     "retry": {"initialIntervalSeconds": 0.2, "maximumAttempts": 3}}]}"#,
    );
    let server = sandbox.server();
    ok(server.ry(&["run", "start", "journaled", "--run-id", "r1", "--goal", "g"]));

    static CALLED: [AtomicU32; 5] = [const { AtomicU32::new(0) }; 5];
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let client = Client::connect(&server.url).await.expect("connect");

        // The first worker journals three calls, then hangs holding the lease.
        let first = StepWorker::new(client.clone(), "default", "journal", "first");
        let (done, journaled) = tokio::sync::oneshot::channel();
        let worker = tokio::spawn(async move {
            let task = first
                .poll(Duration::from_secs(30))
                .await
                .expect("poll")
                .expect("a task");
            assert_eq!(task.attempt, 1);
            let mut step = first.step(task);
            let got = work(&mut step, &CALLED, 3).await;
            let stats = step.checkpoint_sync().stats;
            let _ = done.send((got, stats));
            std::future::pending::<()>().await;
        });
        let (got, stats) = journaled.await.expect("three calls journaled");
        assert_eq!(got, [0, 10, 20]);
        // No checkpoint yet: the first record went whole, the others as appends.
        assert_eq!((stats.whole, stats.appends, stats.refused), (1, 2, 0));
        // The worker is killed: no completion, no more heartbeats.
        worker.abort();
        assert!(worker.await.is_err_and(|e| e.is_cancelled()));

        let second = StepWorker::new(client.clone(), "default", "journal", "second");
        let task = second
            .poll(Duration::from_secs(60))
            .await
            .expect("poll")
            .expect("the step comes back once its lease times out");
        assert_eq!((task.run_id.as_str(), task.attempt), ("r1", 2));
        let text = String::from_utf8(task.checkpoint.clone()).expect("the journal is UTF-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "the header and three records: {text}");
        assert_eq!(lines[0], HEADER);
        let mut step = second.step(task);
        assert_eq!(step.journal().run("fetch", 1), Some(&serde_json::json!(10)));
        let got = work(&mut step, &CALLED, CALLS.len()).await;
        assert_eq!(got, [0, 10, 20, 30, 40]);
        let counts: Vec<u32> = CALLED.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(counts, [1; 5], "each call ran exactly once across both attempts");
        // The resumed attempt appended to the journal the task carried.
        let stats = step.checkpoint_sync().stats;
        assert_eq!((stats.whole, stats.appends, stats.refused), (0, 2, 0));
        // The server holds the journal byte for byte: the header and five records.
        let held = client
            .get_step_checkpoint(GetStepCheckpointRequest {
                namespace: "default".into(),
                run_id: "r1".into(),
                max_bytes: 1 << 20,
                ..Default::default()
            })
            .await
            .expect("checkpoint");
        assert_eq!((held.attempt, held.data.as_slice()), (2, step.journal().bytes()));
        assert_eq!(held.data.iter().filter(|&&b| b == b'\n').count(), 6);
        step.complete(Completion::notes("five calls"))
            .await
            .expect("complete");

        let run = client.describe_run("default", "r1").await.expect("describe");
        let status = run.run.map(|r| r.status());
        assert_eq!(status, Some(RunStatus::Completed));
    });
}
