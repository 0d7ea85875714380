//! Guarantee 1 under load: acknowledged starts, signals and completions survive
//! `kill -9` of the server while hundreds of requests are in flight, every history
//! stays numbered and well-formed, and every run goes on to completion afterwards.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use railyard_proto::v1::{HistoryEvent, ListRunsRequest, RunStatus, SignalRunRequest, StartRunRequest};
use railyard_sdk::{Client, ClientError, Completion, ConnectOptions, StepWorker};
use serde_json::Value;

/// Two steps; a lease lost in the crash comes back one heartbeat timeout later.
const WORKFLOW: &str = r#"{"id":"pair","version":"1","name":"Pair","steps":[
    {"id":"first","title":"First","prompt":"First of {{goal}}","heartbeatTimeoutSeconds":1,
     "retry":{"initialIntervalSeconds":0.1,"maximumIntervalSeconds":0.5,"maximumAttempts":0}},
    {"id":"second","title":"Second","prompt":"Second of {{goal}}","heartbeatTimeoutSeconds":1,
     "retry":{"initialIntervalSeconds":0.1,"maximumIntervalSeconds":0.5,"maximumAttempts":0}}]}"#;

/// Runs started in all, across the crash.
const RUNS: usize = 560;
/// The server is killed once this many operations were acknowledged.
const KILL_AFTER: usize = 300;
const STARTERS: usize = 8;
const WORKERS: usize = 8;
const CONNECTIONS: usize = 4;
const NS: &str = "default";

fn run_id(i: usize) -> String {
    format!("crash-{i:04}")
}

fn request_id(i: usize) -> String {
    format!("req-{i:04}")
}

/// A completion the server answered.
#[derive(Debug, Clone)]
struct Done {
    run_id: String,
    step_id: String,
    attempt: u32,
    notes: String,
}

/// What the load saw answered, and anything that went wrong.
#[derive(Default)]
struct Ledger {
    /// Indexes of the runs whose start was acknowledged.
    started: Mutex<BTreeSet<usize>>,
    /// Starts sent but not answered (the crash cut them off): outcome unknown.
    unanswered: Mutex<BTreeSet<usize>>,
    completed: Mutex<Vec<Done>>,
    /// Completions refused as stale: they must not be in history.
    refused: Mutex<Vec<Done>>,
    /// Run id → acknowledged signal payload.
    signals: Mutex<Vec<(String, String)>>,
    /// Errors no healthy server should give.
    unexpected: Mutex<Vec<String>>,
    acked: AtomicUsize,
    killed: AtomicBool,
}

impl Ledger {
    fn ack(&self) {
        self.acked.fetch_add(1, SeqCst);
    }

    fn unexpected(&self, what: String) {
        self.unexpected.lock().unwrap().push(what);
    }

    /// An error while the server should be up is a failure; after the kill it is expected.
    fn failed(&self, what: &str, e: &ClientError) {
        if !self.killed.load(SeqCst) {
            self.unexpected(format!("{what}: {e}"));
        }
    }
}

async fn clients(url: &str, opts: ConnectOptions) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..CONNECTIONS {
        out.push(Client::connect_with(url, opts.clone()).await.expect("client"));
    }
    out
}

fn start_request(i: usize) -> StartRunRequest {
    StartRunRequest {
        namespace: NS.into(),
        workflow_id: "pair".into(),
        goal: format!("goal {i}"),
        request_id: request_id(i),
        run_id: run_id(i),
        identity: "crash-test".into(),
        ..Default::default()
    }
}

