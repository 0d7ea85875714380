use super::*;
use crate::workflow::parse_definition;

const DEF: &str = r#"{"id":"wf","version":"1","name":"W","steps":[
  {"id":"a","title":"A","prompt":"{{goal}}","heartbeatTimeoutSeconds":10,
   "retry":{"maximumAttempts":2,"initialIntervalSeconds":1,"nonRetryableErrorTypes":["fatal"]}},
  {"id":"b","title":"B","prompt":"b","timeoutSeconds":60}]}"#;

struct Fixture {
    run: RunState,
    seq: u64,
    now: Millis,
}

impl Fixture {
    fn new() -> (Self, Vec<Event>, Vec<Effect>) {
        let def = parse_definition(DEF).unwrap();
        let mut seq = 0;
        let mut out = Out::new(1_000, &mut seq);
        let params = StartParams {
            namespace: "default".into(),
            run_id: "r1".into(),
            goal: "g".into(),
            ..Default::default()
        };
        let run = RunState::start(params, Arc::new(def), &mut out);
        let (events, effects) = (out.events, out.effects);
        (Self { run, seq, now: 1_000 }, events, effects)
    }

    fn step<T>(&mut self, f: impl FnOnce(&mut RunState, &mut Out) -> T) -> (T, Vec<Event>, Vec<Effect>) {
        let mut out = Out::new(self.now, &mut self.seq);
        let r = f(&mut self.run, &mut out);
        (r, out.events, out.effects)
    }

    fn task_seq(&self) -> u64 {
        match &self.run.phase {
            Phase::Scheduled { task_seq, .. } => *task_seq,
            p => panic!("not scheduled: {p:?}"),
        }
    }

    fn lease(&mut self) -> TokenClaims {
        let seq = self.task_seq();
        let (lease, _, _) = self.step(|r, o| r.lease(seq, "w1", o));
        let lease = lease.unwrap();
        TokenClaims {
            namespace: "default".into(),
            run_id: "r1".into(),
            step: self.run.step_id(),
            attempt: self.run.attempt(),
            lease: lease.seq,
            kid: "k".into(),
        }
    }
}

fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

#[test]
fn start_records_run_started_and_schedules_first_step() {
    let (fx, events, effects) = Fixture::new();
    assert_eq!(types(&events), ["RunStarted", "StepScheduled"]);
    assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    assert!(matches!(&effects[..], [Effect::EnqueueTask { queue, .. }] if queue == "default"));
    assert_eq!(fx.run.status, RunStatus::Running);
}

#[test]
fn happy_path_runs_every_step_then_completes() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let ctx = BTreeMap::from([("k".to_string(), "v".to_string())]);
    let (r, events, _) = fx.step(|r, o| r.complete(&claims, "w1", "n1".into(), vec![], ctx, o));
    r.unwrap();
    assert_eq!(types(&events), ["StepCompleted", "StepScheduled"]);
    assert_eq!(fx.run.context.get("k").map(String::as_str), Some("v"));
    let claims = fx.lease();
    let (r, events, _) =
        fx.step(|r, o| r.complete(&claims, "w1", "n2".into(), vec!["f".into()], BTreeMap::new(), o));
    r.unwrap();
    assert_eq!(types(&events), ["StepCompleted", "RunCompleted"]);
    assert_eq!(fx.run.status, RunStatus::Completed);
    assert_eq!(fx.run.last_event_id, 8);
    assert_eq!(fx.run.steps[0].notes, "n1");
}

#[test]
fn stale_and_replayed_reports_are_refused_without_events() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let wrong_attempt = TokenClaims {
        attempt: 2,
        ..claims.clone()
    };
    let (r, events, effects) =
        fx.step(|r, o| r.complete(&wrong_attempt, "w", String::new(), vec![], BTreeMap::new(), o));
    assert!(matches!(r, Err(Refusal::StaleLease { .. })));
    assert!(events.is_empty() && effects.is_empty());
    let (r, _, _) = fx.step(|r, o| r.complete(&claims, "w", String::new(), vec![], BTreeMap::new(), o));
    r.unwrap();
    let before = fx.run.clone();
    let (r, events, _) = fx.step(|r, o| r.complete(&claims, "w", String::new(), vec![], BTreeMap::new(), o));
    assert!(
        matches!(r, Err(Refusal::StepNotLeased { .. })),
        "replay must be refused"
    );
    assert!(events.is_empty());
    assert_eq!(fx.run, before);
}

