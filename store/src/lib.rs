//! Storage: the boundary the server reaches it through ([`backend`]), its two
//! implementations here (the redb file, [`redb_backend`], and an in-memory reference,
//! [`memory`]; PostgreSQL's is the `railyard-store-postgres` crate, over the same
//! [`records`]), and the read side ([`Store`], never waits for the writer). The
//! single writer that applies every mutation with group commit is the server's.
//!
//! [`StorageError`] names no backend's types: each backend turns its own errors
//! into it.
//!
//! The redb backend stores explicit, versioned records ([`records`]: the state row,
//! events, timers, definitions) and migrates older layouts at open (`redb_backend::migrate`).

pub mod backend;
#[cfg(any(test, feature = "testing"))]
pub mod counting;
pub mod dump;
pub mod error;
pub mod listing;
#[cfg(test)]
mod listing_attr_tests;
#[cfg(test)]
mod listing_tests;
pub mod memory;
pub mod output;

pub mod records;
pub mod redb_backend;

use railyard_model::RunKey;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub use backend::{
    Backend, BackendStats, BatchReads, BatchWrites, CheckpointAt, CheckpointDigest, CheckpointHead,
    CheckpointPage, ClaimStats, PoolStats, SharedKeys, Snapshot, WorkflowReads, WorkflowWrites, WriteTx,
};

pub use error::StorageError;
use railyard_model::Millis;
use railyard_model::run::{Event, RunState, RunStatus};

/// A ready task as stored, for rebuilding matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTask {
    pub namespace: String,
    pub queue: String,
    pub task_seq: u64,
    pub run_id: String,
}

/// Where a run listing left off: the last run's start time and id.
pub type Cursor = (Millis, String);

/// Filters of a run listing.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub workflow_id: Option<String>,
    pub parent_run_id: Option<String>,
    pub started_after_ms: Option<Millis>,
    pub started_before_ms: Option<Millis>,
    /// Only runs whose agents reported an issue (`report_issue`).
    pub has_issues: bool,
    /// A parsed list query ([`railyard_model::query`]), beside the fields above.
    pub query: Option<railyard_model::query::Query>,
}

/// Read access to the database, over any [`Backend`]. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// Live output, apart from the history ([`output`]).
    output: Arc<dyn output::OutputStore>,
}

impl Store {
    /// Opens (or creates) `<dir>/railyard.redb` and makes sure every table and the
    /// `default` namespace exist.
    pub fn open(dir: &Path) -> Result<Self, redb_backend::OpenError> {
        Self::open_with_cache(dir, redb_backend::DEFAULT_CACHE_BYTES)
    }

    /// [`Store::open`] with a page cache of at most `cache_bytes`.
    /// Live output goes to `<dir>/output.redb` beside it ([`output::redb`]), with a
    /// page cache of a quarter of `cache_bytes`.
    pub fn open_with_cache(dir: &Path, cache_bytes: usize) -> Result<Self, redb_backend::OpenError> {
        let backend = redb_backend::RedbBackend::open_with_cache(dir, cache_bytes)?;
        let output = output::redb::RedbOutput::open(dir, cache_bytes / 4)?;
        Ok(Self::new(Arc::new(backend)).with_output(Arc::new(output)))
    }

