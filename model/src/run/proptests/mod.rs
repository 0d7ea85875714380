//! Property test of the run state machine: random definitions (1–4 steps, timeouts,
//! retry policies) and random sequences of transitions, with valid and invalid tokens
//! (stale lease, wrong attempt, wrong step, old tokens), stray task and timer numbers,
//! and clock advances. After every transition the run must agree with its own history,
//! and a refused transition must have changed nothing.
//!
//! Written against behaviour only (accepted or refused, the state before and after, the
//! events and effects), not against error types.

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::workflow::parse_definition;
use history::{phase_kind, replay};

mod history;

/// Which lease a worker's report carries.
#[derive(Debug, Clone)]
enum Token {
    /// The lease in flight (or, when none is, the newest one handed out).
    Current,
    /// The lease before it.
    StaleLease,
    /// The right lease with the next attempt number.
    WrongAttempt,
    /// The right lease naming another step.
    WrongStep,
    /// Any token handed out earlier.
    Issued(usize),
}

/// Which task, lease or timer a call names, relative to the current one.
#[derive(Debug, Clone)]
enum Pick {
    Current,
    Previous,
    Next,
    Issued(usize),
}

#[derive(Debug, Clone)]
enum Action {
    Advance(Millis),
    Lease(Pick),
    Heartbeat {
        token: Token,
        checkpoint: bool,
        notes: usize,
        ack: usize,
    },
    Complete {
        token: Token,
        update: Option<(u8, u8)>,
    },
    Fail {
        token: Token,
        error: usize,
        non_retryable: bool,
        checkpoint: bool,
    },
    /// The store's timer: move the clock to the lease's deadline, then fire.
    LeaseDeadline,
    LeaseTimer(Pick),
    Undelivered(Pick),
    /// `Current` moves the clock to the armed timer's due time first, as the store does.
    BackoffTimer(Pick),
    Signal,
    Cancel,
    Terminate,
}

const ERRORS: [&str; 4] = ["flaky", "fatal", "timeout", CANCELED_ERROR_TYPE];

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        4 => Just(Pick::Current),
        1 => Just(Pick::Previous),
        1 => Just(Pick::Next),
        1 => any::<usize>().prop_map(Pick::Issued),
    ]
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![
        6 => Just(Token::Current),
        1 => Just(Token::StaleLease),
        1 => Just(Token::WrongAttempt),
        1 => Just(Token::WrongStep),
        1 => any::<usize>().prop_map(Token::Issued),
    ]
}

/// Closing the run by hand is rare, so that most runs get far before it.
fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        12 => prop_oneof![0..5_000i64, 5_000..150_000i64, Just(3_600_000i64)].prop_map(Action::Advance),
        20 => pick().prop_map(Action::Lease),
        12 => (token(), any::<bool>(), 0..3usize, 0..4usize)
            .prop_map(|(token, checkpoint, notes, ack)| Action::Heartbeat { token, checkpoint, notes, ack }),
        20 => (token(), proptest::option::of((0..3u8, any::<u8>())))
            .prop_map(|(token, update)| Action::Complete { token, update }),
        12 => (token(), 0..ERRORS.len(), any::<bool>(), any::<bool>()).prop_map(
            |(token, error, non_retryable, checkpoint)| Action::Fail { token, error, non_retryable, checkpoint }
        ),
        8 => Just(Action::LeaseDeadline),
        4 => pick().prop_map(Action::LeaseTimer),
        4 => pick().prop_map(Action::Undelivered),
        12 => pick().prop_map(Action::BackoffTimer),
        4 => Just(Action::Signal),
        1 => Just(Action::Cancel),
        1 => Just(Action::Terminate),
    ]
}

fn retry_policy() -> impl Strategy<Value = serde_json::Value> {
    (0..=4u32, 1..=50u32, 10..=30u32, 1..=4u32, any::<bool>()).prop_map(
        |(attempts, initial_tenths, coefficient_tenths, cap, fatal)| {
            json!({
                "maximumAttempts": attempts,
                "initialIntervalSeconds": f64::from(initial_tenths) / 10.0,
                "backoffCoefficient": f64::from(coefficient_tenths) / 10.0,
                "maximumIntervalSeconds": f64::from(initial_tenths * cap) / 10.0,
                "nonRetryableErrorTypes": if fatal { vec!["fatal"] } else { vec![] },
            })
        },
    )
}

