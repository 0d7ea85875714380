//! Runs: start, read, list, watch and steer them.

use railyard_model::Rejection;
use railyard_model::RunKey;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Caller, Core, workflows};
use crate::error::ApiError;
use crate::writer::{StartCommand, Started, Stop};
use railyard_model::Millis;
use railyard_model::limits::{self, check_context, check_len, check_name};
use railyard_model::run::{Event, RunBudget, RunState, RunStatus, StartParams};
use railyard_model::trace::TraceContext;
use railyard_store::RunFilter;

/// Most events in one history page.
pub const MAX_PAGE: usize = 1000;
/// Longest history wait.
pub const MAX_WAIT_MS: u32 = 60_000;
/// Deepest session tree returned.
pub const MAX_TREE_DEPTH: usize = 32;
/// Runs in a listing page when the request names no size.
pub const DEFAULT_LIST_PAGE: usize = 100;
/// Most runs in one listing page.
pub const MAX_LIST_PAGE: usize = 1000;
/// Most bytes of events in one history page (as their wire form counts them): a
/// page holds at least one event, and ends before the event that would pass this.
pub const MAX_HISTORY_PAGE_BYTES: usize = 4 << 20;
/// Most bytes of run summaries in one listing page ([`RunState::summary_bytes`]).
pub const MAX_LIST_PAGE_BYTES: usize = 4 << 20;
/// Most runs one listing page reads from its index: a condition no index serves (a
/// goal's word) then answers a short page, even an empty one, with the token to go
/// on, rather than reading the whole namespace in one call.
pub const MAX_LIST_ROWS_READ: u64 = 10_000;
/// Most bytes of run summaries in one session tree; deeper or later children past
/// it are left out (and logged).
pub const MAX_TREE_BYTES: usize = 8 << 20;
/// Events read from storage at a time while filling a history page.
const HISTORY_CHUNK: usize = 32;
/// Events buffered ahead of a slow watcher.
const WATCH_BUFFER: usize = 256;

/// What happens when a run id is already taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IdReusePolicy {
    /// Refuse with `ALREADY_EXISTS`.
    #[default]
    RejectDuplicate,
    /// Start a new run under the id of a closed one. Refused until the workflow-id
    /// / run-id split arrives with schedules.
    AllowDuplicate,
}

/// A run to start.
#[derive(Debug, Clone, Default)]
pub struct StartRun {
    pub workflow_id: String,
    /// Empty: the server makes one (a UUIDv7).
    pub run_id: String,
    pub goal: String,
    pub context: BTreeMap<String, String>,
    /// Empty: none. A start repeating an earlier one's request id starts nothing
    /// and answers that run's id.
    pub request_id: String,
    pub id_reuse_policy: IdReusePolicy,
    /// Empty: none.
    pub parent_run_id: String,
    /// Empty: none; else an http:// or https:// URL.
    pub callback_url: String,
    /// The queue of steps that name none of their own (empty: the workflow's).
    pub task_queue: String,
    /// The run's token budget; a limit left out is the definition's.
    pub budget: RunBudget,
    /// The trace the run joins (`None`: one derived from its id).
    pub trace: Option<TraceContext>,
    /// Search attributes, name → text, read by the namespace's declarations when
    /// the writer checks the start (an undeclared or mistyped one is refused).
    pub attributes: BTreeMap<String, String>,
    /// 1 (first) to 5 (last); 0: 3.
    pub priority: u32,
    /// The key its steps share fairly with other keys (empty: none).
    pub fairness_key: String,
    /// Its fairness weight, 1 to 1000; 0: 1.
    pub fairness_weight: u32,
    /// The key its concurrency limit counts under (empty: its fairness key).
    pub concurrency_key: String,
}

/// Starts a run of a loaded workflow.
pub async fn start(core: &Core, caller: &Caller, r: StartRun) -> Result<Started, ApiError> {
    let workflow = r.workflow_id.clone();
    let started = core.writer.call(prepare(core, caller, r)?).await?;
    tracing::info!(run_id = %started.run_id, %workflow, started = started.started, "run started");
    Ok(started)
}

