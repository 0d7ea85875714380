//! Schedules in the writer, on both backends: many schedules fired in batches, each
//! once; every way a run closes reaches its schedule in the same commit; a failed
//! commit fires nothing and the retry fires once.

use std::path::PathBuf;

use super::*;
use railyard_model::run::RunStatus;
use railyard_model::schedule::state::{Action, NewSchedule};
use railyard_model::schedule::{Overlap, Policies, ScheduleSpec, SpecDoc};

/// One step, one attempt, a minute to finish it.
const ONE_SHOT: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"a","title":"A","prompt":"do a","timeoutSeconds":60,"retry":{"maximumAttempts":1}}]}"#;

const T0: Millis = 1_767_225_600_000;
const MIN: Millis = 60_000;

struct Fx {
    writer: Writer,
    store: Store,
    clock: ManualClock,
    matching: Arc<Matching>,
    _dir: Option<Held>,
}

fn fx_on(store: Store, dir: Option<Held>) -> Fx {
    let clock = ManualClock::new(T0);
    let mut workflows = WorkflowRegistry::default();
    for def in [ONE_SHOT, TWO_STEPS] {
        let def = railyard_model::workflow::parse_definition(def).unwrap();
        workflows
            .valid
            .insert(def.id.clone(), (Arc::new(def), PathBuf::from("test.json")));
    }
    let built = builder(store).clock(Arc::new(clock.clone())).workflows(workflows);
    let Fixture {
        writer,
        store,
        matching,
        _dir,
    } = Fixture::built(built, dir);
    Fx {
        writer,
        store,
        clock,
        matching,
        _dir,
    }
}

fn fx(kind: Kind) -> Fx {
    let (store, dir) = store(kind);
    fx_on(store, dir)
}

fn create(id: &str, workflow: &str, overlap: Overlap) -> CreateSchedule {
    CreateSchedule {
        new: NewSchedule {
            namespace: "default".into(),
            id: id.into(),
            spec: ScheduleSpec::new(SpecDoc {
                interval: Some("every 1m".into()),
                ..SpecDoc::default()
            })
            .unwrap(),
            action: Action {
                attributes: Default::default(),
                workflow_id: workflow.into(),
                goal: "at {{scheduledTime}}".into(),
                ..Action::default()
            },
            policies: Policies {
                overlap,
                ..Policies::default()
            },
            memo: String::new(),
            paused: false,
            note: String::new(),
            remaining: None,
        },
        request_id: String::new(),
    }
}

fn run_id(id: &str, due: Millis) -> String {
    railyard_model::schedule::Fire::new(id, due).unwrap().run_id()
}

impl Fx {
    fn advance(&self, ms: Millis) {
        self.clock.advance(Duration::from_millis(ms as u64));
    }

    /// Fires until nothing more is due; returns how many timers fired.
    async fn fire_all(&self) -> usize {
        let mut total = 0;
        loop {
            let n = self.writer.call(crate::writer::FireTimers).await.unwrap();
            if n == 0 {
                return total;
            }
            total += n;
        }
    }

    fn schedule(&self, id: &str) -> railyard_model::schedule::Schedule {
        self.store.schedule("default", id).unwrap().unwrap()
    }

    fn status(&self, id: &str) -> Option<RunStatus> {
        self.store
            .run(&RunKey::new("default", id))
            .unwrap()
            .map(|r| r.status)
    }
}

