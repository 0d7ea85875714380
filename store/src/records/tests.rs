//! Records on a real database file: round trips, old and odd rows.

use railyard_model::RunKey;
use redb::{Database, ReadableDatabase, TableDefinition};

use super::*;
use railyard_model::run::{Event, EventKind, Out, StartParams, TimeoutKind, Timer};
use railyard_model::workflow::parse_definition;

pub(super) const DEFS: TableDefinition<DefinitionTableKey, &[u8]> = TableDefinition::new("definitions");

const DEF: &str = r#"{"id":"wf","version":"1","name":"W","steps":[
  {"id":"a","title":"A","prompt":"a long prompt that must not be copied into every state row","heartbeatTimeoutSeconds":10},
  {"id":"b","title":"B","prompt":"b"}]}"#;

pub(super) struct Db {
    pub(super) db: Database,
    pub(super) defs: Definitions,
    _dir: tempfile::TempDir,
}

pub(super) fn db() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("t.redb")).unwrap();
    Db {
        db,
        defs: Definitions::default(),
        _dir: dir,
    }
}

/// A run that has been through a lease, a signal and a heartbeat.
pub(super) fn busy_run() -> (RunState, Vec<Event>) {
    let def = Arc::new(parse_definition(DEF).unwrap());
    let mut seq = 0;
    let mut out = Out::new(1_000, &mut seq);
    let params = StartParams {
        namespace: "ns".into(),
        run_id: "r1".into(),
        goal: "g".into(),
        context: BTreeMap::from([("k".into(), "v".into())]),
        request_id: "req".into(),
        schedule_id: "nightly".into(),
        ..Default::default()
    };
    let mut run = RunState::start(params, def, &mut out);
    let task_seq = match &run.phase {
        Phase::Scheduled { task_seq, .. } => *task_seq,
        p => panic!("{p:?}"),
    };
    run.lease(task_seq, "w1", &mut out).unwrap();
    run.signal("u", "steer".into(), "{}".into(), &mut out).unwrap();
    let events = out.events;
    (run, events)
}

#[test]
fn a_run_and_its_events_round_trip_and_the_definition_is_stored_once() {
    let d = db();
    let (run, events) = busy_run();
    let tx = d.db.begin_write().unwrap();
    let state = {
        let mut table = tx.open_table(DEFS).unwrap();
        d.defs.store(&run.definition, &mut table).unwrap();
        d.defs.store(&run.definition, &mut table).unwrap();
        assert_eq!(redb::ReadableTableMetadata::len(&table).unwrap(), 1);
        encode_run(&run, &d.defs).unwrap()
    };
    tx.commit().unwrap();
    let text = String::from_utf8(state.clone()).unwrap();
    assert!(
        !text.contains("long prompt"),
        "the state row names its definition: {text}"
    );

    // A fresh cache (another process) reads the definition from the table once.
    let fresh = Definitions::default();
    let tx = d.db.begin_read().unwrap();
    let table = tx.open_table(DEFS).unwrap();
    let back = decode_run(&state, &fresh, &table).unwrap();
    assert_eq!(back, run);
    let again = decode_run(&state, &fresh, &table).unwrap();
    assert!(
        Arc::ptr_eq(&back.definition, &again.definition),
        "decoded once, then shared"
    );
    for ev in &events {
        let row = encode_event(ev, &d.defs).unwrap();
        assert_eq!(&decode_event(&row, &fresh, &table).unwrap(), ev);
    }
    assert_eq!(
        events.iter().map(|e| e.kind.type_name()).collect::<Vec<_>>(),
        ["RunStarted", "StepScheduled", "StepStarted", "SignalReceived"]
    );
}