/// Every check of a start, and the writer command that makes it: [`start`] sends
/// it as it is; a webhook delivery wraps it in its own command (dedup and
/// concurrency keys), so both start runs the same way.
pub fn prepare(core: &Core, caller: &Caller, r: StartRun) -> Result<StartCommand, ApiError> {
    check_name("workflow_id", &r.workflow_id)?;
    let definition = workflows::get(core, &caller.namespace, &r.workflow_id)?;
    check_len("goal", &r.goal, limits::GOAL)?;
    check_context("context", &r.context)?;
    check_len("request_id", &r.request_id, limits::REQUEST_ID)?;
    limits::check_storable("request_id", &r.request_id)?;
    if r.id_reuse_policy == IdReusePolicy::AllowDuplicate {
        return Err(ApiError::field(
            "id_reuse_policy",
            "ALLOW_DUPLICATE is not supported yet: a run id names one run for good within its namespace",
        ));
    }
    let run_id = if r.run_id.is_empty() {
        uuid::Uuid::now_v7().to_string()
    } else {
        check_name("run_id", &r.run_id)?;
        r.run_id
    };
    if !r.parent_run_id.is_empty() {
        check_name("parent_run_id", &r.parent_run_id)?;
    }
    if !r.task_queue.is_empty() {
        check_name("task_queue", &r.task_queue)?;
    }
    check_len("callback_url", &r.callback_url, limits::URL)?;
    let flow = railyard_model::flow::Flow::from_request(
        r.priority,
        &r.fairness_key,
        r.fairness_weight,
        &r.concurrency_key,
    )?;
    if let Some(t) = r.budget.max_tokens
        && !(1..=railyard_model::workflow::MAX_BUDGET_TOKENS).contains(&t)
    {
        return Err(ApiError::field(
            "max_tokens",
            format!("must be at most {}", railyard_model::workflow::MAX_BUDGET_TOKENS),
        ));
    }
    if let Some(c) = r.budget.max_cost_usd
        && !(c > 0.0 && c <= railyard_model::workflow::MAX_BUDGET_USD)
    {
        return Err(ApiError::field(
            "max_cost_usd",
            format!(
                "must be a number of US dollars above 0 and at most {}",
                railyard_model::workflow::MAX_BUDGET_USD
            ),
        ));
    }
    if !r.callback_url.is_empty() {
        railyard_model::run::delivery::url::check("callback_url", &r.callback_url)?;
        super::subscriptions::check_destination(core, "callback_url", &r.callback_url)?;
        super::subscriptions::require_signing(core, "callback_url")?;
    }
    let params = StartParams {
        namespace: caller.namespace.clone(),
        run_id,
        goal: r.goal,
        context: r.context,
        request_id: r.request_id,
        parent_run_id: r.parent_run_id,
        callback_url: r.callback_url,
        task_queue: r.task_queue,
        schedule_id: String::new(),
        identity: caller.identity.clone(),
        budget: r.budget,
        trace: r.trace,
        attributes: r.attributes,
        flow,
        ..Default::default()
    };
    Ok(StartCommand { params, definition })
}

fn run_not_found(key: &RunKey) -> ApiError {
    let RunKey { namespace, run_id } = key;
    ApiError::Rejected(Rejection::NotFound(format!(
        "run {run_id:?} not found in namespace {namespace:?}"
    )))
}

/// Why `run`'s ready step waits though a poll may be free (empty: nothing holds it
/// back): its concurrency key is at its limit.
pub fn flow_wait(core: &Core, run: &RunState) -> String {
    let key = run.flow.limit_key();
    if key.is_empty()
        || !run.status.is_open()
        || !matches!(run.phase, railyard_model::run::Phase::Scheduled { .. })
    {
        return String::new();
    }
    let load = core.matching.key_load(&run.namespace, key);
    match load.limit {
        Some(limit) if load.running >= limit => format!(
            "waiting for the concurrency limit of key {key:?} (rule {:?}: {} of {limit} running)",
            load.rule, load.running
        ),
        _ => String::new(),
    }
}

/// A run's state (`NOT_FOUND` when there is no such run).
pub fn describe(core: &Core, caller: &Caller, run_id: &str) -> Result<RunState, ApiError> {
    check_name("run_id", run_id)?;
    let key = RunKey::new(&caller.namespace, run_id);
    let run = core.store.run(&key)?.ok_or_else(|| run_not_found(&key))?;
    caller.check_run_queues(&run)?;
    Ok(run)
}

/// A page of history to read.
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery {
    pub run_id: String,
    /// The first event wanted (0 or 1: from the start).
    pub from_event_id: u64,
    /// 0: as many as a page holds ([`MAX_PAGE`]).
    pub page_size: u32,
    /// When no event is there yet and the run is open, wait this long for one
    /// (at most [`MAX_WAIT_MS`]).
    pub wait_timeout_ms: u32,
}