#[test]
fn leasing_a_stale_task_is_refused() {
    let (mut fx, _, _) = Fixture::new();
    let seq = fx.task_seq();
    let (r, _, _) = fx.step(|r, o| r.lease(seq + 100, "w", o));
    assert!(r.is_err());
    fx.lease();
    let (r, _, _) = fx.step(|r, o| r.lease(seq, "w2", o));
    assert!(r.is_err(), "a leased task cannot be leased twice");
}

#[test]
fn failure_retries_by_policy_then_fails_the_run() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let failure = StepFailure {
        error_type: "flaky".into(),
        message: "boom".into(),
        ..Default::default()
    };
    let (r, events, effects) = fx.step(|r, o| r.fail(&claims, "w1", failure.clone(), o));
    assert!(r.unwrap());
    assert_eq!(types(&events), ["StepFailed"]);
    assert!(matches!(
        &effects[..],
        [Effect::Timer {
            due_ms: 2_000,
            timer: Timer::Backoff { attempt: 2, .. }
        }]
    ));
    fx.now = 2_000;
    let (_, events, _) = fx.step(|r, o| r.backoff_timer(0, 2, o));
    assert_eq!(types(&events), ["StepScheduled"]);
    let claims = fx.lease();
    assert_eq!(claims.attempt, 2);
    let (r, events, _) = fx.step(|r, o| r.fail(&claims, "w1", failure, o));
    assert!(!r.unwrap(), "maximumAttempts 2 reached");
    assert_eq!(types(&events), ["StepFailed", "RunFailed"]);
    assert_eq!(fx.run.status, RunStatus::Failed);
}

#[test]
fn non_retryable_types_fail_at_once() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let failure = StepFailure {
        error_type: "fatal".into(),
        ..Default::default()
    };
    let (r, events, _) = fx.step(|r, o| r.fail(&claims, "w1", failure, o));
    assert!(!r.unwrap());
    assert_eq!(types(&events), ["StepFailed", "RunFailed"]);
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let failure = StepFailure {
        error_type: "x".into(),
        non_retryable: true,
        ..Default::default()
    };
    assert!(!fx.step(|r, o| r.fail(&claims, "w1", failure, o)).0.unwrap());
}

#[test]
fn heartbeat_extends_the_lease_and_expiry_times_out() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    fx.now = 9_000;
    let (r, _, effects) = fx.step(|r, o| r.heartbeat(&claims, "w1", b"cp".to_vec(), vec![], 0, o));
    r.unwrap();
    assert_eq!(effects, [Effect::SaveCheckpoint(b"cp".to_vec())]);
    // An append is an effect of its own; keeping is none.
    let (r, _, effects) = fx.step(|r, o| {
        r.heartbeat(
            &claims,
            "w1",
            CheckpointUpdate::Append(b"+".to_vec()),
            vec![],
            0,
            o,
        )
    });
    r.unwrap();
    assert_eq!(effects, [Effect::AppendCheckpoint(b"+".to_vec())]);
    let (r, _, effects) = fx.step(|r, o| r.heartbeat(&claims, "w1", CheckpointUpdate::Keep, vec![], 0, o));
    r.unwrap();
    assert!(effects.is_empty());
    // The deadline moved from 11_000 to 19_000: a check at 11_000 does nothing.
    assert_eq!(fx.run.lease_deadline(), Some((19_000, claims.lease)));
    fx.now = 11_000;
    let (_, events, effects) = fx.step(|r, o| r.lease_timer(claims.lease, o));
    assert!(events.is_empty() && effects.is_empty());
    fx.now = 19_000;
    let (_, events, _) = fx.step(|r, o| r.lease_timer(claims.lease, o));
    assert_eq!(types(&events), ["StepTimedOut"]);
    assert!(matches!(
        &events[0].kind,
        EventKind::StepTimedOut {
            timeout: TimeoutKind::Heartbeat,
            will_retry: true,
            ..
        }
    ));
    assert_eq!(
        fx.run.lease_deadline(),
        None,
        "no lease in flight while backing off"
    );
    // The timed-out lease's report is refused.
    let (r, _, _) = fx.step(|r, o| r.complete(&claims, "w1", String::new(), vec![], BTreeMap::new(), o));
    assert!(matches!(r, Err(Refusal::StepNotLeased { .. })));
    // A stale timer does nothing.
    let (_, events, effects) = fx.step(|r, o| r.lease_timer(claims.lease, o));
    assert!(events.is_empty() && effects.is_empty());
}

