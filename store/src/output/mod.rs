//! Live output storage: each run's output chunks ([`OutputChunk`]) and a head row
//! per run, apart from the event history and written outside the writer's
//! transactions, so output never slows the durable path.
//!
//! The server batches appends (a few writes a second in all, each carrying every
//! run's new chunks) and answers watchers from here. Three implementations: the
//! redb file `output.redb` next to `railyard.redb` ([`redb::RedbOutput`]; a separate
//! file, so output writes never take the history's write lock), the in-memory
//! reference ([`MemoryOutput`]), and PostgreSQL's (`railyard-store-postgres`, its own
//! table and transactions).
//!
//! Output is not in `store export` dumps: it is for watching, and expires a few days
//! after its run closes.

#[cfg(any(test, feature = "testing"))]
pub mod conformance;
mod record;
pub mod redb;

use railyard_model::RunKey;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use railyard_model::Millis;
use railyard_model::output::OutputChunk;

use crate::error::StorageError;

pub use record::{decode_chunk, decode_head, encode_chunk, encode_head};

/// Where a run's output stands: what the server needs to go on appending after a
/// restart, and the retention purge to find runs whose output went quiet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputHead {
    /// The offset the next chunk gets (1 for a run without output).
    pub next_offset: u64,
    /// Weight of the chunks kept, for the run's cap.
    pub run_bytes: u64,
    /// The attempt the last chunk belongs to.
    pub step: String,
    pub attempt: u32,
    /// Weight of that attempt's chunks kept, for the attempt's cap.
    pub attempt_bytes: u64,
    /// Chunks of that attempt dropped past a cap, and their weight.
    pub dropped_chunks: u64,
    pub dropped_bytes: u64,
    /// How many of the dropped chunks the last drop marker counted.
    pub marked_chunks: u64,
    /// When the last marker was written (0: none).
    pub marked_ms: Millis,
    /// When the run's output was last written.
    pub last_ms: Millis,
}

/// One run's part of an append: its new chunks, in offset order, and its head after them.
#[derive(Debug, Clone)]
pub struct RunAppend {
    pub ns: String,
    pub run_id: String,
    pub chunks: Vec<OutputChunk>,
    pub head: OutputHead,
}

/// A run whose output was last written at `last_ms` (the retention purge's candidates).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct QuietRun {
    pub last_ms: Millis,
    pub ns: String,
    pub run_id: String,
}

/// Storage of live output. Every call is its own short transaction.
pub trait OutputStore: Send + Sync {
    /// Writes every run's chunks and its new head, in one transaction.
    fn append(&self, batch: &[RunAppend]) -> Result<(), StorageError>;

    /// The run's head (`None`: no output kept).
    fn head(&self, key: &RunKey) -> Result<Option<OutputHead>, StorageError>;

    /// Chunks with offsets `from..`, in order, at most `limit`.
    fn read(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<OutputChunk>, StorageError>;

    /// Runs whose output was last written at or before `up_to_ms`, after `after`,
    /// oldest first, at most `limit`.
    fn quiet_runs(
        &self,
        up_to_ms: Millis,
        after: Option<&QuietRun>,
        limit: usize,
    ) -> Result<Vec<QuietRun>, StorageError>;

    /// Removes the runs' output and heads.
    fn purge(&self, runs: &[RunKey]) -> Result<(), StorageError>;
}

/// The in-memory reference implementation.
#[derive(Default)]
pub struct MemoryOutput {
    data: Mutex<MemoryData>,
}

#[derive(Default)]
struct MemoryData {
    chunks: BTreeMap<RunKey, BTreeMap<u64, OutputChunk>>,
    heads: BTreeMap<RunKey, OutputHead>,
    quiet: BTreeSet<QuietRun>,
}

impl MemoryOutput {
    fn data(&self) -> std::sync::MutexGuard<'_, MemoryData> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl OutputStore for MemoryOutput {
    fn append(&self, batch: &[RunAppend]) -> Result<(), StorageError> {
        let mut d = self.data();
        for a in batch {
            let key = RunKey::new(&a.ns, &a.run_id);
            if let Some(old) = d.heads.get(&key).cloned() {
                d.quiet.remove(&QuietRun {
                    last_ms: old.last_ms,
                    ns: a.ns.clone(),
                    run_id: a.run_id.clone(),
                });
            }
            let rows = d.chunks.entry(key.clone()).or_default();
            for c in &a.chunks {
                rows.insert(c.offset, c.clone());
            }
            d.quiet.insert(QuietRun {
                last_ms: a.head.last_ms,
                ns: a.ns.clone(),
                run_id: a.run_id.clone(),
            });
            d.heads.insert(key, a.head.clone());
        }
        Ok(())
    }

    fn head(&self, key: &RunKey) -> Result<Option<OutputHead>, StorageError> {
        Ok(self.data().heads.get(key).cloned())
    }

    fn read(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<OutputChunk>, StorageError> {
        let d = self.data();
        Ok(d.chunks
            .get(key)
            .map(|rows| rows.range(from..).take(limit).map(|(_, c)| c.clone()).collect())
            .unwrap_or_default())
    }

    fn quiet_runs(
        &self,
        up_to_ms: Millis,
        after: Option<&QuietRun>,
        limit: usize,
    ) -> Result<Vec<QuietRun>, StorageError> {
        let d = self.data();
        Ok(d.quiet
            .iter()
            .filter(|q| after.is_none_or(|a| *q > a))
            .take_while(|q| q.last_ms <= up_to_ms)
            .take(limit)
            .cloned()
            .collect())
    }

    fn purge(&self, runs: &[RunKey]) -> Result<(), StorageError> {
        let mut d = self.data();
        for key in runs {
            d.chunks.remove(key);
            if let Some(head) = d.heads.remove(key) {
                d.quiet.remove(&QuietRun {
                    last_ms: head.last_ms,
                    ns: key.namespace.clone(),
                    run_id: key.run_id.clone(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