/// A valid definition, written as JSON so new optional fields do not break it.
fn definition() -> impl Strategy<Value = WorkflowDef> {
    let step = (
        proptest::option::of(1..=120u32),
        proptest::option::of(1..=30u32),
        proptest::option::of(retry_policy()),
        any::<bool>(),
    );
    vec(step, 1..=4).prop_map(|steps| {
        let steps: Vec<_> = steps
            .into_iter()
            .enumerate()
            .map(|(i, (timeout, heartbeat, retry, own_queue))| {
                let mut s = json!({"id": format!("s{i}"), "title": "T", "prompt": "{{goal}}"});
                if let Some(t) = timeout {
                    s["timeoutSeconds"] = json!(t);
                }
                if let Some(t) = heartbeat {
                    s["heartbeatTimeoutSeconds"] = json!(t);
                }
                if let Some(r) = retry {
                    s["retry"] = r;
                }
                if own_queue {
                    s["taskQueue"] = json!("own");
                }
                s
            })
            .collect();
        let def = json!({"id": "wf", "version": "1", "name": "W", "steps": steps});
        parse_definition(&def.to_string()).expect("generated definitions are valid")
    })
}

/// A transition with its arguments resolved.
#[derive(Debug)]
enum Call {
    Lease(u64),
    Heartbeat {
        claims: TokenClaims,
        checkpoint: Vec<u8>,
        notes: Vec<HeartbeatNote>,
        acked: u64,
    },
    Complete {
        claims: TokenClaims,
        updates: BTreeMap<String, String>,
    },
    Fail {
        claims: TokenClaims,
        failure: StepFailure,
    },
    LeaseTimer(u64),
    Undelivered(u64),
    BackoffTimer(usize, u32),
    Signal,
    Cancel,
    Terminate,
}

/// What a transition answered, whatever its error type.
enum Outcome {
    Refused,
    Accepted,
    Leased(Lease),
    Pending(Vec<PendingSignal>),
    Retries(bool),
    /// A timer or an undelivered lease: these never refuse, at most do nothing.
    Silent,
}

impl Call {
    fn on(self, run: &mut RunState, out: &mut Out) -> Outcome {
        let done = |()| Outcome::Accepted;
        match self {
            Self::Lease(task) => run
                .lease(task, "w", out)
                .map_or(Outcome::Refused, Outcome::Leased),
            Self::Heartbeat {
                claims,
                checkpoint,
                notes,
                acked,
            } => run
                .heartbeat(&claims, "w", checkpoint, notes, acked, out)
                .map_or(Outcome::Refused, Outcome::Pending),
            Self::Complete { claims, updates } => run
                .complete(&claims, "w", "notes".into(), vec!["a.txt".into()], updates, out)
                .map_or(Outcome::Refused, done),
            Self::Fail { claims, failure } => run
                .fail(&claims, "w", failure, out)
                .map_or(Outcome::Refused, Outcome::Retries),
            Self::LeaseTimer(lease) => {
                run.lease_timer(lease, out);
                Outcome::Silent
            }
            Self::Undelivered(lease) => {
                run.undelivered(lease, out);
                Outcome::Silent
            }
            Self::BackoffTimer(step, attempt) => {
                run.backoff_timer(step, attempt, out);
                Outcome::Silent
            }
            Self::Signal => run
                .signal("client", "steer".into(), "\"left\"".into(), out)
                .map_or(Outcome::Refused, done),
            Self::Cancel => run
                .cancel("client", "stop".into(), out)
                .map_or(Outcome::Refused, done),
            Self::Terminate => run
                .terminate("client", "enough".into(), out)
                .map_or(Outcome::Refused, done),
        }
    }
}