/// Takes run indexes from `next` (first from `retry`) and starts them until none are
/// left or a call fails.
async fn starter(client: Client, ledger: Arc<Ledger>, retry: Arc<Mutex<Vec<usize>>>, next: Arc<AtomicUsize>) {
    loop {
        let i = match retry.lock().unwrap().pop() {
            Some(i) => i,
            None => next.fetch_add(1, SeqCst),
        };
        if i >= RUNS {
            return;
        }
        match client.start_run_with(start_request(i)).await {
            Ok(resp) => {
                if resp.run_id != run_id(i) {
                    ledger.unexpected(format!("start {i} answered run {:?}", resp.run_id));
                }
                ledger.unanswered.lock().unwrap().remove(&i);
                ledger.started.lock().unwrap().insert(i);
                ledger.ack();
            }
            Err(e) => {
                ledger.failed(&format!("start {i}"), &e);
                ledger.unanswered.lock().unwrap().insert(i);
                return;
            }
        }
        if i % 4 == 0 {
            let req = SignalRunRequest {
                namespace: NS.into(),
                run_id: run_id(i),
                signal_name: "steer".into(),
                payload_json: format!(r#"{{"n":{i}}}"#),
                identity: "crash-test".into(),
                request_id: format!("sig-{i:04}"),
            };
            match client.signal_run(req.clone()).await {
                Ok(()) => {
                    ledger
                        .signals
                        .lock()
                        .unwrap()
                        .push((req.run_id, req.payload_json));
                    ledger.ack();
                }
                // The workers may have finished the run already.
                Err(ClientError::FailedPrecondition(_)) => {}
                Err(e) => {
                    ledger.failed(&format!("signal {i}"), &e);
                    return;
                }
            }
        }
    }
}

/// Polls and completes steps until `stop` is set or a call fails. An `eager` worker
/// asks each completion for the run's next step (eager dispatch) instead of polling.
async fn worker(w: StepWorker, ledger: Arc<Ledger>, stop: Arc<AtomicBool>, eager: bool) {
    let mut held = None;
    while !stop.load(SeqCst) {
        let task = match held.take() {
            Some(task) => task,
            None => match w.poll(Duration::from_millis(300)).await {
                Ok(Some(task)) => task,
                Ok(None) => continue,
                Err(e) => {
                    ledger.failed("poll", &e);
                    return;
                }
            },
        };
        let done = Done {
            notes: format!(
                "{}:{}:{}:{}",
                w.identity(),
                task.run_id,
                task.step_id,
                task.attempt
            ),
            run_id: task.run_id,
            step_id: task.step_id,
            attempt: task.attempt,
        };
        let completion = Completion::notes(&done.notes);
        let result = if eager {
            w.complete_and_take_next(&task.task_token, completion).await
        } else {
            w.complete(&task.task_token, completion).await.map(|()| None)
        };
        match result {
            Ok(next) => {
                ledger.completed.lock().unwrap().push(done);
                ledger.ack();
                held = next;
            }
            // The lease expired before the completion arrived (a slow machine).
            Err(ClientError::FailedPrecondition(_)) => ledger.refused.lock().unwrap().push(done),
            Err(e) => {
                ledger.failed(&format!("complete {}/{}", done.run_id, done.step_id), &e);
                return;
            }
        }
    }
}

/// Every run in the namespace, any status.
async fn all_runs(client: &Client, status: RunStatus) -> Vec<railyard_proto::v1::RunInfo> {
    let mut runs = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_runs(ListRunsRequest {
                namespace: NS.into(),
                status: status as i32,
                page_size: 500,
                page_token,
                ..Default::default()
            })
            .await
            .expect("list runs");
        runs.extend(page.runs);
        if page.next_page_token.is_empty() {
            return runs;
        }
        page_token = page.next_page_token;
    }
}

/// Checks that a history is numbered 1..N without gaps and well-formed: RunStarted first,
/// each attempt scheduled, started and ended at most once, nothing after a closing event.
fn check_history(run_id: &str, events: &[HistoryEvent]) -> Result<(), String> {
    let fail = |msg: String| Err(format!("run {run_id}: {msg}\n{events:#?}"));
    if events.first().map(|e| e.event_type.as_str()) != Some("RunStarted") {
        return fail("the first event is not RunStarted".into());
    }
    let mut scheduled = BTreeSet::new();
    let mut started = BTreeSet::new();
    let mut outcome = BTreeSet::new();
    let mut completed_steps = BTreeMap::<String, usize>::new();
    let mut closed = None;
    for (i, e) in events.iter().enumerate() {
        if e.event_id != i as u64 + 1 {
            return fail(format!("event {} has id {}", i + 1, e.event_id));
        }
        if let Some(closing) = &closed {
            return fail(format!("event {} ({}) after {closing}", e.event_id, e.event_type));
        }
        let a = attrs(e);
        let key = (
            a["stepId"].as_str().unwrap_or("").to_string(),
            a["attempt"].as_u64().unwrap_or(0),
        );
        match e.event_type.as_str() {
            "RunStarted" if i > 0 => return fail("a second RunStarted".into()),
            "RunStarted" | "SignalReceived" | "CoordinatorNote" | "CancelRequested" => {}
            "StepScheduled" => {
                if !scheduled.insert(key.clone()) {
                    return fail(format!("{key:?} scheduled twice"));
                }
            }
            "StepStarted" => {
                if !scheduled.contains(&key) {
                    return fail(format!("{key:?} started but never scheduled"));
                }
                if !started.insert(key.clone()) {
                    return fail(format!("{key:?} started twice"));
                }
            }
            "StepCompleted" | "StepFailed" | "StepTimedOut" => {
                if !started.contains(&key) {
                    return fail(format!("{} of {key:?} which never started", e.event_type));
                }
                if !outcome.insert(key.clone()) {
                    return fail(format!("{key:?} has a second outcome ({})", e.event_type));
                }
                if e.event_type == "StepCompleted" {
                    *completed_steps.entry(key.0).or_default() += 1;
                }
            }
            t if t.starts_with("Run") => closed = Some(t.to_string()),
            t => return fail(format!("unknown event type {t}")),
        }
    }
    if completed_steps.values().any(|&n| n > 1) {
        return fail(format!("a step completed more than once: {completed_steps:?}"));
    }
    if closed.as_deref() == Some("RunCompleted") && completed_steps.len() != 2 {
        return fail(format!("completed with steps {completed_steps:?}"));
    }
    Ok(())
}

