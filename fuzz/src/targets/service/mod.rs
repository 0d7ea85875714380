//! Every request type through the service layer (`engine/src/service/`), with no
//! transport: sequences of requests whose fields are arbitrary (huge, empty,
//! control characters, `.` and `..`, unicode, odd numbers, forged and stale
//! tokens), on a real redb file in a temp dir or on the memory backend, with the
//! real writer thread. Each request succeeds or gets an `ApiError` (never
//! `INTERNAL` or a storage error, never a panic); a refused request and every read
//! leave the store exactly as it was; after every request each run's history is
//! numbered 1.. with no gap up to its `last_event_id`.
//!
//! A case runs in one namespace: on a fresh fixture, `default` ([`check`], the
//! proptest runs); on a [`Shared`] fixture (libFuzzer's, one per process), a
//! namespace of its own, and what the property compares is that namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use railyard_engine::clock::ManualClock;
use railyard_engine::delivery::{DeliverySettings, SigningSecret};
use railyard_engine::error::ApiError;
use railyard_engine::registry::WorkflowRegistry;
use railyard_engine::service::runs::{self, HistoryQuery, IdReusePolicy, ListRuns, SignalRun, StartRun};
use railyard_engine::service::tasks::{self, Completion, CoordinatorNote, Heartbeat, Poll};
use railyard_engine::service::{
    Caller, CallerInput, Core, CoreParts, Credentials, Operation, caller, workflows,
};
use railyard_model::namespace::{DEFAULT_NAMESPACE, Namespace};
use railyard_model::run::{RunStatus, StepFailure};
use railyard_model::workflow::parse_definition;
use railyard_store::memory::MemoryBackend;
use railyard_store::{RunFilter, Store};

use crate::corpus::{self, Pick};

mod decode;
mod input;

pub use decode::decode;
pub use input::{Op, Request, ServiceInput, Text, TokenPick, strategy};

/// Most requests in a case.
pub const MAX_REQUESTS: usize = 23;

/// Longest error message: a refusal echoes at most a prefix of what was sent.
pub const MAX_MESSAGE: usize = 4096;

/// A second workflow beside the bundled demo: its own queue, one retry.
const RETRY_ONCE: &str = r#"{"id":"two","version":"1","name":"Two","taskQueue":"q",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}} in {{context.lang}}",
            "retry":{"maximumAttempts":2,"initialIntervalSeconds":1}},
           {"id":"b","title":"B","prompt":"then b"}]}"#;

/// A definition to register (`Op::RegisterWorkflow`), under an id no file takes.
pub const REGISTERED: &str =
    r#"{"id":"reg","version":"1","name":"Reg","steps":[{"id":"a","title":"A","prompt":"p {{goal}}"}]}"#;

/// Where every fixture's (manual) clock stands.
const CLOCK_START_MS: i64 = 1_700_000_000_000;

/// A service layer on a fresh store.
pub struct Fixture {
    pub core: Arc<Core>,
    _shutdown: tokio::sync::watch::Sender<bool>,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// A service over redb in a temp dir (`redb`) or over the memory backend.
    pub fn new(redb: bool) -> Self {
        Self::with_namespaces(redb, &[])
    }

    /// [`Self::new`] with the namespaces `names` beside `default`, written before
    /// the core starts (as a restored store holds them), so no case's requests
    /// are spent creating them.
    fn with_namespaces(redb: bool, names: &[String]) -> Self {
        let (store, dir) = if redb {
            let dir = tempfile::tempdir().expect("temp dir");
            (Store::open(dir.path()).expect("open redb"), Some(dir))
        } else {
            (Store::new(Arc::new(MemoryBackend::default())), None)
        };
        if !names.is_empty() {
            store
                .backend()
                .write(&mut |tx| {
                    for name in names {
                        tx.put_namespace(&Namespace {
                            name: name.clone(),
                            created_ms: CLOCK_START_MS,
                            updated_ms: CLOCK_START_MS,
                            ..Namespace::default()
                        })?;
                    }
                    Ok(())
                })
                .expect("the cases' namespaces");
        }
        let mut registry = WorkflowRegistry::default();
        let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows/demo.json");
        let demo_text = std::fs::read_to_string(&demo).expect("workflows/demo.json");
        for (text, file) in [
            (RETRY_ONCE, PathBuf::from("two.json")),
            (demo_text.as_str(), demo),
        ] {
            let def = parse_definition(text).expect("a valid definition");
            registry.valid.insert(def.id.clone(), (Arc::new(def), file));
        }
        let CoreParts { core, shutdown, .. } = Core::builder(store)
            .clock(Arc::new(ManualClock::new(CLOCK_START_MS)))
            .workflows(registry)
            .delivery(DeliverySettings {
                signing_secret: SigningSecret::new("fuzz"),
                ..Default::default()
            })
            .build()
            .expect("a core");
        Self {
            core,
            _shutdown: shutdown,
            _dir: dir,
        }
    }
}

