//! Property: the redb backend, the in-memory reference backend and (when a
//! database is configured) the Postgres backend are the same database. Random
//! batches of commands go through one writer loop on each; after every batch the
//! answers and everything the read side shows (runs, histories, checkpoints, tasks,
//! listings, indexes, timers, lease deadlines, schedules, sequence numbers) must be
//! equal.

use proptest::prelude::*;

use super::*;
use crate::matching::Dispatch;
use railyard_model::run::Phase;

const RUNS: u8 = 4;

/// Step `a` has a heartbeat timeout and step `b` a short start-to-close timeout,
/// so that advancing the clock makes leases time out; both retry with backoff.
const DEFINITION: &str = r#"{"id":"cmp","version":"1","name":"Compare","steps":[
  {"id":"a","title":"A","prompt":"do a","heartbeatTimeoutSeconds":30},
  {"id":"b","title":"B","prompt":"do b","timeoutSeconds":120}]}"#;

#[derive(Debug, Clone)]
enum Op {
    Start {
        run: u8,
        parent: Option<u8>,
        request: Option<u8>,
    },
    StartReplacing {
        old: u8,
        new: u8,
    },
    /// Take a ready task, or park a poll (kept, or abandoned at once).
    Poll {
        keep: bool,
    },
    /// Lease one of the tasks taken so far.
    Lease {
        pick: usize,
    },
    Complete {
        run: u8,
        take_next: bool,
        stale: bool,
    },
    Fail {
        run: u8,
        non_retryable: bool,
    },
    Heartbeat {
        run: u8,
        checkpoint: u8,
    },
    Signal {
        run: u8,
        request: Option<u8>,
    },
    Stop {
        run: u8,
        terminate: bool,
    },
    /// Advance the clock, then fire what is due.
    Tick {
        secs: u16,
    },
    /// Create schedule `sched` (every minute) under an overlap policy.
    CreateSchedule {
        sched: u8,
        overlap: u8,
    },
    /// 0 pause, 1 unpause, 2 trigger, 3 delete.
    PatchSchedule {
        sched: u8,
        what: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let run = 0..RUNS;
    prop_oneof![
        (
            run.clone(),
            proptest::option::of(0..RUNS),
            proptest::option::of(0..3u8)
        )
            .prop_map(|(run, parent, request)| Op::Start { run, parent, request }),
        (run.clone(), run.clone()).prop_map(|(old, new)| Op::StartReplacing { old, new }),
        any::<bool>().prop_map(|keep| Op::Poll { keep }),
        any::<usize>().prop_map(|pick| Op::Lease { pick }),
        (run.clone(), any::<bool>(), proptest::bool::weighted(0.2)).prop_map(|(run, take_next, stale)| {
            Op::Complete {
                run,
                take_next,
                stale,
            }
        }),
        (run.clone(), any::<bool>()).prop_map(|(run, non_retryable)| Op::Fail { run, non_retryable }),
        (run.clone(), any::<u8>()).prop_map(|(run, checkpoint)| Op::Heartbeat { run, checkpoint }),
        (run.clone(), proptest::option::of(0..3u8)).prop_map(|(run, request)| Op::Signal { run, request }),
        (run, any::<bool>()).prop_map(|(run, terminate)| Op::Stop { run, terminate }),
        (0..200u16).prop_map(|secs| Op::Tick { secs }),
        (0..2u8, 0..6u8).prop_map(|(sched, overlap)| Op::CreateSchedule { sched, overlap }),
        (0..2u8, 0..4u8).prop_map(|(sched, what)| Op::PatchSchedule { sched, what }),
    ]
}

/// One writer loop on one backend, driven batch by batch.
struct Side {
    lp: WriterLoop,
    store: Store,
    matching: Arc<Matching>,
    clock: Arc<ManualClock>,
    /// Tasks taken from matching, not yet leased.
    taken: Vec<TaskRef>,
    parked: Vec<oneshot::Receiver<Dispatch>>,
    /// Answers and hand-offs, in order, as text.
    transcript: Vec<String>,
    _dir: Option<Held>,
}

type Pending = Box<dyn FnOnce() -> String>;

fn pending<T: std::fmt::Debug + 'static>(rx: oneshot::Receiver<Result<T, WriteError>>) -> Pending {
    let mut rx = rx;
    Box::new(move || format!("{:?}", rx.try_recv()))
}

