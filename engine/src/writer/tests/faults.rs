//! The failed-batch path, with the in-memory backend failing the Nth write or the
//! next commit: every caller in the batch gets the storage error, nothing of the
//! batch is visible, claimed polls go back to matching, sequence numbers are
//! restored, and the next batch works.

use std::collections::BTreeSet;

use super::*;
use crate::matching::Dispatch;
use railyard_store::StorageError;
use railyard_store::memory::Faults;

/// A writer loop driven batch by batch, without its thread.
struct Harness {
    lp: WriterLoop,
    store: Store,
    matching: Arc<Matching>,
    faults: Arc<Faults>,
}

fn harness() -> Harness {
    let backend = Arc::new(MemoryBackend::default());
    let faults = backend.faults();
    let store = Store::new(backend);
    let hooks = builder(store.clone()).hooks().unwrap();
    let matching = hooks.matching.clone();
    let lp = WriterLoop {
        store: store.clone(),
        hooks,
        delivery: Default::default(),
        next_seq: store.next_seq().unwrap(),
        follow_ups: Vec::new(),
        limits: StartLimits::new(store.open_run_counts().unwrap()),
        incarnation: 0,
    };
    Harness {
        lp,
        store,
        matching,
        faults,
    }
}

type Rx<T> = oneshot::Receiver<Result<T, WriteError>>;

/// Waits for one caller's answer.
type Check = Box<dyn FnOnce() -> Result<(), WriteError>>;

fn cmd<C: Apply>(c: C) -> (Command, Rx<C::Output>)
where
    Command: From<(C, Reply<C::Output>)>,
{
    let (reply, rx) = oneshot::channel();
    (Command::from((c, reply)), rx)
}

/// Everything the read side shows of runs `ids`.
fn seen(store: &Store, ids: &[&str]) -> String {
    let mut out = String::new();
    for id in ids {
        let run = store.run(&RunKey::new("default", *id)).unwrap();
        let history = store.history(&RunKey::new("default", *id), 1, 1000).unwrap();
        let checkpoint = store.checkpoint(&RunKey::new("default", *id)).unwrap();
        out += &format!("{id}: {run:?} {history:?} {checkpoint:?}\n");
    }
    let list = store
        .list_runs("default", &Default::default(), None, 100)
        .unwrap();
    out += &format!(
        "{:?} {:?} {:?}",
        store.ready_tasks().unwrap(),
        store.lease_deadlines().unwrap(),
        list
    );
    out
}

const IDS: [&str; 4] = ["a", "b", "c", "d"];

impl Harness {
    /// Run `a` started and its task taken; a poll parked on the queue.
    fn setup(&mut self) -> (TaskRef, oneshot::Receiver<Dispatch>) {
        let (c, rx) = cmd(start_command("a"));
        self.lp.apply_batch(vec![c]);
        rx.blocking_recv().unwrap().unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(60);
        let task = self
            .matching
            .take_or_park("default", "default", "w", 0, until)
            .expect("a's task is ready");
        let parked = self
            .matching
            .take_or_park("default", "default", "poller", 0, until)
            .expect_err("nothing else is ready");
        (task, parked)
    }

    /// The batch under test: a start that sync-matches the parked poll, a lease,
    /// a signal, and two more starts (one of them into a child index).
    fn batch(&self, task: &TaskRef) -> (Vec<Command>, Vec<Check>) {
        let mut commands = Vec::new();
        let mut checks: Vec<Check> = Vec::new();
        let (c, rx) = cmd(start_command("b"));
        commands.push(c);
        checks.push(Box::new(move || rx.blocking_recv().unwrap().map(drop)));
        let (c, rx) = cmd(LeaseTask {
            task: task.clone(),
            worker: "w".into(),
        });
        commands.push(c);
        checks.push(Box::new(move || rx.blocking_recv().unwrap().map(drop)));
        let (c, rx) = cmd(commands::Signal {
            ns: "default".into(),
            run_id: "a".into(),
            identity: "me".into(),
            name: "steer".into(),
            payload: "{}".into(),
            request_id: "sig-1".into(),
        });
        commands.push(c);
        checks.push(Box::new(move || rx.blocking_recv().unwrap().map(drop)));
        let mut child = start_command("c");
        child.params.parent_run_id = "a".into();
        child.params.request_id = "start-c".into();
        let (c, rx) = cmd(child);
        commands.push(c);
        checks.push(Box::new(move || rx.blocking_recv().unwrap().map(drop)));
        let (c, rx) = cmd(start_command("d"));
        commands.push(c);
        checks.push(Box::new(move || rx.blocking_recv().unwrap().map(drop)));
        (commands, checks)
    }
}

