//! Live output over real gRPC and a real redb data directory: a worker appends
//! chunks under its task token (`Tasks.AppendStepOutput`); watchers
//! (`History.WatchOutput`) replay from an offset then follow live, are told of a
//! retry's new segment, of chunks dropped past a cap and of falling behind, and
//! their stream ends once the run is closed. Output is purged past its retention.

use railyard_model::RunKey;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{
    self, AppendStepOutputRequest, OutputChunk, OutputKind, WatchOutputResponse,
    watch_output_response::Message,
};
use railyard_sdk::{Client, Completion, Failure, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use railyard_store::Store;
use tonic::Code;

use crate::support::start;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"agent","title":"Agent","prompt":"work"}]}"#;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;
/// Bounds a hang, never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(30);

struct Fx {
    server: RunningServer,
    client: Client,
    store: Store,
    clock: ManualClock,
    _data: tempfile::TempDir,
    _workflows: tempfile::TempDir,
}

async fn fx(tune: impl FnOnce(&mut ServerConfig)) -> Fx {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let store = Store::open(data.path()).unwrap();
    let clock = ManualClock::new(T0);
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.store = Some(store.clone());
    config.clock = Arc::new(clock.clone());
    tune(&mut config);
    let (server, client) = start(config).await;
    Fx {
        server,
        client,
        store,
        clock,
        _data: data,
        _workflows: workflows,
    }
}

fn text(s: &str) -> OutputChunk {
    OutputChunk {
        kind: OutputKind::Text as i32,
        text: s.into(),
        ..Default::default()
    }
}

async fn append(
    client: &Client,
    token: &str,
    chunks: Vec<OutputChunk>,
) -> Result<v1::AppendStepOutputResponse, Code> {
    client
        .append_step_output(AppendStepOutputRequest {
            task_token: token.into(),
            identity: "w".into(),
            chunks,
        })
        .await
        .map_err(|e| e.code().unwrap_or(Code::Unknown))
}

/// The next message of a watch, or `None` once it ended.
async fn next(stream: &mut tonic::Streaming<WatchOutputResponse>) -> Option<Message> {
    tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the watch answers")
        .expect("no error")
        .map(|m| m.message.expect("a message"))
}

fn chunk(m: Message) -> OutputChunk {
    match m {
        Message::Chunk(c) => c,
        other => panic!("expected a chunk, got {other:?}"),
    }
}

/// Every remaining message, until the watch ends.
async fn rest(stream: &mut tonic::Streaming<WatchOutputResponse>) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(m) = next(stream).await {
        out.push(m);
    }
    out
}

