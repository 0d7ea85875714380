//! The redb backend's side of a dump ([`crate::dump`]): every table read from one
//! read transaction ([`RedbReader`], a read-only handle beside a running server),
//! and rows written into a [`RedbBackend`]. redb keeps a run's state row, events and
//! checkpoint in one table (`runs`, by slot); the dump's `runs`, `events` and
//! `checkpoints` are split from it and joined into it here. Every other table is
//! the dump's table of the same name, listed once in `redb_tables!` below.

use std::path::{Path, PathBuf};

use redb::{
    Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    WriteTransaction,
};

use super::batches::{BATCH_ITEMS, BATCHES, RUNNING_BATCHES};
use super::triggers::{
    HOOK_DELIVERIES, HOOK_DELIVERY_TIMES, TRIGGER_KEYS, TRIGGER_QUEUE, TRIGGER_RUNS, TRIGGERS,
};
use super::workflows::WORKFLOWS;
use super::{
    API_KEYS, CHECKPOINT_SLOT, CHECKPOINT_SLOTS_FROM, CHILDREN, DEFINITIONS, IDEMPOTENCY, META, NAMESPACES,
    OPEN_RUNS, RUN_TERMS, RUNS, RUNS_BY_CLOSE, RUNS_BY_START, RedbBackend, SCHEDULES, SCHEMA_VERSION,
    STATE_SLOT, STEP_CHECKPOINT_SLOTS_FROM, STEP_CHECKPOINT_SPAN, TASKS, TIMERS,
};
use crate::dump::{DumpError, DumpSource, DumpTarget, Part, Row, TABLES, Value, int_part, table};
use crate::error::StorageError;
use railyard_model::namespace::DEFAULT_NAMESPACE;

/// The page cache of an export: rows are read once, in order.
const EXPORT_CACHE_BYTES: usize = 16 << 20;

/// Why a database could not be opened for export.
#[derive(Debug, thiserror::Error)]
pub enum ReadOpenError {
    #[error("no database at {path}: nothing to export (is --data-dir the server's data directory?)")]
    Missing { path: String },
    #[error(
        "database {path} is in use by a running server: export through it with `railyard store export \
         --from-server` (and an admin key of every namespace under --auth), or stop it and export again"
    )]
    Locked { path: String },
    #[error(
        "database {path} was not closed cleanly; start `railyard server` on it once (which repairs it), \
         stop it, and export again"
    )]
    NeedsRepair { path: String },
    #[error("cannot open database {path} for reading: {source}")]
    Database {
        path: String,
        source: redb::DatabaseError,
    },
    #[error(
        "database {path} has storage layout {found}, this build exports layout {SCHEMA_VERSION}; \
         start `railyard server` of this version on it once (which migrates it), then export"
    )]
    Layout { path: String, found: u64 },
    #[error("cannot read database {path}: {source}")]
    Read { path: String, source: StorageError },
    /// The redo log holds writes the file does not yet (the server stopped without
    /// a checkpoint, as in a crash).
    #[error(
        "the redo log {path} holds {entries} write(s) not yet in the database; start `railyard server` \
         on it once (which applies them), stop it, and export again"
    )]
    Unapplied { path: String, entries: u64 },
}

/// A redb database opened read-only for export, when no server has it open (a
/// running server holds its file alone; it exports through the server, with
/// [`RedbBackend`]'s own [`DumpSource`]).
pub struct RedbReader {
    db: ReadOnlyDatabase,
}

impl RedbReader {
    /// Opens `<dir>/railyard.redb` read-only, and refuses a layout this build does
    /// not write (an older one is migrated by the server, not here).
    pub fn open(dir: &Path) -> Result<Self, ReadOpenError> {
        let path: PathBuf = dir.join("railyard.redb");
        let shown = path.display().to_string();
        if !path.is_file() {
            return Err(ReadOpenError::Missing { path: shown });
        }
        let db = Database::builder()
            .set_cache_size(EXPORT_CACHE_BYTES)
            .set_concurrency_mode(super::concurrency_mode())
            .open_read_only(&path)
            .map_err(|source| match source {
                redb::DatabaseError::DatabaseAlreadyOpen => ReadOpenError::Locked { path: shown.clone() },
                redb::DatabaseError::RepairAborted => ReadOpenError::NeedsRepair { path: shown.clone() },
                source => ReadOpenError::Database {
                    path: shown.clone(),
                    source,
                },
            })?;
        let reader = Self { db };
        let found = reader.layout_found().map_err(|source| ReadOpenError::Read {
            path: shown.clone(),
            source,
        })?;
        if found != SCHEMA_VERSION && found != super::LOGGED_SCHEMA {
            return Err(ReadOpenError::Layout { path: shown, found });
        }
        let applied = super::wal_applied_in(&reader.db).map_err(|source| ReadOpenError::Read {
            path: shown.clone(),
            source,
        })?;
        let wal = dir.join("wal");
        let entries = super::wal::read_entries(&wal).map_err(|e| ReadOpenError::Read {
            path: wal.display().to_string(),
            source: super::log_failed("be read", e),
        })?;
        let entries = entries.iter().filter(|e| e.seq > applied).count() as u64;
        if entries > 0 {
            return Err(ReadOpenError::Unapplied {
                path: wal.display().to_string(),
                entries,
            });
        }
        Ok(reader)
    }