fn side(kind: Kind) -> Side {
    let (store, dir) = store(kind);
    let clock = Arc::new(ManualClock::new(1_000));
    let def = parse_definition(DEFINITION).unwrap();
    let mut workflows = crate::registry::WorkflowRegistry::default();
    workflows.valid.insert(
        def.id.clone(),
        (Arc::new(def), std::path::PathBuf::from("cmp.json")),
    );
    let hooks = builder(store.clone())
        .clock(clock.clone())
        .workflows(workflows)
        .hooks()
        .unwrap();
    let matching = hooks.matching.clone();
    Side {
        lp: WriterLoop {
            store: store.clone(),
            hooks,
            delivery: Default::default(),
            next_seq: store.next_seq().unwrap(),
            follow_ups: Vec::new(),
            limits: StartLimits::new(store.open_run_counts().unwrap()),
            incarnation: 0,
        },
        store,
        matching,
        clock,
        taken: Vec::new(),
        parked: Vec::new(),
        transcript: Vec::new(),
        _dir: dir,
    }
}

fn id(run: u8) -> String {
    format!("r{run}")
}

fn starting(run: u8) -> StartCommand {
    let params = StartParams {
        namespace: "default".into(),
        run_id: id(run),
        goal: "compare".into(),
        identity: "prop".into(),
        // Every other run joins a caller's trace, which every backend must keep.
        trace: (run % 2 == 1).then(|| {
            let traceparent = format!("00-{:032x}-{:016x}-01", u32::from(run) + 1, u32::from(run) + 1);
            railyard_model::trace::TraceContext::parse(&traceparent).unwrap()
        }),
        ..Default::default()
    };
    let definition = Arc::new(parse_definition(DEFINITION).unwrap());
    StartCommand { params, definition }
}

fn send<C: Apply>(c: C, commands: &mut Vec<Command>, answers: &mut Vec<Pending>)
where
    C::Output: std::fmt::Debug,
    Command: From<(C, Reply<C::Output>)>,
{
    let (reply, rx) = oneshot::channel();
    commands.push(Command::from((c, reply)));
    answers.push(pending(rx));
}

impl Side {
    /// The claims of the run's current lease (a lease of 0 when none is in flight).
    fn claims(&self, run: u8, stale: bool) -> TokenClaims {
        let state = self.store.run(&RunKey::new("default", id(run))).unwrap();
        let (step, attempt, lease) = match &state {
            Some(s) => {
                let lease = match &s.phase {
                    Phase::Started(l) => l.seq.saturating_sub(u64::from(stale)),
                    _ => 0,
                };
                let step = s.definition.steps.get(s.current_step).map(|d| d.id.clone());
                let attempt = s.steps.get(s.current_step).map(|r| r.attempt);
                (step.unwrap_or_default(), attempt.unwrap_or(0), lease)
            }
            None => (String::new(), 0, 0),
        };
        TokenClaims {
            namespace: "default".into(),
            run_id: id(run),
            step,
            attempt,
            lease,
            kid: "k".into(),
        }
    }

