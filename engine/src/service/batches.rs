//! Batch operations (`Batches`): one action applied to every run a list query
//! matches, at a bounded rate, as a durable job. Starting resolves the query to its
//! matching run ids once (at most [`MAX_BATCH_RUNS`]) and stores them with the
//! batch, so the set never drifts; the leader's batch task
//! ([`crate::batches`]) works through them. A dry run resolves the same way
//! and stores nothing. The spec is `docs/batches.md`.

use railyard_model::batch::{self, Batch, BatchAction, BatchItem, DEFAULT_RATE, MAX_BATCH_RUNS};
use railyard_model::limits::{self, check_len, check_name};
use railyard_store::RunFilter;

use super::{Caller, Core};
use crate::error::ApiError;
use crate::writer::{BatchCreated, CreateBatch, StopBatch};

/// Runs named by a dry run's answer.
pub const DRY_RUN_SAMPLE: usize = 10;
/// Failed and skipped runs a description names, at most.
pub const MAX_PROBLEMS: usize = 100;
/// Batches per page of a listing, at most (and by default).
pub const MAX_LIST_PAGE: usize = 100;
/// Runs read per page while resolving a query.
const RESOLVE_PAGE: usize = 1000;

/// A batch to start (or to try, `dry_run`).
#[derive(Debug, Clone)]
pub struct StartBatch {
    pub action: BatchAction,
    pub query: String,
    pub reason: String,
    /// Runs per second (`None`: [`DEFAULT_RATE`]; 0 is refused).
    pub rate: Option<u32>,
    pub dry_run: bool,
    /// Empty: the server makes one (a UUIDv7). Starting again with the id, action and
    /// query of an existing batch answers that batch and does nothing.
    pub batch_id: String,
}

/// What starting a batch answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchStart {
    /// Runs the query matches (at most [`MAX_BATCH_RUNS`] + 1).
    pub matched: u64,
    /// Whether it matches more than a batch may act on (a real start is refused).
    pub over_limit: bool,
    /// The first matched runs (newest first), at most [`DRY_RUN_SAMPLE`].
    pub sample: Vec<String>,
    /// The batch; `None` for a dry run.
    pub batch: Option<Batch>,
    /// False when an existing batch was answered.
    pub created: bool,
}

/// A batch and the runs it skipped or failed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchDescription {
    pub batch: Batch,
    /// (index, item) of each run skipped or failed, in order, at most [`MAX_PROBLEMS`].
    pub problems: Vec<(u64, BatchItem)>,
}

/// The ids of the runs `query` matches in the caller's namespace, newest first, at
/// most `MAX_BATCH_RUNS + 1` (one more tells that there are more).
fn resolve(core: &Core, caller: &Caller, query: &str) -> Result<Vec<String>, ApiError> {
    let ns = &caller.namespace;
    let filter = RunFilter {
        query: super::queries::parse(core, ns, query)?,
        ..RunFilter::default()
    };
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let want = (MAX_BATCH_RUNS + 1 - ids.len()).min(RESOLVE_PAGE);
        let (runs, next, _) = core
            .store
            .list_runs_counted(ns, &filter, after, want, usize::MAX, &|_| 0)?;
        ids.extend(runs.into_iter().map(|r| r.run_id));
        match next {
            Some(c) if ids.len() <= MAX_BATCH_RUNS => after = Some(c),
            _ => return Ok(ids),
        }
    }
}