    fn layout_found(&self) -> Result<u64, StorageError> {
        let tx = self.db.begin_read()?;
        match tx.open_table(META) {
            Ok(meta) => Ok(meta.get("schema")?.map_or(1, |v| v.value())),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(1),
            Err(e) => Err(e.into()),
        }
    }
}

fn storage(e: impl Into<StorageError>) -> DumpError {
    DumpError::Storage(e.into())
}

impl DumpSource for RedbBackend {
    fn backend(&self) -> &'static str {
        "redb"
    }

    fn layout(&self) -> u64 {
        SCHEMA_VERSION
    }

    fn rows(&self, visit: &mut dyn FnMut(Row) -> Result<(), DumpError>) -> Result<(), DumpError> {
        let tx = self.usable_db()?.begin_read().map_err(storage)?;
        export_tables(&tx, visit)
    }
}

impl DumpSource for RedbReader {
    fn backend(&self) -> &'static str {
        "redb"
    }

    fn layout(&self) -> u64 {
        SCHEMA_VERSION
    }

    fn rows(&self, visit: &mut dyn FnMut(Row) -> Result<(), DumpError>) -> Result<(), DumpError> {
        let tx = self.db.begin_read().map_err(storage)?;
        export_tables(&tx, visit)
    }
}

/// The dump table of this name (every name used here is in [`TABLES`]).
fn spec(name: &str) -> Result<&'static crate::dump::Table, StorageError> {
    table(name).ok_or_else(|| StorageError::Backend(format!("the dump has no table {name}").into()))
}

macro_rules! to_part {
    (str, $v:expr, $t:expr) => {
        Part::Text($v.to_string())
    };
    (u64, $v:expr, $t:expr) => {
        int_part($v, $t)?
    };
    (i64, $v:expr, $t:expr) => {
        Part::Int($v)
    };
}

macro_rules! from_part {
    (str, $row:expr, $i:tt) => {
        $row.text($i)?
    };
    (u64, $row:expr, $i:tt) => {
        $row.uint($i)?
    };
    (i64, $row:expr, $i:tt) => {
        $row.int($i)?
    };
}

macro_rules! to_value {
    (bytes, $v:expr) => {
        Value::Bytes($v.to_vec())
    };
    (text, $v:expr) => {
        Value::Text($v.to_string())
    };
    (unit, $v:expr) => {{
        let () = $v;
        Value::None
    }};
}

macro_rules! from_value {
    (bytes, $row:expr) => {
        $row.bytes()
    };
    (text, $row:expr) => {
        $row.value_text()?
    };
    (unit, $row:expr) => {
        ()
    };
}

/// The tables that are the dump's table of the same name, with their key parts
/// (index, name, type) and value kind: export, load, clear and count for each.
macro_rules! redb_tables {
    ($($def:ident $name:literal ($($i:tt $n:ident : $kt:ident),+) => $vk:ident;)*) => {
        fn export_plain(
            tx: &ReadTransaction,
            visit: &mut dyn FnMut(Row) -> Result<(), DumpError>,
        ) -> Result<(), DumpError> {
            $({
                let spec = spec($name)?;
                match tx.open_table($def) {
                    // A file the server has not opened since the table was added (each
                    // is made at open) holds none of its rows.
                    Err(redb::TableError::TableDoesNotExist(_)) => {}
                    t => {
                        let t = t.map_err(storage)?;
                        for entry in t.iter().map_err(storage)? {
                            let (k, v) = entry.map_err(storage)?;
                            let ($($n,)+) = k.value();
                            let key = vec![$(to_part!($kt, $n, $name)),+];
                            visit(Row { table: spec, key, value: to_value!($vk, v.value()) })?;
                        }
                    }
                }
            })*
            Ok(())
        }

        /// Writes rows of the table `name`; `false` if it is not one of these.
        fn load_plain(tx: &WriteTransaction, name: &str, rows: &[&Row]) -> Result<bool, StorageError> {
            match name {
                $($name => {
                    let mut t = tx.open_table($def)?;
                    for row in rows {
                        t.insert(($(from_part!($kt, row, $i),)+), from_value!($vk, row))?;
                    }
                    Ok(true)
                })*
                _ => Ok(false),
            }
        }

        fn clear_plain(tx: &WriteTransaction) -> Result<(), StorageError> {
            $(
                tx.delete_table($def)?;
                tx.open_table($def)?;
            )*
            Ok(())
        }

        fn plain_rows(tx: &ReadTransaction) -> Result<u64, StorageError> {
            let mut n = 0;
            $(n += tx.open_table($def)?.len()?;)*
            Ok(n)
        }
    };
}