#[test]
fn a_runs_usage_budget_and_stuck_warnings_round_trip() {
    let d = db();
    let (mut run, _) = busy_run();
    let mut seq = 100;
    let mut out = Out::new(2_000, &mut seq);
    let Phase::Started(lease) = &run.phase else {
        panic!("{:?}", run.phase)
    };
    let claims = railyard_model::token::TokenClaims {
        namespace: "ns".into(),
        run_id: "r1".into(),
        step: run.definition.steps[0].id.clone(),
        attempt: 1,
        lease: lease.seq,
        kid: "k".into(),
    };
    let usage = railyard_model::run::Usage {
        input: 120,
        output: 30,
        cache_read: 900,
        cache_write: 50,
        cost_usd: 0.0125,
    };
    let warning = railyard_model::run::StuckNote {
        signal: "repeated_call".into(),
        message: "the same call".into(),
        fatal: false,
    };
    run.record_usage(&claims, Some(usage), "claude-x", vec![warning], &mut out)
        .unwrap();
    run.budget.max_cost_usd = Some(9.5);
    run.budget.max_tokens = Some(77);
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    d.defs.store(&run.definition, &mut table).unwrap();
    let back = decode_run(
        &encode_run(&run, &d.defs).unwrap(),
        &Definitions::default(),
        &table,
    )
    .unwrap();
    assert_eq!(back, run);
    assert_eq!((back.usage.total(), back.steps[0].usage.cache_read), (1100, 900));
    assert_eq!(back.steps[0].model, "claude-x");
    assert_eq!(out.events.len(), 1);
    let row = encode_event(&out.events[0], &d.defs).unwrap();
    assert_eq!(decode_event(&row, &d.defs, &table).unwrap(), out.events[0]);
}

#[test]
fn every_event_type_and_the_timer_round_trip() {
    let d = db();
    let (run, _) = busy_run();
    let kinds = [
        EventKind::StepCompleted {
            step_id: "a".into(),
            attempt: 1,
            notes: "n".into(),
            artifacts: vec!["x".into()],
            context_updates: BTreeMap::from([("a".into(), "b".into())]),
            result: String::new(),
        },
        EventKind::StepCompleted {
            step_id: "b".into(),
            attempt: 2,
            notes: String::new(),
            artifacts: vec![],
            context_updates: BTreeMap::new(),
            result: r#"{"n":[1,2],"s":"é"}"#.into(),
        },
        EventKind::StepResultRefused {
            step_id: "a".into(),
            attempt: 1,
            violations: vec![railyard_model::contract::Violation {
                path: "result.n".into(),
                reason: "value is not of type \"integer\"".into(),
            }],
            total_violations: 2,
        },
        EventKind::StepFailed {
            step_id: "a".into(),
            attempt: 2,
            error_type: "e".into(),
            message: "m".into(),
            will_retry: true,
            next_attempt_at_ms: Some(9),
        },
        EventKind::StepTimedOut {
            step_id: "a".into(),
            attempt: 1,
            timeout: TimeoutKind::Heartbeat,
            will_retry: false,
            next_attempt_at_ms: None,
        },
        EventKind::StepTimedOut {
            step_id: "a".into(),
            attempt: 1,
            timeout: TimeoutKind::StartToClose,
            will_retry: false,
            next_attempt_at_ms: None,
        },
        EventKind::StepTimedOut {
            step_id: "a".into(),
            attempt: 1,
            timeout: TimeoutKind::Undelivered,
            will_retry: true,
            next_attempt_at_ms: Some(1),
        },
        EventKind::CoordinatorNote {
            step_id: "a".into(),
            attempt: 1,
            kind: "k".into(),
            message: "m".into(),
        },
        EventKind::CancelRequested { reason: "r".into() },
        EventKind::StepUsage {
            step_id: "a".into(),
            attempt: 2,
            model: "claude-x".into(),
            usage: railyard_model::run::Usage {
                input: 1,
                output: 2,
                cache_read: 3,
                cache_write: 4,
                cost_usd: 0.5,
            },
        },
        EventKind::AgentStuck {
            step_id: "a".into(),
            attempt: 1,
            signal: "no_progress".into(),
            message: "m".into(),
            fatal: false,
        },
        EventKind::AgentStuck {
            step_id: "a".into(),
            attempt: 1,
            signal: "repeated_call".into(),
            message: "m".into(),
            fatal: true,
        },
        EventKind::RunCompleted {
            context: BTreeMap::from([("a".into(), "b".into())]),
        },
        EventKind::RunFailed { reason: "r".into() },
        EventKind::RunCanceled { reason: "r".into() },
        EventKind::RunTerminated { reason: "r".into() },
    ];
    let tx = d.db.begin_write().unwrap();
    let table = tx.open_table(DEFS).unwrap();
    for (i, kind) in kinds.into_iter().enumerate() {
        let ev = Event {
            id: i as u64 + 5,
            time_ms: 77,
            identity: "who".into(),
            kind,
        };
        let row = encode_event(&ev, &d.defs).unwrap();
        assert_eq!(decode_event(&row, &d.defs, &table).unwrap(), ev);
    }
    let timer = Timer::Backoff {
        namespace: run.namespace.clone(),
        run_id: run.run_id.clone(),
        step_index: 1,
        attempt: 3,
    };
    assert_eq!(decode_timer(&encode_timer(&timer).unwrap()).unwrap(), timer);
}