#[tokio::test]
async fn a_watcher_replays_then_follows_live_and_ends_when_the_run_closes() {
    let f = fx(|_| {}).await;
    let run = f
        .client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let w = StepWorker::new(f.client.clone(), "default", "default", "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    let token = task.task_token.clone();
    let got = append(&f.client, &token, vec![text("hel"), text("lo")])
        .await
        .unwrap();
    assert_eq!((got.accepted, got.dropped), (2, 0));

    let mut watch = f.client.watch_output("default", &run, 0).await.unwrap();
    // The segment start names the attempt; the stored chunks follow in order.
    let seg = chunk(next(&mut watch).await.unwrap());
    assert_eq!(
        (seg.offset, seg.kind, seg.step_id.as_str(), seg.attempt),
        (1, OutputKind::SegmentStart as i32, "agent", 1)
    );
    let a = chunk(next(&mut watch).await.unwrap());
    let b = chunk(next(&mut watch).await.unwrap());
    assert_eq!(
        (a.offset, a.text.as_str(), b.offset, b.text.as_str()),
        (2, "hel", 3, "lo")
    );

    // Live: a chunk appended now arrives while the step is still running.
    append(
        &f.client,
        &token,
        vec![OutputChunk {
            kind: OutputKind::ToolCallStart as i32,
            name: "bash".into(),
            call_id: "c1".into(),
            ..Default::default()
        }],
    )
    .await
    .unwrap();
    let live = chunk(next(&mut watch).await.unwrap());
    assert_eq!((live.offset, live.name.as_str()), (4, "bash"));
    assert_eq!(
        f.client
            .describe_run("default", &run)
            .await
            .unwrap()
            .run
            .unwrap()
            .status,
        v1::RunStatus::Running as i32
    );

    // Appended just before the completion: sent before the stream ends.
    append(&f.client, &token, vec![text("done")]).await.unwrap();
    w.complete(&token, Completion::notes("ok")).await.unwrap();
    let tail: Vec<u64> = rest(&mut watch)
        .await
        .into_iter()
        .map(|m| chunk(m).offset)
        .collect();
    assert_eq!(tail, vec![5]);

    // A closed run still replays, and from any offset: no gap, no repeat.
    let mut again = f.client.watch_output("default", &run, 3).await.unwrap();
    let offsets: Vec<u64> = rest(&mut again)
        .await
        .into_iter()
        .map(|m| chunk(m).offset)
        .collect();
    assert_eq!(offsets, vec![3, 4, 5]);

    // The completed lease's token no longer appends.
    assert_eq!(
        append(&f.client, &token, vec![text("late")]).await.unwrap_err(),
        Code::FailedPrecondition
    );
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_retry_starts_a_new_segment_and_the_old_token_is_refused() {
    let f = fx(|_| {}).await;
    let run = f
        .client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let w = StepWorker::new(f.client.clone(), "default", "default", "w");
    let first = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    append(&f.client, &first.task_token, vec![text("one")])
        .await
        .unwrap();
    let mut watch = f.client.watch_output("default", &run, 0).await.unwrap();
    assert_eq!(
        chunk(next(&mut watch).await.unwrap()).kind,
        OutputKind::SegmentStart as i32
    );
    assert_eq!(chunk(next(&mut watch).await.unwrap()).text, "one");

    let retry = w
        .fail(
            &first.task_token,
            Failure {
                error_type: "Flaky".into(),
                message: "try again".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(retry);
    f.clock.advance(Duration::from_secs(120));
    let second = w.poll(Duration::from_secs(10)).await.unwrap().expect("the retry");
    assert_eq!(second.attempt, 2);
    append(&f.client, &second.task_token, vec![text("two")])
        .await
        .unwrap();
    let seg = chunk(next(&mut watch).await.unwrap());
    assert_eq!(
        (seg.offset, seg.kind, seg.attempt),
        (3, OutputKind::SegmentStart as i32, 2)
    );
    let two = chunk(next(&mut watch).await.unwrap());
    assert_eq!((two.offset, two.text.as_str(), two.attempt), (4, "two", 2));
    // The first attempt's token is stale now.
    assert_eq!(
        append(&f.client, &first.task_token, vec![text("zombie")])
            .await
            .unwrap_err(),
        Code::FailedPrecondition
    );
    drop(watch);
    f.server.shutdown().await;
}

#[tokio::test]
async fn past_the_caps_chunks_are_dropped_with_a_marker_saying_how_many() {
    let f = fx(|c| {
        // Each 4-byte text weighs 20: four fit in an attempt.
        c.output.attempt_cap_bytes = 80;
        c.output.run_cap_bytes = 1000;
    })
    .await;
    let run = f
        .client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let w = StepWorker::new(f.client.clone(), "default", "default", "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    let got = append(
        &f.client,
        &task.task_token,
        (0..10).map(|i| text(&format!("t{i:03}"))).collect(),
    )
    .await
    .unwrap();
    assert_eq!((got.accepted, got.dropped), (4, 6));
    // Within the marker interval: counted, not marked yet.
    let more = append(&f.client, &task.task_token, vec![text("xxxx")])
        .await
        .unwrap();
    assert_eq!((more.accepted, more.dropped), (0, 1));
    w.complete(&task.task_token, Completion::notes("ok"))
        .await
        .unwrap();

    let mut watch = f.client.watch_output("default", &run, 0).await.unwrap();
    let all: Vec<OutputChunk> = rest(&mut watch).await.into_iter().map(chunk).collect();
    let kinds: Vec<i32> = all.iter().map(|c| c.kind).collect();
    let (t, d) = (OutputKind::Text as i32, OutputKind::Dropped as i32);
    assert_eq!(kinds, vec![OutputKind::SegmentStart as i32, t, t, t, t, d, d]);
    // The first marker at the first drop; the last, at the attempt's end, counts all.
    assert_eq!((all[5].dropped_chunks, all[5].dropped_bytes), (6, 120));
    assert_eq!((all[6].dropped_chunks, all[6].dropped_bytes), (7, 140));
    let offsets: Vec<u64> = all.iter().map(|c| c.offset).collect();
    assert_eq!(offsets, (1..=7).collect::<Vec<_>>());
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_slow_watcher_is_told_it_lagged_and_still_gets_every_chunk_once() {
    // A batch fits in the live channel; a watcher that stops reading falls far behind.
    // Each flush publishes a batch of 50 into a live channel of 4: a watcher that is
    // not reading at that moment falls behind (and the one that stopped reading
    // certainly does); both must still get every chunk once.
    let f = fx(|c| {
        c.output.watch_buffer = 4;
        c.output.flush_interval_ms = 20;
        c.output.attempt_cap_bytes = 1 << 30;
        c.output.run_cap_bytes = 1 << 30;
    })
    .await;
    let run = f
        .client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let w = StepWorker::new(f.client.clone(), "default", "default", "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    append(&f.client, &task.task_token, vec![text("first")])
        .await
        .unwrap();
    // A watcher that reads two messages, then stops reading while much is appended.
    let mut slow = f.client.watch_output("default", &run, 0).await.unwrap();
    next(&mut slow).await.unwrap();
    next(&mut slow).await.unwrap();
    // A fast watcher beside it, and the worker, are not held up.
    let mut fast = f.client.watch_output("default", &run, 0).await.unwrap();
    let mut fast_seen = 0;
    let big = "x".repeat(20_000);
    let batches = 20;
    for _ in 0..batches {
        let got = append(&f.client, &task.task_token, (0..50).map(|_| text(&big)).collect())
            .await
            .unwrap();
        assert_eq!(got.accepted, 50);
        // The other watcher reads on: it is never held up by the slow one.
        let stored = || {
            f.store
                .output()
                .head(&RunKey::new("default", &run))
                .unwrap()
                .map_or(0, |h| h.next_offset - 1)
        };
        let mut last = fast_seen;
        while last < stored() {
            match next(&mut fast).await.unwrap() {
                Message::Chunk(c) => {
                    assert_eq!(c.offset, last + 1, "the other watcher misses nothing");
                    last = c.offset;
                }
                Message::Lagged(l) => assert_eq!(l.next_offset, last + 1),
            }
        }
        fast_seen = last;
    }
    // The other watcher's client goes away (a stream nobody reads holds the HTTP/2
    // connection's graceful close).
    drop(fast);
    // The slow watcher reads again while the step still runs: told it lagged, it
    // catches up from storage.
    let total = 2 + batches * 50;
    let mut offsets = vec![1, 2];
    let mut lagged = 0;
    while (offsets.len() as u64) < total as u64 {
        match next(&mut slow).await.unwrap() {
            Message::Chunk(c) => offsets.push(c.offset),
            Message::Lagged(l) => {
                lagged += 1;
                assert_eq!(l.next_offset, offsets.last().unwrap() + 1);
            }
        }
    }
    w.complete(&task.task_token, Completion::notes("ok"))
        .await
        .unwrap();
    assert!(rest(&mut slow).await.is_empty(), "nothing more, then the end");
    assert!(lagged >= 1, "the slow watcher was told it lagged");
    assert_eq!(offsets, (1..=total as u64).collect::<Vec<_>>());
    f.server.shutdown().await;
}

#[tokio::test]
async fn bad_chunks_are_refused_naming_the_field() {
    let f = fx(|_| {}).await;
    f.client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let w = StepWorker::new(f.client.clone(), "default", "default", "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    for kind in [
        OutputKind::Unspecified,
        OutputKind::SegmentStart,
        OutputKind::Dropped,
    ] {
        let bad = OutputChunk {
            kind: kind as i32,
            ..Default::default()
        };
        let e = f
            .client
            .append_step_output(AppendStepOutputRequest {
                task_token: task.task_token.clone(),
                identity: "w".into(),
                chunks: vec![text("ok"), bad],
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(Code::InvalidArgument));
        assert!(e.to_string().contains("chunks[1].kind"), "{e}");
    }
    let e = f
        .client
        .append_step_output(AppendStepOutputRequest {
            task_token: "forged.token".into(),
            identity: "w".into(),
            chunks: vec![text("x")],
        })
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Some(Code::PermissionDenied | Code::InvalidArgument)),
        "{e}"
    );
    f.server.shutdown().await;
}

#[tokio::test]
async fn output_is_purged_once_past_its_retention_after_the_run_closed() {
    let f = fx(|c| c.output.retention_ms = 7 * 86_400_000).await;
    let run = f
        .client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let w = StepWorker::new(f.client.clone(), "default", "default", "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    append(&f.client, &task.task_token, vec![text("kept a while")])
        .await
        .unwrap();
    w.complete(&task.task_token, Completion::notes("ok"))
        .await
        .unwrap();
    let stored = || {
        f.store
            .output()
            .read(&RunKey::new("default", &run), 0, 10)
            .unwrap()
            .len()
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while stored() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the output is stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A day on: still there (the sweep runs each minute of the clock).
    f.clock.advance(Duration::from_secs(86_400));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stored(), 2);
    // Eight days on: gone, while the run itself is kept (its namespace keeps runs longer).
    f.clock.advance(Duration::from_secs(7 * 86_400));
    while stored() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the output is purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(f.store.run(&RunKey::new("default", &run)).unwrap().is_some());
    f.server.shutdown().await;
}
