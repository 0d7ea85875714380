//! A backend that counts its reads (tests only, the `testing` feature): every
//! snapshot taken, every read call on a snapshot, and the rows each call handed
//! back (a state row, each event, each run a listing visited, each stored segment a
//! checkpoint page read, ...), so that a test asserts a request's storage reads
//! against a stated budget: counts, not time. Writes pass through uncounted.

use railyard_model::RunKey;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use railyard_model::Millis;
use railyard_model::auth::ApiKey;
use railyard_model::batch::{Batch, BatchItem};
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, RunState};
use railyard_model::schedule::Schedule;
use railyard_model::trigger::{HookDelivery, KeyHolder, QueuedStart, Trigger};

use crate::backend::{
    Backend, BackendStats, BatchReads, CheckpointAt, CheckpointHead, CheckpointPage, DueTimer, SharedKeys,
    Snapshot, TriggerReads, WriteTx,
};
use crate::{StorageError, StoredTask};

/// What was read since the counts were last taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reads {
    /// Snapshots taken.
    pub snapshots: u64,
    /// Read calls made on them.
    pub calls: u64,
    /// Rows the calls handed back.
    pub rows: u64,
    /// Checkpoint bytes the calls handed back.
    pub checkpoint_bytes: u64,
}

#[derive(Default)]
struct Counts {
    snapshots: AtomicU64,
    calls: AtomicU64,
    rows: AtomicU64,
    checkpoint_bytes: AtomicU64,
}

impl Counts {
    fn read(&self, rows: u64) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows, Ordering::Relaxed);
    }
}

/// `inner`, with its reads counted.
pub struct CountingBackend {
    inner: Arc<dyn Backend>,
    counts: Arc<Counts>,
}

impl CountingBackend {
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            counts: Arc::default(),
        }
    }

    /// The reads since the last call (or since it was made), and zero again.
    pub fn take(&self) -> Reads {
        let c = &self.counts;
        Reads {
            snapshots: c.snapshots.swap(0, Ordering::Relaxed),
            calls: c.calls.swap(0, Ordering::Relaxed),
            rows: c.rows.swap(0, Ordering::Relaxed),
            checkpoint_bytes: c.checkpoint_bytes.swap(0, Ordering::Relaxed),
        }
    }
}

impl Backend for CountingBackend {
    fn ping(&self, within: std::time::Duration) -> Result<(), StorageError> {
        self.inner.ping(within)
    }

    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }

    fn shared_keys(&self) -> Result<Option<SharedKeys>, StorageError> {
        self.inner.shared_keys()
    }

    fn dump_source(&self) -> Option<&dyn crate::dump::DumpSource> {
        self.inner.dump_source()
    }

    fn snapshot(&self) -> Result<Box<dyn Snapshot>, StorageError> {
        self.counts.snapshots.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(CountingSnapshot {
            inner: self.inner.snapshot()?,
            counts: self.counts.clone(),
        }))
    }

    fn write(
        &self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.inner.write(f)
    }

    fn incarnation(&self) -> u64 {
        self.inner.incarnation()
    }
}

struct CountingSnapshot {
    inner: Box<dyn Snapshot>,
    counts: Arc<Counts>,
}

fn some<T>(r: &Result<Option<T>, StorageError>) -> u64 {
    matches!(r, Ok(Some(_))) as u64
}

fn len<T>(r: &Result<Vec<T>, StorageError>) -> u64 {
    r.as_ref().map_or(0, |v| v.len() as u64)
}

impl CountingSnapshot {
    /// Calls `f` with a visitor that counts each row it is handed.
    fn visits<T>(&self, visit: &mut dyn FnMut(T) -> bool, f: impl FnOnce(&mut dyn FnMut(T) -> bool)) {
        let mut rows = 0;
        f(&mut |t| {
            rows += 1;
            visit(t)
        });
        self.counts.read(rows);
    }
}

impl Snapshot for CountingSnapshot {
    fn run(&self, key: &RunKey) -> Result<Option<RunState>, StorageError> {
        let r = self.inner.run(key);
        self.counts.read(some(&r));
        r
    }

    fn history(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        let r = self.inner.history(key, from, limit);
        self.counts.read(len(&r));
        r
    }

    fn checkpoint(&self, key: &RunKey, at: CheckpointAt) -> Result<Vec<u8>, StorageError> {
        let r = self.inner.checkpoint(key, at);
        let bytes = r.as_ref().map_or(0, |b| b.len() as u64);
        self.counts.read(1);
        self.counts.checkpoint_bytes.fetch_add(bytes, Ordering::Relaxed);
        r
    }