#[test]
fn older_rows_with_missing_fields_and_newer_ones_with_unknown_fields_are_read() {
    let d = db();
    let def = Arc::new(parse_definition(DEF).unwrap());
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    let key = d.defs.store(&def, &mut table).unwrap();
    let fresh = Definitions::default();
    // Only what has no default, plus fields this build has never heard of.
    let state = serde_json::json!({
        "definition": {"workflow_id": "wf", "version": "1", "hash": key.hash},
        "status": "RUNNING",
        "phase": {"kind": "scheduled", "queue": "default", "task_seq": 4, "priority": 9},
        "steps": [{"state": "SCHEDULED", "attempt": 1, "cost_usd": 0.5}, {}],
        "sla": "gold",
    });
    let run = decode_run(&serde_json::to_vec(&state).unwrap(), &fresh, &table).unwrap();
    assert_eq!(run.definition, def);
    assert_eq!(
        run.phase,
        Phase::Scheduled {
            queue: "default".into(),
            task_seq: 4
        }
    );
    assert_eq!((run.steps[0].attempt, run.steps[1].attempt), (1, 0));
    assert_eq!(
        (run.goal.as_str(), run.last_event_id, run.close_ms),
        ("", 0, None)
    );
    assert_eq!(
        run.schedule_id, "",
        "a row from before schedules was started by none"
    );
    assert!(run.usage.is_zero() && run.steps[0].usage.is_zero() && run.steps[0].attempt_usage.is_zero());
    assert_eq!(
        (run.budget, run.steps[0].model.as_str()),
        (Default::default(), "")
    );
    assert_eq!(
        run.flow,
        railyard_model::flow::Flow::default(),
        "a row from before flow control has priority 3, weight 1 and no keys"
    );
    // A history row from before usage and stuck events reads as it did; one of a
    // StepUsage with missing counts reads them as 0.
    let usage = br#"{"id":4,"event":{"StepUsage":{"step_id":"a","usage":{"input":7}}}}"#;
    let ev = decode_event(usage, &fresh, &table).unwrap();
    assert!(matches!(ev.kind, EventKind::StepUsage { usage, .. } if usage.input == 7 && usage.total() == 7));

    let event = br#"{"id":3,"event":{"StepStarted":{"step_id":"a","lease":2,"gpu":"h100"}},"trace":"x"}"#;
    let ev = decode_event(event, &fresh, &table).unwrap();
    assert_eq!((ev.id, ev.identity.as_str()), (3, ""));
    assert_eq!(
        ev.kind,
        EventKind::StepStarted {
            step_id: "a".into(),
            attempt: 0,
            worker: String::new(),
            lease: 2
        }
    );
    let timer = br#"{"timer":{"backoff":{"namespace":"ns","run_id":"r","attempt":2}},"jitter":true}"#;
    assert_eq!(
        decode_timer(timer).unwrap(),
        Timer::Backoff {
            namespace: "ns".into(),
            run_id: "r".into(),
            step_index: 0,
            attempt: 2
        }
    );
}

#[test]
fn a_row_of_a_newer_record_version_or_a_missing_definition_is_refused_by_name() {
    let d = db();
    let tx = d.db.begin_write().unwrap();
    let table = tx.open_table(DEFS).unwrap();
    let newer = br#"{"v":2,"timer":{"backoff":{}}}"#;
    let err = decode_timer(newer).unwrap_err().to_string();
    assert!(
        err.contains("timer record") && err.contains("version 2") && err.contains("newer"),
        "{err}"
    );

    let (run, _) = busy_run();
    let row = encode_run(&run, &d.defs).unwrap();
    let err = decode_run(&row, &Definitions::default(), &table)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("run record") && err.contains("definition wf version 1"),
        "{err}"
    );

    // A state row that disagrees with its definition is refused, not trusted.
    let d2 = db();
    let tx2 = d2.db.begin_write().unwrap();
    let mut t2 = tx2.open_table(DEFS).unwrap();
    let key = d2.defs.store(&run.definition, &mut t2).unwrap();
    let bad = serde_json::json!({
        "definition": key,
        "status": "RUNNING",
        "phase": {"kind": "backing_off", "until_ms": 5},
        "steps": [{}, {}],
        "current_step": 2,
    });
    let err = decode_run(&serde_json::to_vec(&bad).unwrap(), &d2.defs, &t2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("current step 2"), "{err}");
    let _ = tx;
}