redb_tables! {
    DEFINITIONS "definitions" (0 workflow_id: str, 1 version: str, 2 hash: str) => bytes;
    OPEN_RUNS "open_runs" (0 ns: str, 1 run_id: str) => unit;
    TASKS "tasks" (0 ns: str, 1 queue: str, 2 seq: u64) => text;
    TIMERS "timers" (0 due_ms: i64, 1 seq: u64) => bytes;
    IDEMPOTENCY "idempotency" (0 ns: str, 1 key: str) => text;
    RUNS_BY_START "runs_by_start" (0 ns: str, 1 start_ms: i64, 2 run_id: str) => unit;
    RUNS_BY_CLOSE "runs_by_close" (0 ns: str, 1 close_ms: i64, 2 run_id: str) => unit;
    RUN_TERMS "run_terms" (0 ns: str, 1 term: str, 2 start_ms: i64, 3 run_id: str) => unit;
    CHILDREN "children" (0 ns: str, 1 parent_id: str, 2 child_id: str) => unit;
    SCHEDULES "schedules" (0 ns: str, 1 schedule_id: str) => bytes;
    TRIGGERS "triggers" (0 ns: str, 1 trigger_id: str) => bytes;
    HOOK_DELIVERIES "hook_deliveries" (0 ns: str, 1 trigger_id: str, 2 delivery_id: str) => bytes;
    HOOK_DELIVERY_TIMES "hook_delivery_times" (0 received_ms: i64, 1 ns: str, 2 trigger_id: str, 3 delivery_id: str) => unit;
    TRIGGER_KEYS "trigger_keys" (0 ns: str, 1 trigger_id: str, 2 key: str) => text;
    TRIGGER_QUEUE "trigger_queue" (0 ns: str, 1 trigger_id: str, 2 key: str, 3 seq: u64) => bytes;
    TRIGGER_RUNS "trigger_runs" (0 ns: str, 1 run_id: str) => bytes;
    BATCHES "batches" (0 ns: str, 1 batch_id: str) => bytes;
    BATCH_ITEMS "batch_items" (0 ns: str, 1 batch_id: str, 2 idx: u64) => bytes;
    RUNNING_BATCHES "running_batches" (0 ns: str, 1 batch_id: str) => unit;
    WORKFLOWS "workflows" (0 ns: str, 1 workflow_id: str) => bytes;
}

/// Every table: those keyed by one text (namespaces, API keys), the split `runs`
/// table, then the rest.
fn export_tables(
    tx: &ReadTransaction,
    visit: &mut dyn FnMut(Row) -> Result<(), DumpError>,
) -> Result<(), DumpError> {
    for (def, name) in [(NAMESPACES, "namespaces"), (API_KEYS, "api_keys")] {
        let spec = spec(name)?;
        let t = tx.open_table(def).map_err(storage)?;
        for entry in t.iter().map_err(storage)? {
            let (k, v) = entry.map_err(storage)?;
            visit(Row {
                table: spec,
                key: vec![Part::Text(k.value().to_string())],
                value: Value::Bytes(v.value().to_vec()),
            })?;
        }
    }
    let (runs, events, checkpoints) = (spec("runs")?, spec("events")?, spec("checkpoints")?);
    let step_checkpoints = spec("step_checkpoints")?;
    let t = tx.open_table(RUNS).map_err(storage)?;
    for entry in t.iter().map_err(storage)? {
        let (k, v) = entry.map_err(storage)?;
        let (ns, run_id, slot) = k.value();
        let mut key = vec![Part::Text(ns.to_string()), Part::Text(run_id.to_string())];
        let table = match slot {
            STATE_SLOT => runs,
            // A checkpoint leaves whole (its first segment, then the appended ones,
            // in order) and comes back as one segment, its digest derived from its
            // bytes; its head and appended segments are not rows of their own.
            CHECKPOINT_SLOT => {
                visit(Row {
                    table: checkpoints,
                    key,
                    value: Value::Bytes(super::reads::checkpoint_in(
                        &t,
                        ns,
                        run_id,
                        crate::backend::CheckpointAt::Run,
                    )?),
                })?;
                continue;
            }
            CHECKPOINT_SLOTS_FROM.. => continue,
            // A step's checkpoint leaves whole too, found by its first segment (a
            // step's head may be absent: one imported whole has none).
            STEP_CHECKPOINT_SLOTS_FROM.. => {
                let step = (slot - STEP_CHECKPOINT_SLOTS_FROM) / STEP_CHECKPOINT_SPAN;
                if (slot - STEP_CHECKPOINT_SLOTS_FROM) % STEP_CHECKPOINT_SPAN != 1 {
                    continue;
                }
                let at = crate::backend::CheckpointAt::Step(u32::try_from(step).unwrap_or(u32::MAX));
                key.push(int_part(step, "step_checkpoints")?);
                visit(Row {
                    table: step_checkpoints,
                    key,
                    value: Value::Bytes(super::reads::checkpoint_in(&t, ns, run_id, at)?),
                })?;
                continue;
            }
            event => {
                key.push(int_part(event, "events")?);
                events
            }
        };
        visit(Row {
            table,
            key,
            value: Value::Bytes(v.value().to_vec()),
        })?;
    }
    export_plain(tx, visit)
}

