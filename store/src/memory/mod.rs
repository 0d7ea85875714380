//! The in-memory reference backend: plain ordered maps, one per redb table, behind
//! a mutex. A write transaction works on a copy of the maps and replaces them only
//! on commit, so an abandoned transaction leaves no trace. Simple rather than fast:
//! it exists to check the redb backend against and to inject faults.
//!
//! [`Faults`] makes the Nth write or the Nth commit fail, for testing the writer's
//! failed-batch path.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod batches;
mod triggers;
mod workflows;

use super::StoredTask;
use super::backend::{
    Backend, CheckpointAt, CheckpointDigest, CheckpointHead, DueTimer, Snapshot, TimerKey, WriteTx,
};
use crate::error::StorageError;
use railyard_model::auth::ApiKey;
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, RunState, Timer};
use railyard_model::schedule::Schedule;
use railyard_model::{Millis, RunKey};

/// A row keyed by namespace and a name (an idempotency key, a schedule id).
type Pair = (String, String);

/// The tables, as maps.
#[derive(Clone, Default)]
struct Data {
    runs: BTreeMap<RunKey, RunState>,
    events: BTreeMap<RunKey, BTreeMap<u64, Event>>,
    checkpoints: BTreeMap<CheckpointKey, StoredCheckpoint>,
    open_runs: BTreeSet<RunKey>,
    tasks: BTreeMap<(String, String, u64), String>,
    timers: BTreeMap<TimerKey, Timer>,
    idempotency: BTreeMap<Pair, String>,
    by_start: BTreeSet<(String, Millis, String)>,
    by_close: BTreeSet<(String, Millis, String)>,
    /// (namespace, index term, start ms, run id): `railyard_model::query::index_terms`.
    terms: BTreeSet<(String, String, Millis, String)>,
    children: BTreeSet<(String, String, String)>,
    schedules: BTreeMap<Pair, Schedule>,
    namespaces: BTreeMap<String, Namespace>,
    api_keys: BTreeMap<String, ApiKey>,
    triggers: triggers::TriggerData,
    batches: batches::BatchData,
    workflows: workflows::WorkflowData,
}

/// A run's checkpoint: its segments in order, and the digest of the whole.
#[derive(Clone)]
struct StoredCheckpoint {
    segments: Vec<Vec<u8>>,
    digest: CheckpointDigest,
    merged: u32,
}

fn key(ns: &str, name: &str) -> Pair {
    (ns.to_string(), name.to_string())
}

/// A checkpoint's key: the run, and its step (`None`: [`CheckpointAt::Run`]).
type CheckpointKey = (RunKey, Option<u32>);

fn ckey(run: &RunKey, at: CheckpointAt) -> CheckpointKey {
    let step = match at {
        CheckpointAt::Run => None,
        CheckpointAt::Step(n) => Some(n),
    };
    (run.clone(), step)
}

/// Which operations fail: counted from 1 over the backend's life. Zero disarms.
#[derive(Default)]
pub struct Faults {
    writes: AtomicU64,
    commits: AtomicU64,
    snapshots: AtomicU64,
    fail_write: AtomicU64,
    fail_commit: AtomicU64,
    lose_commit: AtomicU64,
    fail_snapshot: AtomicU64,
    /// Commits that landed with their answer lost: the backend's incarnation.
    lost: AtomicU64,
}

impl Faults {
    /// The `n`th write from now (1: the next one) fails, once.
    pub fn fail_write_in(&self, n: u64) {
        let done = self.writes.load(Ordering::SeqCst);
        self.fail_write.store(done + n, Ordering::SeqCst);
    }

    /// The `n`th commit from now (1: the next one) fails, once.
    pub fn fail_commit_in(&self, n: u64) {
        let done = self.commits.load(Ordering::SeqCst);
        self.fail_commit.store(done + n, Ordering::SeqCst);
    }

    /// The `n`th commit from now lands but answers that the database cannot be
    /// reached, once, as a `COMMIT` whose answer a dying connection lost; the
    /// backend's [`incarnation`](Backend::incarnation) goes up by one.
    pub fn lose_commit_answer_in(&self, n: u64) {
        let done = self.commits.load(Ordering::SeqCst);
        self.lose_commit.store(done + n, Ordering::SeqCst);
    }

    /// The `n`th snapshot from now fails as unreachable, once.
    pub fn fail_snapshot_in(&self, n: u64) {
        let done = self.snapshots.load(Ordering::SeqCst);
        self.fail_snapshot.store(done + n, Ordering::SeqCst);
    }

