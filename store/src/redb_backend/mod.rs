//! The redb backend: the tables, their layout version, the migration of older
//! layouts at open ([`migrate`]), and every conversion of a model type into a
//! row (through [`super::records`], and nowhere else).
//!
//! Values are versioned JSON records (the state row, events, timers, definitions);
//! keys are redb tuples so that range scans give history in event order, tasks in
//! queue order and timers in due order.
//!
//! This file owns the table definitions, opening (and migrating) the file and the
//! [`Backend`] impl; the rest is split by concern: `reads` (every read, written once
//! for both transactions), `snapshot` (the read transaction), `write` (the writer's
//! transaction and its writes), `purge` (the close-time index and the retention
//! purge), `terms` (the status and workflow index of queries) and `triggers` (the
//! trigger tables).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};

mod batches;
mod dump;
#[cfg(any(test, feature = "testing"))]
pub mod faults;
pub(crate) mod logged;
mod migrate;
mod pieces;
mod purge;
mod reads;
mod snapshot;
mod terms;
mod triggers;
mod wal;
#[cfg(test)]
mod wal_tests;
mod workflows;
mod write;

use super::backend::{Backend, Snapshot, WriteTx};

use super::records::{DefinitionTableKey, Definitions};
use crate::error::StorageError;

pub use dump::{ReadOpenError, RedbReader};
pub(crate) use purge::RUNS_BY_CLOSE;
use snapshot::RedbSnapshot;
pub(crate) use terms::RUN_TERMS;
pub use wal::LogLimits;
use write::RedbTx;

/// Errors opening the database.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open database {path}: {source}")]
    Database {
        path: String,
        source: ::redb::DatabaseError,
    },
    /// Another process has the file open for writing (a server on this data directory).
    #[error(
        "database {path} is in use by another process (a railyard server on this data directory?); \
         stop it first"
    )]
    InUse { path: String },
    #[error("cannot initialise database {path}: {source}")]
    Init { path: String, source: StorageError },
    #[error(
        "cannot migrate database {path} from storage layout {from} to {}: {source}; nothing was changed",
        SCHEMA_VERSION
    )]
    Migrate {
        path: String,
        from: u64,
        source: StorageError,
    },
    #[error(
        "database {path} has storage layout {found}, this build reads layout {}; \
         it was written by another version of Railyard (move the data directory away to start afresh)",
        SCHEMA_VERSION
    )]
    Schema { path: String, found: u64 },
    /// The database file could not be created private (mode 0600).
    #[error("cannot make database {path} private (mode 0600): {source}")]
    Permissions { path: String, source: std::io::Error },
    /// The redo log (`<data-dir>/wal/`) cannot be read, replayed or started.
    #[error("cannot recover the redo log {path}: {source}")]
    Log { path: String, source: StorageError },
}

/// redb's errors become [`StorageError::Backend`]: the storage boundary names no
/// backend's types.
macro_rules! redb_error {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(e: $t) -> Self {
                match redb::Error::from(e) {
                    // The file failed, or failed before (redb then refuses everything
                    // until the database is reopened): the disk, not the request.
                    e @ (redb::Error::Io(_) | redb::Error::PreviousIo | redb::Error::DatabaseClosed) => {
                        StorageError::Unavailable(e.to_string())
                    }
                    e => StorageError::Backend(Box::new(e)),
                }
            }
        }
    )*};
}

redb_error!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);

/// The redo log failed: the disk, not the request.
fn log_failed(what: &str, e: std::io::Error) -> StorageError {
    StorageError::Unavailable(format!("the redo log failed to {what}: {e}"))
}

