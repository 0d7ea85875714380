//! Finished steps' transcripts: each step's last checkpoint is kept after the step
//! completes (and after the run closes), read back through `GetStepCheckpoint` by
//! the step's id page by page, byte for byte; the oldest are dropped past the
//! per-run bound, none are kept when it is 0, and the retention purge takes them
//! with the run. On redb and on Postgres (`RAILYARD_TEST_BACKEND`).

use railyard_model::RunKey;
use std::sync::Arc;
use std::time::{Duration, Instant};

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{CreateNamespaceRequest, GetStepCheckpointRequest, TerminateRunRequest};
use railyard_sdk::{CheckpointSync, Client, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use railyard_store::{CheckpointAt, Store};

use crate::support;

const THREE_STEPS: &str = r#"{"id":"three","version":"1","name":"Three","steps":[
  {"id":"a","title":"A","prompt":"one"},
  {"id":"b","title":"B","prompt":"two"},
  {"id":"c","title":"C","prompt":"three"}]}"#;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;
const DAY: u64 = 86_400_000;

struct Fx {
    server: RunningServer,
    client: Client,
    store: Store,
    clock: ManualClock,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn fx(kept_bytes: u64) -> Fx {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("three.json"), THREE_STEPS).unwrap();
    let store = support::store_for(data.path()).await;
    let clock = ManualClock::new(T0);
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.store = Some(store.clone());
    config.clock = Arc::new(clock.clone());
    config.kept_checkpoint_bytes = kept_bytes;
    let (server, client) = support::start(config).await;
    Fx {
        server,
        client,
        store,
        clock,
        _dirs: (data, workflows),
    }
}

/// A transcript of `turns` lines of ~`line` bytes, marked with `tag`.
fn transcript(tag: &str, turns: usize, line: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for turn in 0..turns {
        out.extend_from_slice(
            format!(
                "{{\"step\":\"{tag}\",\"turn\":{turn},\"text\":\"{}\"}}\n",
                "y".repeat(line)
            )
            .as_bytes(),
        );
    }
    out
}

impl Fx {
    /// Leases the run's next step, heartbeats `bytes` as its checkpoint in appended
    /// parts (so it is stored in segments), and completes it.
    async fn run_step(&self, ns: &str, bytes: &[u8]) {
        let w = StepWorker::new(self.client.clone(), ns, "default", "w");
        let task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
        let mut sync = CheckpointSync::from_task(&task);
        for end in (1..=8).map(|i| bytes.len() * i / 8) {
            w.heartbeat(&task.task_token)
                .checkpoint(&bytes[..end])
                .sync(&mut sync)
                .send()
                .await
                .unwrap();
        }
        w.complete(&task.task_token, Completion::notes("done"))
            .await
            .unwrap();
    }

    /// The step's kept checkpoint read through `GetStepCheckpoint`, `page` bytes a
    /// call: (step id answered, bytes, pages).
    async fn read(&self, ns: &str, run: &str, step: &str, page: u32) -> (String, Vec<u8>, usize) {
        let (mut offset, mut out, mut pages) = (0, Vec::new(), 0);
        loop {
            let got = self
                .client
                .get_step_checkpoint(GetStepCheckpointRequest {
                    namespace: ns.into(),
                    run_id: run.into(),
                    step_id: step.into(),
                    offset,
                    max_bytes: page,
                })
                .await
                .unwrap();
            assert!(page == 0 || got.data.len() <= page as usize);
            out.extend_from_slice(&got.data);
            pages += 1;
            if got.next_offset == 0 {
                return (got.step_id, out, pages);
            }
            offset = got.next_offset;
        }
    }
}

