//! Storage: the redb tables, the read side (never waits for the writer), and the
//! single writer that applies every mutation with group commit ([`writer`]).
//!
//! Values are versioned JSON records ([`records`]: the state row, events, timers,
//! definitions); keys are redb tuples so that range scans give history in event
//! order, tasks in queue order and timers in due order.

mod migrate;
pub(crate) mod records;
pub mod writer;

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};

use crate::clock::Millis;
use crate::error::ApiError;
use crate::model::{Event, RunState, RunStatus};
use records::{Definitions, decode_event, decode_run};

/// Everything about one run, in one table so that a transition dirties one B-tree:
/// (namespace, run id, [`STATE_SLOT`]) → run record, (namespace, run id, event id) →
/// event record, and (namespace, run id, [`CHECKPOINT_SLOT`]) → the last
/// heartbeat checkpoint of the step in flight.
pub(crate) const RUNS: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("runs");
/// The slot of a run's state row. Events are numbered from 1.
pub(crate) const STATE_SLOT: u64 = 0;
/// The slot of a run's checkpoint, after every event.
pub(crate) const CHECKPOINT_SLOT: u64 = u64::MAX;
/// (namespace, run id) of every open run: read at start to rebuild lease deadlines.
pub(crate) const OPEN_RUNS: TableDefinition<(&str, &str), ()> = TableDefinition::new("open_runs");
/// (namespace, queue, task seq) → run id: the ready tasks, rebuilt into matching at start.
pub(crate) const TASKS: TableDefinition<(&str, &str, u64), &str> = TableDefinition::new("tasks");
/// (due ms, seq) → timer record.
pub(crate) const TIMERS: TableDefinition<(i64, u64), &[u8]> = TableDefinition::new("timers");
/// (namespace, "start:" or "signal:" + request id) → run id.
pub(crate) const IDEMPOTENCY: TableDefinition<(&str, &str), &str> = TableDefinition::new("idempotency");
/// (namespace, start ms, run id): runs by start time, for listing.
pub(crate) const RUNS_BY_START: TableDefinition<(&str, i64, &str), ()> =
    TableDefinition::new("runs_by_start");
/// (namespace, parent run id, child run id): the session tree.
pub(crate) const CHILDREN: TableDefinition<(&str, &str, &str), ()> = TableDefinition::new("children");
/// Namespace name → settings JSON.
pub(crate) const NAMESPACES: TableDefinition<&str, &[u8]> = TableDefinition::new("namespaces");
/// (workflow id, version, content hash) → definition record: each definition a run
/// used, stored once; run records and `RunStarted` events name it by this key.
pub(crate) const DEFINITIONS: TableDefinition<records::DefinitionTableKey, &[u8]> =
    TableDefinition::new("definitions");
/// Name → value: the storage layout version (`schema`).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The table layout this build reads and writes. Layout 2 (serde images of the
/// model, a definition in every state row) is migrated at open ([`migrate`]).
const SCHEMA_VERSION: u64 = 3;

/// Errors opening the database.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open database {path}: {source}")]
    Database {
        path: String,
        source: redb::DatabaseError,
    },
    #[error("cannot initialise database {path}: {source}")]
    Init { path: String, source: ApiError },
    #[error(
        "cannot migrate database {path} from storage layout {from} to {SCHEMA_VERSION}: {source}; nothing was changed"
    )]
    Migrate {
        path: String,
        from: u64,
        source: ApiError,
    },
    #[error(
        "database {path} has storage layout {found}, this build reads layout {SCHEMA_VERSION}; \
         it was written by another version of Railyard (move the data directory away to start afresh)"
    )]
    Schema { path: String, found: u64 },
}

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
}

/// Read access to the database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    defs: Arc<Definitions>,
}