/// Everything about one run, in one table so that a transition dirties one B-tree:
/// (namespace, run id, [`STATE_SLOT`]) → run record, (namespace, run id, event id) →
/// event record, each step's checkpoint from [`STEP_CHECKPOINT_SLOTS_FROM`]
/// ([`CheckpointSlots`]), and the run's one checkpoint of older releases in the slots
/// from [`CHECKPOINT_SLOTS_FROM`]: its first segment at [`CHECKPOINT_SLOT`] (where every
/// release before segments kept the whole checkpoint), its head record (length,
/// digest, segment count) at [`CHECKPOINT_HEAD_SLOT`], and segment `k` (from 2) at
/// `CHECKPOINT_SLOTS_FROM + k`. A checkpoint without a head row is one written whole
/// (by an older release, or imported from a dump): one segment, digest derived from
/// its bytes.
pub(crate) const RUNS: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("runs");
/// The slot of a run's state row. Events are numbered from 1.
pub(crate) const STATE_SLOT: u64 = 0;
/// The slot of a run's checkpoint's first segment, after every event.
pub(crate) const CHECKPOINT_SLOT: u64 = u64::MAX;
/// The slot of a run's checkpoint's head record.
pub(crate) const CHECKPOINT_HEAD_SLOT: u64 = u64::MAX - 1;
/// The first slot of a run's checkpoint rows of older releases.
pub(crate) const CHECKPOINT_SLOTS_FROM: u64 = u64::MAX - (1 << 20);
/// The first slot of the steps' checkpoints: step `n`'s head record at
/// `STEP_CHECKPOINT_SLOTS_FROM + n * STEP_CHECKPOINT_SPAN` and its segment `k` (from
/// one) `k` slots after it, so that a step's checkpoint stays where it was written
/// when the step ends, as its transcript. Events are numbered below it.
pub(crate) const STEP_CHECKPOINT_SLOTS_FROM: u64 = 1 << 62;
/// The slots of one step's checkpoint (its head and at most `2^21 - 1` segments).
pub(crate) const STEP_CHECKPOINT_SPAN: u64 = 1 << 21;

/// Where one checkpoint's rows are in [`RUNS`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckpointSlots {
    /// Its head record.
    pub head: u64,
    /// Its first segment.
    pub first: u64,
    /// Segment `k` (from 2) is at `rest + k`.
    pub rest: u64,
    /// Past its last possible segment.
    pub end: u64,
}

impl CheckpointSlots {
    /// The slots of the checkpoint `at` a run.
    pub(crate) fn of(at: crate::backend::CheckpointAt) -> Self {
        match at {
            crate::backend::CheckpointAt::Run => Self {
                head: CHECKPOINT_HEAD_SLOT,
                first: CHECKPOINT_SLOT,
                rest: CHECKPOINT_SLOTS_FROM,
                end: CHECKPOINT_HEAD_SLOT,
            },
            crate::backend::CheckpointAt::Step(n) => {
                let head = STEP_CHECKPOINT_SLOTS_FROM + u64::from(n) * STEP_CHECKPOINT_SPAN;
                Self {
                    head,
                    first: head + 1,
                    rest: head,
                    end: head + STEP_CHECKPOINT_SPAN,
                }
            }
        }
    }

    /// The slots of segments 2.. (the tail after the first).
    pub(crate) fn tail(&self) -> std::ops::Range<u64> {
        self.rest + 2..self.end
    }
}
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
#[cfg(test)]
pub(crate) const META_TABLE: TableDefinition<&str, u64> = META;

/// The table layout this build reads and writes, and the layout of its exports.
/// Layout 2 (serde images of the model, a definition in every state row) is migrated
/// at open ([`migrate`]).
pub(crate) const SCHEMA_VERSION: u64 = 3;

/// What `meta.schema` holds in a file with a redo log beside it: layout
/// [`SCHEMA_VERSION`]'s tables, whose latest writes may be only in the log. Releases
/// before the log refuse any value but theirs ("storage layout 4, this build reads
/// layout 3"), so none opens the file and misses what the log holds. A file of
/// layout 3 opens here and is marked (durably, before its log is started).
pub(crate) const LOGGED_SCHEMA: u64 = 4;

/// `meta` row: the sequence number of the last log entry applied to the tables,
/// written in the same transaction as the entry's writes.
pub(crate) const WAL_APPLIED: &str = "wal_applied";