    /// Writes (row inserts and removals) attempted so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Commits attempted so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }

    fn count(counter: &AtomicU64, fail_at: &AtomicU64, what: &str) -> Result<(), StorageError> {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        if fail_at.load(Ordering::SeqCst) == n {
            return Err(StorageError::Injected(format!("{what} {n} fails")));
        }
        Ok(())
    }

    fn write(&self) -> Result<(), StorageError> {
        Self::count(&self.writes, &self.fail_write, "write")
    }

    /// Before a commit: an error fails it. After it landed: whether to answer
    /// that its answer was lost.
    fn commit(&self) -> Result<bool, StorageError> {
        Self::count(&self.commits, &self.fail_commit, "commit")?;
        Ok(self.lose_commit.load(Ordering::SeqCst) == self.commits.load(Ordering::SeqCst))
    }

    fn snapshot(&self) -> Result<(), StorageError> {
        let n = self.snapshots.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_snapshot.load(Ordering::SeqCst) == n {
            return Err(StorageError::Unavailable(format!("snapshot {n} fails")));
        }
        Ok(())
    }
}

/// The in-memory backend. A new one holds the `default` namespace, like a new
/// database file.
pub struct MemoryBackend {
    data: Mutex<Arc<Data>>,
    /// Held for a whole write transaction: one writer at a time.
    writing: Mutex<()>,
    faults: Arc<Faults>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        let mut data = Data::default();
        let default = railyard_model::namespace::DEFAULT_NAMESPACE.to_string();
        data.namespaces.insert(
            default.clone(),
            Namespace {
                principles: None,
                name: default,
                ..Namespace::default()
            },
        );
        Self {
            data: Mutex::new(Arc::new(data)),
            writing: Mutex::new(()),
            faults: Arc::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder cannot leave the maps half-changed: commits swap whole copies.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryBackend {
    /// The fault plan, to arm failures with.
    pub fn faults(&self) -> Arc<Faults> {
        self.faults.clone()
    }
}

impl Backend for MemoryBackend {
    fn snapshot(&self) -> Result<Box<dyn Snapshot>, StorageError> {
        self.faults.snapshot()?;
        Ok(Box::new(MemorySnapshot(lock(&self.data).clone())))
    }

    fn write(
        &self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let _writing = lock(&self.writing);
        let copy = Data::clone(&lock(&self.data));
        let mut tx = MemoryTx {
            data: copy,
            faults: &self.faults,
        };
        f(&mut tx)?;
        let lost = self.faults.commit()?;
        *lock(&self.data) = Arc::new(tx.data);
        if lost {
            self.faults.lost.fetch_add(1, Ordering::SeqCst);
            return Err(StorageError::Unavailable(
                "the commit's answer was lost (injected)".into(),
            ));
        }
        Ok(())
    }

    fn incarnation(&self) -> u64 {
        self.faults.lost.load(Ordering::SeqCst)
    }
}

struct MemorySnapshot(Arc<Data>);

struct MemoryTx<'a> {
    data: Data,
    faults: &'a Faults,
}

impl Data {
    fn run(&self, run: &RunKey) -> Option<RunState> {
        self.runs.get(run).cloned()
    }