on_each!(
    schedules_due_at_one_moment_fire_in_batches_each_once,
    many_due_at_once
);
async fn many_due_at_once(kind: Kind) {
    let fx = fx(kind);
    const N: usize = 600;
    for i in 0..N {
        fx.writer
            .call(create(&format!("s{i:04}"), "one", Overlap::Skip))
            .await
            .unwrap();
    }
    assert_eq!(fx.store.schedule_counts().unwrap()["default"], N as u64);
    fx.advance(MIN);
    assert_eq!(fx.fire_all().await, N, "more than one transaction's worth");
    for i in 0..N {
        let id = format!("s{i:04}");
        let s = fx.schedule(&id);
        assert_eq!(s.counters.taken, 1);
        assert_eq!(s.running, vec![run_id(&id, T0 + MIN)]);
        assert_eq!(s.timer.map(|t| t.0), Some(T0 + 2 * MIN));
        assert_eq!(fx.status(&run_id(&id, T0 + MIN)), Some(RunStatus::Running));
    }
    assert_eq!(fx.fire_all().await, 0, "nothing fires twice");
    let page = fx.store.schedules("default", "s0099", 3).unwrap();
    assert_eq!(
        page.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["s0100", "s0101", "s0102"]
    );
}

on_each!(every_way_a_run_closes_reaches_its_schedule, every_close);
async fn every_close(kind: Kind) {
    let fx = fx(kind);
    let until = || tokio::time::Instant::now() + Duration::from_secs(30);
    let mut runs = Vec::new();
    for (i, how) in ["complete", "fail", "time out", "cancel", "terminate"]
        .into_iter()
        .enumerate()
    {
        let id = format!("c{i}");
        fx.writer.call(create(&id, "one", Overlap::Skip)).await.unwrap();
        fx.advance(MIN);
        fx.fire_all().await;
        let run = fx.schedule(&id).running[0].clone();
        runs.push(run.clone());
        let task = fx
            .matching
            .take_or_park("default", "default", "w", 0, until())
            .expect("the fire's step is ready");
        assert_eq!(task.run_id, run);
        let grant = fx
            .writer
            .call(crate::writer::LeaseTask {
                task,
                worker: "w".into(),
            })
            .await
            .unwrap();
        match how {
            "complete" => {
                fx.writer
                    .call(crate::writer::Complete {
                        claims: claims(&grant),
                        identity: "w".into(),
                        completion: StepCompletion::default(),
                    })
                    .await
                    .unwrap();
            }
            "fail" => {
                let f = StepFailure {
                    error_type: "boom".into(),
                    message: "it broke".into(),
                    non_retryable: true,
                    ..Default::default()
                };
                fx.writer
                    .call(crate::writer::Fail {
                        claims: claims(&grant),
                        identity: "w".into(),
                        failure: f,
                    })
                    .await
                    .unwrap();
            }
            "time out" => {
                fx.advance(61_000);
                fx.fire_all().await;
            }
            "cancel" | "terminate" => {
                let stop = if how == "cancel" {
                    Stop::Cancel
                } else {
                    Stop::Terminate
                };
                // Cancelling a leased step only asks; the worker's report closes it.
                fx.writer
                    .call(crate::writer::StopRun {
                        how: stop,
                        ns: "default".into(),
                        run_id: run.clone(),
                        identity: "me".into(),
                        reason: "r".into(),
                    })
                    .await
                    .unwrap();
                if how == "cancel" {
                    let f = StepFailure {
                        error_type: railyard_model::run::CANCELED_ERROR_TYPE.into(),
                        ..Default::default()
                    };
                    fx.writer
                        .call(crate::writer::Fail {
                            claims: claims(&grant),
                            identity: "w".into(),
                            failure: f,
                        })
                        .await
                        .unwrap();
                }
            }
            _ => unreachable!(),
        }
        // Answered means committed: the schedule already knows.
        let status = fx.status(&run).unwrap();
        assert!(!status.is_open(), "{how}: {status:?}");
        let s = fx.schedule(&id);
        assert!(s.running.is_empty(), "{how}: {:?}", s.running);
        assert_eq!(s.recent_actions[0].status, status, "{how}");
        fx.writer
            .call(DeleteSchedule {
                ns: "default".into(),
                schedule_id: id,
            })
            .await
            .unwrap();
    }
    let closed: Vec<_> = runs.iter().map(|r| fx.status(r).unwrap()).collect();
    // A step out of attempts by timeout fails its run (no run timeout exists yet).
    assert_eq!(
        closed,
        [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Failed,
            RunStatus::Canceled,
            RunStatus::Terminated
        ]
    );
}