#[test]
fn signals_are_recorded_and_acknowledged() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let (r, events, _) = fx.step(|r, o| r.signal("cli", "steer".into(), "\"go left\"".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["SignalReceived"]);
    let id = events[0].id;
    let notes = vec![HeartbeatNote {
        kind: "progress".into(),
        message: "half".into(),
    }];
    let (pending, events, _) = fx.step(|r, o| r.heartbeat(&claims, "w1", vec![], notes, 0, o));
    assert_eq!(pending.unwrap().len(), 1);
    assert_eq!(types(&events), ["CoordinatorNote"]);
    let (pending, _, _) = fx.step(|r, o| r.heartbeat(&claims, "w1", vec![], vec![], id, o));
    assert!(pending.unwrap().is_empty());
}

#[test]
fn cancel_waits_for_the_worker_when_leased() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let (r, events, _) = fx.step(|r, o| r.cancel("cli", "stop".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["CancelRequested"]);
    let failure = StepFailure {
        error_type: CANCELED_ERROR_TYPE.into(),
        ..Default::default()
    };
    let (r, events, _) = fx.step(|r, o| r.fail(&claims, "w1", failure, o));
    assert!(!r.unwrap());
    assert_eq!(types(&events), ["StepFailed", "RunCanceled"]);
    assert_eq!(fx.run.status, RunStatus::Canceled);
}

#[test]
fn cancel_of_a_queued_step_is_immediate_and_removes_the_task() {
    let (mut fx, _, _) = Fixture::new();
    let (r, events, effects) = fx.step(|r, o| r.cancel("cli", "stop".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["CancelRequested", "RunCanceled"]);
    assert!(effects.iter().any(|e| matches!(e, Effect::RemoveTask { .. })));
}

#[test]
fn closed_runs_refuse_every_change() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let (r, events, _) = fx.step(|r, o| r.terminate("cli", "enough".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["RunTerminated"]);
    let before = fx.run.clone();
    assert!(fx.step(|r, o| r.terminate("cli", String::new(), o)).0.is_err());
    assert!(fx.step(|r, o| r.cancel("cli", String::new(), o)).0.is_err());
    assert!(
        fx.step(|r, o| r.signal("cli", "s".into(), String::new(), o))
            .0
            .is_err()
    );
    assert!(
        fx.step(|r, o| r.heartbeat(&claims, "w", vec![], vec![], 0, o))
            .0
            .is_err()
    );
    assert!(
        fx.step(|r, o| r.fail(&claims, "w", StepFailure::default(), o))
            .0
            .is_err()
    );
    let (_, events, _) = fx.step(|r, o| r.lease_timer(claims.lease, o));
    assert!(events.is_empty());
    let (_, events, _) = fx.step(|r, o| r.backoff_timer(0, 2, o));
    assert!(events.is_empty());
    assert_eq!(fx.run, before);
}

#[test]
fn an_undelivered_lease_ends_at_once_and_a_stale_report_of_it_does_nothing() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    let (_, events, _) = fx.step(|r, o| r.undelivered(claims.lease + 1, o));
    assert!(events.is_empty(), "another lease is not touched");
    let (_, events, _) = fx.step(|r, o| r.undelivered(claims.lease, o));
    assert_eq!(types(&events), ["StepTimedOut", "StepScheduled"]);
    assert!(matches!(
        &events[0].kind,
        EventKind::StepTimedOut {
            timeout: TimeoutKind::Undelivered,
            will_retry: true,
            next_attempt_at_ms: Some(1_000),
            ..
        }
    ));
    // The same attempt is offered again at once: nobody ever ran it.
    assert!(matches!(
        &events[1].kind,
        EventKind::StepScheduled { attempt: 1, .. }
    ));
    let (_, events, _) = fx.step(|r, o| r.undelivered(claims.lease, o));
    assert!(events.is_empty());
    let again = fx.lease();
    assert_eq!((again.attempt, again.lease), (1, claims.lease + 1));
    let (r, _, _) = fx.step(|r, o| r.complete(&claims, "w1", String::new(), vec![], BTreeMap::new(), o));
    assert!(
        matches!(r, Err(Refusal::StaleLease { .. })),
        "the undelivered lease is dead"
    );
    // Undelivered leases never use up the retry policy (maximumAttempts 2 here).
    for _ in 0..3 {
        let lease = fx.run.lease_deadline().unwrap().1;
        fx.step(|r, o| r.undelivered(lease, o));
        assert_eq!(fx.lease().attempt, 1);
    }
    assert!(fx.run.status.is_open());
}