/// Starts a batch, or answers what one would match (`dry_run`).
pub async fn start(core: &Core, caller: &Caller, r: StartBatch) -> Result<BatchStart, ApiError> {
    let rate = r.rate.unwrap_or(DEFAULT_RATE);
    batch::check_request(&r.action, &r.query, &r.reason, rate)?;
    if !r.batch_id.is_empty() {
        check_name("batch_id", &r.batch_id)?;
    }
    let ids = resolve(core, caller, &r.query)?;
    let matched = ids.len() as u64;
    let over_limit = ids.len() > MAX_BATCH_RUNS;
    let sample = ids.iter().take(DRY_RUN_SAMPLE).cloned().collect();
    if r.dry_run {
        return Ok(BatchStart {
            matched,
            over_limit,
            sample,
            batch: None,
            created: false,
        });
    }
    let batch_id = if r.batch_id.is_empty() {
        uuid::Uuid::now_v7().to_string()
    } else {
        r.batch_id
    };
    let cmd = CreateBatch {
        batch: Batch {
            namespace: caller.namespace.clone(),
            batch_id,
            action: r.action,
            query: r.query,
            reason: r.reason,
            rate,
            identity: caller.identity.clone(),
            created_ms: 0,
            closed_ms: None,
            state: batch::BatchState::Running,
            stopped_by: String::new(),
            stop_reason: String::new(),
            total: 0,
            next: 0,
            succeeded: 0,
            skipped: 0,
            failed: 0,
        },
        run_ids: ids,
    };
    let BatchCreated { batch, created } = core.writer.call(cmd).await?;
    if created {
        core.batch_wake.notify_one();
        tracing::info!(
            namespace = %batch.namespace,
            batch_id = %batch.batch_id,
            action = batch.action.name(),
            runs = batch.total,
            rate = batch.rate,
            "batch started"
        );
    }
    Ok(BatchStart {
        matched,
        over_limit,
        sample,
        batch: Some(batch),
        created,
    })
}

/// A batch of the caller's namespace, with the runs it skipped or failed on.
pub fn describe(core: &Core, caller: &Caller, batch_id: &str) -> Result<BatchDescription, ApiError> {
    check_name("batch_id", batch_id)?;
    let snap = core.store.backend().snapshot()?;
    let ns = &caller.namespace;
    let batch = snap
        .batch(ns, batch_id)?
        .ok_or_else(|| ApiError::from(crate::writer::batch_not_found(ns, batch_id)))?;
    let mut problems = Vec::new();
    if batch.skipped + batch.failed > 0 {
        // Only the items reached can have an outcome: at most `next` read.
        let mut from = 0;
        while from < batch.next && problems.len() < MAX_PROBLEMS {
            let page = snap.batch_items(ns, batch_id, from, 500)?;
            let Some((last, _)) = page.last() else { break };
            from = last + 1;
            problems.extend(
                page.into_iter()
                    .filter(|(_, it)| it.outcome.as_ref().is_some_and(|o| o.name() != "done")),
            );
        }
        problems.truncate(MAX_PROBLEMS);
    }
    Ok(BatchDescription { batch, problems })
}

/// The batches of the caller's namespace, in id order (a server's ids are UUIDv7s:
/// oldest first), after `page_token`; answers the page and the next token (empty:
/// no more).
pub fn list(
    core: &Core,
    caller: &Caller,
    page_size: u32,
    page_token: &str,
) -> Result<(Vec<Batch>, String), ApiError> {
    if !page_token.is_empty() {
        check_name("page_token", page_token)?;
    }
    let limit = match page_size as usize {
        0 => MAX_LIST_PAGE,
        n => n.min(MAX_LIST_PAGE),
    };
    let snap = core.store.backend().snapshot()?;
    let mut out = Vec::new();
    let mut more = false;
    snap.batches(&caller.namespace, page_token, &mut |b| {
        if out.len() == limit {
            more = true;
            return false;
        }
        out.push(b);
        true
    })?;
    let next = if more {
        out.last().map(|b| b.batch_id.clone()).unwrap_or_default()
    } else {
        String::new()
    };
    Ok((out, next))
}

/// Stops a batch; one already ended is answered as it is.
pub async fn stop(core: &Core, caller: &Caller, batch_id: String, reason: String) -> Result<Batch, ApiError> {
    check_name("batch_id", &batch_id)?;
    check_len("reason", &reason, limits::MESSAGE)?;
    let b = core
        .writer
        .call(StopBatch {
            ns: caller.namespace.clone(),
            batch_id,
            identity: caller.identity.clone(),
            reason,
        })
        .await?;
    core.batch_wake.notify_one();
    tracing::info!(namespace = %b.namespace, batch_id = %b.batch_id, state = b.state.name(), "batch stop asked");
    Ok(b)
}
