//! A disk that fails on demand, under redb: the file backend redb writes through,
//! with switches that make every write (and length change) or every sync fail until
//! healed. What a failed write or `fsync` does to the server, and how it recovers
//! when the disk does, is tested with it.

use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, Database, StorageBackend};

/// The switches, shared by every file opened with them (a reopen gets the same ones).
#[derive(Clone, Debug, Default)]
pub struct DiskFaults {
    writes: Arc<AtomicBool>,
    syncs: Arc<AtomicBool>,
    injected: Arc<AtomicU64>,
}

impl DiskFaults {
    /// Makes every write and length change fail (`on`), or work again.
    pub fn fail_writes(&self, on: bool) {
        self.writes.store(on, Ordering::Release);
    }

    /// Makes every sync fail (`on`), or work again. The writes before it still reach
    /// the file, as with a disk whose flush fails after the page cache took the data.
    pub fn fail_syncs(&self, on: bool) {
        self.syncs.store(on, Ordering::Release);
    }

    /// Heals the disk: writes and syncs work again.
    pub fn heal(&self) {
        self.fail_writes(false);
        self.fail_syncs(false);
    }

    /// How many operations failed on purpose so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Acquire)
    }

    /// Opens (or creates) the database at `path` on this disk.
    pub(crate) fn open(&self, path: &Path) -> Result<Database, redb::DatabaseError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| redb::DatabaseError::Storage(redb::StorageError::Io(e)))?;
        let inner = FileBackend::new(file)?;
        Database::builder()
            .set_concurrency_mode(super::concurrency_mode())
            .create_with_backend(FaultyFile {
                inner,
                faults: self.clone(),
            })
    }

    fn check(&self, switch: &AtomicBool, what: &str) -> io::Result<()> {
        if switch.load(Ordering::Acquire) {
            self.injected.fetch_add(1, Ordering::AcqRel);
            return Err(io::Error::other(format!("injected {what} failure")));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: FileBackend,
    faults: DiskFaults,
}

impl StorageBackend for FaultyFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.faults.check(&self.faults.writes, "length change")?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.faults.check(&self.faults.syncs, "sync")?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.faults.check(&self.faults.writes, "write")?;
        self.inner.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