/// One page of a run's history.
#[derive(Debug, Clone)]
pub struct HistoryPage {
    pub events: Vec<Event>,
    /// Where the next page starts; 0 when the run is closed and this page ends its
    /// history.
    pub next_event_id: u64,
    pub status: RunStatus,
}

/// Reads a page of history, waiting for the next event if asked to.
pub async fn history(core: &Core, caller: &Caller, q: HistoryQuery) -> Result<HistoryPage, ApiError> {
    let mut run = describe(core, caller, &q.run_id)?;
    let from = q.from_event_id.max(1);
    let limit = if q.page_size == 0 {
        MAX_PAGE
    } else {
        (q.page_size as usize).min(MAX_PAGE)
    };
    let key = run.key();
    let mut events = history_page(core, &key, from, limit)?;
    if events.is_empty() && run.status.is_open() && q.wait_timeout_ms > 0 {
        let mut changes = core.watchers.subscribe(&key);
        let wait = Duration::from_millis(q.wait_timeout_ms.min(MAX_WAIT_MS).into());
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Re-read after subscribing so an event committed in between is not missed.
            events = history_page(core, &key, from, limit)?;
            if !events.is_empty() {
                break;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                break;
            }
        }
        run = describe(core, caller, &q.run_id)?;
    }
    let last_sent = events.last().map(|e| e.id).unwrap_or(from - 1);
    let next_event_id = if !run.status.is_open() && last_sent >= run.last_event_id {
        0
    } else {
        last_sent + 1
    };
    Ok(HistoryPage {
        events,
        next_event_id,
        status: run.status,
    })
}

/// What one event takes on the wire, about: its attributes as JSON, its type and
/// identity.
pub fn event_bytes(ev: &Event) -> usize {
    railyard_model::run::wire::event_attributes_json(&ev.kind).len()
        + ev.kind.type_name().len()
        + ev.identity.len()
        + 32
}

/// Events `from..` of a run: at most `limit`, and no more than fit in
/// [`MAX_HISTORY_PAGE_BYTES`] (at least one). Read a few at a time, so a history of
/// large events is never loaded whole.
fn history_page(core: &Core, key: &RunKey, from: u64, limit: usize) -> Result<Vec<Event>, ApiError> {
    let mut page: Vec<Event> = Vec::new();
    let mut bytes = 0usize;
    let mut next = from;
    while page.len() < limit {
        let want = HISTORY_CHUNK.min(limit - page.len());
        let chunk = core.store.history(key, next, want)?;
        let got = chunk.len();
        for ev in chunk {
            let weight = event_bytes(&ev);
            if !page.is_empty() && bytes.saturating_add(weight) > MAX_HISTORY_PAGE_BYTES {
                return Ok(page);
            }
            bytes = bytes.saturating_add(weight);
            next = ev.id + 1;
            page.push(ev);
        }
        if got < want {
            break;
        }
    }
    Ok(page)
}