/// Creates the database file readable and writable by its owner only (mode 0600), or
/// narrows an existing one to that: it holds every run's goal, context and results.
pub(crate) fn make_private(path: &Path) -> std::io::Result<()> {
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

/// How the file is shared: the server holds it alone (redb's exclusive-writer mode,
/// a lock on the whole file taken once). redb's single-writer mode would let a reader
/// open the file beside the server, but it takes byte-range locks on every
/// transaction, about 15% of a durable write here; a running server is exported
/// through the server instead (`railyard store export --from-server`).
pub(crate) fn concurrency_mode() -> redb::ConcurrencyMode {
    redb::ConcurrencyMode::ExclusiveWriter
}

/// The database file `<data-dir>/railyard.redb`.
///
/// After a failed write or sync, redb refuses everything until the database is
/// reopened; so does this backend ([`StorageError::Unavailable`]), reopening the file at the
/// next call that finds it failed, until the disk lets it. Each reopen is counted
/// ([`Backend::incarnation`]): a commit that reported a failed sync may be found on
/// disk after it, and the writer then rebuilds what it keeps in memory.
pub struct RedbBackend {
    /// `None` only between closing a failed database and reopening it.
    db: RwLock<Option<Arc<Database>>>,
    /// Opens the file again (the same path, cache and disk as the first time).
    reopen: Opener,
    /// Set by an I/O failure; cleared by a reopen.
    failed: AtomicBool,
    reopens: AtomicU64,
    /// Definitions by content, shared by every snapshot and write transaction, so
    /// that decoding a run does not parse its definition again.
    defs: Arc<Definitions>,
    /// The redo log every write goes through first; `None` only while opening.
    log: Mutex<Option<wal::RedoLog>>,
    /// Set by [`crash`](Self::crash): dropping then checkpoints nothing.
    #[cfg(any(test, feature = "testing"))]
    crashed: AtomicBool,
}

type Opener = Box<dyn Fn() -> Result<Database, redb::DatabaseError> + Send + Sync>;

/// redb's page cache for a server that does not say: 64 MiB, a size that suits a
/// small machine (redb's own default is 1 GiB, which the cache fills as the database
/// grows and never gives back).
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

impl RedbBackend {
    /// [`open_with_cache`](Self::open_with_cache) with [`DEFAULT_CACHE_BYTES`].
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        Self::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) `<dir>/railyard.redb` with a page cache of at most
    /// `cache_bytes`, migrates a file of layout 2 (in one transaction: on failure
    /// nothing changes), refuses a file of another layout, and makes sure every table
    /// and the `default` namespace exist.
    pub fn open_with_cache(dir: &Path, cache_bytes: usize) -> Result<Self, OpenError> {
        Self::open_with_limits(dir, cache_bytes, LogLimits::default())
    }

    /// [`open_with_cache`](Self::open_with_cache) with the redo log checkpointed
    /// and bounded by `limits`.
    pub fn open_with_limits(dir: &Path, cache_bytes: usize, limits: LogLimits) -> Result<Self, OpenError> {
        let path = dir.join("railyard.redb");
        make_private(&path).map_err(|source| OpenError::Permissions {
            path: path.display().to_string(),
            source,
        })?;
        let file = path.clone();
        Self::open_with(
            &path,
            Box::new(move || {
                Database::builder()
                    .set_cache_size(cache_bytes)
                    .set_concurrency_mode(concurrency_mode())
                    .create(&file)
            }),
            wal::LogDisk::default(),
            limits,
        )
    }

    /// Opens `<dir>/railyard.redb` on a disk that fails when `faults` says so: for
    /// tests of what a failed write or sync does, and of recovering from it.
    #[cfg(any(test, feature = "testing"))]
    pub fn open_faulty(dir: &Path, faults: &faults::DiskFaults) -> Result<Self, OpenError> {
        Self::open_faulty_with(dir, faults, LogLimits::default())
    }

    /// [`open_faulty`](Self::open_faulty) with the redo log bounded by `limits`.
    #[cfg(any(test, feature = "testing"))]
    pub fn open_faulty_with(
        dir: &Path,
        faults: &faults::DiskFaults,
        limits: LogLimits,
    ) -> Result<Self, OpenError> {
        let path = dir.join("railyard.redb");
        make_private(&path).map_err(|source| OpenError::Permissions {
            path: path.display().to_string(),
            source,
        })?;
        let (file, on_disk) = (path.clone(), faults.clone());
        let disk = wal::LogDisk {
            faults: Some(faults.clone()),
        };
        Self::open_with(&path, Box::new(move || on_disk.open(&file)), disk, limits)
    }

    /// Stops as a crash would: dropped, it checkpoints nothing (with the disk's
    /// writes failing, redb keeps nothing of its unsynced commits either).
    #[cfg(any(test, feature = "testing"))]
    pub fn crash(self) {
        self.crashed.store(true, Ordering::Release);
    }

    /// Opens the database with `reopen`, migrates a file of layout 2 (in one
    /// transaction: on failure nothing changes), refuses a file of another layout,
    /// makes sure every table and the `default` namespace exist, and recovers the
    /// redo log beside it (starting one for a file without).
    fn open_with(
        path: &Path,
        reopen: Opener,
        disk: wal::LogDisk,
        limits: LogLimits,
    ) -> Result<Self, OpenError> {
        let shown = path.display().to_string();
        let db = reopen().map_err(|source| match source {
            redb::DatabaseError::DatabaseAlreadyOpen => OpenError::InUse { path: shown.clone() },
            source => OpenError::Database {
                path: shown.clone(),
                source,
            },
        })?;
        let backend = Self {
            db: RwLock::new(Some(Arc::new(db))),
            reopen,
            failed: AtomicBool::new(false),
            reopens: AtomicU64::new(0),
            defs: Arc::default(),
            log: Mutex::new(None),
            #[cfg(any(test, feature = "testing"))]
            crashed: AtomicBool::new(false),
        };
        let db = backend.usable_db().map_err(|source| OpenError::Init {
            path: shown.clone(),
            source,
        })?;
        match backend.schema() {
            Ok(None | Some(SCHEMA_VERSION | LOGGED_SCHEMA)) => {}
            Ok(Some(from @ migrate::LAYOUT_2)) => {
                migrate::from_layout_2(&db).map_err(|source| OpenError::Migrate {
                    path: shown.clone(),
                    from,
                    source,
                })?;
            }
            Ok(Some(found)) => return Err(OpenError::Schema { path: shown, found }),
            Err(source) => return Err(OpenError::Init { path: shown, source }),
        }
        backend.init().map_err(|source| OpenError::Init {
            path: shown.clone(),
            source,
        })?;
        let wal_dir = path.parent().unwrap_or(Path::new(".")).join("wal");
        let log_error = |source| OpenError::Log {
            path: wal_dir.display().to_string(),
            source,
        };
        let applied = wal_applied(&db).map_err(log_error)?;
        let (log, entries) = wal::RedoLog::open(&wal_dir, disk, limits, applied)
            .map_err(|e| log_error(log_failed("open", e)))?;
        let mut slot = backend.log.lock().unwrap_or_else(|p| p.into_inner());
        let log = slot.insert(log);
        let replayed = replay(&db, &entries).and_then(|n| {
            checkpoint(&db, log)?;
            Ok(n)
        });
        let replayed = replayed.map_err(log_error)?;
        if replayed > 0 {
            tracing::info!(entries = replayed, "redo log replayed into the database");
        }
        drop(slot);
        purge::build_close_index(&db, &backend.defs)
            .and_then(|()| terms::build_term_index(&db, &backend.defs))
            .map_err(|source| OpenError::Init { path: shown, source })?;
        Ok(backend)
    }

    /// The redo log, locked.
    fn log(&self) -> MutexGuard<'_, Option<wal::RedoLog>> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open database, for tests that look at the rows themselves.
    #[cfg(test)]
    pub(crate) fn db(&self) -> Arc<Database> {
        self.usable_db().expect("the test's database is open")
    }

    /// The open database, reopened first if an I/O failure left it refusing
    /// everything. Reopening needs the old one closed (redb locks the file while it
    /// is open), so it fails, and is tried again at the next call, while a snapshot
    /// still holds the old one or while the disk still fails.
    fn usable_db(&self) -> Result<Arc<Database>, StorageError> {
        if !self.failed.load(Ordering::Acquire) {
            let slot = self.db.read().unwrap_or_else(|p| p.into_inner());
            if let Some(db) = slot.as_ref() {
                return Ok(db.clone());
            }
        }
        let mut slot = self.db.write().unwrap_or_else(|p| p.into_inner());
        if !self.failed.load(Ordering::Acquire)
            && let Some(db) = slot.as_ref()
        {
            return Ok(db.clone());
        }
        drop(slot.take());
        match self.reopen_and_replay() {
            Ok(db) => {
                let db = Arc::new(db);
                *slot = Some(db.clone());
                self.failed.store(false, Ordering::Release);
                let n = self.reopens.fetch_add(1, Ordering::AcqRel) + 1;
                tracing::warn!(reopens = n, "database reopened after an I/O failure");
                Ok(db)
            }
            Err(e) => {
                self.failed.store(true, Ordering::Release);
                Err(StorageError::Unavailable(format!(
                    "the database file failed and cannot be reopened yet: {e}"
                )))
            }
        }
    }

    /// Opens the database again, cuts what a failed append left in the log, and
    /// replays the log's entries the file does not hold (its unsynced commits may
    /// be gone with the old handle).
    fn reopen_and_replay(&self) -> Result<Database, String> {
        let mut log = self.log();
        if let Some(log) = log.as_mut() {
            log.repair()
                .map_err(|e| format!("the redo log cannot be repaired: {e}"))?;
        }
        let db = (self.reopen)().map_err(|e| e.to_string())?;
        if let Some(log) = log.as_mut() {
            let entries = log
                .entries()
                .map_err(|e| format!("the redo log cannot be read: {e}"))?;
            replay(&db, &entries).map_err(|e| e.to_string())?;
            checkpoint(&db, log).map_err(|e| e.to_string())?;
        }
        Ok(db)
    }

    /// Notes an I/O failure, so that the next call reopens the database.
    fn noting<T>(&self, r: Result<T, StorageError>) -> Result<T, StorageError> {
        if let Err(StorageError::Unavailable(e)) = &r
            && !self.failed.swap(true, Ordering::AcqRel)
        {
            tracing::error!(error = %e, "database I/O failed; refusing requests until it reopens");
        }
        r
    }

    /// The stored layout version; `None` for a new, empty database.
    pub(crate) fn schema(&self) -> Result<Option<u64>, StorageError> {
        let tx = self.usable_db()?.begin_read()?;
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

    /// Makes every table (registering each with the redo log's replay) and marks the
    /// file as one with a log, durably.
    fn init(&self) -> Result<(), StorageError> {
        let raw = self.usable_db()?.begin_write()?;
        let unlogged = logged::WriteSet::default();
        let tx = logged::LoggedTx::new(&raw, &unlogged);
        {
            tx.open_table(META)?.insert("schema", LOGGED_SCHEMA)?;
            tx.open_table(RUNS)?;
            tx.open_table(OPEN_RUNS)?;
            tx.open_table(TASKS)?;
            tx.open_table(TIMERS)?;
            tx.open_table(IDEMPOTENCY)?;
            tx.open_table(RUNS_BY_START)?;
            tx.open_table(RUNS_BY_CLOSE)?;
            tx.open_table(RUN_TERMS)?;
            tx.open_table(CHILDREN)?;
            tx.open_table(DEFINITIONS)?;
            tx.open_table(SCHEDULES)?;
            tx.open_table(API_KEYS)?;
            triggers::create_tables(&tx)?;
            batches::create_tables(&tx)?;
            workflows::create_tables(&tx)?;
            let mut ns = tx.open_table(NAMESPACES)?;
            if ns.get(railyard_model::namespace::DEFAULT_NAMESPACE)?.is_none() {
                ns.insert(railyard_model::namespace::DEFAULT_NAMESPACE, b"{}".as_slice())?;
            }
        }
        raw.commit()?;
        Ok(())
    }

    /// Appends the batch's write set to the log (one `fdatasync`), then commits its
    /// transaction to redb without a sync; checkpoints when one is due. A failed
    /// append aborts the transaction; a failed commit after it leaves the entry to
    /// the replay at the reopen that follows.
    fn log_and_commit(
        &self,
        db: &Database,
        mut tx: redb::WriteTransaction,
        writes: &logged::WriteSet,
    ) -> Result<(), StorageError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut slot = self.log();
        let Some(log) = slot.as_mut() else {
            return Err(StorageError::Unavailable("the redo log is not open".into()));
        };
        if log.full() {
            checkpoint(db, log).map_err(|e| {
                StorageError::Unavailable(format!(
                    "the redo log holds {} bytes, past its bound of {}, and cannot be checkpointed \
                     into the database ({e}); writes resume once it can (free disk space)",
                    log.size(),
                    log.limits.max_bytes
                ))
            })?;
        }
        let payload = writes.take();
        tx.set_durability(Durability::None)?;
        tx.open_table(META)?.insert(WAL_APPLIED, log.next_seq())?;
        log.append(&payload).map_err(|e| {
            self.failed.store(true, Ordering::Release);
            log_failed("append", e)
        })?;
        tx.commit()?;
        if log.checkpoint_due()
            && let Err(e) = checkpoint(db, log)
        {
            // This batch is in the log and answered; an I/O failure leaves redb
            // refusing everything, so the next write reopens (and names the disk's
            // error if that fails too).
            if matches!(e, StorageError::Unavailable(_)) {
                self.failed.store(true, Ordering::Release);
            }
            tracing::warn!(error = %e, log_bytes = log.size(), "redo log checkpoint failed; tried again at the next write");
        }
        Ok(())
    }
}