#[test]
fn an_undelivered_lease_of_a_run_being_canceled_closes_it() {
    let (mut fx, _, _) = Fixture::new();
    let claims = fx.lease();
    fx.step(|r, o| r.cancel("u", "stop".into(), o)).0.unwrap();
    let (_, events, _) = fx.step(|r, o| r.undelivered(claims.lease, o));
    assert_eq!(types(&events), ["StepTimedOut", "RunCanceled"]);
    assert_eq!(fx.run.status, RunStatus::Canceled);
}

mod usage {
    use super::*;

    const BUDGET_DEF: &str = r#"{"id":"wf","version":"1","name":"W","maxTokens":1000,"steps":[
      {"id":"a","title":"A","prompt":"a","maxTokens":300,"retry":{"maximumAttempts":3}},
      {"id":"b","title":"B","prompt":"b"}]}"#;

    fn fixture(def: &str, budget: RunBudget) -> Fixture {
        let mut seq = 0;
        let mut out = Out::new(1_000, &mut seq);
        let params = StartParams {
            namespace: "default".into(),
            run_id: "r1".into(),
            budget,
            ..Default::default()
        };
        let run = RunState::start(params, Arc::new(parse_definition(def).unwrap()), &mut out);
        Fixture { run, seq, now: 1_000 }
    }

    fn tokens(input: u64, cost_usd: f64) -> Option<Usage> {
        Some(Usage {
            input,
            cost_usd,
            ..Default::default()
        })
    }

    #[test]
    fn cumulative_reports_add_only_their_growth_and_end_in_history() {
        let mut fx = fixture(DEF, RunBudget::default());
        let claims = fx.lease();
        let report = |fx: &mut Fixture, n| {
            fx.step(|r, o| r.record_usage(&claims, tokens(n, 0.0), "m1", Vec::new(), o))
                .0
                .unwrap()
        };
        assert_eq!(report(&mut fx, 100).added.input, 100);
        assert_eq!(report(&mut fx, 250).added.input, 150);
        // A late, smaller total (reordered) adds nothing and lowers nothing.
        assert_eq!(report(&mut fx, 200).added.input, 0);
        assert_eq!(fx.run.usage.input, 250);
        assert_eq!(fx.run.steps[0].usage.input, 250);
        assert_eq!(fx.run.steps[0].model, "m1");
        // The attempt fails and retries: its usage is recorded, the next starts at 0.
        let failure = StepFailure {
            error_type: "flaky".into(),
            message: "x".into(),
            ..Default::default()
        };
        let (r, events, _) = fx.step(|r, o| r.fail(&claims, "w1", failure, o));
        assert!(r.unwrap());
        assert_eq!(types(&events), ["StepUsage", "StepFailed"]);
        assert!(
            matches!(&events[0].kind, EventKind::StepUsage { usage, model, .. } if usage.input == 250 && model == "m1")
        );
        fx.now = 10_000;
        let (_, _, _) = fx.step(|r, o| r.backoff_timer(0, 2, o));
        let claims = fx.lease();
        assert!(fx.run.steps[0].attempt_usage.is_zero());
        let (r, _, _) = fx.step(|r, o| r.record_usage(&claims, tokens(40, 0.0), "m1", Vec::new(), o));
        assert_eq!(r.unwrap().added.input, 40);
        assert_eq!((fx.run.steps[0].usage.input, fx.run.usage.input), (290, 290));
        let (r, events, _) =
            fx.step(|r, o| r.complete(&claims, "w1", "n".into(), vec![], BTreeMap::new(), o));
        r.unwrap();
        assert_eq!(types(&events)[..2], ["StepUsage", "StepCompleted"]);
    }

    #[test]
    fn the_heartbeat_that_passes_a_step_budget_fails_the_step_for_good() {
        let mut fx = fixture(BUDGET_DEF, RunBudget::default());
        let claims = fx.lease();
        let (r, events, _) = fx.step(|r, o| r.record_usage(&claims, tokens(300, 0.0), "m", Vec::new(), o));
        assert_eq!(r.unwrap().budget_exceeded, None, "at the limit is not past it");
        assert!(events.is_empty(), "a usage report records no event");
        let (r, events, _) = fx.step(|r, o| r.record_usage(&claims, tokens(301, 0.0), "m", Vec::new(), o));
        let why = r.unwrap().budget_exceeded.unwrap();
        assert!(
            why.contains("step used 301 tokens") && why.contains("maxTokens of 300"),
            "{why}"
        );
        assert_eq!(types(&events), ["StepUsage", "StepFailed", "RunFailed"]);
        assert!(
            matches!(&events[1].kind, EventKind::StepFailed { error_type, will_retry: false, .. }
            if error_type == TOKEN_BUDGET_EXCEEDED)
        );
        assert_eq!(events[1].identity, "server");
        assert_eq!(fx.run.status, RunStatus::Failed);
        // The worker's later report on that lease is refused: the lease is gone.
        let (r, _, _) = fx.step(|r, o| r.complete(&claims, "w1", "n".into(), vec![], BTreeMap::new(), o));
        assert!(r.is_err());
    }

    #[test]
    fn run_budgets_count_every_step_and_a_start_overrides_the_definition() {
        // The definition allows 1000 tokens; this run was started with 500 and $1.
        let budget = RunBudget {
            max_tokens: Some(500),
            max_cost_usd: Some(1.0),
        };
        let mut fx = fixture(BUDGET_DEF, budget);
        assert_eq!(fx.run.budget, budget);
        let claims = fx.lease();
        let (r, _, _) = fx.step(|r, o| r.record_usage(&claims, tokens(250, 0.4), "m", Vec::new(), o));
        assert_eq!(r.unwrap().budget_exceeded, None);
        let (r, _, _) = fx.step(|r, o| r.complete(&claims, "w1", "n".into(), vec![], BTreeMap::new(), o));
        r.unwrap();
        let claims = fx.lease();
        let (r, _, _) = fx.step(|r, o| r.record_usage(&claims, tokens(100, 0.7), "m", Vec::new(), o));
        let why = r.unwrap().budget_exceeded.unwrap();
        assert!(why.contains("maxCostUsd of $1"), "{why}");
        assert_eq!(fx.run.status, RunStatus::Failed);

        // With no override, the definition's limit holds.
        let fx = fixture(BUDGET_DEF, RunBudget::default());
        assert_eq!(fx.run.budget.max_tokens, Some(1000));
    }

    #[test]
    fn stuck_reports_become_events_and_a_stale_lease_records_nothing() {
        let mut fx = fixture(DEF, RunBudget::default());
        let claims = fx.lease();
        let notes = vec![
            StuckNote {
                signal: "repeated_call".into(),
                message: "warned".into(),
                fatal: false,
            },
            StuckNote {
                signal: "repeated_call".into(),
                message: "failed".into(),
                fatal: true,
            },
        ];
        let (r, events, _) = fx.step(|r, o| r.record_usage(&claims, None, "", notes.clone(), o));
        r.unwrap();
        assert_eq!(types(&events), ["AgentStuckWarning", "AgentStuck"]);
        let stale = TokenClaims {
            lease: claims.lease + 1,
            ..claims
        };
        let before = fx.run.clone();
        let (r, events, _) = fx.step(|r, o| r.record_usage(&stale, tokens(5, 0.0), "m", notes, o));
        assert!(r.is_err());
        assert!(events.is_empty());
        assert_eq!(fx.run, before);
    }
}