    fn checkpoint_head(
        &self,
        key: &RunKey,
        at: CheckpointAt,
    ) -> Result<Option<CheckpointHead>, StorageError> {
        let r = self.inner.checkpoint_head(key, at);
        self.counts.read(some(&r));
        r
    }

    fn checkpoint_page(
        &self,
        key: &RunKey,
        at: CheckpointAt,
        offset: u64,
        limit: usize,
    ) -> Result<CheckpointPage, StorageError> {
        let r = self.inner.checkpoint_page(key, at, offset, limit);
        if let Ok(page) = &r {
            self.counts.read(u64::from(page.rows_read));
            self.counts
                .checkpoint_bytes
                .fetch_add(page.bytes.len() as u64, Ordering::Relaxed);
        }
        r
    }

    fn step_checkpoint_heads(
        &self,
        key: &RunKey,
        steps: u32,
    ) -> Result<Vec<(u32, CheckpointHead)>, StorageError> {
        let r = self.inner.step_checkpoint_heads(key, steps);
        self.counts.read(len(&r));
        r
    }

    fn checkpoint_in_flight_at(
        &self,
        key: &RunKey,
        current_step: usize,
    ) -> Result<CheckpointAt, StorageError> {
        self.counts.read(1);
        self.inner.checkpoint_in_flight_at(key, current_step)
    }

    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        let mut rows = 0;
        let r = self.inner.runs_by_start(ns, from_ms, before, &mut |ms, id, run| {
            rows += 1;
            visit(ms, id, run)
        });
        self.counts.read(rows);
        r
    }

    fn runs_by_term(
        &self,
        ns: &str,
        term: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        let mut rows = 0;
        let r = self
            .inner
            .runs_by_term(ns, term, from_ms, before, &mut |ms, id, run| {
                rows += 1;
                visit(ms, id, run)
            });
        self.counts.read(rows);
        r
    }

    fn term_count(&self, ns: &str, term: &str, cap: u64) -> Result<u64, StorageError> {
        let r = self.inner.term_count(ns, term, cap);
        self.counts.read(*r.as_ref().unwrap_or(&0));
        r
    }

    fn next_term(&self, ns: &str, from: &str, inclusive: bool) -> Result<Option<String>, StorageError> {
        let r = self.inner.next_term(ns, from, inclusive);
        self.counts.read(some(&r));
        r
    }

    fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
        let r = self.inner.children(ns, parent);
        self.counts.read(len(&r));
        r
    }

    fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
        let r = self.inner.ready_tasks();
        self.counts.read(len(&r));
        r
    }

    fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError> {
        let mut r = Ok(());
        let mut visit = |run: RunState| {
            visit(run);
            true
        };
        self.visits(&mut visit, |v| {
            r = self.inner.open_runs(&mut |run| {
                v(run);
            });
        });
        r
    }

    fn open_run_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        let r = self.inner.open_run_counts();
        self.counts.read(r.as_ref().map_or(0, |m| m.len() as u64));
        r
    }

    fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
        let r = self.inner.next_timer_due();
        self.counts.read(some(&r));
        r
    }

    fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError> {
        let r = self.inner.due_timers(now, max);
        self.counts.read(len(&r));
        r
    }

    fn namespaces(&self) -> Result<Vec<String>, StorageError> {
        let r = self.inner.namespaces();
        self.counts.read(len(&r));
        r
    }

    fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError> {
        let r = self.inner.namespace(name);
        self.counts.read(some(&r));
        r
    }

    fn idempotency(&self, ns: &str, key: &str) -> Result<Option<String>, StorageError> {
        let r = self.inner.idempotency(ns, key);
        self.counts.read(some(&r));
        r
    }

    fn max_seq(&self) -> Result<u64, StorageError> {
        self.counts.read(1);
        self.inner.max_seq()
    }

    fn schedule(&self, ns: &str, schedule_id: &str) -> Result<Option<Schedule>, StorageError> {
        let r = self.inner.schedule(ns, schedule_id);
        self.counts.read(some(&r));
        r
    }

    fn schedules(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(Schedule) -> bool,
    ) -> Result<(), StorageError> {
        let mut r = Ok(());
        self.visits(visit, |v| r = self.inner.schedules(ns, after, v));
        r
    }

    fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        let r = self.inner.schedule_counts();
        self.counts.read(r.as_ref().map_or(0, |m| m.len() as u64));
        r
    }

    fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError> {
        let r = self.inner.closed_runs(ns, after, up_to_ms, limit);
        self.counts.read(len(&r));
        r
    }

    fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
        let r = self.inner.api_key(key_id);
        self.counts.read(some(&r));
        r
    }

    fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError> {
        let mut r = Ok(());
        self.visits(visit, |v| r = self.inner.api_keys(after, v));
        r
    }
}