    fn apply(&mut self, ops: &[Op]) {
        let mut commands = std::mem::take(&mut self.lp.follow_ups);
        let mut answers = Vec::new();
        for op in ops {
            match op.clone() {
                Op::Start { run, parent, request } => {
                    let mut c = starting(run);
                    c.params.parent_run_id = parent.map(id).unwrap_or_default();
                    c.params.request_id = request.map(|r| format!("q{r}")).unwrap_or_default();
                    send(c, &mut commands, &mut answers);
                }
                Op::StartReplacing { old, new } => send(
                    StartReplacing {
                        terminate_run_id: id(old),
                        identity: "prop".into(),
                        reason: "replaced".into(),
                        start: starting(new),
                    },
                    &mut commands,
                    &mut answers,
                ),
                Op::Poll { keep } => {
                    let until = tokio::time::Instant::now() + Duration::from_secs(600);
                    match self.matching.take_or_park("default", "default", "w", 0, until) {
                        Ok(task) => {
                            self.transcript.push(format!("took {task:?}"));
                            self.taken.push(task);
                        }
                        Err(rx) if keep => self.parked.push(rx),
                        Err(_) => {}
                    }
                }
                Op::Lease { pick } => {
                    if !self.taken.is_empty() {
                        let task = self.taken.remove(pick % self.taken.len());
                        let worker = "w".into();
                        send(LeaseTask { task, worker }, &mut commands, &mut answers);
                    }
                }
                Op::Complete {
                    run,
                    take_next,
                    stale,
                } => {
                    let completion = StepCompletion {
                        notes: format!("notes of r{run}"),
                        take_next,
                        ..Default::default()
                    };
                    let claims = self.claims(run, stale);
                    let identity = "w".into();
                    send(
                        Complete {
                            claims,
                            identity,
                            completion,
                        },
                        &mut commands,
                        &mut answers,
                    );
                }
                Op::Fail { run, non_retryable } => {
                    let failure = railyard_model::run::StepFailure {
                        error_type: "boom".into(),
                        message: "it broke".into(),
                        non_retryable,
                        checkpoint: b"at failure".to_vec(),
                    };
                    let claims = self.claims(run, false);
                    let identity = "w".into();
                    send(
                        commands::Fail {
                            claims,
                            identity,
                            failure,
                        },
                        &mut commands,
                        &mut answers,
                    );
                }
                Op::Heartbeat { run, checkpoint } => send(
                    commands::Heartbeat {
                        claims: self.claims(run, false),
                        identity: "w".into(),
                        checkpoint: self.beat_checkpoint(run, checkpoint),
                        notes: Vec::new(),
                        acked: 0,
                        // Usage grows with each heartbeat's byte, so both backends
                        // store and read back step and run totals.
                        report: commands::UsageReport {
                            usage: Some(railyard_model::run::Usage {
                                input: u64::from(checkpoint),
                                output: 1,
                                cost_usd: f64::from(checkpoint) / 1000.0,
                                ..Default::default()
                            }),
                            model: "m".into(),
                            stuck: Vec::new(),
                        },
                    },
                    &mut commands,
                    &mut answers,
                ),
                Op::Signal { run, request } => send(
                    commands::Signal {
                        ns: "default".into(),
                        run_id: id(run),
                        identity: "prop".into(),
                        name: "steer".into(),
                        payload: "{}".into(),
                        request_id: request.map(|r| format!("s{r}")).unwrap_or_default(),
                    },
                    &mut commands,
                    &mut answers,
                ),
                Op::Stop { run, terminate } => send(
                    commands::StopRun {
                        how: if terminate { Stop::Terminate } else { Stop::Cancel },
                        ns: "default".into(),
                        run_id: id(run),
                        identity: "prop".into(),
                        reason: "stop".into(),
                    },
                    &mut commands,
                    &mut answers,
                ),
                Op::Tick { secs } => {
                    self.clock.advance(Duration::from_secs(u64::from(secs)));
                    send(commands::FireTimers, &mut commands, &mut answers);
                }
                Op::CreateSchedule { sched, overlap } => {
                    use railyard_model::schedule::state::{Action, NewSchedule, Policies};
                    let new = NewSchedule {
                        namespace: "default".into(),
                        id: format!("s{sched}"),
                        spec: railyard_model::schedule::ScheduleSpec::new(
                            railyard_model::schedule::SpecDoc {
                                interval: Some("every 1m".into()),
                                ..Default::default()
                            },
                        )
                        .unwrap(),
                        action: Action {
                            attributes: Default::default(),
                            workflow_id: "cmp".into(),
                            goal: "at {{scheduledTime}}".into(),
                            ..Default::default()
                        },
                        policies: Policies {
                            overlap: railyard_model::schedule::Overlap::ALL[usize::from(overlap)],
                            pause_on_failure: sched == 1,
                            ..Default::default()
                        },
                        memo: String::new(),
                        paused: false,
                        note: String::new(),
                        remaining: (sched == 1).then_some(3),
                    };
                    let request_id = String::new();
                    send(CreateSchedule { new, request_id }, &mut commands, &mut answers);
                }
                Op::PatchSchedule { sched, what: 3 } => send(
                    DeleteSchedule {
                        ns: "default".into(),
                        schedule_id: format!("s{sched}"),
                    },
                    &mut commands,
                    &mut answers,
                ),
                Op::PatchSchedule { sched, what } => send(
                    PatchSchedule {
                        ns: "default".into(),
                        schedule_id: format!("s{sched}"),
                        pause: what == 0,
                        unpause: what == 1,
                        trigger: (what == 2).then_some(None),
                        ..Default::default()
                    },
                    &mut commands,
                    &mut answers,
                ),
            }
        }
        if !commands.is_empty() {
            self.lp.apply_batch(commands);
        }
        for answer in answers {
            self.transcript.push(answer());
        }
        let parked = std::mem::take(&mut self.parked);
        for mut rx in parked {
            match rx.try_recv() {
                Ok(Dispatch::Task(task)) => {
                    self.transcript.push(format!("woken with {task:?}"));
                    self.taken.push(task);
                }
                Ok(Dispatch::Leased(grant)) => self.transcript.push(format!("handed {grant:?}")),
                Err(oneshot::error::TryRecvError::Empty) => self.parked.push(rx),
                Err(oneshot::error::TryRecvError::Closed) => {}
            }
        }
    }

