//! The redb backend: the tables, their layout version, the migration of older
//! layouts at open ([`super::migrate`]), and every conversion of a model type into a
//! row (through [`super::records`], and nowhere else).
//!
//! Values are versioned JSON records (the state row, events, timers, definitions);
//! keys are redb tuples so that range scans give history in event order, tasks in
//! queue order and timers in due order.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use redb::{
    Database, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable, Table, TableDefinition,
    TableHandle, WriteTransaction,
};

mod triggers;

use super::backend::{Backend, DueTimer, Snapshot, TimerKey, WriteTx};
use super::records::{self, DefinitionTableKey, Definitions};
use super::{OpenError, StoredTask, migrate};
use crate::auth::ApiKey;
use crate::clock::Millis;
use crate::error::StorageError;
use crate::model::{Event, EventKind, RunState, Timer};
use crate::namespace::Namespace;

mod purge;

pub(crate) use purge::RUNS_BY_CLOSE;

/// Everything about one run, in one table so that a transition dirties one B-tree:
/// (namespace, run id, [`STATE_SLOT`]) → run record, (namespace, run id, event id) →
/// event record, and (namespace, run id, [`CHECKPOINT_SLOT`]) → the last heartbeat
/// checkpoint of the step in flight.
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
/// Namespace name → namespace record.
pub(crate) const NAMESPACES: TableDefinition<&str, &[u8]> = TableDefinition::new("namespaces");
/// (workflow id, version, content hash) → definition record: each definition a run
/// used, stored once; run records and `RunStarted` events name it by this key.
pub(crate) const DEFINITIONS: TableDefinition<DefinitionTableKey, &[u8]> =
    TableDefinition::new("definitions");