impl Backend for RedbBackend {
    fn dump_source(&self) -> Option<&dyn crate::dump::DumpSource> {
        Some(self)
    }

    fn snapshot(&self) -> Result<Box<dyn Snapshot>, StorageError> {
        let tx = self.noting(self.usable_db().and_then(|db| Ok(db.begin_read()?)))?;
        Ok(Box::new(RedbSnapshot {
            tx,
            defs: self.defs.clone(),
        }))
    }

    fn write(
        &self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let db = self.usable_db()?;
        let outcome = (|| {
            let raw = db.begin_write()?;
            let writes = logged::WriteSet::default();
            {
                let tx = logged::LoggedTx::new(&raw, &writes);
                // Every table the writer may change, opened once per transaction.
                let mut t = RedbTx {
                    tx,
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
                    terms: tx.open_table(RUN_TERMS)?,
                    defs: &self.defs,
                };
                // On error the transaction is dropped, which aborts it.
                f(&mut t)?;
            }
            self.log_and_commit(&db, raw, &writes)
        })();
        self.noting(outcome)
    }

    fn incarnation(&self) -> u64 {
        self.reopens.load(Ordering::Acquire)
    }
}

impl Drop for RedbBackend {
    /// Checkpoints, so that a cleanly stopped server leaves nothing to replay.
    fn drop(&mut self) {
        #[cfg(any(test, feature = "testing"))]
        if self.crashed.load(Ordering::Acquire) {
            return;
        }
        if self.failed.load(Ordering::Acquire) {
            return;
        }
        let db = self.db.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let (Some(db), Some(log)) = (db, self.log().as_mut())
            && let Err(e) = checkpoint(&db, log)
        {
            tracing::warn!(error = %e, "redo log checkpoint at close failed; the next open replays the log");
        }
    }
}