/// `kill -9` between the fire and its commit is a commit that fails: nothing of
/// the fire is kept, and the next attempt fires the same due time once.
#[tokio::test]
async fn a_failed_fire_commit_keeps_nothing_and_the_retry_fires_once() {
    let backend = Arc::new(railyard_store::memory::MemoryBackend::default());
    let faults = backend.faults();
    let fx = fx_on(Store::new(backend), None);
    fx.writer.call(create("s", "two", Overlap::Skip)).await.unwrap();
    let before = fx.schedule("s");
    fx.advance(MIN);
    faults.fail_commit_in(1);
    assert!(fx.writer.call(crate::writer::FireTimers).await.is_err());
    assert_eq!(fx.schedule("s"), before, "cursor and timer unchanged");
    assert_eq!(fx.status(&run_id("s", T0 + MIN)), None);
    assert_eq!(fx.fire_all().await, 1);
    assert_eq!(fx.schedule("s").counters.taken, 1);
    assert_eq!(fx.status(&run_id("s", T0 + MIN)), Some(RunStatus::Running));
}

on_each!(
    terminate_other_terminates_and_starts_in_the_fire_commit,
    terminate_other
);
async fn terminate_other(kind: Kind) {
    let fx = fx(kind);
    fx.writer
        .call(create("t", "two", Overlap::TerminateOther))
        .await
        .unwrap();
    fx.advance(MIN);
    fx.fire_all().await;
    fx.advance(MIN);
    fx.fire_all().await;
    assert_eq!(fx.status(&run_id("t", T0 + MIN)), Some(RunStatus::Terminated));
    assert_eq!(fx.status(&run_id("t", T0 + 2 * MIN)), Some(RunStatus::Running));
    let s = fx.schedule("t");
    assert_eq!(s.running, vec![run_id("t", T0 + 2 * MIN)]);
    assert_eq!(s.recent_actions[0].status, RunStatus::Terminated);
}

on_each!(
    a_backfill_over_a_fired_time_counts_its_run_as_taken,
    backfill_over_fired
);
async fn backfill_over_fired(kind: Kind) {
    let fx = fx(kind);
    fx.writer
        .call(create("b", "two", Overlap::AllowAll))
        .await
        .unwrap();
    fx.advance(MIN);
    fx.fire_all().await;
    let patched = fx
        .writer
        .call(PatchSchedule {
            ns: "default".into(),
            schedule_id: "b".into(),
            backfill: vec![(T0 + 1, T0 + MIN, Some(Overlap::AllowAll))],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(patched.backfilled, 1);
    let s = fx.schedule("b");
    assert_eq!(s.running, vec![run_id("b", T0 + MIN)], "one run, not two");
    assert_eq!(
        fx.store
            .run(&RunKey::new("default", run_id("b", T0 + MIN)))
            .unwrap()
            .unwrap()
            .last_event_id,
        2
    );
}

on_each!(
    cancel_other_of_a_run_whose_step_waits_starts_the_next_in_the_same_commit,
    cancel_other_unleased
);
async fn cancel_other_unleased(kind: Kind) {
    let fx = fx(kind);
    fx.writer
        .call(create("c", "two", Overlap::CancelOther))
        .await
        .unwrap();
    fx.advance(MIN);
    fx.fire_all().await;
    fx.advance(MIN);
    // One fire: the cancel closes the unleased run at once, and its close starts
    // the waiting fire, all in the fire's transaction.
    assert_eq!(fx.writer.call(crate::writer::FireTimers).await.unwrap(), 1);
    assert_eq!(fx.status(&run_id("c", T0 + MIN)), Some(RunStatus::Canceled));
    assert_eq!(fx.status(&run_id("c", T0 + 2 * MIN)), Some(RunStatus::Running));
    let s = fx.schedule("c");
    assert!(s.buffer.is_empty());
    assert_eq!(s.running, vec![run_id("c", T0 + 2 * MIN)]);
    assert_eq!(s.recent_actions[0].status, RunStatus::Canceled);
}