/// What the model must do with a call, worked out from the state before it.
#[derive(Default)]
struct Expect {
    /// For the calls that may refuse: whether this one is taken.
    accepts: Option<bool>,
    /// For the timers and undelivered leases: whether this one records anything.
    records: Option<bool>,
    /// A heartbeat's signals left after its acknowledgement.
    pending: Vec<PendingSignal>,
    /// Whether a failure gets another attempt.
    retries: bool,
}

/// A run and everything the store would hold beside it: its history, the ready task
/// rows and the backoff timers, rebuilt from the effects.
struct Sim {
    run: RunState,
    seq: u64,
    now: Millis,
    history: Vec<Event>,
    /// Every token a lease was handed out under.
    issued: Vec<TokenClaims>,
    /// Every task number enqueued, in order.
    tasks: Vec<u64>,
    /// Ready task rows.
    ready: BTreeSet<(String, u64)>,
    /// Every backoff timer armed, in order: (due, step index, attempt).
    timers: Vec<(Millis, usize, u32)>,
}

impl Sim {
    fn start(def: WorkflowDef) -> Self {
        let now = 1_000;
        let mut seq = 0;
        let mut out = Out::new(now, &mut seq);
        let params = StartParams {
            namespace: "ns".into(),
            run_id: "r".into(),
            goal: "g".into(),
            context: BTreeMap::from([("k".to_string(), "start".to_string())]),
            task_queue: if def.steps.len().is_multiple_of(2) {
                "run-q".into()
            } else {
                String::new()
            },
            identity: "client".into(),
            ..Default::default()
        };
        let run = RunState::start(params, std::sync::Arc::new(def), &mut out);
        let (events, effects) = (out.events, out.effects);
        let mut sim = Self {
            run,
            seq,
            now,
            history: Vec::new(),
            issued: Vec::new(),
            tasks: Vec::new(),
            ready: BTreeSet::new(),
            timers: Vec::new(),
        };
        assert_eq!(events.first().map(|e| e.id), Some(1), "history starts at event 1");
        sim.record(0, events, &effects);
        sim.check();
        sim
    }

    fn step_id(&self, index: usize) -> String {
        self.run
            .definition
            .steps
            .get(index)
            .map(|s| s.id.clone())
            .unwrap_or_default()
    }

    fn current_attempt(&self) -> u32 {
        self.run.steps.get(self.run.current_step).map_or(0, |s| s.attempt)
    }

    fn current_lease(&self) -> Option<&Lease> {
        match &self.run.phase {
            Phase::Started(lease) => Some(lease),
            _ => None,
        }
    }

    fn claims(&self, token: &Token) -> TokenClaims {
        let current = TokenClaims {
            namespace: "ns".into(),
            run_id: "r".into(),
            step: self.step_id(self.run.current_step),
            attempt: self.current_attempt(),
            lease: self.current_lease().map_or(self.run.lease_counter, |l| l.seq),
            kid: "k".into(),
        };
        match token {
            Token::Current => current,
            Token::StaleLease => TokenClaims {
                lease: current.lease.saturating_sub(1),
                ..current
            },
            Token::WrongAttempt => TokenClaims {
                attempt: current.attempt + 1,
                ..current
            },
            Token::WrongStep => {
                let steps = self.run.definition.steps.len();
                let other = if steps > 1 {
                    self.step_id((self.run.current_step + 1) % steps)
                } else {
                    "elsewhere".into()
                };
                TokenClaims {
                    step: other,
                    ..current
                }
            }
            Token::Issued(i) if !self.issued.is_empty() => self.issued[i % self.issued.len()].clone(),
            Token::Issued(_) => current,
        }
    }

    /// Whether the model must take a report under `claims`: the run is open and the
    /// claims name the lease in flight, its step and its attempt.
    fn takes(&self, claims: &TokenClaims) -> bool {
        self.run.status.is_open()
            && self.current_lease().is_some_and(|l| l.seq == claims.lease)
            && claims.step == self.step_id(self.run.current_step)
            && claims.attempt == self.current_attempt()
    }

