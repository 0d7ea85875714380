//! Trigger deliveries in the writer, on both backends: the serial hand-off in the
//! closing transaction, replace, dedup and its purge, and a failed commit that
//! keeps nothing.

use std::path::PathBuf;

use super::*;
use railyard_model::run::RunStatus;
use railyard_model::trigger::Mode;

struct Fx {
    writer: Writer,
    store: Store,
    clock: ManualClock,
    _dir: Option<Held>,
}

fn fx_on(store: Store, dir: Option<Held>) -> Fx {
    let clock = ManualClock::new(10_000);
    let mut workflows = WorkflowRegistry::default();
    let def = parse_definition(TWO_STEPS).unwrap();
    workflows
        .valid
        .insert(def.id.clone(), (Arc::new(def), PathBuf::from("test.json")));
    let built = builder(store).clock(Arc::new(clock.clone())).workflows(workflows);
    let Fixture {
        writer, store, _dir, ..
    } = Fixture::built(built, dir);
    Fx {
        writer,
        store,
        clock,
        _dir,
    }
}

fn fx(kind: Kind) -> Fx {
    let (store, dir) = store(kind);
    fx_on(store, dir)
}

fn deliver(run_id: &str, delivery: &str, key: &str, mode: Mode) -> DeliverHook {
    let mut start = start_command(run_id);
    start.params.identity = "trigger:t".into();
    DeliverHook {
        trigger_id: "t".into(),
        delivery_id: delivery.into(),
        key: key.into(),
        mode,
        workflow_id: "two".into(),
        start,
    }
}

impl Fx {
    fn status(&self, id: &str) -> Option<RunStatus> {
        self.store.run("default", id).unwrap().map(|r| r.status)
    }

    fn holder(&self, key: &str) -> Option<String> {
        self.store
            .snapshot()
            .unwrap()
            .trigger_key("default", "t", key)
            .unwrap()
    }

    async fn terminate(&self, id: &str) {
        self.writer
            .stop(
                Stop::Terminate,
                "default".into(),
                id.into(),
                "test".into(),
                "done".into(),
            )
            .await
            .unwrap();
    }
}

on_each!(
    serial_deliveries_start_one_by_one_as_each_run_closes,
    serial_hand_off
);
async fn serial_hand_off(kind: Kind) {
    let fx = fx(kind);
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        let d = fx
            .writer
            .deliver_hook(deliver(id, "", "k", Mode::Serial))
            .await
            .unwrap();
        assert_eq!((d.run_id.as_str(), d.queued), (id, i > 0));
    }
    assert_eq!(fx.status("a"), Some(RunStatus::Running));
    assert_eq!((fx.status("b"), fx.status("c")), (None, None));
    assert_eq!(fx.holder("k").as_deref(), Some("a"));
    fx.terminate("a").await;
    assert_eq!(
        fx.status("b"),
        Some(RunStatus::Running),
        "started in a's closing commit"
    );
    assert_eq!(fx.status("c"), None);
    assert_eq!(fx.holder("k").as_deref(), Some("b"));
    fx.terminate("b").await;
    assert_eq!(fx.holder("k").as_deref(), Some("c"));
    fx.terminate("c").await;
    assert_eq!(fx.holder("k"), None, "the key is free");
    let d = fx
        .writer
        .deliver_hook(deliver("d", "", "k", Mode::Serial))
        .await
        .unwrap();
    assert!(!d.queued);
}

on_each!(replace_cancels_the_holder_and_starts_in_one_commit, replace);
async fn replace(kind: Kind) {
    let fx = fx(kind);
    fx.writer
        .deliver_hook(deliver("a", "", "k", Mode::Replace))
        .await
        .unwrap();
    let d = fx
        .writer
        .deliver_hook(deliver("b", "", "k", Mode::Replace))
        .await
        .unwrap();
    assert_eq!(d.replaced.as_deref(), Some("a"));
    assert_eq!(fx.status("a"), Some(RunStatus::Canceled));
    assert_eq!(fx.status("b"), Some(RunStatus::Running));
    assert_eq!(fx.holder("k").as_deref(), Some("b"));
    // Parallel ignores the key.
    fx.writer
        .deliver_hook(deliver("c", "", "k", Mode::Parallel))
        .await
        .unwrap();
    assert_eq!(fx.status("b"), Some(RunStatus::Running));
    assert_eq!(fx.status("c"), Some(RunStatus::Running));
}

on_each!(a_delivery_id_answers_its_run_until_purged, dedup_and_purge);
async fn dedup_and_purge(kind: Kind) {
    let fx = fx(kind);
    let first = fx
        .writer
        .deliver_hook(deliver("a", "d1", "", Mode::Parallel))
        .await
        .unwrap();
    assert!(!first.duplicate);
    let again = fx
        .writer
        .deliver_hook(deliver("b", "d1", "", Mode::Parallel))
        .await
        .unwrap();
    assert_eq!((again.run_id.as_str(), again.duplicate), ("a", true));
    assert_eq!(fx.status("b"), None);
    fx.clock.advance(Duration::from_secs(10));
    fx.writer
        .deliver_hook(deliver("c", "d2", "", Mode::Parallel))
        .await
        .unwrap();
    // Only what was received before the cutoff goes, in bounded batches.
    assert_eq!(fx.writer.purge_hook_deliveries(15_000, 10).await.unwrap(), 1);
    assert_eq!(fx.writer.purge_hook_deliveries(15_000, 10).await.unwrap(), 0);
    let after = fx
        .writer
        .deliver_hook(deliver("e", "d1", "", Mode::Parallel))
        .await
        .unwrap();
    assert_eq!((after.run_id.as_str(), after.duplicate), ("e", false));
    let kept = fx
        .writer
        .deliver_hook(deliver("f", "d2", "", Mode::Parallel))
        .await
        .unwrap();
    assert_eq!((kept.run_id.as_str(), kept.duplicate), ("c", true));
}

#[tokio::test]
async fn a_failed_commit_keeps_no_run_delivery_or_queued_start() {
    let backend = Arc::new(MemoryBackend::default());
    let faults = backend.faults();
    let fx = fx_on(Store::new(backend), None);
    fx.writer
        .deliver_hook(deliver("a", "d1", "k", Mode::Serial))
        .await
        .unwrap();
    faults.fail_commit_in(1);
    assert!(
        fx.writer
            .deliver_hook(deliver("b", "d2", "k", Mode::Serial))
            .await
            .is_err()
    );
    assert!(
        fx.store
            .snapshot()
            .unwrap()
            .queued_starts("default", "t", "k", 10)
            .unwrap()
            .is_empty()
    );
    assert!(
        fx.store
            .snapshot()
            .unwrap()
            .hook_delivery("default", "t", "d2")
            .unwrap()
            .is_none()
    );
    // Nor a hand-off: the closing commit fails, and the key stays with a.
    fx.writer
        .deliver_hook(deliver("b", "d2", "k", Mode::Serial))
        .await
        .unwrap();
    faults.fail_commit_in(1);
    assert!(
        fx.writer
            .stop(
                Stop::Terminate,
                "default".into(),
                "a".into(),
                "t".into(),
                "r".into()
            )
            .await
            .is_err()
    );
    assert_eq!(fx.status("a"), Some(RunStatus::Running));
    assert_eq!(fx.status("b"), None);
    assert_eq!(fx.holder("k").as_deref(), Some("a"));
    fx.terminate("a").await;
    assert_eq!(fx.status("b"), Some(RunStatus::Running));
}
