//! Batch commands on the reference backend with injected faults: an `AdvanceBatch`
//! whose write or commit fails leaves neither the runs' actions nor the items'
//! outcomes (so a crash at any point acts on nothing twice), and the next one acts
//! on each run exactly once. The retention purge of finished batches goes in
//! bounded slices, its header last, and keeps running and recent batches.

use super::*;
use railyard_model::batch::{Batch, BatchAction, BatchState};
use railyard_store::memory::{Faults, MemoryBackend};

struct Harness {
    lp: WriterLoop,
    store: Store,
    faults: Arc<Faults>,
}

fn harness() -> Harness {
    let backend = Arc::new(MemoryBackend::default());
    let faults = backend.faults();
    let store = Store::new(backend);
    let hooks = builder(store.clone()).hooks().unwrap();
    let lp = WriterLoop {
        store: store.clone(),
        hooks,
        delivery: Default::default(),
        next_seq: store.next_seq().unwrap(),
        follow_ups: Vec::new(),
        limits: StartLimits::new(store.open_run_counts().unwrap()),
        incarnation: 0,
    };
    Harness { lp, store, faults }
}

impl Harness {
    fn call<C: Apply>(&mut self, c: C) -> Result<C::Output, WriteError>
    where
        Command: From<(C, Reply<C::Output>)>,
    {
        let (reply, rx) = oneshot::channel();
        self.lp.apply_batch(vec![Command::from((c, reply))]);
        rx.blocking_recv().unwrap()
    }

    fn advance(&mut self, max: u64) -> Result<Batch, WriteError> {
        self.call(AdvanceBatch {
            ns: "default".into(),
            batch_id: "b1".into(),
            max,
            new_run_ids: Vec::new(),
        })
    }

    /// The runs' histories and the batch's header and items, as the read side sees them.
    fn seen(&self) -> String {
        let snap = self.store.backend().snapshot().unwrap();
        let mut out = format!("{:?}\n", snap.batch("default", "b1").unwrap());
        out += &format!("{:?}\n", snap.batch_items("default", "b1", 0, 100).unwrap());
        for id in IDS {
            out += &format!(
                "{:?}\n",
                self.store.history(&RunKey::new("default", id), 1, 100).unwrap()
            );
        }
        out
    }
}

const IDS: [&str; 3] = ["a", "b", "c"];

fn new_batch() -> CreateBatch {
    CreateBatch {
        batch: Batch {
            namespace: "default".into(),
            batch_id: "b1".into(),
            action: BatchAction::Terminate,
            query: "q".into(),
            reason: "why".into(),
            rate: 10,
            identity: "ops".into(),
            created_ms: 0,
            closed_ms: None,
            state: BatchState::Running,
            stopped_by: String::new(),
            stop_reason: String::new(),
            total: 0,
            next: 0,
            succeeded: 0,
            skipped: 0,
            failed: 0,
        },
        run_ids: IDS.iter().map(|s| s.to_string()).collect(),
    }
}

fn setup() -> Harness {
    let mut h = harness();
    for id in IDS {
        h.call(start_command(id)).unwrap();
    }
    h.call(new_batch()).unwrap();
    h
}

fn applied(h: &Harness, id: &str) -> usize {
    h.store
        .history(&RunKey::new("default", id), 1, 100)
        .unwrap()
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::BatchApplied { batch_id, .. } if batch_id == "b1"))
        .count()
}

#[test]
fn a_failed_advance_acts_on_nothing_and_the_next_acts_on_each_run_once() {
    // How many writes an advance over all three makes, counted without faults.
    let mut h = setup();
    let before = h.faults.writes();
    h.advance(3).unwrap();
    let total = h.faults.writes() - before;
    assert!(total >= 6, "each run and each item is written: {total}");

    // Each write in turn (`Some(n)`), then the commit (`None`).
    for fault in (1..=total).map(Some).chain(std::iter::once(None)) {
        let mut h = setup();
        let seen = h.seen();
        match fault {
            Some(n) => h.faults.fail_write_in(n),
            None => h.faults.fail_commit_in(1),
        }
        assert!(matches!(h.advance(3), Err(WriteError::Storage(_))));
        assert_eq!(h.seen(), seen, "nothing of a failed advance is visible");
        // Again, one at a time, then past the end.
        for n in 1..=3 {
            let b = h.advance(1).unwrap();
            assert_eq!(b.next, n);
        }
        let b = h.advance(3).unwrap();
        assert_eq!((b.state, b.succeeded, b.next), (BatchState::Completed, 3, 3));
        for id in IDS {
            assert_eq!(applied(&h, id), 1, "run {id}");
            assert_eq!(
                h.store.run(&RunKey::new("default", id)).unwrap().unwrap().status,
                RunStatus::Terminated
            );
        }
    }
}

