//! The writer on a real database file, driven through its commands.

use std::time::Duration;

use tokio::sync::Notify;

use super::*;
use crate::clock::ManualClock;
use crate::model::{EventKind, TimeoutKind};
use crate::workflow::parse_definition;

const TWO_STEPS: &str = r#"{"id":"two","version":"1","name":"Two","steps":[
  {"id":"a","title":"A","prompt":"do a"},{"id":"b","title":"B","prompt":"do b"}]}"#;

struct Fixture {
    writer: Writer,
    store: Store,
    matching: Arc<Matching>,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let matching = Arc::new(Matching::default());
    let hooks = Hooks {
        matching: matching.clone(),
        watchers: Arc::new(Watchers::default()),
        timer_wake: Arc::new(Notify::new()),
        leases: Arc::new(LeaseDeadlines::default()),
        metrics: Arc::new(Metrics::default()),
        clock: Arc::new(ManualClock::new(1_000)),
    };
    let (writer, _thread) = Writer::spawn(store.clone(), hooks).unwrap();
    Fixture {
        writer,
        store,
        matching,
        _dir: dir,
    }
}

impl Fixture {
    /// Starts run `id` and takes its first task from matching.
    async fn start(&self, id: &str) -> TaskRef {
        let params = StartParams {
            namespace: "default".into(),
            run_id: id.into(),
            ..Default::default()
        };
        let definition = Arc::new(parse_definition(TWO_STEPS).unwrap());
        self.writer
            .start(StartCommand { params, definition })
            .await
            .unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        self.matching
            .take_or_park("default", "default", "w", 0, until)
            .expect("the first step is ready")
    }

    /// Sends a command whose caller has already gone away.
    async fn send_unanswerable(&self, make: impl FnOnce() -> Command) {
        self.writer.tx.send(make()).await.unwrap();
    }

    /// Waits for the run's history to end with `StepTimedOut`, and returns it.
    async fn timed_out(&self, id: &str) -> Vec<EventKind> {
        for _ in 0..500 {
            let kinds: Vec<_> = self
                .store
                .history("default", id, 1, 100)
                .unwrap()
                .into_iter()
                .map(|e| e.kind)
                .collect();
            if kinds.iter().any(|k| matches!(k, EventKind::StepTimedOut { .. })) {
                return kinds;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {id} never timed out");
    }
}

fn claims(grant: &Grant) -> TokenClaims {
    TokenClaims {
        namespace: "default".into(),
        run_id: grant.run.run_id.clone(),
        step: grant.run.definition.steps[grant.run.current_step].id.clone(),
        attempt: grant.run.steps[grant.run.current_step].attempt,
        lease: grant.lease.seq,
        kid: "test".into(),
    }
}

fn undelivered(kinds: &[EventKind], step: &str) -> bool {
    kinds.iter().any(|k| {
        matches!(k, EventKind::StepTimedOut { step_id, timeout: TimeoutKind::Undelivered, will_retry: true, .. }
            if step_id == step)
    })
}

#[tokio::test]
async fn a_lease_whose_poll_gave_up_during_the_commit_ends_at_once() {
    let fx = fixture();
    let task = fx.start("r1").await;
    fx.send_unanswerable(|| {
        let (reply, rx) = oneshot::channel();
        drop(rx);
        Command::Lease(task, "w".into(), reply)
    })
    .await;
    let kinds = fx.timed_out("r1").await;
    assert!(undelivered(&kinds, "a"), "{kinds:?}");
}

#[tokio::test]
async fn an_eager_next_step_whose_caller_gave_up_ends_at_once() {
    let fx = fixture();
    let task = fx.start("r2").await;
    let grant = fx.writer.lease(task, "w".into()).await.unwrap();
    let claims = claims(&grant);
    fx.send_unanswerable(|| {
        let (reply, rx) = oneshot::channel();
        drop(rx);
        Command::Complete {
            claims,
            identity: "w".into(),
            completion: StepCompletion {
                notes: "done".into(),
                take_next: true,
                ..Default::default()
            },
            reply,
        }
    })
    .await;
    let kinds = fx.timed_out("r2").await;
    // Step a's completion stands; only the lease on b, which nobody took, ends.
    assert!(kinds.iter().any(|k| matches!(k, EventKind::StepCompleted { .. })));
    assert!(undelivered(&kinds, "b"), "{kinds:?}");
}
