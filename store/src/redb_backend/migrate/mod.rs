//! Bringing a database of an older storage layout to the current one, at open.
//!
//! Layout 2 → 3: every state row, event and timer is rewritten as a versioned
//! record under the same key, each definition a run used is stored once in
//! `definitions`, and `meta.schema` becomes 3 — all in one write transaction, so a
//! failure (or a crash) leaves layout 2 untouched. Checkpoints (opaque bytes) and
//! the index tables keep their layout.
//!
//! Both ends are frozen types of their own: rows are read as `layout2.rs` and
//! written as `layout3.rs` (version 1 of each record, which the current records
//! read as they read any older row). No model type and no current record is
//! between them, so changing the model never edits the migration.

mod layout2;
mod layout3;
#[cfg(test)]
mod tests;

use redb::{Database, ReadableTable, ReadableTableMetadata, Table};
use serde::de::DeserializeOwned;

use super::{CHECKPOINT_SLOT, DEFINITIONS, META, RUNS, SCHEMA_VERSION, STATE_SLOT, TIMERS};
use crate::error::StorageError;

/// The layout this module migrates from.
pub(super) const LAYOUT_2: u64 = 2;

/// Rows converted per pass: the migration holds at most this many old rows in memory.
const CHUNK: usize = 1024;

/// An old `runs` row's key: (namespace, run id, slot).
type RowKey = (String, String, u64);

/// What a migration rewrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Migrated {
    pub runs: usize,
    pub events: usize,
    pub timers: usize,
    pub definitions: u64,
}

/// Migrates a layout-2 database to the current layout in one transaction.
pub(super) fn from_layout_2(db: &Database) -> Result<Migrated, StorageError> {
    let started = std::time::Instant::now();
    let tx = db.begin_write()?;
    let mut done = Migrated::default();
    {
        let mut runs = tx.open_table(RUNS)?;
        let mut definitions = tx.open_table(DEFINITIONS)?;
        let mut after: Option<RowKey> = None;
        loop {
            let chunk = next_chunk(&runs, after.as_ref())?;
            let Some((last, _)) = chunk.last() else {
                break;
            };
            after = Some(last.clone());
            for ((ns, id, slot), old) in chunk {
                let row = match slot {
                    CHECKPOINT_SLOT => continue,
                    STATE_SLOT => {
                        done.runs += 1;
                        let run: layout2::RunV2 = parse(&old, "layout-2 run", &ns, &id, slot)?;
                        let run = run.into_layout3(|d| store(&d.into_layout3(), &mut definitions))?;
                        layout3::encode("run", &run)?
                    }
                    _ => {
                        done.events += 1;
                        let ev: layout2::EventV2 = parse(&old, "layout-2 event", &ns, &id, slot)?;
                        let ev = ev.into_layout3(|d| store(&d.into_layout3(), &mut definitions))?;
                        layout3::encode("event", &ev)?
                    }
                };
                runs.insert((ns.as_str(), id.as_str(), slot), row.as_slice())?;
            }
        }
        done.definitions = definitions.len()?;

        let mut timers = tx.open_table(TIMERS)?;
        let mut old_timers = Vec::new();
        for row in timers.iter()? {
            let (k, v) = row?;
            old_timers.push((k.value(), v.value().to_vec()));
        }
        for ((due, seq), old) in old_timers {
            let timer: layout2::TimerV2 =
                serde_json::from_slice(&old).map_err(|e| StorageError::Corrupt {
                    what: "layout-2 timer",
                    source: format!("row ({due}, {seq}): {e}").into(),
                })?;
            timers.insert(
                (due, seq),
                layout3::encode("timer", &timer.into_layout3())?.as_slice(),
            )?;
            done.timers += 1;
        }
        tx.open_table(META)?.insert("schema", SCHEMA_VERSION)?;
    }
    tx.commit()?;
    tracing::info!(
        from = LAYOUT_2,
        to = SCHEMA_VERSION,
        runs = done.runs,
        events = done.events,
        timers = done.timers,
        definitions = done.definitions,
        ms = started.elapsed().as_millis() as u64,
        "storage layout migrated"
    );
    Ok(done)
}

/// The next rows of `runs` after `after`, copied out so the table can be written.
fn next_chunk(
    runs: &Table<'_, (&'static str, &'static str, u64), &'static [u8]>,
    after: Option<&RowKey>,
) -> Result<Vec<(RowKey, Vec<u8>)>, StorageError> {
    let range = match after {
        Some((ns, id, slot)) => runs.range((ns.as_str(), id.as_str(), *slot)..)?,
        None => runs.range::<(&str, &str, u64)>(..)?,
    };
    let mut chunk = Vec::with_capacity(CHUNK);
    for row in range {
        let (k, v) = row?;
        let (ns, id, slot) = k.value();
        if after.is_some_and(|a| (a.0.as_str(), a.1.as_str(), a.2) == (ns, id, slot)) {
            continue;
        }
        chunk.push(((ns.to_string(), id.to_string(), slot), v.value().to_vec()));
        if chunk.len() == CHUNK {
            break;
        }
    }
    Ok(chunk)
}

fn parse<T: DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
    ns: &str,
    id: &str,
    slot: u64,
) -> Result<T, StorageError> {
    serde_json::from_slice(bytes).map_err(|e| StorageError::Corrupt {
        what,
        source: format!("row ({ns:?}, {id:?}, {slot}): {e}").into(),
    })
}

/// Stores `def` once, keyed by its content (every run of the same definition names
/// the same row), and returns its key.
fn store(
    def: &layout3::Definition,
    table: &mut Table<'_, (&'static str, &'static str, &'static str), &'static [u8]>,
) -> Result<layout3::DefinitionKey, StorageError> {
    let (key, bytes) = layout3::definition_row(def)?;
    let row = (key.workflow_id.as_str(), key.version.as_str(), key.hash.as_str());
    if table.get(row)?.is_none() {
        table.insert(row, bytes.as_slice())?;
    }
    Ok(key)
}