/// Cases one [`Shared`] core serves before a fresh one replaces it: enough that
/// building a core (a store, a writer thread, token keys) costs little per case, few
/// enough that what the cases leave (runs, checkpoints of up to 8 MiB) stays small.
pub const CASES_PER_CORE: usize = 64;

/// A fixture reused across cases, for a fuzzer that runs millions in one process
/// (a fresh core per case holds libFuzzer to tens of cases per second): each case
/// gets a namespace of its own, untouched by the cases before it, and every
/// [`CASES_PER_CORE`] cases a fresh core. One for each backend.
#[derive(Default)]
pub struct Shared {
    memory: Pool,
    redb: Pool,
}

#[derive(Default)]
struct Pool {
    fixture: Option<Fixture>,
    used: usize,
}

impl Shared {
    /// Runs the property on `input` in the next unused namespace of the backend
    /// it names.
    pub fn check(&mut self, rt: &tokio::runtime::Runtime, input: &ServiceInput) -> Result<(), TestCaseError> {
        let pool = if input.redb {
            &mut self.redb
        } else {
            &mut self.memory
        };
        let fixture = match &mut pool.fixture {
            Some(f) if pool.used < CASES_PER_CORE => f,
            slot => {
                let names: Vec<String> = (0..CASES_PER_CORE).map(case_namespace).collect();
                pool.used = 0;
                slot.insert(Fixture::with_namespaces(input.redb, &names))
            }
        };
        let ns = case_namespace(pool.used);
        pool.used += 1;
        check_in(rt, fixture, &ns, input)
    }
}

fn case_namespace(i: usize) -> String {
    format!("fuzz-case-{i}")
}

/// What a case has seen: its namespace, the runs it started and the tokens it
/// was leased.
struct Seen {
    namespace: String,
    runs: Vec<String>,
    tokens: Vec<String>,
}

impl Seen {
    fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            runs: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// The namespace a caller names: in a case of a [`Shared`] fixture, `default`
    /// (or none) is the case's own.
    fn namespace(&self, t: Option<&Text>) -> String {
        let named = t.map(|t| self.text(t)).unwrap_or_default();
        if self.namespace != DEFAULT_NAMESPACE && (named.is_empty() || named == DEFAULT_NAMESPACE) {
            self.namespace.clone()
        } else {
            named
        }
    }

    fn text(&self, t: &Text) -> String {
        match t {
            Text::Any(s) => s.clone(),
            Text::Good(s) => s.to_string(),
            Text::Run(i) if self.runs.is_empty() => "no-run".to_string(),
            Text::Run(i) => self.runs[i.index(self.runs.len())].clone(),
        }
    }

    fn map(&self, pairs: &[(Text, Text)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (self.text(k), self.text(v))).collect()
    }