/// Writes the rows of one table.
fn load_table(tx: &WriteTransaction, name: &str, rows: &[&Row]) -> Result<(), StorageError> {
    match name {
        "namespaces" | "api_keys" => {
            let def = if name == "namespaces" {
                NAMESPACES
            } else {
                API_KEYS
            };
            let mut t = tx.open_table(def)?;
            for row in rows {
                t.insert(row.text(0)?, row.bytes())?;
            }
        }
        "runs" | "events" | "checkpoints" | "step_checkpoints" => {
            let mut t = tx.open_table(RUNS)?;
            for row in rows {
                let slot = match name {
                    "runs" => STATE_SLOT,
                    "checkpoints" => CHECKPOINT_SLOT,
                    "step_checkpoints" => {
                        let step = u32::try_from(row.uint(2)?).map_err(|_| StorageError::Corrupt {
                            what: "dump row",
                            source: "a step checkpoint's step is past 2^32".into(),
                        })?;
                        super::CheckpointSlots::of(crate::backend::CheckpointAt::Step(step)).first
                    }
                    _ => match row.uint(2)? {
                        id if id != STATE_SLOT && id < STEP_CHECKPOINT_SLOTS_FROM => id,
                        id => {
                            return Err(StorageError::Corrupt {
                                what: "dump row",
                                source: format!("event id {id} is not one redb can keep").into(),
                            });
                        }
                    },
                };
                t.insert((row.text(0)?, row.text(1)?, slot), row.bytes())?;
            }
        }
        _ => {
            if !load_plain(tx, name, rows)? {
                return Err(StorageError::Backend(
                    format!("the redb backend has no table {name} to import into").into(),
                ));
            }
        }
    }
    Ok(())
}

impl DumpTarget for RedbBackend {
    fn backend(&self) -> &'static str {
        "redb"
    }

    fn derived(&self, row: &Row) -> Result<Vec<Row>, StorageError> {
        if row.table.name != "runs" {
            return Ok(Vec::new());
        }
        let (start_ms, terms) = crate::records::run_index_terms(row.bytes())?;
        crate::dump::run_terms_rows(row.text(0)?, row.text(1)?, start_ms, terms)
    }

    fn is_empty(&self) -> Result<bool, StorageError> {
        let tx = self.usable_db()?.begin_read()?;
        let namespaces = tx.open_table(NAMESPACES)?;
        let others = namespaces
            .iter()?
            .map(|e| e.map(|(k, _)| k.value() != DEFAULT_NAMESPACE))
            .collect::<Result<Vec<bool>, _>>()?;
        Ok(!others.contains(&true)
            && tx.open_table(API_KEYS)?.is_empty()?
            && tx.open_table(RUNS)?.is_empty()?
            && plain_rows(&tx)? == 0)
    }

    fn clear(&self) -> Result<(), StorageError> {
        let tx = self.usable_db()?.begin_write()?;
        tx.delete_table(RUNS)?;
        tx.open_table(RUNS)?;
        for def in [NAMESPACES, API_KEYS] {
            tx.delete_table(def)?;
            tx.open_table(def)?;
        }
        clear_plain(&tx)?;
        tx.open_table(NAMESPACES)?
            .insert(DEFAULT_NAMESPACE, b"{}".as_slice())?;
        tx.commit()?;
        Ok(())
    }

    fn load(&self, rows: &[Row]) -> Result<(), StorageError> {
        let tx = self.usable_db()?.begin_write()?;
        for t in TABLES {
            let of: Vec<&Row> = rows.iter().filter(|r| r.table.name == t.name).collect();
            if !of.is_empty() {
                load_table(&tx, t.name, &of)?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