/// Loads every given run's history (over a few concurrent tasks) and checks it.
async fn histories(clients: &[Client], run_ids: Vec<String>) -> HashMap<String, Vec<HistoryEvent>> {
    let mut set = tokio::task::JoinSet::new();
    for (n, chunk) in run_ids.chunks(run_ids.len().div_ceil(8).max(1)).enumerate() {
        let (client, chunk) = (clients[n % clients.len()].clone(), chunk.to_vec());
        set.spawn(async move {
            let mut out = Vec::new();
            for id in chunk {
                let events = client.full_history(NS, &id).await.expect("history");
                out.push((id, events));
            }
            out
        });
    }
    let mut all = HashMap::new();
    while let Some(part) = set.join_next().await {
        all.extend(part.expect("history task"));
    }
    for (id, events) in &all {
        if let Err(e) = check_history(id, events) {
            panic!("{e}");
        }
    }
    all
}

/// Checks that every acknowledged start, completion and signal is in storage, and no
/// refused completion is.
async fn check_acknowledged(clients: &[Client], ledger: &Ledger) -> HashMap<String, Vec<HistoryEvent>> {
    let client = &clients[0];
    let listed: BTreeSet<String> = all_runs(client, RunStatus::Unspecified)
        .await
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    let started: Vec<usize> = ledger.started.lock().unwrap().iter().copied().collect();
    for &i in &started {
        assert!(
            listed.contains(&run_id(i)),
            "acknowledged start {i} is not listed"
        );
        let described = client.describe_run(NS, &run_id(i)).await;
        let run = described
            .unwrap_or_else(|e| panic!("acknowledged start {i}: {e}"))
            .run
            .unwrap();
        assert_eq!(
            (run.workflow_id.as_str(), run.goal.clone()),
            ("pair", format!("goal {i}"))
        );
    }
    let all = histories(clients, listed.iter().cloned().collect()).await;
    let has = |run: &str, ty: &str, pred: &dyn Fn(&Value) -> bool| {
        all.get(run)
            .is_some_and(|events| events.iter().any(|e| e.event_type == ty && pred(&attrs(e))))
    };
    for d in ledger.completed.lock().unwrap().iter() {
        let matches = |a: &Value| {
            a["stepId"] == d.step_id.as_str() && a["attempt"] == d.attempt && a["notes"] == d.notes.as_str()
        };
        assert!(
            has(&d.run_id, "StepCompleted", &matches),
            "acknowledged completion lost: {d:?}"
        );
    }
    for d in ledger.refused.lock().unwrap().iter() {
        let notes = |a: &Value| a["notes"] == d.notes.as_str();
        assert!(
            !has(&d.run_id, "StepCompleted", &notes),
            "refused completion recorded: {d:?}"
        );
    }
    for (run, payload) in ledger.signals.lock().unwrap().iter() {
        let matches = |a: &Value| a["name"] == "steer" && a["payloadJson"] == payload.as_str();
        assert!(
            has(run, "SignalReceived", &matches),
            "acknowledged signal to {run} lost"
        );
    }
    all
}