    fn token(&self, t: &TokenPick) -> String {
        let pick = |i: &Pick| {
            if self.tokens.is_empty() {
                String::new()
            } else {
                self.tokens[i.index(self.tokens.len())].clone()
            }
        };
        match t {
            TokenPick::Latest => self.tokens.last().cloned().unwrap_or_default(),
            TokenPick::Leased(i) => pick(i),
            TokenPick::Mutated(i, ms) => {
                let mut bytes = pick(i).into_bytes();
                for m in ms {
                    corpus::apply(&mut bytes, m, &[]);
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
            TokenPick::Any(s) => s.clone(),
        }
    }
}

/// Everything the read side shows of a namespace: each run's status, last event id,
/// pending signals and its history's event ids; each registered workflow's id and
/// content hash.
#[derive(Debug, PartialEq)]
struct Picture {
    runs: BTreeMap<String, (RunStatus, u64, usize, Vec<u64>)>,
    registered: Vec<(String, String)>,
}

/// The picture of namespace `ns`, where a case's requests land: `default` is `ns`
/// or stands for it, and any other name is missing to them (short of another case's
/// `fuzz-case-N`, which a fuzzer would have to spell out).
fn picture(core: &Core, ns: &str) -> Result<Picture, TestCaseError> {
    let fail = |e: railyard_store::StorageError| TestCaseError::fail(format!("reading the store: {e}"));
    let mut out = BTreeMap::new();
    let mut after = None;
    loop {
        let (runs, next) = core
            .store
            .list_runs(ns, &RunFilter::default(), after, 1000)
            .map_err(fail)?;
        for run in runs {
            let ids = core
                .store
                .history(&run.key(), 1, usize::MAX)
                .map_err(fail)?
                .iter()
                .map(|e| e.id)
                .collect();
            out.insert(
                run.run_id.clone(),
                (run.status, run.last_event_id, run.pending_signals.len(), ids),
            );
        }
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let mut registered = Vec::new();
    core.store
        .snapshot()
        .and_then(|snap| {
            snap.registered_workflows(ns, &mut |w| {
                registered.push((w.definition.id.clone(), w.hash));
                true
            })
        })
        .map_err(fail)?;
    Ok(Picture {
        runs: out,
        registered,
    })
}

fn is_mutation(op: &Op) -> bool {
    !matches!(
        op,
        Op::Describe(_)
            | Op::History { .. }
            | Op::List { .. }
            | Op::Tree(_)
            | Op::Watch { .. }
            | Op::DescribeQueue(_)
            | Op::GetWorkflow(_)
    )
}

/// Runs one request; `Ok(Err(e))` is a refusal.
async fn send(core: &Arc<Core>, seen: &mut Seen, r: &Request) -> Result<(), ApiError> {
    let op = match r.op {
        Op::Poll { .. } => Operation::PollTask,
        _ => Operation::StartRun,
    };
    let input = match &r.caller {
        None => CallerInput {
            namespace: seen.namespace(None),
            ..Default::default()
        },
        Some((ns, identity)) => CallerInput {
            namespace: seen.namespace(Some(ns)),
            identity: seen.text(identity),
            ..Default::default()
        },
    };
    let identity = input.identity.clone();
    let lease_holder = |seen: &Seen, t: &TokenPick| {
        tasks::lease_holder(core, &Credentials::None, &seen.token(t), identity.clone())
    };
    match &r.op {
        Op::Complete { token, .. } | Op::Heartbeat { token, .. } | Op::Fail { token, .. } => {
            let (c, claims) = lease_holder(seen, token)?;
            return lease_op(core, seen, &c, claims, &r.op).await;
        }
        _ => {}
    }
    let c: Caller = caller::resolve(core, input, op)?;
    let t = |x: &Text| seen.text(x);
    match &r.op {
        Op::Start {
            workflow,
            run,
            goal,
            context,
            request_id,
            parent,
            callback,
            queue,
            allow_duplicate,
        } => {
            let start = StartRun {
                workflow_id: t(workflow),
                run_id: t(run),
                goal: t(goal),
                context: seen.map(context),
                request_id: t(request_id),
                id_reuse_policy: if *allow_duplicate {
                    IdReusePolicy::AllowDuplicate
                } else {
                    IdReusePolicy::RejectDuplicate
                },
                parent_run_id: t(parent),
                callback_url: t(callback),
                task_queue: t(queue),
                budget: Default::default(),
                trace: None,
                attributes: Default::default(),
                ..Default::default()
            };
            let started = runs::start(core, &c, start.clone()).await?;
            if started.started {
                let run = runs::describe(core, &c, &started.run_id)?;
                if run.goal != start.goal || run.context != start.context {
                    return Err(ApiError::Internal(format!(
                        "run {:?} does not hold the goal and context it was started with",
                        started.run_id
                    )));
                }
            }
            seen.runs.push(started.run_id);
        }
        Op::Describe(run) => {
            runs::describe(core, &c, &t(run))?;
        }
        Op::History { run, from, page } => {
            let q = HistoryQuery {
                run_id: t(run),
                from_event_id: *from,
                page_size: *page,
                wait_timeout_ms: 0,
            };
            runs::history(core, &c, q).await?;
        }
        Op::List {
            status,
            workflow,
            parent,
            after,
            before,
            token,
            page,
        } => {
            runs::list(
                core,
                &c,
                ListRuns {
                    status: status
                        .as_ref()
                        .map(|i| RunStatus::ALL[i.index(RunStatus::ALL.len())]),
                    workflow_id: workflow.as_ref().map(t).unwrap_or_default(),
                    parent_run_id: parent.as_ref().map(t).unwrap_or_default(),
                    started_after_ms: after.unwrap_or(0),
                    started_before_ms: before.unwrap_or(0),
                    has_issues: false,
                    page_token: t(token),
                    page_size: *page,
                    query: String::new(),
                },
            )?;
        }
        Op::Signal {
            run,
            name,
            payload,
            request_id,
        } => {
            let s = SignalRun {
                run_id: t(run),
                name: t(name),
                payload_json: t(payload),
                request_id: t(request_id),
            };
            runs::signal(core, &c, s).await?;
        }
        Op::Cancel { run, reason } => runs::cancel(core, &c, t(run), t(reason)).await?,
        Op::Terminate { run, reason } => runs::terminate(core, &c, t(run), t(reason)).await?,
        Op::Tree(run) => {
            runs::session_tree(core, &c, &t(run))?;
        }
        Op::Watch { run, from } => {
            let mut rx = runs::watch(core, &c, &t(run), *from)?;
            // Take what is there; dropping the receiver ends the watch.
            tokio::task::yield_now().await;
            while let Ok(event) = rx.try_recv() {
                event?;
            }
        }
        Op::Poll { queue } => {
            let p = Poll {
                task_queue: t(queue),
                wait_timeout_ms: 1,
                run_id: String::new(),
            };
            if let Some(leased) = tasks::poll(core, &c, p).await? {
                seen.tokens.push(leased.task_token);
            }
        }
        Op::DescribeQueue(queue) => {
            tasks::describe_queue(core, &c, &t(queue))?;
        }
        Op::GetWorkflow(id) => {
            workflows::get(core, &c.namespace, &t(id))?;
            workflows::list(core, &c)?;
        }
        Op::RegisterWorkflow(definition) => {
            workflows::register(core, &c, t(definition)).await?;
        }
        Op::Complete { .. } | Op::Heartbeat { .. } | Op::Fail { .. } => {}
    }
    Ok(())
}

async fn lease_op(
    core: &Arc<Core>,
    seen: &mut Seen,
    c: &Caller,
    claims: railyard_model::token::TokenClaims,
    op: &Op,
) -> Result<(), ApiError> {
    match op {
        Op::Heartbeat {
            checkpoint,
            notes,
            acked,
            ..
        } => {
            let h = Heartbeat {
                checkpoint: vec![b'c'; *checkpoint],
                notes: notes
                    .iter()
                    .map(|(k, m)| CoordinatorNote {
                        kind: seen.text(k),
                        message: seen.text(m),
                    })
                    .collect(),
                acked_signal_event_id: *acked,
                ..Default::default()
            };
            tasks::heartbeat(core, c, claims, h).await?;
        }
        Op::Complete {
            notes,
            artifacts,
            context,
            take_next,
            ..
        } => {
            let completion = Completion {
                notes: seen.text(notes),
                artifacts: artifacts.iter().map(|a| seen.text(a)).collect(),
                context_updates: seen.map(context),
                result_json: String::new(),
                take_next: *take_next,
                checkpoint: Vec::new(),
                search_attributes: Default::default(),
            };
            if let Some(next) = tasks::complete(core, c, claims, completion).await? {
                seen.tokens.push(next.task_token);
            }
        }
        Op::Fail {
            error_type,
            message,
            non_retryable,
            checkpoint,
            ..
        } => {
            let failure = StepFailure {
                error_type: seen.text(error_type),
                message: seen.text(message),
                non_retryable: *non_retryable,
                checkpoint: vec![b'c'; *checkpoint],
            };
            tasks::fail(core, c, claims, failure).await?;
        }
        _ => {}
    }
    Ok(())
}

fn check_history(p: &Picture) -> Result<(), TestCaseError> {
    for (run, (_, last, _, ids)) in &p.runs {
        let want: Vec<u64> = (1..=*last).collect();
        prop_assert_eq!(ids, &want, "history of {} is not 1..={}", run, last);
    }
    Ok(())
}

/// The property (see the module docs), on a fresh fixture.
pub fn check(rt: &tokio::runtime::Runtime, input: &ServiceInput) -> Result<(), TestCaseError> {
    check_in(rt, &Fixture::new(input.redb), DEFAULT_NAMESPACE, input)
}

/// The property, with the case's requests in namespace `ns` of `fx`.
fn check_in(
    rt: &tokio::runtime::Runtime,
    fx: &Fixture,
    ns: &str,
    input: &ServiceInput,
) -> Result<(), TestCaseError> {
    let core = &fx.core;
    let mut seen = Seen::new(ns);
    rt.block_on(async {
        // One picture per request: what a request leaves is what the next one finds,
        // as nothing runs between them (the clock is manual, and every write a request
        // causes is committed before it is answered).
        let mut before = picture(core, ns)?;
        for (i, request) in input.requests.iter().enumerate() {
            let result = send(core, &mut seen, request).await;
            let after = picture(core, ns)?;
            check_history(&after)?;
            match result {
                Ok(()) => {
                    if !is_mutation(&request.op) {
                        prop_assert_eq!(&before, &after, "request {} (a read) changed the store", i);
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    prop_assert!(
                        !matches!(e, ApiError::Internal(_) | ApiError::Storage(_)),
                        "request {i} failed inside: {message}"
                    );
                    prop_assert!(
                        message.len() <= MAX_MESSAGE,
                        "request {i}: an error of {} bytes: {}…",
                        message.len(),
                        message.chars().take(100).collect::<String>()
                    );
                    prop_assert_eq!(
                        &before,
                        &after,
                        "refused request {} ({}) changed the store",
                        i,
                        message
                    );
                }
            }
            before = after;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A start of run `r`, by a caller naming `namespace` (`None`: naming none).
    fn start_r(namespace: Option<&'static str>) -> ServiceInput {
        let any = |s: &str| Text::Any(s.to_string());
        ServiceInput {
            redb: false,
            requests: vec![Request {
                caller: namespace.map(|ns| (Text::Good(ns), any(""))),
                op: Op::Start {
                    workflow: Text::Good("two"),
                    run: any("r"),
                    goal: any("g"),
                    context: vec![(any("lang"), any("rust"))],
                    request_id: any(""),
                    parent: any(""),
                    callback: any(""),
                    queue: any(""),
                    allow_duplicate: false,
                },
            }],
        }
    }

    fn runs_in(shared: &Shared, ns: &str) -> Vec<String> {
        let fx = shared.memory.fixture.as_ref().expect("a fixture");
        picture(&fx.core, ns)
            .expect("a picture")
            .runs
            .into_keys()
            .collect()
    }

    #[test]
    fn a_shared_fixture_gives_each_case_a_namespace_of_its_own() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let mut shared = Shared::default();
        // The same run id in every case: each starts it afresh, in its own namespace.
        shared.check(&rt, &start_r(None)).expect("case 0");
        shared.check(&rt, &start_r(Some("default"))).expect("case 1");
        assert_eq!(runs_in(&shared, &case_namespace(0)), ["r"]);
        assert_eq!(runs_in(&shared, &case_namespace(1)), ["r"]);
        assert!(runs_in(&shared, DEFAULT_NAMESPACE).is_empty());
        // Past the last namespace, a fresh core.
        for _ in 2..=CASES_PER_CORE {
            shared.check(&rt, &start_r(None)).expect("a case");
        }
        assert_eq!(runs_in(&shared, &case_namespace(0)), ["r"]);
        assert!(runs_in(&shared, &case_namespace(1)).is_empty());
    }
}
