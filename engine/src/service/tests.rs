//! The service layer called directly, with no transport: a real database file, the
//! real writer thread, a manual clock.

use railyard_model::Rejection;
use railyard_model::RunKey;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::caller::Principal;
use super::runs::{self, HistoryQuery, IdReusePolicy, ListRuns, SignalRun, StartRun};
use super::tasks::{self, Completion, Heartbeat, Poll};
use super::*;
use crate::clock::ManualClock;
use crate::error::ApiError;
use railyard_model::limits;
use railyard_model::run::{EventKind, RunStatus, StepFailure};
use railyard_model::workflow::parse_definition;

const TWO_STEPS: &str = r#"{"id":"two","version":"1","name":"Two","steps":[
  {"id":"a","title":"A","prompt":"do {{goal}} in {{context.lang}}"},
  {"id":"b","title":"B","prompt":"then b"}]}"#;

struct Fixture {
    core: Arc<Core>,
    _shutdown: tokio::sync::watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let def = parse_definition(TWO_STEPS).unwrap();
    let mut workflows = WorkflowRegistry::default();
    workflows
        .valid
        .insert(def.id.clone(), (Arc::new(def), PathBuf::from("two.json")));
    let CoreParts { core, shutdown, .. } = Core::builder(Store::open(dir.path()).unwrap())
        .clock(Arc::new(ManualClock::new(1_000)))
        .workflows(workflows)
        .delivery(crate::delivery::DeliverySettings {
            signing_secret: crate::delivery::SigningSecret::new("test-secret"),
            ..Default::default()
        })
        .build()
        .unwrap();
    Fixture {
        core,
        _shutdown: shutdown,
        _dir: dir,
    }
}

impl Fixture {
    fn client(&self) -> Caller {
        caller::resolve(&self.core, CallerInput::default(), Operation::StartRun).unwrap()
    }

    async fn start(&self, run_id: &str) -> String {
        let start = StartRun {
            workflow_id: "two".into(),
            run_id: run_id.into(),
            goal: "port it".into(),
            context: BTreeMap::from([("lang".to_string(), "Rust".to_string())]),
            ..Default::default()
        };
        let started = runs::start(&self.core, &self.client(), start).await.unwrap();
        assert!(started.started);
        started.run_id
    }

    async fn poll(&self) -> Option<tasks::LeasedStep> {
        let input = CallerInput {
            identity: "w1".into(),
            ..Default::default()
        };
        let poller = caller::resolve(&self.core, input, Operation::PollTask).unwrap();
        let poll = Poll {
            task_queue: "default".into(),
            wait_timeout_ms: 1,
            run_id: String::new(),
        };
        tasks::poll(&self.core, &poller, poll).await.unwrap()
    }
}

