//! Heartbeats that append to the checkpoint, over real gRPC: the SDK's
//! `CheckpointSync` appends what the transcript gained; a heartbeat lost, repeated or
//! reordered is refused for its base (FAILED_PRECONDITION, "checkpoint base
//! mismatch") and the SDK resends the checkpoint whole; an old-style worker's whole
//! checkpoints keep working; a server restart keeps every segment.

use railyard_model::RunKey;
use std::time::Duration;

use railyard_proto::checkpoint::{self as digest, BASE_MISMATCH};
use railyard_proto::v1::{CheckpointAppend, HeartbeatStepTaskRequest};
use railyard_sdk::{CheckpointSync, ClientError, StepWorker};
use railyard_server::ServerConfig;
use railyard_store::{CheckpointAt, Store};

use crate::support::start;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"agent","title":"Agent","prompt":"work"}]}"#;

#[tokio::test]
async fn lost_repeated_and_reordered_heartbeats_are_refused_and_resent_whole() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    // The test keeps a handle on the store to read what is stored.
    let config = async || {
        let store = crate::support::store_for(data.path()).await;
        let mut config = ServerConfig::new(data.path(), workflows.path());
        config.store = Some(store.clone());
        (config, store)
    };
    let (c, store) = config().await;
    let (server, client) = start(c).await;
    let run = client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let stored = |store: &Store| store.checkpoint(&RunKey::new("default", &run)).unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    let token = task.task_token.clone();
    let mut sync = CheckpointSync::from_task(&task);
    let mut transcript = Vec::new();
    let beat = async |sync: &mut CheckpointSync, transcript: &[u8]| {
        w.heartbeat(&token)
            .checkpoint(transcript)
            .sync(sync)
            .send()
            .await
            .unwrap()
    };

    // The first goes whole; the next ones append only what they gained.
    transcript.extend_from_slice(b"turn 1;");
    let r = beat(&mut sync, &transcript).await;
    assert_eq!(r.checkpoint_length, 7);
    for turn in 2..=4 {
        transcript.extend_from_slice(format!("turn {turn};").as_bytes());
        beat(&mut sync, &transcript).await;
    }
    assert_eq!(
        (sync.stats.whole, sync.stats.appends, sync.stats.refused),
        (1, 3, 0)
    );
    assert_eq!(sync.stats.bytes, transcript.len() as u64);

    // A heartbeat whose answer was lost: the worker's view stays one behind, and its
    // next append names a base the server has moved past.
    let behind = sync.clone();
    transcript.extend_from_slice(b"turn 5;");
    beat(&mut sync, &transcript).await;
    let mut lost = behind.clone();
    transcript.extend_from_slice(b"turn 6;");
    beat(&mut lost, &transcript).await;
    assert_eq!(
        (lost.stats.refused, lost.stats.whole - behind.stats.whole),
        (1, 1)
    );
    assert_eq!(stored(&store), transcript);

    // A caller that vouches its transcript only grows appends without a comparison
    // or a copy, and recovers a lost answer the same way.
    let grow = async |sync: &mut CheckpointSync, transcript: &[u8]| {
        w.heartbeat(&token)
            .checkpoint(transcript)
            .sync(sync)
            .send()
            .await
            .unwrap()
    };
    let mut growing = lost.clone().growing();
    transcript.extend_from_slice(b"turn 6b;");
    grow(&mut growing, &transcript).await;
    let behind = growing.clone();
    transcript.extend_from_slice(b"turn 6c;");
    grow(&mut growing, &transcript).await;
    assert_eq!(
        (growing.stats.appends - lost.stats.appends, growing.stats.refused),
        (2, 1)
    );
    let mut lost = behind;
    transcript.extend_from_slice(b"turn 6d;");
    let r = grow(&mut lost, &transcript).await;
    assert_eq!(
        (lost.stats.refused, r.checkpoint_length),
        (2, transcript.len() as u64)
    );
    assert_eq!(stored(&store), transcript);

    // Repeated: the same append sent twice is stored once, both answered alike.
    let before = transcript.clone();
    transcript.extend_from_slice(b"turn 7;");
    let d = digest::full(&before);
    let append = HeartbeatStepTaskRequest {
        task_token: token.clone(),
        checkpoint_append: Some(CheckpointAppend {
            base_length: before.len() as u64,
            base_digest: d.to_vec(),
            bytes: b"turn 7;".to_vec(),
        }),
        ..Default::default()
    };
    let first = client.heartbeat_step_task(append.clone()).await.unwrap();
    let again = client.heartbeat_step_task(append.clone()).await.unwrap();
    assert_eq!(first.checkpoint_digest, again.checkpoint_digest);
    assert_eq!(first.checkpoint_digest, digest::extend(&d, b"turn 7;").to_vec());
    assert_eq!(stored(&store), transcript);
    // Reordered: an older append arriving after a newer one is refused, by the code
    // and the reason the SDK knows, and changes nothing.
    let mut older = append.clone();
    older.checkpoint_append = Some(CheckpointAppend {
        base_length: 7,
        base_digest: digest::full(b"turn 1;").to_vec(),
        bytes: b"turn 2;".to_vec(),
    });
    match client.heartbeat_step_task(older).await {
        Err(ClientError::FailedPrecondition(m)) => assert!(m.starts_with(BASE_MISMATCH), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(stored(&store), transcript);

    // An old-style worker sends the checkpoint whole every time; the answer's digest
    // is that of the whole.
    let r = w
        .heartbeat(&token)
        .checkpoint(b"old style".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.checkpoint_digest, digest::full(b"old style").to_vec());
    assert_eq!(stored(&store), b"old style");

    // Segments survive a restart: appends, then a new server on the same files.
    let mut sync = CheckpointSync::new();
    transcript = b"again;".to_vec();
    beat(&mut sync, &transcript).await;
    transcript.extend_from_slice(b" more;");
    beat(&mut sync, &transcript).await;
    server.shutdown().await;
    drop(store);
    let (c, store) = config().await;
    let (server, _client) = start(c).await;
    assert_eq!(stored(&store), transcript);
    server.shutdown().await;
}

/// `GetStepCheckpoint`: a reader pages through the checkpoint of the step in flight,
/// each page read from the segments that hold it (a bounded number of rows, never
/// more bytes than asked); a step the run lacks is refused; a completed step's is
/// kept.
#[tokio::test]
async fn a_reader_pages_through_the_checkpoint_of_the_step_in_flight() {
    use railyard_proto::v1::GetStepCheckpointRequest;
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let store = crate::support::store_for(data.path()).await;
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.store = Some(store.clone());
    let (server, client) = start(config).await;
    let run = client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let req = |offset: u64, max_bytes: u32| GetStepCheckpointRequest {
        namespace: "default".into(),
        run_id: run.clone(),
        step_id: String::new(),
        offset,
        max_bytes,
    };
    // Before any heartbeat: nothing is kept.
    let none = client.get_step_checkpoint(req(0, 0)).await.unwrap();
    assert_eq!((none.total_bytes, none.data.len(), none.next_offset), (0, 0, 0));

    let w = StepWorker::new(client.clone(), "default", "default", "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    let mut sync = CheckpointSync::from_task(&task);
    // 100 appends of 20 KiB: ~2 MB in merged and appended segments.
    let mut transcript = Vec::new();
    for turn in 0..100u32 {
        let line = format!("{{\"turn\":{turn},\"text\":\"{}\"}}\n", "x".repeat(20_000));
        transcript.extend_from_slice(line.as_bytes());
        w.heartbeat(&task.task_token)
            .checkpoint(&transcript)
            .sync(&mut sync)
            .send()
            .await
            .unwrap();
    }
    let head = store
        .snapshot()
        .unwrap()
        .checkpoint_head(&RunKey::new("default", &run), CheckpointAt::Step(0))
        .unwrap()
        .unwrap();
    assert!(head.segments > 2, "stored in segments: {head:?}");

    // Paged through at the default size, the pages are the checkpoint.
    let (mut offset, mut read, mut pages) = (0, Vec::new(), 0);
    loop {
        let page = client.get_step_checkpoint(req(offset, 0)).await.unwrap();
        assert_eq!((page.step_id.as_str(), page.attempt), ("agent", 1));
        assert_eq!(page.total_bytes, transcript.len() as u64);
        assert!(page.data.len() <= 256 * 1024);
        read.extend_from_slice(&page.data);
        pages += 1;
        if page.next_offset == 0 {
            break;
        }
        assert_eq!(page.next_offset, offset + page.data.len() as u64);
        offset = page.next_offset;
    }
    assert_eq!(read, transcript);
    assert_eq!(pages, transcript.len().div_ceil(256 * 1024));
    // A page asked of more than the most is cut to it; one past the end is empty.
    let big = client.get_step_checkpoint(req(0, u32::MAX)).await.unwrap();
    assert_eq!(big.data.len(), 1024 * 1024);
    let past = client
        .get_step_checkpoint(req(transcript.len() as u64 + 5, 10))
        .await
        .unwrap();
    assert_eq!((past.data.len(), past.next_offset), (0, 0));
    // A small page in the middle reads the head and the segments up to it only.
    let snap = store.snapshot().unwrap();
    let mid = snap
        .checkpoint_page(
            &RunKey::new("default", &run),
            CheckpointAt::Step(0),
            1_000_000,
            100,
        )
        .unwrap();
    assert_eq!(mid.bytes, transcript[1_000_000..1_000_100]);
    assert!(mid.rows_read <= 1 + head.segments, "{}", mid.rows_read);
    let first = snap
        .checkpoint_page(&RunKey::new("default", &run), CheckpointAt::Step(0), 0, 100)
        .unwrap();
    assert_eq!(first.rows_read, 2, "the head and the first segment");
    drop(snap);

    // A step the run does not have is refused, naming it.
    let mut other = req(0, 0);
    other.step_id = "elsewhere".into();
    match client.get_step_checkpoint(other).await {
        Err(ClientError::NotFound(m)) => assert!(m.contains("\"elsewhere\""), "{m}"),
        r => panic!("{r:?}"),
    }
    let mut missing = req(0, 0);
    missing.run_id = "no-such-run".into();
    assert!(matches!(
        client.get_step_checkpoint(missing).await,
        Err(ClientError::NotFound(_))
    ));

    // Completed: the run has no current step, but the step's checkpoint is kept,
    // read by its id.
    w.complete(&task.task_token, railyard_sdk::Completion::notes("done"))
        .await
        .unwrap();
    let after = client.get_step_checkpoint(req(0, 0)).await.unwrap();
    assert_eq!((after.step_id.as_str(), after.total_bytes), ("", 0));
    let mut kept = req(0, 0);
    kept.step_id = "agent".into();
    let kept = client.get_step_checkpoint(kept).await.unwrap();
    assert_eq!(
        (kept.step_id.as_str(), kept.total_bytes),
        ("agent", transcript.len() as u64)
    );
    assert_eq!(kept.data, transcript[..256 * 1024]);
    server.shutdown().await;
}