    /// A store over `backend` (the in-memory one in tests), its live output kept in
    /// memory until [`Store::with_output`] says where.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            output: Arc::new(output::MemoryOutput::default()),
        }
    }

    /// This store with its live output kept in `output`.
    pub fn with_output(mut self, output: Arc<dyn output::OutputStore>) -> Self {
        self.output = output;
        self
    }

    /// Live output storage.
    pub fn output(&self) -> &Arc<dyn output::OutputStore> {
        &self.output
    }

    /// The backend, for the writer.
    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// A read snapshot of the whole store.
    pub fn snapshot(&self) -> Result<Box<dyn Snapshot>, StorageError> {
        self.backend.snapshot()
    }

    /// Names of every namespace.
    pub fn namespaces(&self) -> Result<Vec<String>, StorageError> {
        self.snapshot()?.namespaces()
    }

    /// One namespace.
    pub fn namespace(
        &self,
        name: &str,
    ) -> Result<Option<railyard_model::namespace::Namespace>, StorageError> {
        self.snapshot()?.namespace(name)
    }

    /// The state row of a run.
    pub fn run(&self, key: &RunKey) -> Result<Option<RunState>, StorageError> {
        self.snapshot()?.run(key)
    }

    /// Events `from..` of a run, at most `limit`.
    pub fn history(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        self.snapshot()?.history(key, from, limit)
    }

    /// The last checkpoint of the run's current step (empty when none): the one in
    /// flight, or for a closed run the one it closed on.
    pub fn checkpoint(&self, key: &RunKey) -> Result<Vec<u8>, StorageError> {
        let snap = self.snapshot()?;
        let Some(run) = snap.run(key)? else {
            return Ok(Vec::new());
        };
        let at = snap.checkpoint_in_flight_at(key, run.current_step)?;
        snap.checkpoint(key, at)
    }

    /// Runs newest first, starting after the `(start ms, run id)` cursor.
    pub fn list_runs(
        &self,
        ns: &str,
        filter: &RunFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<(Vec<RunState>, Option<Cursor>), StorageError> {
        self.list_runs_within(ns, filter, after, limit, usize::MAX, &|_| 0)
    }

    /// Runs newest first, starting after the cursor: at most `limit` of them, and
    /// no more than fit in `max_bytes` as `weigh` counts them (always at least one).
    /// The cursor returned is the last run's when more may follow.
    pub fn list_runs_within(
        &self,
        ns: &str,
        filter: &RunFilter,
        after: Option<Cursor>,
        limit: usize,
        max_bytes: usize,
        weigh: &dyn Fn(&RunState) -> usize,
    ) -> Result<(Vec<RunState>, Option<Cursor>), StorageError> {
        let (runs, next, _) = self.list_runs_counted(ns, filter, after, limit, max_bytes, weigh)?;
        Ok((runs, next))
    }

    /// [`Store::list_runs_within`], and what it read ([`listing::ListStats`]): served
    /// from the most selective index the filter allows ([`listing`]).
    pub fn list_runs_counted(
        &self,
        ns: &str,
        filter: &RunFilter,
        after: Option<Cursor>,
        limit: usize,
        max_bytes: usize,
        weigh: &dyn Fn(&RunState) -> usize,
    ) -> Result<(Vec<RunState>, Option<Cursor>, listing::ListStats), StorageError> {
        let bounds = listing::Bounds {
            limit,
            max_bytes,
            max_rows: u64::MAX,
        };
        listing::list(&*self.snapshot()?, ns, filter, after, bounds, weigh)
    }

    /// [`Store::list_runs_counted`] reading at most `max_rows` rows from one index: a
    /// page may then hold fewer runs than `limit` (even none) and a cursor to go on.
    pub fn list_runs_bounded(
        &self,
        ns: &str,
        filter: &RunFilter,
        after: Option<Cursor>,
        bounds: listing::Bounds,
        weigh: &dyn Fn(&RunState) -> usize,
    ) -> Result<(Vec<RunState>, Option<Cursor>, listing::ListStats), StorageError> {
        listing::list(&*self.snapshot()?, ns, filter, after, bounds, weigh)
    }

    /// Counts the runs that pass `filter`, grouped by `group_by` when given.
    pub fn count_runs(
        &self,
        ns: &str,
        filter: &RunFilter,
        group_by: Option<&railyard_model::query::Field>,
    ) -> Result<listing::RunCount, StorageError> {
        listing::count(&*self.snapshot()?, ns, filter, group_by)
    }

    /// Ids of the runs started by `parent`.
    /// Closed runs of `ns` closed at or before `up_to_ms`, after `after`, oldest
    /// first, at most `limit` (the retention purge's candidates).
    pub fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError> {
        self.snapshot()?.closed_runs(ns, after, up_to_ms, limit)
    }

    pub fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
        self.snapshot()?.children(ns, parent)
    }

    /// Every ready task, in queue order.
    pub fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
        self.snapshot()?.ready_tasks()
    }

    /// The lease deadline of every open run with a step in flight:
    /// (due, namespace, run id, lease).
    pub fn lease_deadlines(&self) -> Result<Vec<(Millis, String, String, u64)>, StorageError> {
        let mut out = Vec::new();
        self.snapshot()?.open_runs(&mut |run| {
            if let Some((due, lease)) = run.lease_deadline() {
                out.push((due, run.namespace, run.run_id, lease));
            }
        })?;
        Ok(out)
    }

    /// Open runs per namespace, every namespace listed (zero included), for `/metrics`.
    /// Reads every key of `open_runs`: fine for a scrape, not for a request path.
    pub fn open_run_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        self.snapshot()?.open_run_counts()
    }

    /// Schedules per namespace.
    pub fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        self.snapshot()?.schedule_counts()
    }

    /// A schedule.
    pub fn schedule(
        &self,
        ns: &str,
        schedule_id: &str,
    ) -> Result<Option<railyard_model::schedule::Schedule>, StorageError> {
        self.snapshot()?.schedule(ns, schedule_id)
    }

    /// Up to `limit` schedules of `ns` whose ids sort after `after`, in id order.
    pub fn schedules(
        &self,
        ns: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<railyard_model::schedule::Schedule>, StorageError> {
        let mut out = Vec::new();
        self.snapshot()?.schedules(ns, after, &mut |s| {
            out.push(s);
            out.len() < limit
        })?;
        Ok(out)
    }

    /// A trigger.
    pub fn trigger(
        &self,
        ns: &str,
        trigger_id: &str,
    ) -> Result<Option<railyard_model::trigger::Trigger>, StorageError> {
        self.snapshot()?.trigger(ns, trigger_id)
    }

    /// Up to `limit` triggers of `ns` whose ids sort after `after`, in id order.
    pub fn triggers(
        &self,
        ns: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<railyard_model::trigger::Trigger>, StorageError> {
        let mut out = Vec::new();
        self.snapshot()?.triggers(Some(ns), after, &mut |t| {
            out.push(t);
            out.len() < limit
        })?;
        Ok(out)
    }

    /// The API key stored under `key_id`.
    pub fn api_key(&self, key_id: &str) -> Result<Option<railyard_model::auth::ApiKey>, StorageError> {
        self.snapshot()?.api_key(key_id)
    }

    /// API keys with ids after `after`, in id order, that `keep` accepts; at most
    /// `limit`. The second value is the id to continue after, when there may be more.
    pub fn api_keys(
        &self,
        after: &str,
        limit: usize,
        keep: impl Fn(&railyard_model::auth::ApiKey) -> bool,
    ) -> Result<(Vec<railyard_model::auth::ApiKey>, Option<String>), StorageError> {
        let mut out = Vec::new();
        let mut next = None;
        self.snapshot()?.api_keys(after, &mut |key| {
            if keep(&key) {
                out.push(key);
                if out.len() == limit {
                    next = out.last().map(|k| k.key_id.clone());
                    return false;
                }
            }
            true
        })?;
        Ok((out, next))
    }

    /// Due time of the earliest timer.
    pub fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
        self.snapshot()?.next_timer_due()
    }

    /// The highest task or timer sequence number in use. Sequence numbers only need
    /// to be unique among rows that exist, so the counter is derived at start rather
    /// than written on every commit.
    pub fn next_seq(&self) -> Result<u64, StorageError> {
        self.snapshot()?.max_seq()
    }
}
