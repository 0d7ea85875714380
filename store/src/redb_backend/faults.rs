//! A disk that fails on demand, under redb: the file backend redb writes through,
//! with switches that make every write (and length change) or every sync fail until
//! healed. What a failed write or `fsync` does to the server, and how it recovers
//! when the disk does, is tested with it. The same switches govern the redo log's
//! files, which can also be made to run out of room, write short, or lose power
//! part-way through an append ([`LogFault`]).

use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, Database, StorageBackend};

/// The switches, shared by every file opened with them (a reopen gets the same ones).
#[derive(Clone, Debug, Default)]
pub struct DiskFaults {
    writes: Arc<AtomicBool>,
    syncs: Arc<AtomicBool>,
    /// Fails the database file's syncs only (the log's work): no checkpoint succeeds.
    database_syncs: Arc<AtomicBool>,
    injected: Arc<AtomicU64>,
    /// The bytes the log may still write, and what happens at the one past them.
    log_budget: Arc<Mutex<Option<(u64, LogFault)>>>,
}

/// What the redo log's write meets once its budget of bytes is spent
/// ([`DiskFaults::fail_log_after`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFault {
    /// The disk is full (`ENOSPC`): the bytes that fit are written, then the write
    /// fails; later writes fail until healed.
    NoSpace,
    /// The write stops short and fails (`EIO`) once; the next write works.
    Short,
    /// The power goes: the bytes that fit reach the file and nothing after them does
    /// (every write and sync of the log and of redb fails until healed).
    Crash,
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

    /// Makes the database file's syncs fail (`on`), or work again, while the redo
    /// log's still work: appends go on, checkpoints fail.
    pub fn fail_database_syncs(&self, on: bool) {
        self.database_syncs.store(on, Ordering::Release);
    }

    /// Heals the disk: writes and syncs work again.
    pub fn heal(&self) {
        self.fail_writes(false);
        self.fail_syncs(false);
        self.fail_database_syncs(false);
        *self.log_budget.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Lets the redo log write `bytes` more bytes, then meets `fault`.
    pub fn fail_log_after(&self, bytes: u64, fault: LogFault) {
        *self.log_budget.lock().unwrap_or_else(|p| p.into_inner()) = Some((bytes, fault));
    }

    /// How many of `len` bytes the log may write now (an error: none, and the
    /// write fails).
    pub(crate) fn log_write(&self, len: usize) -> io::Result<usize> {
        self.check(&self.writes, "write")?;
        let mut budget = self.log_budget.lock().unwrap_or_else(|p| p.into_inner());
        let Some((left, fault)) = *budget else {
            return Ok(len);
        };
        if (len as u64) <= left {
            *budget = Some((left - len as u64, fault));
            return Ok(len);
        }
        self.injected.fetch_add(1, Ordering::AcqRel);
        match fault {
            LogFault::NoSpace => *budget = Some((0, fault)),
            LogFault::Short => *budget = None,
            LogFault::Crash => {
                *budget = Some((0, fault));
                self.fail_writes(true);
                self.fail_syncs(true);
            }
        }
        Ok(left as usize)
    }

    /// The error of a write cut short by [`log_write`](Self::log_write).
    pub(crate) fn log_write_error(&self) -> io::Error {
        let fault = self
            .log_budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|(_, f)| f);
        match fault {
            Some(LogFault::NoSpace) => {
                io::Error::new(io::ErrorKind::StorageFull, "injected: no space left on device")
            }
            _ => io::Error::other("injected short write"),
        }
    }

    /// Whether the log's sync may go ahead.
    pub(crate) fn log_sync(&self) -> io::Result<()> {
        self.check(&self.syncs, "sync")
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
        self.faults.check(&self.faults.database_syncs, "database sync")?;
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