fn invalid(r: Result<impl std::fmt::Debug, ApiError>) -> String {
    match r {
        Err(ApiError::Rejected(Rejection::InvalidArgument(m))) => m,
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

#[tokio::test]
async fn the_caller_is_resolved_once_with_its_namespace_and_role_default() {
    let fx = fixture();
    let c = fx.client();
    assert_eq!(
        (c.namespace.as_str(), c.identity.as_str(), &c.principal),
        ("default", "client", &Principal::Anonymous)
    );
    let named = |identity: &str, role| {
        let input = CallerInput {
            namespace: "default".into(),
            identity: identity.into(),
            ..Default::default()
        };
        caller::resolve(&fx.core, input, role)
    };
    assert_eq!(named("", Operation::PollTask).unwrap().identity, "unknown-worker");
    assert_eq!(named("", Operation::ReportTask).unwrap().identity, "worker");
    assert_eq!(named("me", Operation::PollTask).unwrap().identity, "me");
    let long = "x".repeat(limits::IDENTITY + 1);
    assert!(invalid(named(&long, Operation::StartRun)).starts_with("identity: is 257 bytes"));
    let input = CallerInput {
        namespace: "nope".into(),
        ..Default::default()
    };
    match caller::resolve(&fx.core, input, Operation::StartRun) {
        Err(ApiError::Rejected(Rejection::NotFound(m))) => assert_eq!(m, "namespace \"nope\" does not exist"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_appending_heartbeat_is_checked_and_bounded_as_a_whole() {
    let fx = fixture();
    fx.start("r1").await;
    let task = fx.poll().await.expect("the first step is ready");
    let (holder, claims) =
        tasks::lease_holder(&fx.core, &Credentials::None, &task.task_token, String::new()).unwrap();
    let beat = |checkpoint: &[u8], append: Option<tasks::CheckpointAppend>| Heartbeat {
        checkpoint: checkpoint.to_vec(),
        append,
        ..Default::default()
    };
    let append = |base_length: u64, base_digest: Vec<u8>, bytes: Vec<u8>| tasks::CheckpointAppend {
        base_length,
        base_digest,
        bytes,
    };
    let empty = railyard_model::checkpoint::EMPTY_DIGEST.to_vec();
    let cases = [
        (
            beat(b"x", Some(append(0, empty.clone(), b"y".to_vec()))),
            "checkpoint_append: cannot be sent with checkpoint",
        ),
        (
            beat(b"", Some(append(0, empty.clone(), Vec::new()))),
            "checkpoint_append.bytes: must not be empty",
        ),
        (
            beat(b"", Some(append(0, vec![1; 5], b"y".to_vec()))),
            "checkpoint_append.base_digest: is 5 bytes",
        ),
        // The limit is on the whole checkpoint the append would make.
        (
            beat(
                b"",
                Some(append(
                    limits::CHECKPOINT as u64 - 1,
                    empty.clone(),
                    b"yz".to_vec(),
                )),
            ),
            "checkpoint_append: would make the checkpoint 8388609 bytes",
        ),
    ];
    for (h, expected) in cases {
        let got = invalid(tasks::heartbeat(&fx.core, &holder, claims.clone(), h).await);
        assert!(got.starts_with(expected), "{got}");
    }
    // Up to the limit is fine: a whole checkpoint of all but one byte, then that byte.
    let whole = vec![b'a'; limits::CHECKPOINT - 1];
    let reply = tasks::heartbeat(&fx.core, &holder, claims.clone(), beat(&whole, None))
        .await
        .unwrap();
    let (len, digest) = reply.checkpoint.unwrap();
    let reply = tasks::heartbeat(
        &fx.core,
        &holder,
        claims,
        beat(b"", Some(append(len, digest.to_vec(), b"b".to_vec()))),
    )
    .await
    .unwrap();
    assert_eq!(reply.checkpoint.unwrap().0, limits::CHECKPOINT as u64);
    assert_eq!(
        fx.core
            .store
            .checkpoint(&RunKey::new("default", "r1"))
            .unwrap()
            .len(),
        limits::CHECKPOINT
    );
}

#[tokio::test]
async fn a_run_goes_from_start_to_completion_without_a_transport() {
    let fx = fixture();
    let run_id = fx.start("").await;
    assert!(uuid::Uuid::parse_str(&run_id).is_ok(), "a generated id: {run_id}");

    let first = fx.poll().await.expect("the first step is ready");
    assert_eq!(first.prompt, "do port it in Rust");
    assert_eq!(first.max_turns, railyard_model::workflow::DEFAULT_MAX_TURNS);
    assert_eq!(first.grant.run.run_id, run_id);

    let (holder, claims) =
        tasks::lease_holder(&fx.core, &Credentials::None, &first.task_token, String::new()).unwrap();
    assert_eq!(holder.identity, "worker");
    assert_eq!((claims.step.as_str(), claims.attempt), ("a", 1));
    let beat = Heartbeat {
        checkpoint: b"cp".to_vec(),
        ..Default::default()
    };
    let reply = tasks::heartbeat(&fx.core, &holder, claims.clone(), beat)
        .await
        .unwrap();
    assert!(!reply.cancel_requested && reply.signals.is_empty());

    let done = Completion {
        notes: "a done".into(),
        context_updates: BTreeMap::from([("found".to_string(), "3".to_string())]),
        take_next: true,
        ..Default::default()
    };
    let next = tasks::complete(&fx.core, &holder, claims.clone(), done)
        .await
        .unwrap()
        .expect("eager dispatch hands out step b");
    assert_eq!(next.prompt, "then b");
    // The first lease is spent: a replay is refused, as the model words it.
    let replay = tasks::complete(&fx.core, &holder, claims, Completion::default()).await;
    match replay {
        Err(ApiError::Rejected(Rejection::FailedPrecondition(m))) => {
            assert!(m.contains("is no longer current"), "{m}")
        }
        other => panic!("{other:?}"),
    }

    let (holder, claims) =
        tasks::lease_holder(&fx.core, &Credentials::None, &next.task_token, "w2".into()).unwrap();
    let last = tasks::complete(&fx.core, &holder, claims, Completion::default())
        .await
        .unwrap();
    assert!(last.is_none());

    let run = runs::describe(&fx.core, &fx.client(), &run_id).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.context.get("found").map(String::as_str), Some("3"));
    let page = runs::history(
        &fx.core,
        &fx.client(),
        HistoryQuery {
            run_id: run_id.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(page.next_event_id, 0, "the closed run's history ends here");
    assert_eq!(page.status, RunStatus::Completed);
    assert!(matches!(
        page.events.last().map(|e| &e.kind),
        Some(EventKind::RunCompleted { .. })
    ));
    assert_eq!(page.events.last().unwrap().identity, "w2");
}

#[tokio::test]
async fn start_refuses_what_it_cannot_honour_naming_the_field() {
    let fx = fixture();
    let c = fx.client();
    let core = &fx.core;
    let start = |f: fn(&mut StartRun)| {
        let mut s = StartRun {
            workflow_id: "two".into(),
            ..Default::default()
        };
        f(&mut s);
        runs::start(core, &c, s)
    };
    let m = invalid(start(|s| s.id_reuse_policy = IdReusePolicy::AllowDuplicate).await);
    assert!(
        m.starts_with("id_reuse_policy: ALLOW_DUPLICATE is not supported yet"),
        "{m}"
    );
    let m = invalid(start(|s| s.callback_url = "ftp://x".into()).await);
    assert_eq!(m, "callback_url: must be an http:// or https:// URL");
    let m = invalid(start(|s| s.run_id = "bad id".into()).await);
    assert_eq!(
        m,
        "run_id: \"bad id\" may hold only letters, digits and - _ . : @"
    );
    let m = invalid(start(|s| s.parent_run_id = "p/q".into()).await);
    assert!(m.starts_with("parent_run_id: "), "{m}");
    let m = invalid(
        start(|s| {
            s.context.insert("k".repeat(129), "v".into());
        })
        .await,
    );
    assert!(m.starts_with("context: key \"kkk"), "{m}");
    assert!(m.ends_with("must be 1 to 128 bytes"), "{m}");
    match start(|s| s.workflow_id = "nope".into()).await {
        Err(ApiError::Rejected(Rejection::NotFound(m))) => {
            assert_eq!(m, "workflow \"nope\" not found (known: two)")
        }
        other => panic!("{other:?}"),
    }
    // Nothing was started by any of them.
    let page = runs::list(&fx.core, &c, ListRuns::default()).unwrap();
    assert!(page.runs.is_empty());
}

#[tokio::test]
async fn list_pages_follow_their_tokens_to_the_end() {
    let fx = fixture();
    let c = fx.client();
    for id in ["r1", "r2", "r3"] {
        fx.start(id).await;
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let list = ListRuns {
            page_token: token.clone(),
            page_size: 2,
            ..Default::default()
        };
        let page = runs::list(&fx.core, &c, list).unwrap();
        assert!(page.runs.len() <= 2);
        seen.extend(page.runs.into_iter().map(|r| r.run_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    seen.sort();
    assert_eq!(seen, ["r1", "r2", "r3"]);
    for bad in ["nonsense", "x:r1"] {
        let list = ListRuns {
            page_token: bad.into(),
            ..Default::default()
        };
        let m = invalid(runs::list(&fx.core, &c, list));
        assert_eq!(m, "page_token: is not a token this server handed out");
    }
}

#[tokio::test]
async fn a_history_wait_ends_with_the_next_event() {
    let fx = fixture();
    let c = fx.client();
    let run_id = fx.start("r1").await;
    let so_far = runs::history(
        &fx.core,
        &c,
        HistoryQuery {
            run_id: run_id.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let query = HistoryQuery {
        run_id: run_id.clone(),
        from_event_id: so_far.next_event_id,
        wait_timeout_ms: runs::MAX_WAIT_MS,
        ..Default::default()
    };
    let (core, waiter) = (fx.core.clone(), c.clone());
    let waiting = tokio::spawn(async move { runs::history(&core, &waiter, query).await });
    let signal = SignalRun {
        run_id: run_id.clone(),
        name: "steer".into(),
        payload_json: r#"{"say":"hi"}"#.into(),
        ..Default::default()
    };
    runs::signal(&fx.core, &c, signal).await.unwrap();
    let page = waiting.await.unwrap().unwrap();
    assert_eq!(page.events.len(), 1);
    assert!(matches!(&page.events[0].kind, EventKind::SignalReceived { name, .. } if name == "steer"));
    assert_eq!(page.next_event_id, so_far.next_event_id + 1);
}

#[tokio::test]
async fn a_watch_sends_every_event_and_ends_after_the_close() {
    let fx = fixture();
    let c = fx.client();
    let run_id = fx.start("r1").await;
    let mut events = runs::watch(&fx.core, &c, &run_id, 0).unwrap();
    runs::terminate(&fx.core, &c, run_id.clone(), "enough".into())
        .await
        .unwrap();
    let mut kinds = Vec::new();
    while let Some(ev) = events.recv().await {
        kinds.push(ev.unwrap().kind);
    }
    assert!(matches!(kinds.first(), Some(EventKind::RunStarted { .. })));
    assert!(matches!(kinds.last(), Some(EventKind::RunTerminated { reason }) if reason == "enough"));
    // A closed run refuses to be stopped again, as the model words it.
    match runs::cancel(&fx.core, &c, run_id, String::new()).await {
        Err(ApiError::Rejected(Rejection::FailedPrecondition(m))) => {
            assert_eq!(m, "run r1 is TERMINATED; cannot cancel it")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn reports_are_checked_before_they_reach_the_writer() {
    let fx = fixture();
    fx.start("r1").await;
    let leased = fx.poll().await.unwrap();
    let forged = format!("{}x", leased.task_token);
    assert!(matches!(
        tasks::lease_holder(&fx.core, &Credentials::None, &forged, String::new()),
        Err(ApiError::Rejected(Rejection::PermissionDenied(_)))
    ));
    let (holder, claims) =
        tasks::lease_holder(&fx.core, &Credentials::None, &leased.task_token, String::new()).unwrap();
    let bad = StepFailure {
        error_type: "no spaces".into(),
        ..Default::default()
    };
    let m = invalid(tasks::fail(&fx.core, &holder, claims.clone(), bad).await);
    assert!(m.starts_with("error_type: "), "{m}");
    let notes = (0..=limits::COORDINATOR_NOTES)
        .map(|_| tasks::CoordinatorNote {
            kind: "k".into(),
            message: String::new(),
        })
        .collect();
    let beat = Heartbeat {
        notes,
        ..Default::default()
    };
    let m = invalid(tasks::heartbeat(&fx.core, &holder, claims.clone(), beat).await);
    assert_eq!(m, "notes: has 65 entries, more than 64");
    // None of it reached the run: the lease is still good, and an empty error type
    // is recorded as `error`.
    let will_retry = tasks::fail(&fx.core, &holder, claims, StepFailure::default())
        .await
        .unwrap();
    assert!(will_retry);
    let run = runs::describe(&fx.core, &fx.client(), "r1").unwrap();
    assert!(
        run.steps[0].last_failure.starts_with("error: "),
        "{}",
        run.steps[0].last_failure
    );
    let stats = tasks::describe_queue(&fx.core, &fx.client(), "default").unwrap();
    assert_eq!(stats.pollers.len(), 1);
    assert_eq!(stats.pollers[0].0, "w1");
}

#[tokio::test]
async fn run_listings_are_paged_by_bytes_as_well_as_by_count() {
    let f = fixture();
    for i in 0..5 {
        f.start(&format!("r{i}")).await;
    }
    let one = f
        .core
        .store
        .run(&RunKey::new("default", "r0"))
        .unwrap()
        .unwrap()
        .summary_bytes();
    let (mut seen, mut pages, mut after) = (Vec::new(), Vec::new(), None);
    loop {
        let (runs, next) = f
            .core
            .store
            .list_runs_within(
                "default",
                &Default::default(),
                after,
                100,
                2 * one + 1,
                &|r: &railyard_model::run::RunState| r.summary_bytes(),
            )
            .unwrap();
        pages.push(runs.len());
        seen.extend(runs.into_iter().map(|r| r.run_id));
        match next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert_eq!(pages, [2, 2, 1]);
    assert_eq!(seen, ["r4", "r3", "r2", "r1", "r0"]);
    // Always at least one run, however small the budget.
    let (runs, next) = f
        .core
        .store
        .list_runs_within(
            "default",
            &Default::default(),
            None,
            100,
            0,
            &|_: &railyard_model::run::RunState| 1 << 30,
        )
        .unwrap();
    assert_eq!((runs.len(), next.is_some()), (1, true));
}