#[test]
fn acknowledged_operations_survive_sigkill_under_load() {
    // Hundreds of requests in flight: the other end-to-end tests wait meanwhile.
    let sandbox = Sandbox::alone();
    sandbox.workflow("pair.json", WORKFLOW);
    let server = sandbox.server();
    let pid = Pid::from_raw(server.child.id() as i32);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let next = Arc::new(AtomicUsize::new(0));
    let retry = Arc::new(Mutex::new(Vec::new()));

    // Phase 1: load until the kill. No client retries: every answer is the server's.
    rt.block_on(async {
        let opts = ConnectOptions {
            max_attempts: 1,
            ..Default::default()
        };
        let clients = clients(&server.url, opts).await;
        let never = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..STARTERS {
            let c = clients[n % CONNECTIONS].clone();
            tasks.spawn(starter(c, ledger.clone(), retry.clone(), next.clone()));
        }
        for n in 0..WORKERS {
            let w = StepWorker::new(clients[n % CONNECTIONS].clone(), NS, "default", &format!("w{n}"));
            tasks.spawn(worker(w, ledger.clone(), never.clone(), n % 2 == 1));
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while ledger.acked.load(SeqCst) < KILL_AFTER
            && ledger.unexpected.lock().unwrap().is_empty()
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        ledger.killed.store(true, SeqCst);
        kill(pid, Signal::SIGKILL).expect("SIGKILL the server");
        while let Some(r) = tasks.join_next().await {
            r.expect("load task");
        }
    });
    let unexpected = ledger.unexpected.lock().unwrap().clone();
    assert!(unexpected.is_empty(), "errors before the crash: {unexpected:#?}");
    let acked_before = ledger.acked.load(SeqCst);
    assert!(
        acked_before >= KILL_AFTER,
        "only {acked_before} operations acknowledged"
    );
    let issued = next.load(SeqCst).min(RUNS);
    eprintln!(
        "killed after {acked_before} acknowledged operations: {} starts, {} completions, {} signals; \
         {} starts unanswered, {} of {RUNS} runs issued",
        ledger.started.lock().unwrap().len(),
        ledger.completed.lock().unwrap().len(),
        ledger.signals.lock().unwrap().len(),
        ledger.unanswered.lock().unwrap().len(),
        issued,
    );

    let server = server.crash_and_restart();
    let url = server.url.clone();
    // From here on every error is unexpected again.
    ledger.killed.store(false, SeqCst);

    rt.block_on(async {
        let clients = clients(&url, ConnectOptions::default()).await;
        // Phase 2: everything acknowledged is there, and histories are well-formed.
        check_acknowledged(&clients, &ledger).await;
        let acknowledged: Vec<usize> = ledger.started.lock().unwrap().iter().copied().collect();
        for &i in &acknowledged {
            let again = clients[0].start_run_with(start_request(i)).await.expect("repeat start");
            assert_eq!((again.run_id, again.started), (run_id(i), false), "repeat of start {i}");
        }

        // Phase 3: the rest of the starts (cut-off ones again, under the same request
        // ids), and workers drive every run to completion.
        retry.lock().unwrap().extend(ledger.unanswered.lock().unwrap().iter().copied());
        let stop = Arc::new(AtomicBool::new(false));
        let mut starters = tokio::task::JoinSet::new();
        for n in 0..STARTERS / 2 {
            let c = clients[n % CONNECTIONS].clone();
            starters.spawn(starter(c, ledger.clone(), retry.clone(), next.clone()));
        }
        let mut workers = tokio::task::JoinSet::new();
        for n in 0..WORKERS {
            let w = StepWorker::new(clients[n % CONNECTIONS].clone(), NS, "default", &format!("v{n}"));
            workers.spawn(worker(w, ledger.clone(), stop.clone(), n % 2 == 1));
        }
        while let Some(r) = starters.join_next().await {
            r.expect("starter");
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let open = all_runs(&clients[0], RunStatus::Running).await;
            if open.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} runs still open, e.g. {:?}",
                open.len(),
                open[0]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        stop.store(true, SeqCst);
        while let Some(r) = workers.join_next().await {
            r.expect("worker");
        }
        let unexpected = ledger.unexpected.lock().unwrap().clone();
        assert!(unexpected.is_empty(), "errors after the restart: {unexpected:#?}");
        assert!(ledger.unanswered.lock().unwrap().is_empty());
        assert_eq!(ledger.started.lock().unwrap().len(), RUNS);

        // Every run completed, exactly once per step, and nothing acknowledged was lost.
        let runs = all_runs(&clients[0], RunStatus::Unspecified).await;
        assert_eq!(runs.len(), RUNS);
        for r in &runs {
            assert_eq!(r.status, RunStatus::Completed as i32, "{r:?}");
        }
        let all = check_acknowledged(&clients, &ledger).await;
        let timed_out = all
            .values()
            .filter(|events| events.iter().any(|e| e.event_type == "StepTimedOut"))
            .count();
        eprintln!(
            "after the restart: {RUNS} runs completed, {timed_out} with a step timed out, {} completions refused as stale",
            ledger.refused.lock().unwrap().len()
        );
    });
    assert!(server.stop().success());
}