/// (namespace, schedule id) → schedule record. Due schedules are found through
/// their `timers` row, never by scanning this table.
pub(crate) const SCHEDULES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("schedules");
/// Key id → API key record (hash, namespace, role, expiry, revocation). Added to
/// layout 3 without a new layout version: an older file gets the empty table at open.
pub(crate) const API_KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("api_keys");
/// Name → value: the storage layout version (`schema`).
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The table layout this build reads and writes. Layout 2 (serde images of the
/// model, a definition in every state row) is migrated at open ([`migrate`]).
pub(crate) const SCHEMA_VERSION: u64 = 3;

/// Creates the database file readable and writable by its owner only (mode 0600), or
/// narrows an existing one to that: it holds every run's goal, context and results.
fn make_private(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta = std::fs::metadata(path)?;
                if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// The database file `<data-dir>/railyard.redb`.
pub struct RedbBackend {
    db: Database,
    /// Definitions by content, shared by every snapshot and write transaction, so
    /// that decoding a run does not parse its definition again.
    defs: Arc<Definitions>,
}

impl RedbBackend {
    /// Opens (or creates) `<dir>/railyard.redb`, migrates a file of layout 2 (in one
    /// transaction: on failure nothing changes), refuses a file of another layout,
    /// and makes sure every table and the `default` namespace exist.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        let path = dir.join("railyard.redb");
        let shown = path.display().to_string();
        make_private(&path).map_err(|source| OpenError::Permissions {
            path: shown.clone(),
            source,
        })?;
        let db = Database::create(&path).map_err(|source| OpenError::Database {
            path: shown.clone(),
            source,
        })?;
        let backend = Self {
            db,
            defs: Arc::default(),
        };
        match backend.schema() {
            Ok(None | Some(SCHEMA_VERSION)) => {}
            Ok(Some(from @ migrate::LAYOUT_2)) => {
                migrate::from_layout_2(&backend.db, &backend.defs).map_err(|source| OpenError::Migrate {
                    path: shown.clone(),
                    from,
                    source,
                })?;
            }
            Ok(Some(found)) => return Err(OpenError::Schema { path: shown, found }),
            Err(source) => return Err(OpenError::Init { path: shown, source }),
        }
        backend
            .init()
            .and_then(|()| purge::build_close_index(&backend.db, &backend.defs))
            .map_err(|source| OpenError::Init { path: shown, source })?;
        Ok(backend)
    }

    /// The database, for tests that look at the rows themselves.
    #[cfg(test)]
    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    /// The stored layout version; `None` for a new, empty database.
    pub(crate) fn schema(&self) -> Result<Option<u64>, StorageError> {
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

    fn init(&self) -> Result<(), StorageError> {
        let tx = self.db.begin_write()?;
        {
            tx.open_table(META)?.insert("schema", SCHEMA_VERSION)?;
            tx.open_table(RUNS)?;
            tx.open_table(OPEN_RUNS)?;
            tx.open_table(TASKS)?;
            tx.open_table(TIMERS)?;
            tx.open_table(IDEMPOTENCY)?;
            tx.open_table(RUNS_BY_START)?;
            tx.open_table(RUNS_BY_CLOSE)?;
            tx.open_table(CHILDREN)?;
            tx.open_table(DEFINITIONS)?;
            tx.open_table(SCHEDULES)?;
            tx.open_table(API_KEYS)?;
            triggers::create_tables(&tx)?;
            let mut ns = tx.open_table(NAMESPACES)?;
            if ns.get(railyard_proto::DEFAULT_NAMESPACE)?.is_none() {
                ns.insert(railyard_proto::DEFAULT_NAMESPACE, b"{}".as_slice())?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

impl Backend for RedbBackend {
    fn snapshot(&self) -> Result<Box<dyn Snapshot>, StorageError> {
        Ok(Box::new(RedbSnapshot {
            tx: self.db.begin_read()?,
            defs: self.defs.clone(),
        }))
    }

    fn write(
        &self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let tx = self.db.begin_write()?;
        {
            // Every table the writer may change, opened once per transaction.
            let mut t = RedbTx {
                tx: &tx,
                runs: tx.open_table(RUNS)?,
                open_runs: tx.open_table(OPEN_RUNS)?,
                tasks: tx.open_table(TASKS)?,
                timers: tx.open_table(TIMERS)?,
                idempotency: tx.open_table(IDEMPOTENCY)?,
                by_start: tx.open_table(RUNS_BY_START)?,
                by_close: tx.open_table(RUNS_BY_CLOSE)?,
                children: tx.open_table(CHILDREN)?,
                definitions: tx.open_table(DEFINITIONS)?,
                schedules: tx.open_table(SCHEDULES)?,
                defs: &self.defs,
            };
            // On error the transaction is dropped, which aborts it.
            f(&mut t)?;
        }
        tx.commit()?;
        Ok(())
    }
}

// The reads, written once over redb's `ReadableTable` so that the snapshot and the
// write transaction share them.

type RunsKey = (&'static str, &'static str, u64);

/// The `runs` table with what decoding its rows needs: the definition cache, and
/// the `definitions` table for a definition the cache has not seen yet.
struct RunRows<'a, R, D> {
    rows: &'a R,
    defs: &'a Definitions,
    definitions: &'a D,
}

impl<R, D> RunRows<'_, R, D>
where
    R: ReadableTable<RunsKey, &'static [u8]>,
    D: ReadableTable<DefinitionTableKey, &'static [u8]>,
{
    fn run(&self, ns: &str, run_id: &str) -> Result<Option<RunState>, StorageError> {
        self.rows
            .get((ns, run_id, STATE_SLOT))?
            .map(|v| records::decode_run(v.value(), self.defs, self.definitions))
            .transpose()
    }

    fn history(&self, ns: &str, run_id: &str, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        let mut out = Vec::new();
        for row in self
            .rows
            .range((ns, run_id, from.max(STATE_SLOT + 1))..(ns, run_id, CHECKPOINT_SLOT))?
            .take(limit)
        {
            out.push(records::decode_event(
                row?.1.value(),
                self.defs,
                self.definitions,
            )?);
        }
        Ok(out)
    }
}

fn checkpoint_in(
    t: &impl ReadableTable<RunsKey, &'static [u8]>,
    ns: &str,
    run_id: &str,
) -> Result<Vec<u8>, StorageError> {
    Ok(t.get((ns, run_id, CHECKPOINT_SLOT))?
        .map(|v| v.value().to_vec())
        .unwrap_or_default())
}

fn runs_by_start_in(
    index: &impl ReadableTable<(&'static str, i64, &'static str), ()>,
    runs: &RunRows<
        '_,
        impl ReadableTable<RunsKey, &'static [u8]>,
        impl ReadableTable<DefinitionTableKey, &'static [u8]>,
    >,
    ns: &str,
    from_ms: Millis,
    before: (Millis, &str),
    visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
) -> Result<(), StorageError> {
    for row in index.range((ns, from_ms, "")..(ns, before.0, before.1))?.rev() {
        let row = row?;
        let (_, ms, id) = row.0.value();
        let Some(run) = runs.run(ns, id)? else {
            continue;
        };
        if !visit(ms, id, run) {
            break;
        }
    }
    Ok(())
}

fn children_in(
    t: &impl ReadableTable<(&'static str, &'static str, &'static str), ()>,
    ns: &str,
    parent: &str,
) -> Result<Vec<String>, StorageError> {
    let mut out = Vec::new();
    for row in t.range((ns, parent, "")..=(ns, parent, "\u{10FFFF}"))? {
        out.push(row?.0.value().2.to_string());
    }
    Ok(out)
}

fn ready_tasks_in(
    t: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
) -> Result<Vec<StoredTask>, StorageError> {
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

fn open_runs_in(
    open: &impl ReadableTable<(&'static str, &'static str), ()>,
    runs: &RunRows<
        '_,
        impl ReadableTable<RunsKey, &'static [u8]>,
        impl ReadableTable<DefinitionTableKey, &'static [u8]>,
    >,
    visit: &mut dyn FnMut(RunState),
) -> Result<(), StorageError> {
    for row in open.iter()? {
        let row = row?;
        let (ns, id) = row.0.value();
        if let Some(run) = runs.run(ns, id)? {
            visit(run);
        }
    }
    Ok(())
}

fn next_timer_due_in(
    t: &impl ReadableTable<TimerKey, &'static [u8]>,
) -> Result<Option<Millis>, StorageError> {
    Ok(t.first()?.map(|(k, _)| k.value().0))
}

fn due_timers_in(
    t: &impl ReadableTable<TimerKey, &'static [u8]>,
    now: Millis,
    max: usize,
) -> Result<Vec<DueTimer>, StorageError> {
    let mut out = Vec::new();
    for row in t.range(..=(now, u64::MAX))?.take(max) {
        let row = row?;
        out.push((row.0.value(), records::decode_timer(row.1.value())));
    }
    Ok(out)
}

fn namespaces_in(t: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<Vec<String>, StorageError> {
    let mut out = Vec::new();
    for row in t.iter()? {
        out.push(row?.0.value().to_string());
    }
    Ok(out)
}

fn namespace_in(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<Option<Namespace>, StorageError> {
    t.get(name)?
        .map(|v| records::decode_namespace(name, v.value()))
        .transpose()
}

fn idempotency_in(
    t: &impl ReadableTable<(&'static str, &'static str), &'static str>,
    ns: &str,
    key: &str,
) -> Result<Option<String>, StorageError> {
    Ok(t.get((ns, key))?.map(|v| v.value().to_string()))
}

// Sequence numbers only need to be unique among rows that exist, so the counter is
// derived at start rather than written on every commit.
fn max_seq_in(
    tasks: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
    timers: &impl ReadableTable<TimerKey, &'static [u8]>,
) -> Result<u64, StorageError> {
    let mut max = 0;
    for row in tasks.iter()? {
        max = max.max(row?.0.value().2);
    }
    for row in timers.iter()? {
        max = max.max(row?.0.value().1);
    }
    Ok(max)
}

type SchedulesTable = (&'static str, &'static str);

fn schedule_in(
    t: &impl ReadableTable<SchedulesTable, &'static [u8]>,
    ns: &str,
    id: &str,
) -> Result<Option<crate::schedule::Schedule>, StorageError> {
    t.get((ns, id))?
        .map(|v| records::decode_schedule(v.value()))
        .transpose()
}

fn schedules_in(
    t: &impl ReadableTable<SchedulesTable, &'static [u8]>,
    ns: &str,
    after: &str,
    visit: &mut dyn FnMut(crate::schedule::Schedule) -> bool,
) -> Result<(), StorageError> {
    use std::ops::Bound;
    let range = t.range::<(&str, &str)>((Bound::Excluded((ns, after)), Bound::Unbounded))?;
    for row in range {
        let (k, v) = row?;
        if k.value().0 != ns {
            break;
        }
        if !visit(records::decode_schedule(v.value())?) {
            break;
        }
    }
    Ok(())
}

fn api_key_in(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    key_id: &str,
) -> Result<Option<ApiKey>, StorageError> {
    t.get(key_id)?
        .map(|v| records::decode_api_key(v.value()))
        .transpose()
}

fn api_keys_in(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    after: &str,
    visit: &mut dyn FnMut(ApiKey) -> bool,
) -> Result<(), StorageError> {
    use std::ops::Bound;
    for row in t.range::<&str>((Bound::Excluded(after), Bound::Unbounded))? {
        if !visit(records::decode_api_key(row?.1.value())?) {
            break;
        }
    }
    Ok(())
}

fn schedule_counts_in(
    t: &impl ReadableTable<SchedulesTable, &'static [u8]>,
) -> Result<BTreeMap<String, u64>, StorageError> {
    let mut counts = BTreeMap::new();
    for row in t.iter()? {
        *counts.entry(row?.0.value().0.to_string()).or_insert(0) += 1;
    }
    Ok(counts)
}

type ReadRunRows<'a> =
    RunRows<'a, ReadOnlyTable<RunsKey, &'static [u8]>, ReadOnlyTable<DefinitionTableKey, &'static [u8]>>;

/// A read transaction; each read opens the tables it needs.
struct RedbSnapshot {
    tx: ReadTransaction,
    defs: Arc<Definitions>,
}

impl RedbSnapshot {
    /// Runs `f` over the `runs` table, ready to decode its rows.
    fn with_runs<T>(
        &self,
        f: impl FnOnce(&ReadRunRows<'_>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let rows = self.tx.open_table(RUNS)?;
        let definitions = self.tx.open_table(DEFINITIONS)?;
        f(&RunRows {
            rows: &rows,
            defs: &self.defs,
            definitions: &definitions,
        })
    }
}

impl Snapshot for RedbSnapshot {
    fn open_run_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        let mut counts = BTreeMap::new();
        for ns in namespaces_in(&self.tx.open_table(NAMESPACES)?)? {
            counts.insert(ns, 0);
        }
        for row in self.tx.open_table(OPEN_RUNS)?.iter()? {
            let row = row?;
            *counts.entry(row.0.value().0.to_string()).or_insert(0) += 1;
        }
        Ok(counts)
    }

    fn run(&self, ns: &str, run_id: &str) -> Result<Option<RunState>, StorageError> {
        self.with_runs(|runs| runs.run(ns, run_id))
    }

    fn history(&self, ns: &str, run_id: &str, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        self.with_runs(|runs| runs.history(ns, run_id, from, limit))
    }

    fn checkpoint(&self, ns: &str, run_id: &str) -> Result<Vec<u8>, StorageError> {
        checkpoint_in(&self.tx.open_table(RUNS)?, ns, run_id)
    }

    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        let index = self.tx.open_table(RUNS_BY_START)?;
        self.with_runs(|runs| runs_by_start_in(&index, runs, ns, from_ms, before, visit))
    }

    fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
        children_in(&self.tx.open_table(CHILDREN)?, ns, parent)
    }

    fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
        ready_tasks_in(&self.tx.open_table(TASKS)?)
    }

    fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError> {
        let open = self.tx.open_table(OPEN_RUNS)?;
        self.with_runs(|runs| open_runs_in(&open, runs, visit))
    }

    fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
        next_timer_due_in(&self.tx.open_table(TIMERS)?)
    }

    fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError> {
        due_timers_in(&self.tx.open_table(TIMERS)?, now, max)
    }

    fn namespaces(&self) -> Result<Vec<String>, StorageError> {
        namespaces_in(&self.tx.open_table(NAMESPACES)?)
    }

    fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError> {
        namespace_in(&self.tx.open_table(NAMESPACES)?, name)
    }

    fn idempotency(&self, ns: &str, key: &str) -> Result<Option<String>, StorageError> {
        idempotency_in(&self.tx.open_table(IDEMPOTENCY)?, ns, key)
    }

    fn max_seq(&self) -> Result<u64, StorageError> {
        max_seq_in(&self.tx.open_table(TASKS)?, &self.tx.open_table(TIMERS)?)
    }

    fn schedule(&self, ns: &str, id: &str) -> Result<Option<crate::schedule::Schedule>, StorageError> {
        schedule_in(&self.tx.open_table(SCHEDULES)?, ns, id)
    }

    fn schedules(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(crate::schedule::Schedule) -> bool,
    ) -> Result<(), StorageError> {
        schedules_in(&self.tx.open_table(SCHEDULES)?, ns, after, visit)
    }

    fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        schedule_counts_in(&self.tx.open_table(SCHEDULES)?)
    }

    fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError> {
        purge::closed_runs_in(&self.tx.open_table(RUNS_BY_CLOSE)?, ns, after, up_to_ms, limit)
    }

    fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
        api_key_in(&self.tx.open_table(API_KEYS)?, key_id)
    }

    fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError> {
        api_keys_in(&self.tx.open_table(API_KEYS)?, after, visit)
    }
}

/// The open write transaction's tables.
struct RedbTx<'t> {
    tx: &'t WriteTransaction,
    runs: Table<'t, RunsKey, &'static [u8]>,
    open_runs: Table<'t, (&'static str, &'static str), ()>,
    tasks: Table<'t, (&'static str, &'static str, u64), &'static str>,
    timers: Table<'t, TimerKey, &'static [u8]>,
    idempotency: Table<'t, (&'static str, &'static str), &'static str>,
    by_start: Table<'t, (&'static str, i64, &'static str), ()>,
    by_close: Table<'t, (&'static str, i64, &'static str), ()>,
    children: Table<'t, (&'static str, &'static str, &'static str), ()>,
    /// Written only when a start uses a definition new to storage.
    definitions: Table<'t, DefinitionTableKey, &'static [u8]>,
    schedules: Table<'t, (&'static str, &'static str), &'static [u8]>,
    defs: &'t Definitions,
}

type WriteRunRows<'a, 't> =
    RunRows<'a, Table<'t, RunsKey, &'static [u8]>, Table<'t, DefinitionTableKey, &'static [u8]>>;

impl<'t> RedbTx<'t> {
    /// The `runs` table, ready to decode its rows.
    fn rows(&self) -> WriteRunRows<'_, 't> {
        RunRows {
            rows: &self.runs,
            defs: self.defs,
            definitions: &self.definitions,
        }
    }
}

impl Snapshot for RedbTx<'_> {
    fn run(&self, ns: &str, run_id: &str) -> Result<Option<RunState>, StorageError> {
        self.rows().run(ns, run_id)
    }

    fn history(&self, ns: &str, run_id: &str, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        self.rows().history(ns, run_id, from, limit)
    }

    fn checkpoint(&self, ns: &str, run_id: &str) -> Result<Vec<u8>, StorageError> {
        checkpoint_in(&self.runs, ns, run_id)
    }

    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        runs_by_start_in(&self.by_start, &self.rows(), ns, from_ms, before, visit)
    }

    fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
        children_in(&self.children, ns, parent)
    }

    fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
        ready_tasks_in(&self.tasks)
    }

    fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError> {
        open_runs_in(&self.open_runs, &self.rows(), visit)
    }

    fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
        next_timer_due_in(&self.timers)
    }

    fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError> {
        due_timers_in(&self.timers, now, max)
    }

    fn namespaces(&self) -> Result<Vec<String>, StorageError> {
        // Not among the tables the writer opens: opened only if asked.
        namespaces_in(&self.tx.open_table(NAMESPACES)?)
    }

    fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError> {
        namespace_in(&self.tx.open_table(NAMESPACES)?, name)
    }

    fn idempotency(&self, ns: &str, key: &str) -> Result<Option<String>, StorageError> {
        idempotency_in(&self.idempotency, ns, key)
    }

    fn max_seq(&self) -> Result<u64, StorageError> {
        max_seq_in(&self.tasks, &self.timers)
    }

    fn schedule(&self, ns: &str, id: &str) -> Result<Option<crate::schedule::Schedule>, StorageError> {
        schedule_in(&self.schedules, ns, id)
    }

    fn schedules(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(crate::schedule::Schedule) -> bool,
    ) -> Result<(), StorageError> {
        schedules_in(&self.schedules, ns, after, visit)
    }

    fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        schedule_counts_in(&self.schedules)
    }

    fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError> {
        purge::closed_runs_in(&self.by_close, ns, after, up_to_ms, limit)
    }

    // Keys are not among the tables the writer opens: opened only if asked.
    fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
        api_key_in(&self.tx.open_table(API_KEYS)?, key_id)
    }

    fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError> {
        api_keys_in(&self.tx.open_table(API_KEYS)?, after, visit)
    }
}