impl TriggerReads for CountingSnapshot {
    fn trigger(&self, ns: &str, id: &str) -> Result<Option<Trigger>, StorageError> {
        let r = self.inner.trigger(ns, id);
        self.counts.read(some(&r));
        r
    }

    fn triggers(
        &self,
        ns: Option<&str>,
        after: &str,
        visit: &mut dyn FnMut(Trigger) -> bool,
    ) -> Result<(), StorageError> {
        let mut r = Ok(());
        self.visits(visit, |v| r = self.inner.triggers(ns, after, v));
        r
    }

    fn hook_delivery(
        &self,
        ns: &str,
        trigger: &str,
        delivery: &str,
    ) -> Result<Option<HookDelivery>, StorageError> {
        let r = self.inner.hook_delivery(ns, trigger, delivery);
        self.counts.read(some(&r));
        r
    }

    fn trigger_key(&self, ns: &str, trigger: &str, key: &str) -> Result<Option<String>, StorageError> {
        let r = self.inner.trigger_key(ns, trigger, key);
        self.counts.read(some(&r));
        r
    }

    fn key_holder(&self, key: &RunKey) -> Result<Option<KeyHolder>, StorageError> {
        let r = self.inner.key_holder(key);
        self.counts.read(some(&r));
        r
    }

    fn queued_starts(
        &self,
        ns: &str,
        trigger: &str,
        key: &str,
        max: usize,
    ) -> Result<Vec<(u64, QueuedStart)>, StorageError> {
        let r = self.inner.queued_starts(ns, trigger, key, max);
        self.counts.read(len(&r));
        r
    }
}

impl BatchReads for CountingSnapshot {
    fn batch(&self, ns: &str, batch_id: &str) -> Result<Option<Batch>, StorageError> {
        let r = self.inner.batch(ns, batch_id);
        self.counts.read(some(&r));
        r
    }

    fn batches(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), StorageError> {
        let mut r = Ok(());
        self.visits(visit, |v| r = self.inner.batches(ns, after, v));
        r
    }

    fn running_batches(&self) -> Result<Vec<(String, String)>, StorageError> {
        let r = self.inner.running_batches();
        self.counts.read(len(&r));
        r
    }

    fn batch_items(
        &self,
        ns: &str,
        batch_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, BatchItem)>, StorageError> {
        let r = self.inner.batch_items(ns, batch_id, from, limit);
        self.counts.read(len(&r));
        r
    }
}

impl crate::backend::WorkflowReads for CountingSnapshot {
    fn registered_workflow(
        &self,
        ns: &str,
        id: &str,
    ) -> Result<Option<railyard_model::workflow::RegisteredWorkflow>, StorageError> {
        let r = self.inner.registered_workflow(ns, id);
        self.counts.read(some(&r));
        r
    }

    fn registered_workflows(
        &self,
        ns: &str,
        visit: &mut dyn FnMut(railyard_model::workflow::RegisteredWorkflow) -> bool,
    ) -> Result<(), StorageError> {
        let mut r = Ok(());
        self.visits(visit, |v| r = self.inner.registered_workflows(ns, v));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBackend;

    #[test]
    fn reads_are_counted_and_taken_once() {
        let counting = CountingBackend::new(Arc::new(MemoryBackend::default()));
        let digest = [1u8; 32];
        counting
            .write(&mut |tx| {
                tx.append_checkpoint(&RunKey::new("ns", "r"), CheckpointAt::Step(0), b"one", &digest)?;
                tx.append_checkpoint(&RunKey::new("ns", "r"), CheckpointAt::Step(0), b"two", &digest)
            })
            .unwrap();
        assert_eq!(counting.take(), Reads::default(), "writes are not counted");
        let snap = counting.snapshot().unwrap();
        assert_eq!(snap.run(&RunKey::new("ns", "r")).unwrap(), None);
        let page = snap
            .checkpoint_page(&RunKey::new("ns", "r"), CheckpointAt::Step(0), 0, 4)
            .unwrap();
        assert_eq!(page.bytes, b"onet");
        assert_eq!(snap.history(&RunKey::new("ns", "r"), 1, 10).unwrap(), vec![]);
        assert_eq!(
            counting.take(),
            Reads {
                snapshots: 1,
                calls: 3,
                rows: u64::from(page.rows_read),
                checkpoint_bytes: 4,
            }
        );
        assert_eq!(counting.take(), Reads::default());
    }
}
