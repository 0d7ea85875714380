//! `PurgeRuns`: a closed run past retention goes whole, in one commit; open runs,
//! young ones, and those another run still needs stay.

use super::*;
use railyard_store::backend::signal_key;

struct Purging {
    fx: Fixture,
    clock: ManualClock,
}

fn purging(kind: Kind) -> Purging {
    let (store, dir) = store(kind);
    let clock = ManualClock::new(1_000);
    Purging {
        fx: Fixture::built(builder(store).clock(Arc::new(clock.clone())), dir),
        clock,
    }
}

impl Purging {
    async fn start(&self, id: &str, parent: &str, request_id: &str) {
        let mut cmd = start_command(id);
        cmd.params.parent_run_id = parent.into();
        cmd.params.request_id = request_id.into();
        assert!(self.fx.writer.call(cmd).await.unwrap().started);
    }

    async fn terminate(&self, id: &str) {
        self.fx
            .writer
            .call(crate::writer::StopRun {
                how: Stop::Terminate,
                ns: "default".into(),
                run_id: id.into(),
                identity: "op".into(),
                reason: "done".into(),
            })
            .await
            .unwrap();
    }

    /// The first `limit` closed runs the index holds, as purge candidates.
    fn candidates(&self, limit: usize) -> Vec<PurgeCandidate> {
        self.fx
            .store
            .closed_runs("default", None, Millis::MAX, limit)
            .unwrap()
            .into_iter()
            .map(|(close_ms, run_id)| PurgeCandidate {
                ns: "default".into(),
                close_ms,
                run_id,
            })
            .collect()
    }

    /// Every closed run the index holds, as candidates.
    async fn purge_all(&self) -> Purged {
        let candidates = self.candidates(1000);
        self.fx.writer.call(PurgeRuns { candidates }).await.unwrap()
    }

    fn idempotency(&self, key: &str) -> Option<String> {
        let snap = self.fx.store.backend().snapshot().unwrap();
        snap.idempotency("default", key).unwrap()
    }
}

const DAY: u64 = 86_400_000;

on_each!(
    a_closed_run_past_retention_goes_whole_and_what_is_needed_stays,
    purges_whole
);
async fn purges_whole(kind: Kind) {
    let p = purging(kind);
    p.start("parent", "", "req-parent").await;
    p.fx.writer
        .call(crate::writer::Signal {
            ns: "default".into(),
            run_id: "parent".into(),
            identity: "op".into(),
            name: "steer".into(),
            payload: "{}".into(),
            request_id: "sig-1".into(),
        })
        .await
        .unwrap();
    p.start("child", "parent", "").await;
    p.start("open", "", "").await;
    p.terminate("child").await;
    assert_eq!(
        p.fx.store
            .closed_runs("default", None, Millis::MAX, 10)
            .unwrap()
            .len(),
        1
    );

    // Not yet past the default retention (30 days): kept.
    p.clock.advance(Duration::from_millis(29 * DAY));
    assert_eq!(
        p.purge_all().await,
        Purged {
            purged: vec![],
            kept: 1
        }
    );

    // Past it, but its parent is open: kept.
    p.clock.advance(Duration::from_millis(2 * DAY));
    assert_eq!(
        p.purge_all().await,
        Purged {
            purged: vec![],
            kept: 1
        }
    );

    // The parent closes: both may go once the parent's retention passes too.
    p.terminate("parent").await;
    assert_eq!(
        p.purge_all().await,
        Purged {
            purged: vec![RunKey::new("default", "child")],
            kept: 1
        }
    );
    p.clock.advance(Duration::from_millis(31 * DAY));
    let done = p.purge_all().await;
    assert_eq!(
        done,
        Purged {
            purged: vec![RunKey::new("default", "parent")],
            kept: 0
        }
    );

    // Nothing of them is left: state, history, indexes, idempotency keys.
    for id in ["parent", "child"] {
        assert!(
            p.fx.store.run(&RunKey::new("default", id)).unwrap().is_none(),
            "{id}"
        );
        assert!(
            p.fx.store
                .history(&RunKey::new("default", id), 1, 100)
                .unwrap()
                .is_empty(),
            "{id}"
        );
    }
    assert!(
        p.fx.store
            .closed_runs("default", None, Millis::MAX, 10)
            .unwrap()
            .is_empty()
    );
    assert!(p.fx.store.children("default", "parent").unwrap().is_empty());
    assert_eq!(p.idempotency("start:req-parent"), None);
    assert_eq!(p.idempotency(&signal_key("parent", "sig-1")), None);
    let (listed, _) =
        p.fx.store
            .list_runs("default", &railyard_store::RunFilter::default(), None, 10)
            .unwrap();
    let ids: Vec<_> = listed.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["open"]);

    // An open run named as a candidate is never purged, whatever its age.
    let open = PurgeCandidate {
        ns: "default".into(),
        close_ms: 0,
        run_id: "open".into(),
    };
    let kept =
        p.fx.writer
            .call(PurgeRuns {
                candidates: vec![open],
            })
            .await
            .unwrap();
    assert_eq!(
        kept,
        Purged {
            purged: vec![],
            kept: 1
        }
    );
    assert!(p.fx.store.run(&RunKey::new("default", "open")).unwrap().is_some());

    // The purged start's request id is free again.
    p.start("again", "", "req-parent").await;
}

#[tokio::test]
async fn a_purge_whose_commit_fails_leaves_every_run_whole() {
    let backend = railyard_store::memory::MemoryBackend::default();
    let faults = backend.faults();
    let store = Store::new(Arc::new(backend));
    let clock = ManualClock::new(1_000);
    let p = Purging {
        fx: Fixture::built(builder(store).clock(Arc::new(clock.clone())), None),
        clock,
    };
    for id in ["a", "b", "c"] {
        p.start(id, "", &format!("req-{id}")).await;
        p.terminate(id).await;
    }
    p.clock.advance(Duration::from_millis(31 * DAY));
    let before: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            (
                p.fx.store.run(&RunKey::new("default", *id)).unwrap(),
                p.fx.kinds(id),
            )
        })
        .collect();
    faults.fail_commit_in(1);
    let candidates = p.candidates(10);
    assert!(
        p.fx.writer
            .call(PurgeRuns {
                candidates: candidates.clone()
            })
            .await
            .is_err()
    );
    let after: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            (
                p.fx.store.run(&RunKey::new("default", *id)).unwrap(),
                p.fx.kinds(id),
            )
        })
        .collect();
    assert_eq!(before, after, "nothing of a failed purge is kept");
    assert_eq!(p.idempotency("start:req-b").as_deref(), Some("b"));
    assert_eq!(
        p.fx.store
            .closed_runs("default", None, Millis::MAX, 10)
            .unwrap()
            .len(),
        3
    );
    let done = p.fx.writer.call(PurgeRuns { candidates }).await.unwrap();
    assert_eq!(done.purged.len(), 3);
    for id in ["a", "b", "c"] {
        assert!(p.fx.store.run(&RunKey::new("default", id)).unwrap().is_none());
        assert!(p.fx.kinds(id).is_empty());
    }
}