/// The last log entry the file holds.
fn wal_applied(db: &Database) -> Result<u64, StorageError> {
    wal_applied_in(db)
}

/// [`wal_applied`] of any open database (a read-only one too); 0 for a file that
/// never had a log.
pub(crate) fn wal_applied_in(db: &impl ReadableDatabase) -> Result<u64, StorageError> {
    let tx = db.begin_read()?;
    let meta = match tx.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    Ok(meta.get(WAL_APPLIED)?.map_or(0, |v| v.value()))
}

/// Applies the entries after the one the file holds, in order, each at most once;
/// answers how many.
fn replay(db: &Database, entries: &[wal::Entry]) -> Result<u64, StorageError> {
    let mut applied = wal_applied(db)?;
    let from = applied;
    let mut pending = entries.iter().filter(|e| e.seq > from).peekable();
    let mut n = 0;
    while pending.peek().is_some() {
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::None)?;
        for e in pending.by_ref().take(256) {
            if e.seq != applied + 1 {
                return Err(StorageError::Corrupt {
                    what: "redo log",
                    source: format!("entries {} to {} are missing", applied + 1, e.seq - 1).into(),
                });
            }
            let ops = logged::decode(&e.payload).ok_or_else(|| StorageError::Corrupt {
                what: "redo log",
                source: format!("entry {} does not decode", e.seq).into(),
            })?;
            for op in &ops {
                logged::replay(&tx, op)?;
            }
            applied = e.seq;
            n += 1;
        }
        tx.open_table(META)?.insert(WAL_APPLIED, applied)?;
        tx.commit()?;
    }
    Ok(n)
}