/// Follows a run's history from `from_event_id`: every event in order, as it is
/// committed, ending after the close event. The stream ends early when the receiver
/// is dropped, and with `UNAVAILABLE` when the server shuts down.
pub fn watch(
    core: &Arc<Core>,
    caller: &Caller,
    run_id: &str,
    from_event_id: u64,
) -> Result<mpsc::Receiver<Result<Event, ApiError>>, ApiError> {
    describe(core, caller, run_id)?;
    let core = core.clone();
    let key = RunKey::new(&caller.namespace, run_id);
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let mut changes = core.watchers.subscribe(&key);
    let mut from = from_event_id.max(1);
    tokio::spawn(async move {
        loop {
            let events = match core.store.history(&key, from, HISTORY_CHUNK) {
                Ok(events) => events,
                Err(e) => {
                    let _ = tx.send(Err(e.into())).await;
                    return;
                }
            };
            let got = events.len();
            for ev in events {
                from = ev.id + 1;
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            if got > 0 {
                continue;
            }
            let closed = matches!(core.store.run(&key), Ok(Some(run)) if !run.status.is_open());
            if closed {
                // Everything up to the close event has been sent.
                if core
                    .store
                    .history(&key, from, 1)
                    .map(|e| e.is_empty())
                    .unwrap_or(true)
                {
                    return;
                }
                continue;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                _ = tx.closed() => return,
                _ = core.shutting_down() => {
                    let _ = tx.send(Err(ApiError::Unavailable("the server is shutting down".into()))).await;
                    return;
                }
            }
        }
    });
    Ok(rx)
}

/// A run listing to read. An empty id and a zero time mean "any".
#[derive(Debug, Clone, Default)]
pub struct ListRuns {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    pub workflow_id: String,
    /// Only the children of this run.
    pub parent_run_id: String,
    /// Only runs started after this time (unix ms).
    pub started_after_ms: Millis,
    /// Only runs started before this time (unix ms).
    pub started_before_ms: Millis,
    /// Only runs whose agents reported an issue.
    pub has_issues: bool,
    /// Empty: the first page; else a `next_page_token` this server handed out.
    pub page_token: String,
    /// 0: [`DEFAULT_LIST_PAGE`]; at most [`MAX_LIST_PAGE`].
    pub page_size: u32,
    /// A list query (`docs/search-and-queries.md`), beside the filter; empty: none.
    pub query: String,
}

/// One page of a run listing, newest first.
#[derive(Debug, Clone)]
pub struct RunPage {
    pub runs: Vec<RunState>,
    /// Empty on the last page.
    pub next_page_token: String,
}

/// Lists runs, newest first.
pub fn list(core: &Core, caller: &Caller, r: ListRuns) -> Result<RunPage, ApiError> {
    for (field, value) in [
        ("workflow_id", &r.workflow_id),
        ("parent_run_id", &r.parent_run_id),
        ("page_token", &r.page_token),
    ] {
        check_len(field, value, limits::QUERY_FIELD)?;
        limits::check_storable(field, value)?;
    }
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    let set = |ms: Millis| (ms != 0).then_some(ms);
    let mut filter = RunFilter {
        status: r.status,
        workflow_id: non_empty(r.workflow_id),
        parent_run_id: non_empty(r.parent_run_id),
        started_after_ms: set(r.started_after_ms),
        started_before_ms: set(r.started_before_ms),
        has_issues: r.has_issues,
        query: None,
    };
    if let (Some(after), Some(before)) = (filter.started_after_ms, filter.started_before_ms)
        && before <= after
    {
        return Err(ApiError::field(
            "started_before_unix_ms",
            format!("{before} is not after started_after_unix_ms {after}"),
        ));
    }
    let after = if r.page_token.is_empty() {
        None
    } else {
        let bad = || ApiError::field("page_token", "is not a token this server handed out");
        let (ms, id) = r.page_token.split_once(':').ok_or_else(bad)?;
        Some((ms.parse::<i64>().map_err(|_| bad())?, id.to_string()))
    };
    let limit = if r.page_size == 0 {
        DEFAULT_LIST_PAGE
    } else {
        (r.page_size as usize).min(MAX_LIST_PAGE)
    };
    filter.query = super::queries::parse(core, &caller.namespace, &r.query)?;
    let bounds = railyard_store::listing::Bounds {
        limit,
        max_bytes: MAX_LIST_PAGE_BYTES,
        max_rows: MAX_LIST_ROWS_READ,
    };
    let (runs, next, stats) = core.store.list_runs_bounded(
        &caller.namespace,
        &filter,
        after,
        bounds,
        &RunState::summary_bytes,
    )?;
    tracing::debug!(
        namespace = %caller.namespace,
        runs = runs.len(),
        rows_read = stats.rows_read,
        index = %stats.index,
        "runs listed"
    );
    Ok(RunPage {
        runs,
        next_page_token: next.map(|(ms, id)| format!("{ms}:{id}")).unwrap_or_default(),
    })
}

/// A signal to send to a run.
#[derive(Debug, Clone, Default)]
pub struct SignalRun {
    pub run_id: String,
    pub name: String,
    /// Empty, or a JSON document.
    pub payload_json: String,
    /// Empty: none. A signal repeating an earlier one's request id is not recorded
    /// again.
    pub request_id: String,
}

/// Records a signal for the worker running the run's current step.
pub async fn signal(core: &Core, caller: &Caller, r: SignalRun) -> Result<(), ApiError> {
    check_name("run_id", &r.run_id)?;
    check_name("signal_name", &r.name)?;
    check_len("payload_json", &r.payload_json, limits::SIGNAL_PAYLOAD)?;
    if !r.payload_json.is_empty() {
        serde_json::from_str::<serde_json::Value>(&r.payload_json)
            .map_err(|e| ApiError::field("payload_json", format!("is not valid JSON: {e}")))?;
    }
    check_len("request_id", &r.request_id, limits::REQUEST_ID)?;
    limits::check_storable("request_id", &r.request_id)?;
    core.writer
        .call(crate::writer::Signal {
            ns: caller.namespace.clone(),
            run_id: r.run_id,
            identity: caller.identity.clone(),
            name: r.name,
            payload: r.payload_json,
            request_id: r.request_id,
        })
        .await
        .map_err(ApiError::from)
}

/// Asks a run to stop: at once when no worker holds its step, else when the worker
/// reports back.
pub async fn cancel(core: &Core, caller: &Caller, run_id: String, reason: String) -> Result<(), ApiError> {
    stop(core, caller, Stop::Cancel, run_id, reason).await
}

/// Pauses (`pause`) or unpauses a run and the open runs it spawned: while paused no
/// step is dispatched, and a step in flight is asked to suspend at its next turn.
/// Answers whether the run changed (false: it was already so).
pub async fn pause(
    core: &Core,
    caller: &Caller,
    run_id: String,
    reason: String,
    pause: bool,
) -> Result<bool, ApiError> {
    check_name("run_id", &run_id)?;
    check_len("reason", &reason, limits::MESSAGE)?;
    let changed = core
        .writer
        .call(crate::writer::PauseRun {
            ns: caller.namespace.clone(),
            run_id: run_id.clone(),
            identity: caller.identity.clone(),
            reason,
            pause,
        })
        .await?;
    tracing::info!(%run_id, pause, changed, "run pause changed");
    Ok(changed)
}

/// Ends a run at once; a worker holding its step loses the lease.
pub async fn terminate(core: &Core, caller: &Caller, run_id: String, reason: String) -> Result<(), ApiError> {
    stop(core, caller, Stop::Terminate, run_id, reason).await
}

async fn stop(
    core: &Core,
    caller: &Caller,
    how: Stop,
    run_id: String,
    reason: String,
) -> Result<(), ApiError> {
    check_name("run_id", &run_id)?;
    check_len("reason", &reason, limits::MESSAGE)?;
    core.writer
        .call(crate::writer::StopRun {
            how,
            ns: caller.namespace.clone(),
            run_id,
            identity: caller.identity.clone(),
            reason,
        })
        .await
        .map_err(ApiError::from)
}

/// A run and the runs it started, recursively.
#[derive(Debug, Clone)]
pub struct SessionTree {
    pub run: RunState,
    pub children: Vec<SessionTree>,
}

/// The tree of runs under `run_id`, at most [`MAX_TREE_DEPTH`] levels below it and
/// at most [`MAX_TREE_BYTES`] of summaries in all.
pub fn session_tree(core: &Core, caller: &Caller, run_id: &str) -> Result<SessionTree, ApiError> {
    let run = describe(core, caller, run_id)?;
    let mut budget = MAX_TREE_BYTES.saturating_sub(run.summary_bytes());
    let tree = tree(core, &caller.namespace, run, 0, &mut budget)?;
    Ok(tree)
}

fn tree(
    core: &Core,
    ns: &str,
    run: RunState,
    depth: usize,
    budget: &mut usize,
) -> Result<SessionTree, ApiError> {
    let mut children = Vec::new();
    if depth < MAX_TREE_DEPTH {
        for id in core.store.children(ns, &run.run_id)? {
            if let Some(child) = core.store.run(&RunKey::new(ns, &id))? {
                let weight = child.summary_bytes();
                if weight > *budget {
                    tracing::warn!(run_id = %run.run_id, "session tree cut short: more than {MAX_TREE_BYTES} bytes of runs");
                    break;
                }
                *budget -= weight;
                children.push(tree(core, ns, child, depth + 1, budget)?);
            }
        }
    }
    Ok(SessionTree { run, children })
}

/// Retries a closed run's failed result deliveries (all, or `target`'s): a new
/// round with the full retry budget. Answers the targets requeued.
pub async fn redeliver(
    core: &Core,
    caller: &Caller,
    run_id: &str,
    target: &str,
) -> Result<Vec<String>, ApiError> {
    check_name("run_id", run_id)?;
    if !target.is_empty() && railyard_model::run::DeliveryTarget::parse(target).is_none() {
        return Err(ApiError::field(
            "target",
            format!(
                "{} is neither \"callback\" nor \"subscription:<id>\"",
                railyard_model::echo(target)
            ),
        ));
    }
    let targets = core
        .writer
        .call(crate::writer::Redeliver {
            ns: caller.namespace.clone(),
            run_id: run_id.to_string(),
            target: target.to_string(),
        })
        .await?;
    tracing::info!(%run_id, targets = ?targets, by = %caller.identity, "result redelivery requested");
    Ok(targets)
}
