//! Live output in its own redb file, `<data-dir>/output.redb`: output writes never
//! take `railyard.redb`'s write lock, and never wait behind the writer's commits.
//!
//! Tables: `output` (namespace, run id, offset) → chunk record; `output_heads`
//! (namespace, run id) → head record; `output_quiet` (last write ms, namespace, run
//! id), the runs by their last write, for the retention purge. Each append is one
//! durable commit, so a chunk a watcher was sent is on disk.

use railyard_model::RunKey;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    OutputHead, OutputStore, QuietRun, RunAppend, decode_chunk, decode_head, encode_chunk, encode_head,
};
use crate::error::StorageError;
use crate::redb_backend::OpenError;
use railyard_model::Millis;
use railyard_model::output::OutputChunk;

const CHUNKS: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("output");
const HEADS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("output_heads");
const QUIET: TableDefinition<(i64, &str, &str), ()> = TableDefinition::new("output_quiet");

/// The output file's name in the data directory.
pub const FILE_NAME: &str = "output.redb";

/// Live output in `<data-dir>/output.redb`.
pub struct RedbOutput {
    db: Database,
    path: PathBuf,
}

impl RedbOutput {
    /// Opens (or creates, mode 0600) `<dir>/output.redb` with a page cache of at most
    /// `cache_bytes`, and makes sure its tables exist.
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Self, OpenError> {
        let path = dir.join(FILE_NAME);
        let shown = path.display().to_string();
        crate::redb_backend::make_private(&path).map_err(|source| OpenError::Permissions {
            path: shown.clone(),
            source,
        })?;
        let db = Database::builder()
            .set_cache_size(cache_bytes)
            .set_concurrency_mode(crate::redb_backend::concurrency_mode())
            .create(&path)
            .map_err(|source| match source {
                redb::DatabaseError::DatabaseAlreadyOpen => OpenError::InUse { path: shown.clone() },
                source => OpenError::Database {
                    path: shown.clone(),
                    source,
                },
            })?;
        let out = Self { db, path };
        out.init()
            .map_err(|source| OpenError::Init { path: shown, source })?;
        Ok(out)
    }

    fn init(&self) -> Result<(), StorageError> {
        let tx = self.db.begin_write()?;
        tx.open_table(CHUNKS)?;
        tx.open_table(HEADS)?;
        tx.open_table(QUIET)?;
        tx.commit()?;
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl OutputStore for RedbOutput {
    fn append(&self, batch: &[RunAppend]) -> Result<(), StorageError> {
        let tx = self.db.begin_write()?;
        {
            let mut chunks = tx.open_table(CHUNKS)?;
            let mut heads = tx.open_table(HEADS)?;
            let mut quiet = tx.open_table(QUIET)?;
            for a in batch {
                let (ns, run) = (a.ns.as_str(), a.run_id.as_str());
                let old = heads
                    .get((ns, run))?
                    .map(|v| decode_head(v.value()))
                    .transpose()?;
                if let Some(old) = old {
                    quiet.remove((old.last_ms, ns, run))?;
                }
                for c in &a.chunks {
                    chunks.insert((ns, run, c.offset), encode_chunk(c)?.as_slice())?;
                }
                heads.insert((ns, run), encode_head(&a.head)?.as_slice())?;
                quiet.insert((a.head.last_ms, ns, run), ())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn head(&self, key: &RunKey) -> Result<Option<OutputHead>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let tx = self.db.begin_read()?;
        let heads = tx.open_table(HEADS)?;
        heads
            .get((ns, run_id))?
            .map(|v| decode_head(v.value()))
            .transpose()
    }

    fn read(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<OutputChunk>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let tx = self.db.begin_read()?;
        let chunks = tx.open_table(CHUNKS)?;
        let mut out = Vec::new();
        for row in chunks.range((ns, run_id, from)..=(ns, run_id, u64::MAX))? {
            if out.len() >= limit {
                break;
            }
            out.push(decode_chunk(row?.1.value())?);
        }
        Ok(out)
    }

    fn quiet_runs(
        &self,
        up_to_ms: Millis,
        after: Option<&QuietRun>,
        limit: usize,
    ) -> Result<Vec<QuietRun>, StorageError> {
        let tx = self.db.begin_read()?;
        let quiet = tx.open_table(QUIET)?;
        let mut out = Vec::new();
        let from = after.map_or((Millis::MIN, "", ""), |a| {
            (a.last_ms, a.ns.as_str(), a.run_id.as_str())
        });
        for row in quiet.range(from..=(up_to_ms, "\u{10FFFF}", "\u{10FFFF}"))? {
            let row = row?;
            let (last_ms, ns, run_id) = row.0.value();
            let q = QuietRun {
                last_ms,
                ns: ns.to_string(),
                run_id: run_id.to_string(),
            };
            if after.is_some_and(|a| q <= *a) {
                continue;
            }
            out.push(q);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    fn purge(&self, runs: &[RunKey]) -> Result<(), StorageError> {
        let tx = self.db.begin_write()?;
        {
            let mut chunks = tx.open_table(CHUNKS)?;
            let mut heads = tx.open_table(HEADS)?;
            let mut quiet = tx.open_table(QUIET)?;
            for key in runs {
                let (ns, run) = (key.namespace.as_str(), key.run_id.as_str());
                chunks.retain_in((ns, run, 0)..=(ns, run, u64::MAX), |_, _| false)?;
                if let Some(old) = heads.remove((ns, run))? {
                    let old = decode_head(old.value())?;
                    quiet.remove((old.last_ms, ns, run))?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }
}