/// A durable redb commit of everything applied, then a fresh log segment.
fn checkpoint(db: &Database, log: &mut wal::RedoLog) -> Result<(), StorageError> {
    let tx = db.begin_write()?;
    tx.open_table(META)?
        .insert(WAL_APPLIED, log.next_seq().saturating_sub(1))?;
    tx.commit()?;
    log.checkpointed()
        .map_err(|e| log_failed("start a new segment", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_model::RunKey;

    #[test]
    fn a_checkpoint_the_previous_release_wrote_whole_reads_and_grows_by_segments() {
        use crate::backend::{Backend, CheckpointAt, CheckpointHead};
        let dir = tempfile::tempdir().unwrap();
        // What the release before segments wrote: the bytes at the checkpoint slot, no
        // head row, nothing else.
        {
            let backend = RedbBackend::open(dir.path()).unwrap();
            let tx = backend.db().begin_write().unwrap();
            tx.open_table(RUNS)
                .unwrap()
                .insert(("default", "r1", CHECKPOINT_SLOT), b"old whole".as_slice())
                .unwrap();
            tx.commit().unwrap();
        }
        let backend = RedbBackend::open(dir.path()).unwrap();
        let head = backend
            .snapshot()
            .unwrap()
            .checkpoint_head(&RunKey::new("default", "r1"), CheckpointAt::Run)
            .unwrap();
        let legacy = CheckpointHead {
            len: 9,
            digest: None,
            segments: 1,
            merged: 1,
        };
        assert_eq!(head, Some(legacy));
        let d = [7u8; 32];
        backend
            .write(&mut |tx| {
                tx.append_checkpoint(&RunKey::new("default", "r1"), CheckpointAt::Run, b"; new", &d)
            })
            .unwrap();
        let snap = backend.snapshot().unwrap();
        // The step in flight's checkpoint is where the older release kept it.
        assert_eq!(
            snap.checkpoint_in_flight_at(&RunKey::new("default", "r1"), 0)
                .unwrap(),
            CheckpointAt::Run
        );
        assert_eq!(
            snap.checkpoint(&RunKey::new("default", "r1"), CheckpointAt::Run)
                .unwrap(),
            b"old whole; new"
        );
        let grown = CheckpointHead {
            len: 14,
            digest: Some(d),
            segments: 2,
            merged: 1,
        };
        assert_eq!(
            snap.checkpoint_head(&RunKey::new("default", "r1"), CheckpointAt::Run)
                .unwrap(),
            Some(grown)
        );
        // The history (events below the checkpoint slots) sees none of it.
        assert!(
            snap.history(&RunKey::new("default", "r1"), 1, 100)
                .unwrap()
                .is_empty()
        );
        // Cleared: every segment and the head go.
        backend
            .write(&mut |tx| tx.set_checkpoint(&RunKey::new("default", "r1"), CheckpointAt::Run, None))
            .unwrap();
        let tx = backend.db().begin_read().unwrap();
        let rows = tx.open_table(RUNS).unwrap();
        assert_eq!(
            rows.range(("default", "r1", 0)..=("default", "r1", u64::MAX))
                .unwrap()
                .count(),
            0
        );
    }

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
        assert_eq!(backend.schema().unwrap(), Some(LOGGED_SCHEMA));
    }

    /// Writes `mib` MiB of rows, then reads them all back.
    fn fill_and_read(backend: &RedbBackend, mib: usize) {
        let table: TableDefinition<u64, &[u8]> = TableDefinition::new("filler");
        let row = vec![7u8; 16 << 10];
        let tx = backend.db().begin_write().unwrap();
        {
            let mut t = tx.open_table(table).unwrap();
            for i in 0..(mib as u64 * 64) {
                t.insert(i, row.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
        let tx = backend.db().begin_read().unwrap();
        let t = tx.open_table(table).unwrap();
        for i in 0..(mib as u64 * 64) {
            assert!(t.get(i).unwrap().is_some());
        }
    }

    /// The cache size given is the one redb keeps to: a small cache evicts and stays
    /// within its size while the data outgrows it; the default holds the same data.
    #[test]
    fn the_page_cache_keeps_to_the_size_it_was_opened_with() {
        use redb::ReadableDatabase;
        let small = tempfile::tempdir().unwrap();
        let backend = RedbBackend::open_with_cache(small.path(), 1 << 20).unwrap();
        fill_and_read(&backend, 8);
        let stats = backend.db().cache_stats();
        assert!(stats.evictions() > 0, "a 1 MiB cache evicted nothing");
        assert!(
            stats.used_bytes() <= 2 << 20,
            "{} bytes cached",
            stats.used_bytes()
        );

        let default = tempfile::tempdir().unwrap();
        let backend = RedbBackend::open(default.path()).unwrap();
        fill_and_read(&backend, 8);
        let stats = backend.db().cache_stats();
        assert!(
            stats.used_bytes() > 4 << 20,
            "{} bytes cached",
            stats.used_bytes()
        );
        assert!(stats.used_bytes() <= DEFAULT_CACHE_BYTES);
    }
}