    fn pick_lease(&self, pick: &Pick) -> u64 {
        let newest = self.run.lease_counter;
        match pick {
            Pick::Current => newest,
            Pick::Previous => newest.saturating_sub(1),
            Pick::Next => newest + 1,
            Pick::Issued(i) if !self.issued.is_empty() => self.issued[i % self.issued.len()].lease,
            Pick::Issued(_) => newest,
        }
    }

    /// The call an action stands for, with its arguments resolved against the run, and
    /// what the model must do with it.
    fn resolve(&self, action: &Action) -> (Call, Expect) {
        let run = &self.run;
        let open = run.status.is_open();
        let mut expect = Expect::default();
        let call = match action {
            Action::Advance(_) | Action::LeaseDeadline => unreachable!("not a transition"),
            Action::Lease(p) => {
                let ready = match &run.phase {
                    Phase::Scheduled { task_seq, .. } => Some(*task_seq),
                    _ => None,
                };
                let task = match p {
                    Pick::Current => ready.unwrap_or(self.seq + 1),
                    Pick::Previous => ready.unwrap_or(self.seq + 1) - 1,
                    Pick::Next => self.seq + 1,
                    Pick::Issued(i) => self.tasks[i % self.tasks.len()],
                };
                expect.accepts = Some(open && ready == Some(task));
                Call::Lease(task)
            }
            Action::Heartbeat {
                token,
                checkpoint,
                notes,
                ack,
            } => {
                let claims = self.claims(token);
                let pending = &run.pending_signals;
                let acked = match ack {
                    0 => 0,
                    1 => pending.first().map_or(0, |s| s.event_id),
                    2 => pending.last().map_or(0, |s| s.event_id),
                    _ => run.last_event_id + 5,
                };
                expect.accepts = Some(self.takes(&claims));
                expect.pending = pending.iter().filter(|s| s.event_id > acked).cloned().collect();
                Call::Heartbeat {
                    claims,
                    checkpoint: if *checkpoint { b"cp".to_vec() } else { Vec::new() },
                    notes: (0..*notes)
                        .map(|n| HeartbeatNote {
                            kind: "progress".into(),
                            message: format!("note {n}"),
                        })
                        .collect(),
                    acked,
                }
            }
            Action::Complete { token, update } => {
                let claims = self.claims(token);
                expect.accepts = Some(self.takes(&claims));
                let updates = update
                    .iter()
                    .map(|(k, v)| (format!("key{k}"), format!("value{v}")));
                Call::Complete {
                    claims,
                    updates: updates.collect(),
                }
            }
            Action::Fail {
                token,
                error,
                non_retryable,
                checkpoint,
            } => {
                let claims = self.claims(token);
                let error_type = ERRORS[*error];
                let takes = self.takes(&claims);
                expect.accepts = Some(takes);
                expect.retries = takes
                    && !run.cancel_requested
                    && !non_retryable
                    && run.definition.steps[run.current_step]
                        .retry_policy()
                        .allows_retry(claims.attempt, error_type);
                let failure = StepFailure {
                    error_type: error_type.into(),
                    message: "boom".into(),
                    non_retryable: *non_retryable,
                    checkpoint: if *checkpoint { b"cp".to_vec() } else { Vec::new() },
                };
                Call::Fail { claims, failure }
            }
            Action::LeaseTimer(p) => {
                let lease = self.pick_lease(p);
                expect.records = Some(
                    self.current_lease()
                        .is_some_and(|l| open && l.seq == lease && self.now >= l.next_deadline().0),
                );
                Call::LeaseTimer(lease)
            }
            Action::Undelivered(p) => {
                let lease = self.pick_lease(p);
                expect.records = Some(open && self.current_lease().is_some_and(|l| l.seq == lease));
                Call::Undelivered(lease)
            }
            Action::BackoffTimer(p) => {
                let (step, attempt) = (run.current_step, self.current_attempt());
                let (step, attempt) = match p {
                    Pick::Current => self.timers.last().map_or((step, attempt + 1), |t| (t.1, t.2)),
                    Pick::Previous => (step, attempt),
                    Pick::Next => (step + 1, attempt + 1),
                    Pick::Issued(i) if !self.timers.is_empty() => {
                        let t = self.timers[i % self.timers.len()];
                        (t.1, t.2)
                    }
                    Pick::Issued(_) => (step, attempt + 2),
                };
                expect.records = Some(
                    open && matches!(run.phase, Phase::BackingOff { .. })
                        && step == run.current_step
                        && attempt == self.current_attempt() + 1,
                );
                Call::BackoffTimer(step, attempt)
            }
            Action::Signal => {
                expect.accepts = Some(open);
                Call::Signal
            }
            Action::Cancel => {
                expect.accepts = Some(open);
                Call::Cancel
            }
            Action::Terminate => {
                expect.accepts = Some(open);
                Call::Terminate
            }
        };
        (call, expect)
    }