    fn history(&self, run: &RunKey, from: u64, limit: usize) -> Vec<Event> {
        self.events
            .get(run)
            .map(|events| {
                events
                    .range(from.max(1)..)
                    .take(limit)
                    .map(|(_, e)| e.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) {
        let lo = (ns.to_string(), from_ms, String::new());
        let hi = (ns.to_string(), before.0, before.1.to_string());
        if lo >= hi {
            return;
        }
        for (_, ms, id) in self.by_start.range(lo..hi).rev() {
            let Some(run) = self.runs.get(&RunKey::new(ns, id)).cloned() else {
                continue;
            };
            if !visit(*ms, id, run) {
                break;
            }
        }
    }

    fn runs_by_term(
        &self,
        ns: &str,
        term: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) {
        let lo = (ns.to_string(), term.to_string(), from_ms, String::new());
        let hi = (ns.to_string(), term.to_string(), before.0, before.1.to_string());
        if lo >= hi {
            return;
        }
        for (_, _, ms, id) in self.terms.range(lo..hi).rev() {
            let Some(run) = self.runs.get(&RunKey::new(ns, id)).cloned() else {
                continue;
            };
            if !visit(*ms, id, run) {
                break;
            }
        }
    }

    fn term_count(&self, ns: &str, term: &str, cap: u64) -> u64 {
        let lo = (ns.to_string(), term.to_string(), Millis::MIN, String::new());
        let hi = (ns.to_string(), term.to_string(), Millis::MAX, String::new());
        self.terms
            .range(lo..hi)
            .take(usize::try_from(cap).unwrap_or(usize::MAX))
            .count() as u64
    }

    fn next_term(&self, ns: &str, from: &str, inclusive: bool) -> Option<String> {
        let start = if inclusive {
            from.to_string()
        } else {
            format!("{from}\0")
        };
        let lo = (ns.to_string(), start, Millis::MIN, String::new());
        self.terms
            .range(lo..)
            .next()
            .filter(|(n, ..)| n == ns)
            .map(|(_, t, ..)| t.clone())
    }

    /// Applies a save's index-term changes.
    fn retag(&mut self, run: &RunState, removed: &[String], added: &[String]) {
        let (ns, id) = (&run.namespace, &run.run_id);
        for t in removed {
            self.terms
                .remove(&(ns.clone(), t.clone(), run.start_ms, id.clone()));
        }
        for t in added {
            self.terms
                .insert((ns.clone(), t.clone(), run.start_ms, id.clone()));
        }
    }

    fn children(&self, ns: &str, parent: &str) -> Vec<String> {
        self.children
            .iter()
            .filter(|(n, p, _)| n == ns && p == parent)
            .map(|(_, _, c)| c.clone())
            .collect()
    }

    fn ready_tasks(&self) -> Vec<StoredTask> {
        self.tasks
            .iter()
            .map(|((ns, queue, seq), run_id)| StoredTask {
                namespace: ns.clone(),
                queue: queue.clone(),
                task_seq: *seq,
                run_id: run_id.clone(),
            })
            .collect()
    }

    fn due_timers(&self, now: Millis, max: usize) -> Vec<DueTimer> {
        self.timers
            .range(..=(now, u64::MAX))
            .take(max)
            .map(|(k, t)| (*k, Ok(t.clone())))
            .collect()
    }

    fn max_seq(&self) -> u64 {
        let tasks = self.tasks.keys().map(|k| k.2);
        let timers = self.timers.keys().map(|k| k.1);
        tasks.chain(timers).max().unwrap_or(0)
    }
}

/// The read side, shared by the snapshot and the transaction (which reads its
/// own copy, so it sees its own writes).
macro_rules! reads {
    ($data:ident) => {
        fn run(&self, run: &RunKey) -> Result<Option<RunState>, StorageError> {
            Ok(self.$data().run(run))
        }

        fn history(&self, run: &RunKey, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
            Ok(self.$data().history(run, from, limit))
        }

        fn checkpoint(&self, run: &RunKey, at: CheckpointAt) -> Result<Vec<u8>, StorageError> {
            Ok(self
                .$data()
                .checkpoints
                .get(&ckey(run, at))
                .map(|c| c.segments.concat())
                .unwrap_or_default())
        }

        fn checkpoint_head(
            &self,
            run: &RunKey,
            at: CheckpointAt,
        ) -> Result<Option<CheckpointHead>, StorageError> {
            Ok(self
                .$data()
                .checkpoints
                .get(&ckey(run, at))
                .map(|c| CheckpointHead {
                    len: c.segments.iter().map(|s| s.len() as u64).sum(),
                    digest: Some(c.digest),
                    segments: u32::try_from(c.segments.len()).unwrap_or(u32::MAX),
                    merged: c.merged,
                }))
        }

        fn runs_by_start(
            &self,
            ns: &str,
            from_ms: Millis,
            before: (Millis, &str),
            visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
        ) -> Result<(), StorageError> {
            self.$data().runs_by_start(ns, from_ms, before, visit);
            Ok(())
        }

        fn runs_by_term(
            &self,
            ns: &str,
            term: &str,
            from_ms: Millis,
            before: (Millis, &str),
            visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
        ) -> Result<(), StorageError> {
            self.$data().runs_by_term(ns, term, from_ms, before, visit);
            Ok(())
        }

        fn term_count(&self, ns: &str, term: &str, cap: u64) -> Result<u64, StorageError> {
            Ok(self.$data().term_count(ns, term, cap))
        }

        fn next_term(&self, ns: &str, from: &str, inclusive: bool) -> Result<Option<String>, StorageError> {
            Ok(self.$data().next_term(ns, from, inclusive))
        }

        fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
            Ok(self.$data().children(ns, parent))
        }

        fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
            Ok(self.$data().ready_tasks())
        }

        fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError> {
            let d = self.$data();
            for key in &d.open_runs {
                if let Some(run) = d.run(key) {
                    visit(run);
                }
            }
            Ok(())
        }

        fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
            Ok(self.$data().timers.keys().next().map(|k| k.0))
        }

        fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError> {
            Ok(self.$data().due_timers(now, max))
        }

        fn namespaces(&self) -> Result<Vec<String>, StorageError> {
            Ok(self.$data().namespaces.keys().cloned().collect())
        }

        fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError> {
            Ok(self.$data().namespaces.get(name).cloned())
        }

        fn idempotency(&self, ns: &str, k: &str) -> Result<Option<String>, StorageError> {
            Ok(self.$data().idempotency.get(&key(ns, k)).cloned())
        }

        fn max_seq(&self) -> Result<u64, StorageError> {
            Ok(self.$data().max_seq())
        }

        fn schedule(&self, ns: &str, id: &str) -> Result<Option<Schedule>, StorageError> {
            Ok(self.$data().schedules.get(&key(ns, id)).cloned())
        }

        fn schedules(
            &self,
            ns: &str,
            after: &str,
            visit: &mut dyn FnMut(Schedule) -> bool,
        ) -> Result<(), StorageError> {
            use std::ops::Bound;
            let range = self
                .$data()
                .schedules
                .range((Bound::Excluded(key(ns, after)), Bound::Unbounded));
            for ((n, _), s) in range {
                if n != ns || !visit(s.clone()) {
                    break;
                }
            }
            Ok(())
        }

        fn closed_runs(
            &self,
            ns: &str,
            after: Option<(Millis, &str)>,
            up_to_ms: Millis,
            limit: usize,
        ) -> Result<Vec<(Millis, String)>, StorageError> {
            use std::ops::Bound;
            let lo = match after {
                Some((ms, id)) => Bound::Excluded((ns.to_string(), ms, id.to_string())),
                None => Bound::Included((ns.to_string(), Millis::MIN, String::new())),
            };
            Ok(self
                .$data()
                .by_close
                .range((lo, Bound::Unbounded))
                .take_while(|(n, ms, _)| n == ns && *ms <= up_to_ms)
                .take(limit)
                .map(|(_, ms, id)| (*ms, id.clone()))
                .collect())
        }

        fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
            Ok(self.$data().api_keys.get(key_id).cloned())
        }

        fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError> {
            use std::ops::Bound;
            let range = (Bound::Excluded(after.to_string()), Bound::Unbounded);
            for key in self.$data().api_keys.range(range).map(|(_, k)| k) {
                if !visit(key.clone()) {
                    break;
                }
            }
            Ok(())
        }

        fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
            let mut counts = BTreeMap::new();
            for (ns, _) in self.$data().schedules.keys() {
                *counts.entry(ns.clone()).or_insert(0) += 1;
            }
            Ok(counts)
        }
    };
}

impl MemorySnapshot {
    fn data(&self) -> &Data {
        &self.0
    }
}

impl Snapshot for MemorySnapshot {
    reads!(data);
}

impl MemoryTx<'_> {
    fn data(&self) -> &Data {
        &self.data
    }

    /// Counts a write, failing it if the fault plan says so; then the change.
    fn change(&mut self, f: impl FnOnce(&mut Data)) -> Result<(), StorageError> {
        self.faults.write()?;
        f(&mut self.data);
        Ok(())
    }
}

impl Snapshot for MemoryTx<'_> {
    reads!(data);
}

impl WriteTx for MemoryTx<'_> {
    fn save_run(&mut self, run: &RunState, events: &[Event]) -> Result<(), StorageError> {
        self.change(|d| {
            let k = RunKey::new(&run.namespace, &run.run_id);
            let history = d.events.entry(k.clone()).or_default();
            for e in events {
                history.insert(e.id, e.clone());
            }
            d.runs.insert(k, run.clone());
            let (removed, added) = railyard_model::query::index_delta(run, events);
            d.retag(run, &removed, &added);
        })
    }

    fn set_checkpoint(
        &mut self,
        run: &RunKey,
        at: CheckpointAt,
        checkpoint: Option<(&[u8], &CheckpointDigest)>,
    ) -> Result<(), StorageError> {
        self.change(|d| match checkpoint {
            Some((b, digest)) => {
                d.checkpoints.insert(
                    ckey(run, at),
                    StoredCheckpoint {
                        segments: vec![b.to_vec()],
                        digest: *digest,
                        merged: 1,
                    },
                );
            }
            None => {
                d.checkpoints.remove(&ckey(run, at));
            }
        })
    }

    fn append_checkpoint(
        &mut self,
        run: &RunKey,
        at: CheckpointAt,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        self.change(|d| {
            let c = d.checkpoints.entry(ckey(run, at)).or_insert(StoredCheckpoint {
                segments: Vec::new(),
                digest: *digest,
                merged: 1,
            });
            c.segments.push(bytes.to_vec());
            c.digest = *digest;
        })
    }

    fn merge_checkpoint_tail(
        &mut self,
        run: &RunKey,
        at: CheckpointAt,
        from: u32,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        self.change(|d| {
            if let Some(c) = d.checkpoints.get_mut(&ckey(run, at)) {
                let at = (from.max(2) as usize - 1).min(c.segments.len());
                let mut merged = c.segments.split_off(at).concat();
                merged.extend_from_slice(bytes);
                c.segments.push(merged);
                c.digest = *digest;
                c.merged = u32::try_from(c.segments.len()).unwrap_or(u32::MAX);
            }
        })
    }

    fn set_open(&mut self, run: &RunKey, open: bool) -> Result<(), StorageError> {
        self.change(|d| {
            if open {
                d.open_runs.insert(run.clone());
            } else {
                d.open_runs.remove(run);
            }
        })
    }

    fn insert_task(&mut self, ns: &str, queue: &str, seq: u64, run_id: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.tasks.insert((ns.into(), queue.into(), seq), run_id.into());
        })
    }

    fn remove_task(&mut self, ns: &str, queue: &str, seq: u64) -> Result<(), StorageError> {
        self.change(|d| {
            d.tasks.remove(&(ns.into(), queue.into(), seq));
        })
    }

    fn insert_timer(&mut self, k: TimerKey, timer: &Timer) -> Result<(), StorageError> {
        self.change(|d| {
            d.timers.insert(k, timer.clone());
        })
    }

    fn remove_timer(&mut self, k: TimerKey) -> Result<(), StorageError> {
        self.change(|d| {
            d.timers.remove(&k);
        })
    }

    fn index_run(
        &mut self,
        ns: &str,
        start_ms: Millis,
        run_id: &str,
        parent: &str,
    ) -> Result<(), StorageError> {
        self.change(|d| {
            d.by_start.insert((ns.into(), start_ms, run_id.into()));
            if !parent.is_empty() {
                d.children.insert((ns.into(), parent.into(), run_id.into()));
            }
        })
    }

    fn index_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.by_close.insert((ns.into(), close_ms, run_id.into()));
        })
    }

    fn unindex_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.by_close.remove(&(ns.into(), close_ms, run_id.into()));
        })
    }

    fn purge_run(&mut self, run: &RunState) -> Result<(), StorageError> {
        self.change(|d| {
            let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
            let k = RunKey::new(ns, id);
            d.runs.remove(&k);
            d.events.remove(&k);
            d.checkpoints.retain(|(r, _), _| *r != k);
            d.open_runs.remove(&k);
            d.by_start.remove(&(ns.into(), run.start_ms, id.into()));
            d.retag(run, &railyard_model::query::index_terms(run), &[]);
            if let Some(close_ms) = run.close_ms {
                d.by_close.remove(&(ns.into(), close_ms, id.into()));
            }
            d.children.retain(|(n, p, c)| !(n == ns && (c == id || p == id)));
            let start = key(ns, &format!("start:{}", run.request_id));
            if !run.request_id.is_empty() && d.idempotency.get(&start).is_some_and(|r| r == id) {
                d.idempotency.remove(&start);
            }
            let prefix = super::backend::signal_key_prefix(id);
            d.idempotency
                .retain(|(n, k), _| !(n == ns && k.starts_with(&prefix)));
        })
    }

    fn insert_idempotency(&mut self, ns: &str, k: &str, run_id: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.idempotency.insert(key(ns, k), run_id.into());
        })
    }

    fn save_schedule(&mut self, s: &Schedule) -> Result<(), StorageError> {
        self.change(|d| {
            d.schedules.insert(key(&s.namespace, &s.id), s.clone());
        })
    }

    fn delete_schedule(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.schedules.remove(&key(ns, id));
        })
    }

    fn put_api_key(&mut self, k: &ApiKey) -> Result<(), StorageError> {
        self.change(|d| {
            d.api_keys.insert(k.key_id.clone(), k.clone());
        })
    }

    fn put_namespace(&mut self, ns: &Namespace) -> Result<(), StorageError> {
        self.change(|d| {
            d.namespaces.insert(ns.name.clone(), ns.clone());
        })
    }

    fn remove_namespace(&mut self, name: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.namespaces.remove(name);
        })
    }
}