/// Arms a fault with `arm`, runs the batch, checks the failed-batch path, then
/// runs the same batch again and checks that it works.
fn fails_cleanly(arm: impl FnOnce(&Faults)) {
    let mut h = harness();
    let (task, mut parked) = h.setup();
    let before = seen(&h.store, &IDS);
    let seq_before = h.lp.next_seq;

    arm(&h.faults);
    let (batch, checks) = h.batch(&task);
    h.lp.apply_batch(batch);
    for check in checks {
        match check() {
            Err(WriteError::Storage(e)) => assert!(matches!(*e, StorageError::Injected(_)), "{e}"),
            other => panic!("every caller gets the storage error, got {other:?}"),
        }
    }
    assert_eq!(seen(&h.store, &IDS), before, "nothing of the batch is visible");
    assert_eq!(h.lp.next_seq, seq_before, "sequence numbers restored");
    assert!(h.lp.follow_ups.is_empty());
    assert!(parked.try_recv().is_err(), "the poll got nothing");
    let metrics = h.lp.hooks.metrics.render();
    assert!(
        metrics.contains(r#"railyard_commands_total{command="start",outcome="error"} 3"#),
        "{metrics}"
    );

    // The claimed poll was given back: the next batch hands b's step to it.
    let (batch, checks) = h.batch(&task);
    h.lp.apply_batch(batch);
    for check in checks {
        check().expect("the next batch works");
    }
    match parked.try_recv() {
        Ok(Dispatch::Leased(grant)) => assert_eq!(grant.run.run_id, "b"),
        other => panic!("the parked poll gets b's lease, got {other:?}"),
    }
    assert_ne!(seen(&h.store, &IDS), before);
    assert_eq!(h.store.children("default", "a").unwrap(), ["c"]);
}

#[test]
fn a_failed_commit_fails_the_whole_batch() {
    fails_cleanly(|f| f.fail_commit_in(1));
}

#[test]
fn a_failed_write_anywhere_in_the_batch_fails_all_of_it() {
    // How many writes the batch makes, counted on a run without faults.
    let mut h = harness();
    let (task, _parked) = h.setup();
    let writes = h.faults.writes();
    let (batch, _checks) = h.batch(&task);
    h.lp.apply_batch(batch);
    let total = h.faults.writes() - writes;
    assert!(total >= 10, "the batch writes in every command: {total}");
    for n in 1..=total {
        fails_cleanly(|f| f.fail_write_in(n));
    }
}

#[test]
fn start_replacing_commits_both_runs_in_one_commit_or_neither() {
    let mut h = harness();
    let (_task, _parked) = h.setup();
    let replacing = || {
        let (c, rx) = cmd(StartReplacing {
            terminate_run_id: "a".into(),
            identity: "schedule".into(),
            reason: "replaced".into(),
            start: start_command("b"),
        });
        (vec![c], rx)
    };
    let before = seen(&h.store, &IDS);
    h.faults.fail_commit_in(1);
    let (batch, rx) = replacing();
    h.lp.apply_batch(batch);
    assert!(matches!(rx.blocking_recv().unwrap(), Err(WriteError::Storage(_))));
    assert_eq!(seen(&h.store, &IDS), before, "neither run changed");

    let commits = h.faults.commits();
    let (batch, rx) = replacing();
    h.lp.apply_batch(batch);
    assert!(rx.blocking_recv().unwrap().unwrap().terminated);
    assert_eq!(h.faults.commits(), commits + 1, "one commit");
    let status = |id: &str| h.store.run(&RunKey::new("default", id)).unwrap().unwrap().status;
    assert_eq!(status("a"), railyard_model::run::RunStatus::Terminated);
    assert_eq!(status("b"), railyard_model::run::RunStatus::Running);
}

#[test]
fn a_storage_error_is_internal_and_names_its_source() {
    let e = crate::error::ApiError::from(StorageError::Injected("write 3 fails".into()));
    assert_eq!(e.to_string(), "storage error: injected fault: write 3 fails");
    assert!(matches!(e, crate::error::ApiError::Storage(_)), "{e:?}");
}

#[test]
fn a_database_that_cannot_be_reached_is_unavailable() {
    let e = crate::error::ApiError::from(StorageError::Unavailable("connection refused".into()));
    assert_eq!(
        e.to_string(),
        "the database cannot be reached: connection refused"
    );
    assert!(matches!(e, crate::error::ApiError::Unavailable(_)), "{e:?}");
}

#[test]
fn a_server_fenced_off_its_database_is_unavailable_and_names_the_new_holder() {
    let fenced = || StorageError::Fenced { holder: "n2".into() };
    let direct = crate::error::ApiError::from(fenced());
    let through_writer = crate::error::ApiError::from(WriteError::from(fenced()));
    for e in [direct, through_writer] {
        assert!(
            e.to_string()
                .contains("lost its claim on the database to node n2"),
            "{e}"
        );
        assert!(matches!(e, crate::error::ApiError::Unavailable(_)), "{e:?}");
    }
}

#[tokio::test]
async fn through_the_handle_a_failed_commit_is_internal_and_the_writer_carries_on() {
    let backend = Arc::new(MemoryBackend::default());
    let faults = backend.faults();
    let store = Store::new(backend);
    let writer = Fixture::built(builder(store.clone()), None).writer;
    faults.fail_commit_in(1);
    let err = writer.call(start_command("a")).await.unwrap_err();
    assert!(matches!(err, WriteError::Storage(_)), "{err:?}");
    assert!(matches!(
        crate::error::ApiError::from(err),
        crate::error::ApiError::Storage(_)
    ));
    assert!(store.run(&RunKey::new("default", "a")).unwrap().is_none());
    let started = writer.call(start_command("a")).await.unwrap();
    assert!(started.started);
    assert!(store.run(&RunKey::new("default", "a")).unwrap().is_some());
}

/// A reset of run `a` (open, at its first step) to step `a`, as run `b`.
fn reset_a() -> (Vec<Command>, Rx<ResetDone>) {
    use railyard_model::run::{ResetKind, ResetRequest, StartParams};
    let (c, rx) = cmd(ResetRun {
        from_run_id: "a".into(),
        request: ResetRequest {
            kind: ResetKind::Reset,
            to_step: Some("a".into()),
            goal: None,
            context: Default::default(),
            reason: "reset".into(),
        },
        start: StartParams {
            namespace: "default".into(),
            run_id: "b".into(),
            identity: "client".into(),
            ..Default::default()
        },
    });
    (vec![c], rx)
}

#[test]
fn a_reset_commits_the_new_run_and_the_old_runs_termination_together_or_neither() {
    use railyard_model::run::RunStatus;
    // How many writes a reset makes, counted without faults.
    let total = {
        let mut h = harness();
        let _parked = h.setup();
        let writes = h.faults.writes();
        let (batch, rx) = reset_a();
        h.lp.apply_batch(batch);
        assert!(rx.blocking_recv().unwrap().unwrap().terminated);
        h.faults.writes() - writes
    };
    assert!(total >= 2, "a reset writes both runs: {total}");
    // Each write failing in turn, then the commit.
    for n in 1..=total + 1 {
        let mut h = harness();
        let _parked = h.setup();
        let before = seen(&h.store, &IDS);
        if n <= total {
            h.faults.fail_write_in(n);
        } else {
            h.faults.fail_commit_in(1);
        }
        let (batch, rx) = reset_a();
        h.lp.apply_batch(batch);
        assert!(matches!(rx.blocking_recv().unwrap(), Err(WriteError::Storage(_))));
        assert_eq!(seen(&h.store, &IDS), before, "fault {n}: neither run changed");
        // The same reset goes through afterwards.
        let (batch, rx) = reset_a();
        h.lp.apply_batch(batch);
        assert!(rx.blocking_recv().unwrap().unwrap().terminated);
        let status = |id: &str| h.store.run(&RunKey::new("default", id)).unwrap().unwrap().status;
        assert_eq!(
            (status("a"), status("b")),
            (RunStatus::Terminated, RunStatus::Running)
        );
    }
}

#[test]
fn a_commit_whose_answer_was_lost_keeps_its_numbers_and_memory_catches_up_first() {
    let mut h = harness();
    // x's commit lands but its caller hears the database is gone; the rebuild
    // after it fails once, and so does the one before the next batch.
    h.faults.lose_commit_answer_in(1);
    h.faults.fail_snapshot_in(1);
    let (c, x) = cmd(start_command("x"));
    h.lp.turn(vec![c]);
    let lost = x.blocking_recv().unwrap().expect_err("x's answer was lost");
    assert!(
        matches!(&lost, WriteError::Storage(e) if matches!(**e, StorageError::Unavailable(_))),
        "{lost:?}"
    );
    h.faults.fail_snapshot_in(1);
    let (c, y) = cmd(start_command("y"));
    h.lp.turn(vec![c]);
    let refused = y
        .blocking_recv()
        .unwrap()
        .expect_err("memory is behind the tables");
    assert!(
        matches!(&refused, WriteError::Storage(e) if matches!(**e, StorageError::Unavailable(_))),
        "{refused:?}"
    );
    assert!(h.store.run(&RunKey::new("default", "y")).unwrap().is_none());
    // The database answers again: memory is rebuilt before z is applied.
    let (c, z) = cmd(start_command("z"));
    h.lp.turn(vec![c]);
    z.blocking_recv().unwrap().expect("z started");
    let ready = h.store.ready_tasks().unwrap();
    let runs: BTreeSet<&str> = ready.iter().map(|t| t.run_id.as_str()).collect();
    assert_eq!(runs, BTreeSet::from(["x", "z"]), "{ready:?}");
    let seqs: BTreeSet<u64> = ready.iter().map(|t| t.task_seq).collect();
    assert_eq!(seqs.len(), 2, "one number per task: {ready:?}");
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut offered = BTreeSet::new();
    while let Ok(t) = h.matching.take_or_park("default", "default", "w", 0, until) {
        offered.insert(t.run_id);
    }
    assert!(offered.contains("x") && offered.contains("z"), "{offered:?}");
}