    fn apply(&mut self, action: &Action) {
        match action {
            Action::Advance(ms) => {
                self.now += ms;
                return;
            }
            Action::LeaseDeadline => {
                // What the store does at the lease's deadline.
                let Some((due, seq)) = self.run.lease_deadline() else {
                    return;
                };
                self.now = self.now.max(due);
                return self.apply(&Action::LeaseTimer(Pick::Issued(self.lease_index(seq))));
            }
            Action::BackoffTimer(Pick::Current) => {
                // The store fires a timer when it is due.
                if let Some(&(due, _, _)) = self.timers.last() {
                    self.now = self.now.max(due);
                }
            }
            _ => {}
        }
        let before = self.run.clone();
        let seq_before = self.seq;
        let (call, expect) = self.resolve(action);
        let what = format!("{action:?} as {call:?}");
        let mut out = Out::new(self.now, &mut self.seq);
        let outcome = call.on(&mut self.run, &mut out);
        let (events, effects) = (out.events, out.effects);

        let refused = matches!(outcome, Outcome::Refused);
        if let Some(accepts) = expect.accepts {
            assert_eq!(!refused, accepts, "{what}: accepted");
        }
        if let Some(records) = expect.records {
            assert_eq!(!events.is_empty(), records, "{what}: recorded events");
        }
        match outcome {
            Outcome::Leased(lease) => {
                assert_eq!(
                    lease.seq,
                    before.lease_counter + 1,
                    "leases are numbered in order"
                );
                assert_eq!(self.run.phase, Phase::Started(lease.clone()));
                self.issued.push(TokenClaims {
                    namespace: "ns".into(),
                    run_id: "r".into(),
                    step: self.step_id(self.run.current_step),
                    attempt: self.current_attempt(),
                    lease: lease.seq,
                    kid: "k".into(),
                });
            }
            Outcome::Pending(left) => {
                assert_eq!(left, expect.pending, "{what}: signals left");
                assert_eq!(self.run.pending_signals, expect.pending);
            }
            Outcome::Retries(retries) => assert_eq!(retries, expect.retries, "{what}: retried"),
            Outcome::Refused | Outcome::Accepted | Outcome::Silent => {}
        }
        // A heartbeat records nothing yet moves its deadline and drops acknowledged
        // signals; any other transition that records nothing changes nothing.
        let heartbeat = matches!(action, Action::Heartbeat { .. });
        if refused || !before.status.is_open() || (events.is_empty() && !heartbeat) {
            assert_eq!(self.run, before, "{what}: recorded nothing yet changed the run");
            assert!(
                events.is_empty() && effects.is_empty(),
                "{what}: {events:?} {effects:?}"
            );
            assert_eq!(self.seq, seq_before, "{what}: used up a task number");
        }
        assert!(
            self.run.lease_counter >= before.lease_counter,
            "lease numbers only grow"
        );
        self.record(before.last_event_id, events, &effects);
        self.check();
    }

    fn lease_index(&self, seq: u64) -> usize {
        self.issued
            .iter()
            .position(|c| c.lease == seq)
            .expect("the lease in flight was issued")
    }