#[tokio::test]
async fn a_completed_steps_transcript_reads_back_page_by_page_and_the_oldest_go_past_the_bound() {
    // Room for two of the three ~300 KB transcripts.
    let f = fx(700_000).await;
    let run = f
        .client
        .start_run("default", "three", "g", Default::default())
        .await
        .unwrap();
    let (a, b, c) = (
        transcript("a", 30, 10_000),
        transcript("b", 30, 10_000),
        transcript("c", 30, 10_000),
    );
    f.run_step("default", &a).await;
    // A finished step's transcript, while the run goes on, page by page.
    let (step, read, pages) = f.read("default", &run, "a", 64 * 1024).await;
    assert_eq!((step.as_str(), pages), ("a", a.len().div_ceil(64 * 1024)));
    assert!(read == a, "identical bytes");
    // Stored where it was written: still in segments, none copied into one.
    let head = f
        .store
        .snapshot()
        .unwrap()
        .checkpoint_head(&RunKey::new("default", &run), CheckpointAt::Step(0))
        .unwrap()
        .unwrap();
    assert!(head.segments > 1, "{head:?}");
    f.run_step("default", &b).await;
    f.run_step("default", &c).await;
    let described = f.client.describe_run("default", &run).await.unwrap().run.unwrap();
    assert_eq!(described.status, railyard_proto::v1::RunStatus::Completed as i32);
    // After the run closed: b and c are kept; a, the oldest, went past the bound.
    assert_eq!(f.read("default", &run, "b", 100_000).await.1, b);
    assert_eq!(f.read("default", &run, "c", 1024 * 1024).await.1, c);
    let (step, read, _) = f.read("default", &run, "a", 0).await;
    assert_eq!((step.as_str(), read.len()), ("", 0), "dropped");
    // The current step of a completed run is none; a step the run lacks is refused.
    assert_eq!(f.read("default", &run, "", 0).await.1.len(), 0);
    let missing = f
        .client
        .get_step_checkpoint(GetStepCheckpointRequest {
            namespace: "default".into(),
            run_id: run.clone(),
            step_id: "zz".into(),
            ..Default::default()
        })
        .await;
    assert!(matches!(missing, Err(railyard_sdk::ClientError::NotFound(m)) if m.contains("\"zz\"")));
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_bound_of_zero_keeps_no_finished_steps_transcript() {
    let f = fx(0).await;
    let run = f
        .client
        .start_run("default", "three", "g", Default::default())
        .await
        .unwrap();
    f.run_step("default", &transcript("a", 3, 100)).await;
    assert_eq!(f.read("default", &run, "a", 0).await.1.len(), 0);
    let snap = f.store.snapshot().unwrap();
    assert_eq!(
        snap.step_checkpoint_heads(&RunKey::new("default", &run), 3)
            .unwrap(),
        vec![]
    );
    drop(snap);
    f.server.shutdown().await;
}

#[tokio::test]
async fn the_retention_purge_takes_the_kept_transcripts_with_the_run() {
    let f = fx(64 << 20).await;
    f.client
        .create_namespace_with(CreateNamespaceRequest {
            name: "team".into(),
            retention_seconds: Some(86_400),
            ..Default::default()
        })
        .await
        .unwrap();
    let run = f
        .client
        .start_run("team", "three", "g", Default::default())
        .await
        .unwrap();
    let (a, b) = (transcript("a", 5, 1000), transcript("b", 5, 1000));
    f.run_step("team", &a).await;
    f.run_step("team", &b).await;
    f.client
        .terminate_run(TerminateRunRequest {
            namespace: "team".into(),
            run_id: run.clone(),
            reason: "enough".into(),
            identity: "test".into(),
        })
        .await
        .unwrap();
    // Closed: a and b kept, and the step in flight at the close had none.
    assert_eq!(f.read("team", &run, "b", 0).await.1, b);
    let heads = f
        .store
        .snapshot()
        .unwrap()
        .step_checkpoint_heads(&RunKey::new("team", &run), 3)
        .unwrap();
    assert_eq!(heads.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [0, 1]);

    f.clock.advance(Duration::from_millis(DAY + 120_000));
    let deadline = Instant::now() + Duration::from_secs(60);
    while f.store.run(&RunKey::new("team", &run)).unwrap().is_some() {
        assert!(Instant::now() < deadline, "the run was not purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let snap = f.store.snapshot().unwrap();
    assert_eq!(
        snap.step_checkpoint_heads(&RunKey::new("team", &run), 3).unwrap(),
        vec![]
    );
    assert!(
        snap.checkpoint(&RunKey::new("team", &run), CheckpointAt::Step(1))
            .unwrap()
            .is_empty()
    );
    drop(snap);
    f.server.shutdown().await;
}