impl WriteTx for RedbTx<'_> {
    fn save_run(&mut self, run: &RunState, events: &[Event]) -> Result<(), StorageError> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        for ev in events {
            if let EventKind::RunStarted { definition, .. } = &ev.kind {
                // A new run: its definition's row, in this same transaction (the
                // check is of the table, not the cache, so a failed batch cannot
                // leave a run naming a definition that is not stored).
                self.defs.store(definition, &mut self.definitions)?;
            }
            let row = records::encode_event(ev, self.defs)?;
            self.runs.insert((ns, id, ev.id), row.as_slice())?;
        }
        let row = records::encode_run(run, self.defs)?;
        self.runs.insert((ns, id, STATE_SLOT), row.as_slice())?;
        Ok(())
    }

    fn set_checkpoint(&mut self, ns: &str, run_id: &str, bytes: Option<&[u8]>) -> Result<(), StorageError> {
        match bytes {
            Some(bytes) => self.runs.insert((ns, run_id, CHECKPOINT_SLOT), bytes)?,
            None => self.runs.remove((ns, run_id, CHECKPOINT_SLOT))?,
        };
        Ok(())
    }

    fn set_open(&mut self, ns: &str, run_id: &str, open: bool) -> Result<(), StorageError> {
        if open {
            self.open_runs.insert((ns, run_id), ())?;
        } else {
            self.open_runs.remove((ns, run_id))?;
        }
        Ok(())
    }

    fn insert_task(&mut self, ns: &str, queue: &str, seq: u64, run_id: &str) -> Result<(), StorageError> {
        self.tasks.insert((ns, queue, seq), run_id)?;
        Ok(())
    }

    fn remove_task(&mut self, ns: &str, queue: &str, seq: u64) -> Result<(), StorageError> {
        self.tasks.remove((ns, queue, seq))?;
        Ok(())
    }

    fn insert_timer(&mut self, key: TimerKey, timer: &Timer) -> Result<(), StorageError> {
        self.timers
            .insert(key, records::encode_timer(timer)?.as_slice())?;
        Ok(())
    }

    fn remove_timer(&mut self, key: TimerKey) -> Result<(), StorageError> {
        self.timers.remove(key)?;
        Ok(())
    }

    fn index_run(
        &mut self,
        ns: &str,
        start_ms: Millis,
        run_id: &str,
        parent: &str,
    ) -> Result<(), StorageError> {
        self.by_start.insert((ns, start_ms, run_id), ())?;
        if !parent.is_empty() {
            self.children.insert((ns, parent, run_id), ())?;
        }
        Ok(())
    }

    fn index_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.by_close.insert((ns, close_ms, run_id), ())?;
        Ok(())
    }

    fn unindex_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.by_close.remove((ns, close_ms, run_id))?;
        Ok(())
    }

    fn purge_run(&mut self, run: &RunState) -> Result<(), StorageError> {
        self.purge(run)
    }

    fn insert_idempotency(&mut self, ns: &str, key: &str, run_id: &str) -> Result<(), StorageError> {
        self.idempotency.insert((ns, key), run_id)?;
        Ok(())
    }

    fn save_schedule(&mut self, s: &crate::schedule::Schedule) -> Result<(), StorageError> {
        let row = records::encode_schedule(s)?;
        self.schedules
            .insert((s.namespace.as_str(), s.id.as_str()), row.as_slice())?;
        Ok(())
    }

    fn delete_schedule(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.schedules.remove((ns, id))?;
        Ok(())
    }

    fn put_api_key(&mut self, key: &ApiKey) -> Result<(), StorageError> {
        let row = records::encode_api_key(key)?;
        self.tx
            .open_table(API_KEYS)?
            .insert(key.key_id.as_str(), row.as_slice())?;
        Ok(())
    }

    fn put_namespace(&mut self, ns: &Namespace) -> Result<(), StorageError> {
        let row = records::encode_namespace(ns)?;
        self.tx
            .open_table(NAMESPACES)?
            .insert(ns.name.as_str(), row.as_slice())?;
        Ok(())
    }

    fn remove_namespace(&mut self, name: &str) -> Result<(), StorageError> {
        self.tx.open_table(NAMESPACES)?.remove(name)?;
        Ok(())
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
        let err = RedbBackend::open(dir.path())
            .err()
            .expect("an old layout is refused");
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
        drop(RedbBackend::open(fresh.path()).unwrap());
        let backend = RedbBackend::open(fresh.path()).unwrap();
        assert_eq!(backend.schema().unwrap(), Some(SCHEMA_VERSION));
    }
}