#[test]
fn a_stopped_batch_is_not_advanced_and_a_fifth_running_batch_is_refused() {
    let mut h = setup();
    h.advance(1).unwrap();
    let stopped = h
        .call(StopBatch {
            ns: "default".into(),
            batch_id: "b1".into(),
            identity: "ops".into(),
            reason: "enough".into(),
        })
        .unwrap();
    assert_eq!((stopped.state, stopped.next), (BatchState::Stopped, 1));
    let b = h.advance(3).unwrap();
    assert_eq!((b.state, b.next), (BatchState::Stopped, 1));
    assert_eq!(applied(&h, "b"), 0);
    for i in 0..4 {
        let mut c = new_batch();
        c.batch.batch_id = format!("x{i}");
        assert!(h.call(c).unwrap().created);
    }
    let mut c = new_batch();
    c.batch.batch_id = "x4".into();
    match h.call(c) {
        Err(WriteError::Rejected(Rejection::ResourceExhausted(m))) => assert!(m.contains("4 batches"), "{m}"),
        other => panic!("refused past four running: {other:?}"),
    }
}

#[test]
fn a_finished_batch_is_purged_in_slices_header_last_and_running_or_recent_ones_are_kept() {
    let clock = crate::clock::ManualClock::new(1_000);
    let backend = Arc::new(MemoryBackend::default());
    let store = Store::new(backend);
    let hooks = Core::builder(store.clone())
        .clock(Arc::new(clock.clone()))
        .hooks()
        .unwrap();
    let lp = WriterLoop {
        store: store.clone(),
        hooks,
        delivery: Default::default(),
        next_seq: store.next_seq().unwrap(),
        follow_ups: Vec::new(),
        limits: StartLimits::new(store.open_run_counts().unwrap()),
        incarnation: 0,
    };
    let mut h = Harness {
        lp,
        store,
        faults: Arc::new(Faults::default()),
    };
    for (id, runs) in [("done", 5), ("running", 2)] {
        let mut c = new_batch();
        c.batch.batch_id = id.into();
        c.run_ids = (0..runs).map(|i| format!("r{i}")).collect();
        h.call(c).unwrap();
    }
    h.call(StopBatch {
        ns: "default".into(),
        batch_id: "done".into(),
        identity: "ops".into(),
        reason: "enough".into(),
    })
    .unwrap();
    let purge = |max_items| PurgeBatches {
        candidates: vec![
            ("default".into(), "done".into()),
            ("default".into(), "running".into()),
        ],
        retention_ms: 500,
        max_items,
    };
    let items = |h: &Harness, id: &str| {
        let snap = h.store.backend().snapshot().unwrap();
        (
            snap.batch("default", id).unwrap().is_some(),
            snap.batch_items("default", id, 0, 100).unwrap().len(),
        )
    };
    // Closed at 1 000: not yet past a retention of 500 at 1 499.
    clock.advance(Duration::from_millis(499));
    let p = h.call(purge(2)).unwrap();
    assert_eq!((p.processed, p.items, p.purged.len()), (2, 0, 0));
    assert_eq!(items(&h, "done"), (true, 5));
    clock.advance(Duration::from_millis(1));
    // Two items a command; the header stays until the last item is gone.
    for left in [3, 1] {
        let p = h.call(purge(2)).unwrap();
        assert_eq!((p.processed, p.items), (0, 2));
        assert_eq!(items(&h, "done"), (true, left));
    }
    let p = h.call(purge(2)).unwrap();
    assert_eq!((p.processed, p.items), (2, 1));
    assert_eq!(p.purged, vec![("default".to_string(), "done".to_string())]);
    assert_eq!(items(&h, "done"), (false, 0));
    assert_eq!(items(&h, "running"), (true, 2), "a running batch is kept");
}