#[test]
fn runs_store_each_definition_once_and_name_theirs() {
    use crate::Store;
    use crate::backend::Backend;
    use crate::redb_backend::{DEFINITIONS, RUNS, RedbBackend, STATE_SLOT};
    use railyard_model::run::Out;

    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(RedbBackend::open(dir.path()).unwrap());
    let store = Store::new(backend.clone());
    let a = Arc::new(parse_definition(DEF).unwrap());
    let same = Arc::new(parse_definition(DEF).unwrap());
    let mut changed = parse_definition(DEF).unwrap();
    changed.steps[1].prompt = "b, but better".into();
    let changed = Arc::new(changed);
    let stored = |backend: &RedbBackend| {
        let tx = backend.db().begin_read().unwrap();
        redb::ReadableTableMetadata::len(&tx.open_table(DEFINITIONS).unwrap()).unwrap()
    };
    for (id, def, rows) in [
        ("r1", &a, 1),
        ("r2", &a, 1),
        ("r3", &same, 1),
        ("r4", &changed, 2),
    ] {
        let params = StartParams {
            namespace: "default".into(),
            run_id: id.into(),
            ..Default::default()
        };
        let mut seq = 1;
        let mut out = Out::new(1_000, &mut seq);
        let run = RunState::start(params, def.clone(), &mut out);
        let events = out.events;
        backend.write(&mut |tx| tx.save_run(&run, &events)).unwrap();
        assert_eq!(stored(&backend), rows, "after {id}");
    }

    // Another process (a fresh cache) reads each run with its own definition.
    drop((store, backend));
    let backend = Arc::new(RedbBackend::open(dir.path()).unwrap());
    let store = Store::new(backend.clone());
    let r1 = store.run(&RunKey::new("default", "r1")).unwrap().unwrap();
    let r3 = store.run(&RunKey::new("default", "r3")).unwrap().unwrap();
    let r4 = store.run(&RunKey::new("default", "r4")).unwrap().unwrap();
    assert_eq!(r1.definition, a);
    assert!(Arc::ptr_eq(&r1.definition, &r3.definition), "one copy in memory");
    assert_eq!(r4.definition.steps[1].prompt, "b, but better");
    let tx = backend.db().begin_read().unwrap();
    let row = tx
        .open_table(RUNS)
        .unwrap()
        .get(("default", "r1", STATE_SLOT))
        .unwrap()
        .unwrap()
        .value()
        .to_vec();
    assert!(!String::from_utf8(row).unwrap().contains("long prompt"));
}

#[test]
fn schedule_fire_timers_round_trip() {
    let timer = Timer::ScheduleFire {
        namespace: "ns".into(),
        schedule_id: "nightly".into(),
    };
    assert_eq!(decode_timer(&encode_timer(&timer).unwrap()).unwrap(), timer);
}

