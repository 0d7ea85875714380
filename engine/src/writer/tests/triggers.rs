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
        self.store
            .run(&RunKey::new("default", id))
            .unwrap()
            .map(|r| r.status)
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
            .call(crate::writer::StopRun {
                how: Stop::Terminate,
                ns: "default".into(),
                run_id: id.into(),
                identity: "test".into(),
                reason: "done".into(),
            })
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
        let d = fx.writer.call(deliver(id, "", "k", Mode::Serial)).await.unwrap();
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
    let d = fx.writer.call(deliver("d", "", "k", Mode::Serial)).await.unwrap();
    assert!(!d.queued);
}

on_each!(replace_cancels_the_holder_and_starts_in_one_commit, replace);
async fn replace(kind: Kind) {
    let fx = fx(kind);
    fx.writer
        .call(deliver("a", "", "k", Mode::Replace))
        .await
        .unwrap();
    let d = fx
        .writer
        .call(deliver("b", "", "k", Mode::Replace))
        .await
        .unwrap();
    assert_eq!(d.replaced.as_deref(), Some("a"));
    assert_eq!(fx.status("a"), Some(RunStatus::Canceled));
    assert_eq!(fx.status("b"), Some(RunStatus::Running));
    assert_eq!(fx.holder("k").as_deref(), Some("b"));
    // Parallel ignores the key.
    fx.writer
        .call(deliver("c", "", "k", Mode::Parallel))
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
        .call(deliver("a", "d1", "", Mode::Parallel))
        .await
        .unwrap();
    assert!(!first.duplicate);
    let again = fx
        .writer
        .call(deliver("b", "d1", "", Mode::Parallel))
        .await
        .unwrap();
    assert_eq!((again.run_id.as_str(), again.duplicate), ("a", true));
    assert_eq!(fx.status("b"), None);
    fx.clock.advance(Duration::from_secs(10));
    fx.writer
        .call(deliver("c", "d2", "", Mode::Parallel))
        .await
        .unwrap();
    // Only what was received before the cutoff goes, in bounded batches.
    assert_eq!(
        fx.writer
            .call(crate::writer::PurgeHookDeliveries {
                before: 15_000,
                max: 10
            })
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        fx.writer
            .call(crate::writer::PurgeHookDeliveries {
                before: 15_000,
                max: 10
            })
            .await
            .unwrap(),
        0
    );
    let after = fx
        .writer
        .call(deliver("e", "d1", "", Mode::Parallel))
        .await
        .unwrap();
    assert_eq!((after.run_id.as_str(), after.duplicate), ("e", false));
    let kept = fx
        .writer
        .call(deliver("f", "d2", "", Mode::Parallel))
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
        .call(deliver("a", "d1", "k", Mode::Serial))
        .await
        .unwrap();
    faults.fail_commit_in(1);
    assert!(
        fx.writer
            .call(deliver("b", "d2", "k", Mode::Serial))
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
        .call(deliver("b", "d2", "k", Mode::Serial))
        .await
        .unwrap();
    faults.fail_commit_in(1);
    assert!(
        fx.writer
            .call(crate::writer::StopRun {
                how: Stop::Terminate,
                ns: "default".into(),
                run_id: "a".into(),
                identity: "t".into(),
                reason: "r".into()
            })
            .await
            .is_err()
    );
    assert_eq!(fx.status("a"), Some(RunStatus::Running));
    assert_eq!(fx.status("b"), None);
    assert_eq!(fx.holder("k").as_deref(), Some("a"));
    fx.terminate("a").await;
    assert_eq!(fx.status("b"), Some(RunStatus::Running));
}

fn polled(keys: &[(&str, &str, bool)]) -> Vec<PolledItem> {
    keys.iter()
        .map(|(run, key, kept)| PolledItem {
            item: format!("#{run}"),
            keys: vec![railyard_model::trigger::poll::EventKey {
                key: key.to_string(),
                kept: *kept,
            }],
            start: Ok(deliver(run, "", "", Mode::Parallel)),
        })
        .collect()
}

on_each!(
    a_poll_starts_each_unseen_item_once_and_keeps_item_keys_past_the_purge,
    poll_once_each
);
async fn poll_once_each(kind: Kind) {
    use railyard_model::trigger::poll::{PollSource, PollState};
    let fx = fx(kind);
    let t = fx
        .writer
        .call(CreateTrigger {
            trigger: railyard_model::trigger::Trigger {
                namespace: "default".into(),
                id: "t".into(),
                workflow_id: "two".into(),
                goal: "g".into(),
                poll: Some(PollSource {
                    repo: "a/b".into(),
                    every_ms: 60_000,
                    ..PollSource::default()
                }),
                ..Default::default()
            },
        })
        .await
        .unwrap();
    assert_eq!(
        t.poll_state.baseline_ms, 10_000,
        "new items are those from now on"
    );
    let record = |items, since: &str| RecordPoll {
        ns: "default".into(),
        trigger_id: "t".into(),
        definition_ms: t.updated_ms,
        items,
        state: PollState {
            since: since.into(),
            ..t.poll_state.clone()
        },
    };
    let done = fx
        .writer
        .call(record(
            polled(&[("a", "1:new", true), ("b", "2:updated:T", false)]),
            "S1",
        ))
        .await
        .unwrap();
    assert_eq!(done.started, ["a", "b"]);
    let state = fx.store.trigger("default", "t").unwrap().unwrap().poll_state;
    assert_eq!((state.since.as_str(), state.runs_started), ("S1", 2));
    // The same events again (a poll repeated after a crash): nothing starts.
    let again = fx
        .writer
        .call(record(
            polled(&[("a2", "1:new", true), ("b2", "2:updated:T", false)]),
            "S1",
        ))
        .await
        .unwrap();
    assert_eq!((again.started.len(), again.seen_before), (0, 2));
    assert_eq!((fx.status("a2"), fx.status("b2")), (None, None));
    // Past the dedup window an update's key is forgotten; an item's `new` is not.
    assert_eq!(
        fx.writer
            .call(crate::writer::PurgeHookDeliveries {
                before: 10_000_000,
                max: 10
            })
            .await
            .unwrap(),
        1
    );
    let later = fx
        .writer
        .call(record(
            polled(&[("a3", "1:new", true), ("b3", "2:updated:T", false)]),
            "S2",
        ))
        .await
        .unwrap();
    assert_eq!(later.started, ["b3"]);
    // A trigger changed since it was read takes nothing of the poll.
    let stale = RecordPoll {
        definition_ms: t.updated_ms - 1,
        ..record(polled(&[("c", "3:new", true)]), "S3")
    };
    assert!(fx.writer.call(stale).await.is_err());
    assert_eq!(fx.status("c"), None);
    assert_eq!(
        fx.store
            .trigger("default", "t")
            .unwrap()
            .unwrap()
            .poll_state
            .since,
        "S2"
    );
}