impl Store {
    /// Opens (or creates) `<dir>/railyard.redb` and makes sure every table and the
    /// `default` namespace exist.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        let path = dir.join("railyard.redb");
        let shown = path.display().to_string();
        let db = Database::create(&path).map_err(|source| OpenError::Database {
            path: shown.clone(),
            source,
        })?;
        let store = Self {
            db: Arc::new(db),
            defs: Arc::default(),
        };
        match store.schema() {
            Ok(None | Some(SCHEMA_VERSION)) => {}
            Ok(Some(from @ migrate::LAYOUT_2)) => {
                migrate::from_layout_2(&store.db, &store.defs).map_err(|source| OpenError::Migrate {
                    path: shown.clone(),
                    from,
                    source,
                })?;
            }
            Ok(Some(found)) => return Err(OpenError::Schema { path: shown, found }),
            Err(source) => return Err(OpenError::Init { path: shown, source }),
        }
        store
            .init()
            .map_err(|source| OpenError::Init { path: shown, source })?;
        Ok(store)
    }

    /// The stored layout version; `None` for a new, empty database.
    fn schema(&self) -> Result<Option<u64>, ApiError> {
        let tx = self.db.begin_read()?;
        let names: Vec<String> = tx.list_tables()?.map(|t| t.name().to_string()).collect();
        if names.is_empty() {
            return Ok(None);
        }
        // The first layout had no `meta` table.
        if !names.iter().any(|n| n == META.name()) {
            return Ok(Some(1));
        }
        let version = tx.open_table(META)?.get("schema")?.map(|v| v.value());
        Ok(Some(version.unwrap_or(1)))
    }

    fn init(&self) -> Result<(), ApiError> {
        let tx = self.db.begin_write()?;
        {
            tx.open_table(META)?.insert("schema", SCHEMA_VERSION)?;
            tx.open_table(RUNS)?;
            tx.open_table(OPEN_RUNS)?;
            tx.open_table(TASKS)?;
            tx.open_table(TIMERS)?;
            tx.open_table(IDEMPOTENCY)?;
            tx.open_table(RUNS_BY_START)?;
            tx.open_table(CHILDREN)?;
            tx.open_table(DEFINITIONS)?;
            let mut ns = tx.open_table(NAMESPACES)?;
            if ns.get(railyard_proto::DEFAULT_NAMESPACE)?.is_none() {
                ns.insert(railyard_proto::DEFAULT_NAMESPACE, b"{}".as_slice())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    /// The definition cache, shared with the writer.
    pub(crate) fn definitions(&self) -> &Arc<Definitions> {
        &self.defs
    }

    /// Names of every namespace.
    pub fn namespaces(&self) -> Result<Vec<String>, ApiError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(NAMESPACES)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            out.push(row?.0.value().to_string());
        }
        Ok(out)
    }

    /// The state row of a run.
    pub fn run(&self, ns: &str, run_id: &str) -> Result<Option<RunState>, ApiError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(RUNS)?;
        let defs = tx.open_table(DEFINITIONS)?;
        t.get((ns, run_id, STATE_SLOT))?
            .map(|v| decode_run(v.value(), &self.defs, &defs))
            .transpose()
    }

    /// Events `from..` of a run, at most `limit`.
    pub fn history(&self, ns: &str, run_id: &str, from: u64, limit: usize) -> Result<Vec<Event>, ApiError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(RUNS)?;
        let defs = tx.open_table(DEFINITIONS)?;
        let mut out = Vec::new();
        for row in t
            .range((ns, run_id, from.max(STATE_SLOT + 1))..(ns, run_id, CHECKPOINT_SLOT))?
            .take(limit)
        {
            out.push(decode_event(row?.1.value(), &self.defs, &defs)?);
        }
        Ok(out)
    }

    /// The last checkpoint of the run's step in flight (empty when none).
    pub fn checkpoint(&self, ns: &str, run_id: &str) -> Result<Vec<u8>, ApiError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(RUNS)?;
        Ok(t.get((ns, run_id, CHECKPOINT_SLOT))?
            .map(|v| v.value().to_vec())
            .unwrap_or_default())
    }

    /// Runs newest first, starting after the `(start ms, run id)` cursor.
    pub fn list_runs(
        &self,
        ns: &str,
        filter: &RunFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<(Vec<RunState>, Option<Cursor>), ApiError> {
        let tx = self.db.begin_read()?;
        let index = tx.open_table(RUNS_BY_START)?;
        let runs = tx.open_table(RUNS)?;
        let defs = tx.open_table(DEFINITIONS)?;
        let hi_ms = filter.started_before_ms.unwrap_or(i64::MAX);
        let lo_ms = filter.started_after_ms.unwrap_or(i64::MIN);
        let range = match &after {
            Some((ms, id)) => index.range((ns, lo_ms, "")..(ns, *ms, id.as_str()))?,
            None => index.range((ns, lo_ms, "")..(ns, hi_ms, ""))?,
        };
        let mut out = Vec::new();
        for row in range.rev() {
            let row = row?;
            let (_, ms, id) = row.0.value();
            let Some(v) = runs.get((ns, id, STATE_SLOT))? else {
                continue;
            };
            let run = decode_run(v.value(), &self.defs, &defs)?;
            let keep = filter.status.is_none_or(|s| s == run.status)
                && filter.workflow_id.as_ref().is_none_or(|w| *w == run.workflow_id)
                && filter
                    .parent_run_id
                    .as_ref()
                    .is_none_or(|p| *p == run.parent_run_id);
            if keep {
                out.push(run);
                if out.len() == limit {
                    return Ok((out, Some((ms, id.to_string()))));
                }
            }
        }
        Ok((out, None))
    }

    /// Ids of the runs started by `parent`.
    pub fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, ApiError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(CHILDREN)?;
        let mut out = Vec::new();
        for row in t.range((ns, parent, "")..=(ns, parent, "\u{10FFFF}"))? {
            out.push(row?.0.value().2.to_string());
        }
        Ok(out)
    }

    /// Every ready task, in queue order.
    pub fn ready_tasks(&self) -> Result<Vec<StoredTask>, ApiError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TASKS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let row = row?;
            let (namespace, queue, task_seq) = row.0.value();
            out.push(StoredTask {
                namespace: namespace.into(),
                queue: queue.into(),
                task_seq,
                run_id: row.1.value().into(),
            });
        }
        Ok(out)
    }

    /// The lease deadline of every open run with a step in flight:
    /// (due, namespace, run id, lease).
    pub fn lease_deadlines(&self) -> Result<Vec<(Millis, String, String, u64)>, ApiError> {
        let tx = self.db.begin_read()?;
        let open = tx.open_table(OPEN_RUNS)?;
        let runs = tx.open_table(RUNS)?;
        let defs = tx.open_table(DEFINITIONS)?;
        let mut out = Vec::new();
        for row in open.iter()? {
            let row = row?;
            let (ns, id) = row.0.value();
            let Some(v) = runs.get((ns, id, STATE_SLOT))? else {
                continue;
            };
            let run = decode_run(v.value(), &self.defs, &defs)?;
            if let Some((due, lease)) = run.lease_deadline() {
                out.push((due, ns.to_string(), id.to_string(), lease));
            }
        }
        Ok(out)
    }

    /// Due time of the earliest timer.
    pub fn next_timer_due(&self) -> Result<Option<Millis>, ApiError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TIMERS)?;
        Ok(t.first()?.map(|(k, _)| k.value().0))
    }

    /// The highest task or timer sequence number in use. Sequence numbers only need
    /// to be unique among rows that exist, so the counter is derived at start rather
    /// than written on every commit.
    pub(crate) fn next_seq(&self) -> Result<u64, ApiError> {
        let tx = self.db.begin_read()?;
        let mut max = 0;
        for row in tx.open_table(TASKS)?.iter()? {
            max = max.max(row?.0.value().2);
        }
        for row in tx.open_table(TIMERS)?.iter()? {
            max = max.max(row?.0.value().1);
        }
        Ok(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_of_another_layout_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("railyard.redb");
        // The first layout: `runs` keyed by (namespace, run id), no `meta` table.
        {
            let db = Database::create(&path).unwrap();
            let tx = db.begin_write().unwrap();
            let old: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("runs");
            tx.open_table(old)
                .unwrap()
                .insert(("default", "r1"), b"{}".as_slice())
                .unwrap();
            tx.commit().unwrap();
        }
        let err = Store::open(dir.path()).err().expect("an old layout is refused");
        let msg = err.to_string();
        assert!(
            msg.contains("storage layout 1") && msg.contains("railyard.redb"),
            "{msg}"
        );
        // Refusing changed nothing: no table was added and the old row is there.
        let db = Database::create(&path).unwrap();
        let tx = db.begin_read().unwrap();
        let names: Vec<String> = tx.list_tables().unwrap().map(|t| t.name().to_string()).collect();
        assert_eq!(names, ["runs"]);
        let old: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("runs");
        assert!(
            tx.open_table(old)
                .unwrap()
                .get(("default", "r1"))
                .unwrap()
                .is_some()
        );

        // A new database is created with the current layout and opens again.
        let fresh = tempfile::tempdir().unwrap();
        drop(Store::open(fresh.path()).unwrap());
        let store = Store::open(fresh.path()).unwrap();
        assert_eq!(store.schema().unwrap(), Some(SCHEMA_VERSION));
    }
}