    /// Appends a transition's events to the history and applies its effects to the task
    /// rows and timers, as the store would.
    fn record(&mut self, last_before: u64, events: Vec<Event>, effects: &[Effect]) {
        for (k, e) in events.iter().enumerate() {
            assert_eq!(
                e.id,
                last_before + 1 + k as u64,
                "event ids follow on without gaps"
            );
            assert_eq!(e.time_ms, self.now, "events carry the transition's time");
        }
        self.history.extend(events);
        for effect in effects {
            match effect {
                Effect::EnqueueTask { queue, task_seq } => {
                    assert!(
                        self.tasks.last().is_none_or(|t| t < task_seq),
                        "task numbers only grow"
                    );
                    self.tasks.push(*task_seq);
                    self.ready.insert((queue.clone(), *task_seq));
                }
                Effect::RemoveTask { queue, task_seq } => {
                    let was = self.ready.remove(&(queue.clone(), *task_seq));
                    assert!(was, "removed task {task_seq} on {queue:?}, which was not ready");
                }
                Effect::Timer {
                    due_ms,
                    timer:
                        Timer::Backoff {
                            step_index, attempt, ..
                        },
                } => {
                    assert!(*due_ms >= self.now, "a timer armed in the past");
                    self.timers.push((*due_ms, *step_index, *attempt));
                }
                Effect::Timer { timer, .. } => panic!("the run model armed {timer:?}"),
                Effect::SaveCheckpoint(_) | Effect::AppendCheckpoint(_) | Effect::EndCheckpoint { .. } => {}
            }
        }
    }

    /// The run agrees with its history and with the store's task rows and timers.
    fn check(&self) {
        let run = &self.run;
        assert_eq!(
            run.last_event_id,
            self.history.len() as u64,
            "last_event_id is the last event"
        );
        let derived = replay(&run.definition, &self.history);
        assert_eq!(run.status, derived.status, "status");
        assert_eq!(run.close_ms, derived.close_ms, "close time");
        assert_eq!(run.current_step, derived.current_step, "current step");
        assert_eq!(run.lease_counter, derived.lease_counter, "leases handed out");
        assert_eq!(run.cancel_requested, derived.cancel_requested, "cancel requested");
        assert_eq!(run.context, derived.context, "context");
        assert_eq!(Some(phase_kind(&run.phase)), derived.phase, "phase");
        let steps: Vec<_> = run
            .steps
            .iter()
            .map(|s| (s.state.clone(), s.attempt, s.worker.clone()))
            .collect();
        assert_eq!(steps, derived.steps, "step records");
        assert_eq!(
            run.status == RunStatus::Failed,
            !run.failure.is_empty(),
            "failure reason"
        );
        let mut ids = run.pending_signals.iter().map(|s| s.event_id).peekable();
        while let Some(id) = ids.next() {
            assert!(
                ids.peek().is_none_or(|next| *next > id),
                "pending signals in order"
            );
        }
        for s in &run.pending_signals {
            assert!(
                derived
                    .signals
                    .contains(&(s.event_id, s.name.clone(), s.payload_json.clone()))
            );
        }
        assert!(
            run.status.is_open() || run.pending_signals.is_empty(),
            "a closed run has no signals"
        );
        let ready: BTreeSet<_> = match &run.phase {
            Phase::Scheduled { queue, task_seq } if run.status.is_open() => {
                [(queue.clone(), *task_seq)].into()
            }
            _ => BTreeSet::new(),
        };
        assert_eq!(
            self.ready, ready,
            "the ready task rows are the scheduled step's alone"
        );
        match &run.phase {
            Phase::BackingOff { until_ms } => {
                let armed = (*until_ms, run.current_step, self.current_attempt() + 1);
                assert_eq!(self.timers.last(), Some(&armed), "a backoff timer is armed");
            }
            Phase::Started(lease) => {
                assert_eq!(lease.seq, run.lease_counter, "the lease in flight is the newest");
                assert_eq!(run.lease_deadline(), Some((lease.next_deadline().0, lease.seq)));
            }
            _ => assert_eq!(run.lease_deadline(), None),
        }
    }
}

// 256 cases by default; `PROPTEST_CASES=20000` searches deeper.
proptest! {
    #[test]
    fn every_transition_keeps_the_run_in_agreement_with_its_history(
        def in definition(),
        actions in vec(action(), 1..100),
    ) {
        let mut sim = Sim::start(def);
        for action in &actions {
            sim.apply(action);
        }
    }
}