#[test]
fn an_api_key_round_trips_and_a_bad_row_is_named() {
    use railyard_model::auth::{ApiKey, Role};
    let key = ApiKey {
        key_id: "0123456789abcdef".into(),
        namespace: "ns".into(),
        role: Role::Worker,
        queues: vec!["q1".into(), "q2".into()],
        hash: [7; 32],
        created_ms: 5,
        expires_ms: Some(10),
        revoked_ms: None,
        created_by: "bootstrap".into(),
        description: "ci".into(),
    };
    let bytes = encode_api_key(&key).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.contains(r#""v":1"#) && text.contains(r#""role":"worker""#),
        "{text}"
    );
    assert_eq!(decode_api_key(&bytes).unwrap(), key);
    let err = decode_api_key(br#"{"v":1,"key_id":"k","namespace":"n","role":"root","sha256":""}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("api key") && err.contains("root"), "{err}");
    let err = decode_api_key(br#"{"v":9,"key_id":"k","namespace":"n","role":"admin","sha256":""}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("newer Railyard"), "{err}");
}

#[test]
fn a_namespace_round_trips_and_the_first_layouts_empty_row_reads() {
    use railyard_model::namespace::Namespace;
    let ns = Namespace {
        principles: None,
        name: "team".into(),
        description: "d".into(),
        created_ms: 1,
        updated_ms: 2,
        retention_ms: 3_600_000,
        limits: railyard_model::namespace::NamespaceLimits {
            max_open_runs: 5,
            max_starts_per_second: 0,
            max_pending_signals: 7,
        },
        subscriptions: vec![railyard_model::namespace::Subscription {
            id: "pager".into(),
            url: "https://hooks.example/p".into(),
            workflows: vec!["demo".into()],
            outcomes: vec![
                railyard_model::run::RunStatus::Failed,
                railyard_model::run::RunStatus::TimedOut,
            ],
            created_ms: 3,
            events: vec!["issue.reported".into()],
        }],
        attributes: [
            ("customer".to_string(), railyard_model::query::ValueType::Keyword),
            ("tags".to_string(), railyard_model::query::ValueType::KeywordList),
        ]
        .into_iter()
        .collect(),
        key_rules: [(
            "customer:*".to_string(),
            railyard_model::flow::KeyRule {
                concurrency: Some(3),
                weight: Some(2),
                requests_per_minute: Some(50),
                tokens_per_minute: None,
            },
        )]
        .into(),
    };
    let bytes = encode_namespace(&ns).unwrap();
    assert_eq!(decode_namespace("team", &bytes).unwrap(), ns);
    assert_eq!(
        decode_namespace("default", b"{}").unwrap(),
        Namespace {
            principles: None,
            name: "default".into(),
            ..Namespace::default()
        }
    );
    // A row from before retention and limits reads with their defaults.
    let old = decode_namespace(
        "team",
        br#"{"v":1,"description":"d","created_ms":1,"updated_ms":2}"#,
    )
    .unwrap();
    assert_eq!(old.retention_ms, railyard_model::namespace::DEFAULT_RETENTION_MS);
    assert_eq!(old.limits, railyard_model::namespace::NamespaceLimits::default());
    assert!(
        old.attributes.is_empty(),
        "a row from before attributes declares none"
    );
    // A type this build does not know is refused by name.
    let err = decode_namespace("team", br#"{"v":1,"attributes":{"x":"vector"}}"#).unwrap_err();
    assert!(err.to_string().contains("vector"), "{err}");
}

#[test]
fn a_runs_attributes_and_their_change_round_trip_and_an_older_row_has_none() {
    use railyard_model::attributes::AttributeValue;
    let d = db();
    let (mut run, _) = busy_run();
    let mut seq = 100;
    let mut out = Out::new(2_000, &mut seq);
    let set = vec![
        (
            "customer".to_string(),
            Some(AttributeValue::Keyword("acme".into())),
        ),
        ("priority".to_string(), Some(AttributeValue::Int(2))),
        ("score".to_string(), Some(AttributeValue::Double(0.5))),
        ("urgent".to_string(), Some(AttributeValue::Bool(true))),
        ("due".to_string(), Some(AttributeValue::Datetime(1_000))),
        (
            "notes".to_string(),
            Some(AttributeValue::Text("two words".into())),
        ),
        (
            "tags".to_string(),
            Some(AttributeValue::KeywordList(vec!["a".into()])),
        ),
    ];
    run.set_attributes(set, "", "me", &mut out).unwrap();
    let unset = vec![("priority".to_string(), None)];
    run.set_attributes(unset, "a", "me", &mut out).unwrap();
    let events = out.events;
    let tx = d.db.begin_write().unwrap();
    let state = {
        let mut table = tx.open_table(DEFS).unwrap();
        d.defs.store(&run.definition, &mut table).unwrap();
        encode_run(&run, &d.defs).unwrap()
    };
    tx.commit().unwrap();
    let tx = d.db.begin_read().unwrap();
    let table = tx.open_table(DEFS).unwrap();
    let fresh = Definitions::default();
    let back = decode_run(&state, &fresh, &table).unwrap();
    assert_eq!(back, run);
    assert_eq!(back.attributes.len(), 6);
    for ev in &events {
        let row = encode_event(ev, &d.defs).unwrap();
        assert_eq!(&decode_event(&row, &fresh, &table).unwrap(), ev);
    }
    let (_, terms) = run_index_terms(&state).unwrap();
    assert!(terms.iter().any(|t| t == "@customer:k=acme"), "{terms:?}");
    // A row written before attributes: none.
    let mut old: serde_json::Value = serde_json::from_slice(&state).unwrap();
    old.as_object_mut().unwrap().remove("attributes");
    let back = decode_run(&serde_json::to_vec(&old).unwrap(), &fresh, &table).unwrap();
    assert!(back.attributes.is_empty());
}

#[test]
fn a_waiting_child_run_its_new_events_and_its_wait_timer_round_trip() {
    use railyard_model::run::{ChildOutcome, ParentClosePolicy, WaitOn, Waiting};
    let d = db();
    let (mut run, _) = busy_run();
    run.parent_run_id = "parent".into();
    run.parent_step_id = "plan".into();
    run.depth = 2;
    run.parent_close_policy = ParentClosePolicy::Abandon;
    run.children_started = 3;
    run.resume_input = vec!["results".into()];
    run.phase = Phase::Waiting(Waiting {
        on: WaitOn::Children {
            run_ids: vec!["c1".into(), "c2".into()],
            done: vec![ChildOutcome {
                run_id: "c1".into(),
                status: RunStatus::Failed,
                notes: "n".into(),
                artifacts: vec!["a".into()],
                result: r#"{"k":1}"#.into(),
            }],
        },
        since_ms: 5,
        deadline_ms: Some(9),
        wait_id: 7,
    });
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    d.defs.store(&run.definition, &mut table).unwrap();
    let row = encode_run(&run, &d.defs).unwrap();
    assert_eq!(decode_run(&row, &d.defs, &table).unwrap(), run);
    let mut paused = run.clone();
    paused.paused = true;
    paused.phase = Phase::Waiting(Waiting {
        on: WaitOn::Unpause,
        since_ms: 1,
        deadline_ms: None,
        wait_id: 2,
    });
    let row = encode_run(&paused, &d.defs).unwrap();
    assert_eq!(decode_run(&row, &d.defs, &table).unwrap(), paused);

    let kinds = [
        EventKind::StepWaiting {
            step_id: "a".into(),
            attempt: 1,
            on: "children".into(),
            run_ids: vec!["c1".into()],
            deadline_ms: None,
        },
        EventKind::StepResumed {
            step_id: "a".into(),
            attempt: 1,
            reason: "timeout".into(),
            waited_ms: 3,
        },
        EventKind::ChildRunStarted {
            child_run_id: "c1".into(),
            workflow_id: "wf".into(),
            step_id: "a".into(),
            parent_close_policy: ParentClosePolicy::Terminate,
        },
        EventKind::ChildRunCompleted {
            child_run_id: "c1".into(),
            status: RunStatus::Completed,
            notes: "n".into(),
            artifacts: vec![],
            result: r#"{"k":1}"#.into(),
        },
        EventKind::StepTimedOut {
            step_id: "a".into(),
            attempt: 1,
            timeout: TimeoutKind::Wait,
            will_retry: false,
            next_attempt_at_ms: None,
        },
        EventKind::RunPaused {
            reason: "night".into(),
        },
        EventKind::RunUnpaused {},
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let ev = Event {
            id: i as u64 + 1,
            time_ms: 1,
            identity: "w".into(),
            kind,
        };
        let row = encode_event(&ev, &d.defs).unwrap();
        assert_eq!(decode_event(&row, &d.defs, &table).unwrap(), ev);
    }
    let timer = Timer::WaitTimeout {
        namespace: "ns".into(),
        run_id: "r".into(),
        wait_id: 7,
    };
    assert_eq!(decode_timer(&encode_timer(&timer).unwrap()).unwrap(), timer);
}

#[test]
fn a_run_row_from_before_child_runs_reads_as_a_root_with_no_children() {
    use railyard_model::run::ParentClosePolicy;
    let d = db();
    let def = Arc::new(parse_definition(DEF).unwrap());
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    let key = d.defs.store(&def, &mut table).unwrap();
    let state = serde_json::json!({
        "v": 1,
        "definition": {"workflow_id": "wf", "version": "1", "hash": key.hash},
        "status": "RUNNING",
        "parent_run_id": "p",
        "phase": {"kind": "backing_off", "until_ms": 3},
        "steps": [{}, {}],
    });
    let run = decode_run(&serde_json::to_vec(&state).unwrap(), &d.defs, &table).unwrap();
    assert_eq!(
        (run.parent_step_id.as_str(), run.depth, run.children_started),
        ("", 0, 0)
    );
    assert_eq!(run.parent_close_policy, ParentClosePolicy::Cancel);
    assert!(run.resume_input.is_empty());
    assert!(!run.paused);
    // A row written today without child fields reads the same way, and a bad
    // policy name is refused by name.
    let bad = serde_json::json!({
        "definition": {"workflow_id": "wf", "version": "1", "hash": key.hash},
        "status": "RUNNING",
        "phase": {"kind": "closed"},
        "steps": [{}, {}],
        "current_step": 2,
        "parent_close_policy": "explode",
    });
    let err = decode_run(&serde_json::to_vec(&bad).unwrap(), &d.defs, &table).unwrap_err();
    assert!(err.to_string().contains("explode"), "{err}");
    let started =
        br#"{"event":{"RunStarted":{"definition":{"workflow_id":"wf","version":"1","hash":"HASH"}}}}"#;
    let started = String::from_utf8_lossy(started).replace("HASH", &key.hash);
    match decode_event(started.as_bytes(), &d.defs, &table).unwrap().kind {
        EventKind::RunStarted {
            parent_step_id,
            depth,
            ..
        } => assert_eq!((parent_step_id.as_str(), depth), ("", 0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_child_outcome_and_child_run_completed_from_before_results_read_with_none() {
    use railyard_model::run::WaitOn;
    let d = db();
    let def = Arc::new(parse_definition(DEF).unwrap());
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    let key = d.defs.store(&def, &mut table).unwrap();
    let state = serde_json::json!({
        "v": 1,
        "definition": {"workflow_id": "wf", "version": "1", "hash": key.hash},
        "status": "RUNNING",
        "phase": {"kind": "waiting", "on": {"kind": "children", "run_ids": ["c1", "c2"],
                  "done": [{"run_id": "c1", "status": "COMPLETED", "notes": "n"}]}},
        "steps": [{}, {}],
    });
    let run = decode_run(&serde_json::to_vec(&state).unwrap(), &d.defs, &table).unwrap();
    match &run.waiting().unwrap().on {
        WaitOn::Children { done, .. } => {
            assert_eq!((done[0].notes.as_str(), done[0].result.as_str()), ("n", ""))
        }
        other => panic!("{other:?}"),
    }
    let row =
        br#"{"id":3,"event":{"ChildRunCompleted":{"child_run_id":"c1","status":"COMPLETED","notes":"n"}}}"#;
    match decode_event(row, &d.defs, &table).unwrap().kind {
        EventKind::ChildRunCompleted { notes, result, .. } => {
            assert_eq!((notes.as_str(), result.as_str()), ("n", ""))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_run_with_deliveries_round_trips_and_an_older_row_has_none() {
    use railyard_model::run::{DeliveryPolicy, DeliveryTarget};
    let d = db();
    let (mut run, _) = busy_run();
    let mut seq = 100;
    let mut out = Out::new(2_000, &mut seq);
    run.terminate("ops", "stop".into(), &mut out).unwrap();
    run.arm_deliveries(
        vec![
            (DeliveryTarget::Callback, "https://cb.example/x".into()),
            (
                DeliveryTarget::Subscription("pager".into()),
                "https://p.example/".into(),
            ),
        ],
        &mut out,
    );
    let started = run.delivery_timer_fired("callback", 1, &DeliveryPolicy::default(), &mut out);
    assert!(started.is_some());
    let events = out.events;
    let tx = d.db.begin_write().unwrap();
    let state = {
        let mut table = tx.open_table(DEFS).unwrap();
        d.defs.store(&run.definition, &mut table).unwrap();
        encode_run(&run, &d.defs).unwrap()
    };
    tx.commit().unwrap();
    let tx = d.db.begin_read().unwrap();
    let table = tx.open_table(DEFS).unwrap();
    let fresh = Definitions::default();
    let back = decode_run(&state, &fresh, &table).unwrap();
    assert_eq!(back, run);
    assert_eq!(back.deliveries.len(), 2);
    assert!(back.deliveries[0].in_flight);
    for ev in &events {
        let row = encode_event(ev, &d.defs).unwrap();
        assert_eq!(&decode_event(&row, &fresh, &table).unwrap(), ev);
    }
    assert_eq!(events.last().unwrap().kind.type_name(), "DeliveryAttempted");
    let timer = Timer::Delivery {
        namespace: "ns".into(),
        run_id: "r1".into(),
        target: "subscription:pager".into(),
        attempt: 3,
    };
    assert_eq!(decode_timer(&encode_timer(&timer).unwrap()).unwrap(), timer);

    // A row written before delivery existed: no `deliveries` field, none to do.
    let mut old: serde_json::Value = serde_json::from_slice(&state).unwrap();
    old.as_object_mut().unwrap().remove("deliveries");
    let back = decode_run(&serde_json::to_vec(&old).unwrap(), &fresh, &table).unwrap();
    assert!(back.deliveries.is_empty());
    // A target this build does not know is refused by name, not guessed.
    let mut odd: serde_json::Value = serde_json::from_slice(&state).unwrap();
    odd["deliveries"][0]["target"] = "carrier-pigeon".into();
    let err = decode_run(&serde_json::to_vec(&odd).unwrap(), &fresh, &table).unwrap_err();
    assert!(err.to_string().contains("carrier-pigeon"), "{err}");
}

#[test]
fn a_runs_trace_round_trips_and_an_older_row_derives_its_own() {
    use railyard_model::trace::TraceContext;
    let d = db();
    let def = Arc::new(parse_definition(DEF).unwrap());
    let given = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
    let mut seq = 0;
    let mut out = Out::new(1_000, &mut seq);
    let with = |trace| StartParams {
        namespace: "ns".into(),
        run_id: "r1".into(),
        trace,
        ..Default::default()
    };
    let traced = RunState::start(with(Some(given)), def.clone(), &mut out);
    let plain = RunState::start(with(None), def, &mut out);
    assert_eq!(plain.trace, TraceContext::derived("ns", "r1"));
    let tx = d.db.begin_write().unwrap();
    let (traced_row, plain_row) = {
        let mut table = tx.open_table(DEFS).unwrap();
        d.defs.store(&traced.definition, &mut table).unwrap();
        (
            encode_run(&traced, &d.defs).unwrap(),
            encode_run(&plain, &d.defs).unwrap(),
        )
    };
    tx.commit().unwrap();
    let tx = d.db.begin_read().unwrap();
    let table = tx.open_table(DEFS).unwrap();
    let fresh = Definitions::default();
    assert_eq!(decode_run(&traced_row, &fresh, &table).unwrap().trace, given);
    let row: serde_json::Value = serde_json::from_slice(&traced_row).unwrap();
    assert_eq!(row["traceparent"], given.traceparent().unwrap().as_str());
    // A derived trace is not stored: such a row reads as one written before traces.
    let row: serde_json::Value = serde_json::from_slice(&plain_row).unwrap();
    assert!(row.get("traceparent").is_none(), "{row}");
    assert_eq!(
        decode_run(&plain_row, &fresh, &table).unwrap().trace,
        TraceContext::derived("ns", "r1")
    );
    // A bad stored value is refused by name.
    let mut bad = row;
    bad["traceparent"] = "00-nope".into();
    let err = decode_run(&serde_json::to_vec(&bad).unwrap(), &fresh, &table).unwrap_err();
    assert!(err.to_string().contains("traceparent"), "{err}");
}

#[test]
fn a_runs_flow_round_trips_and_the_default_is_not_written() {
    let d = db();
    let (mut run, _) = busy_run();
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    d.defs.store(&run.definition, &mut table).unwrap();
    let plain = String::from_utf8(encode_run(&run, &d.defs).unwrap()).unwrap();
    assert!(
        !plain.contains("priority") && !plain.contains("fairness"),
        "{plain}"
    );
    run.flow = railyard_model::flow::Flow {
        priority: 1,
        fairness_key: "customer:acme".into(),
        weight: 4,
        concurrency_key: "acme".into(),
    };
    let row = encode_run(&run, &d.defs).unwrap();
    let back = decode_run(&row, &d.defs, &table).unwrap();
    assert_eq!(back.flow, run.flow);
}