    /// A heartbeat's checkpoint: whole for an even byte, else an append on the base
    /// the store has now (stale by the time it applies when an earlier command of the
    /// batch changed it: refused alike on every backend), or a made-up one.
    fn beat_checkpoint(&self, run: u8, byte: u8) -> commands::BeatCheckpoint {
        if byte.is_multiple_of(2) {
            return vec![byte; 3].into();
        }
        let head = in_flight_head(&self.store, &id(run));
        let (base_len, base_digest) = match head {
            Some(h) if byte % 7 != 1 => (h.len, h.digest.unwrap_or_default()),
            _ => (0, railyard_model::checkpoint::EMPTY_DIGEST),
        };
        commands::BeatCheckpoint::Append {
            base_len,
            base_digest,
            bytes: vec![byte; 2],
        }
    }

    /// Everything the read side shows, as text.
    fn seen(&self) -> String {
        let s = &self.store;
        let mut out = String::new();
        for run in 0..RUNS {
            let id = id(run);
            out += &format!(
                "{id}: {:?}\n{:?}\n{:?}\nchildren {:?}\n",
                s.run(&RunKey::new("default", &id)).unwrap(),
                s.history(&RunKey::new("default", &id), 1, 10_000).unwrap(),
                (
                    s.checkpoint(&RunKey::new("default", &id)).unwrap(),
                    in_flight_head(s, &id)
                ),
                s.children("default", &id).unwrap(),
            );
        }
        let listed = s.list_runs("default", &Default::default(), None, 2).unwrap();
        let rest = s
            .list_runs("default", &Default::default(), listed.1.clone(), 100)
            .unwrap();
        out += &format!(
            "schedules {:?} {:?}\n",
            s.schedules("default", "", 100).unwrap(),
            s.schedule_counts().unwrap()
        );
        out += &format!(
            "closed {:?}\n",
            s.closed_runs("default", None, Millis::MAX, 1000).unwrap()
        );
        out += &format!(
            "tasks {:?}\nleases {:?}\ntimer {:?}\nlisted {listed:?} {rest:?}\nnamespaces {:?}\nseq {}",
            s.ready_tasks().unwrap(),
            s.lease_deadlines().unwrap(),
            s.next_timer_due().unwrap(),
            s.namespaces().unwrap(),
            self.lp.next_seq,
        );
        out
    }
}

/// Whether the property includes Postgres; says once when it does not.
fn with_postgres() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    let mut configured = true;
    SAID.call_once(|| configured = postgres_configured("compare (the Postgres side)"));
    configured && railyard_store_postgres::testing::test_url().is_some()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn both_backends_show_the_same_runs_histories_and_tasks(
        batches in proptest::collection::vec(proptest::collection::vec(op(), 1..4), 1..14)
    ) {
        let mut redb = side(Kind::Redb);
        let mut memory = side(Kind::Memory);
        let mut postgres = with_postgres().then(|| side(Kind::Postgres));
        for (n, ops) in batches.iter().enumerate() {
            redb.apply(ops);
            memory.apply(ops);
            prop_assert_eq!(&redb.transcript, &memory.transcript, "answers after batch {}", n);
            prop_assert_eq!(redb.seen(), memory.seen(), "tables after batch {}", n);
            if let Some(postgres) = &mut postgres {
                postgres.apply(ops);
                prop_assert_eq!(&postgres.transcript, &memory.transcript, "postgres answers after batch {}", n);
                prop_assert_eq!(postgres.seen(), memory.seen(), "postgres tables after batch {}", n);
            }
        }
        // The stores are the truth a restart rebuilds from: reading them afresh
        // agrees with what the loops kept.
        prop_assert_eq!(redb.store.next_seq().unwrap(), memory.store.next_seq().unwrap());
        if let Some(postgres) = &postgres {
            prop_assert_eq!(postgres.store.next_seq().unwrap(), memory.store.next_seq().unwrap());
        }
    }
}

/// The head of the checkpoint of the run's current step.
fn in_flight_head(store: &Store, id: &str) -> Option<railyard_store::CheckpointHead> {
    let snap = store.snapshot().unwrap();
    let step = snap
        .run(&RunKey::new("default", id))
        .unwrap()
        .map_or(0, |r| r.current_step);
    let at = snap
        .checkpoint_in_flight_at(&RunKey::new("default", id), step)
        .unwrap();
    snap.checkpoint_head(&RunKey::new("default", id), at).unwrap()
}
