//! The storage boundary: what the readers and the writer need from a database, in
//! model types. Encoding stays inside each implementation ([`super::redb_backend`] for the
//! real tables, [`super::memory`] as the reference).
//!
//! Reads go through a [`Snapshot`], a consistent view that never waits for the
//! writer. Writes go through [`Backend::write`]: the writer's closure gets a
//! [`WriteTx`] and the backend commits when it returns `Ok` and abandons every
//! change when it returns `Err`.

use std::collections::BTreeMap;

use crate::error::StorageError;
use railyard_model::auth::ApiKey;
use railyard_model::batch::{Batch, BatchItem};
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, RunState, Timer};
use railyard_model::schedule::Schedule;
use railyard_model::{Millis, RunKey};

use super::StoredTask;
use railyard_model::trigger::{HookDelivery, KeyHolder, QueuedStart, Trigger};
use railyard_model::workflow::RegisteredWorkflow;

/// A checkpoint's digest (the server computes it: `railyard_proto::checkpoint`; the
/// store only keeps it).
pub type CheckpointDigest = [u8; 32];

/// What is stored of a run's checkpoint besides its bytes: enough to check the base of
/// an appending heartbeat without reading the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointHead {
    /// The whole checkpoint's length in bytes.
    pub len: u64,
    /// Its digest as of its last write; `None` for a checkpoint written before
    /// checkpoints had digests (the reader derives it from the bytes).
    pub digest: Option<CheckpointDigest>,
    /// How many segments it is stored as (1 for a checkpoint written whole).
    pub segments: u32,
    /// How many of them, from the first, are compacted (the first, and each tail
    /// merged into one by [`WriteTx::merge_checkpoint_tail`]); the rest are the tail,
    /// one per append.
    pub merged: u32,
}

/// A page of a run's checkpoint ([`Snapshot::checkpoint_page`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointPage {
    /// The whole checkpoint's length (0: none is kept).
    pub total: u64,
    /// The bytes from the page's offset, at most its limit.
    pub bytes: Vec<u8>,
    /// Stored rows read for it (the head and the segments up to the page's end).
    pub rows_read: u32,
}

impl CheckpointPage {
    /// The page `offset..offset + limit` of a whole checkpoint held in memory.
    pub fn of(whole: &[u8], offset: u64, limit: usize, rows_read: u32) -> Self {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(whole.len());
        let end = start.saturating_add(limit).min(whole.len());
        Self {
            total: whole.len() as u64,
            bytes: whole[start..end].to_vec(),
            rows_read,
        }
    }
}

/// Where a checkpoint is stored. Each step's is kept apart from the start, so that
/// ending a step leaves its checkpoint where it is, as the step's transcript, with
/// no bytes copied; [`CheckpointAt::Run`] is the one per run that releases before
/// it kept (the checkpoint of a step in flight across the upgrade, read and grown
/// where it is, dropped when its step ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointAt {
    /// The run's single checkpoint of older releases.
    Run,
    /// Step `n`'s (its index in the run's definition).
    Step(u32),
}

impl CheckpointAt {
    /// Step `index`'s place.
    pub fn step(index: usize) -> Self {
        Self::Step(u32::try_from(index).unwrap_or(u32::MAX))
    }
}

/// A `timers` row's key: (due ms, sequence number).
pub type TimerKey = (Millis, u64);

/// A due timer as read: its key, and the timer or why it cannot be read (an
/// unreadable timer is dropped by whoever fires it, not fatal to the batch).
pub type DueTimer = (TimerKey, Result<Timer, StorageError>);

/// The idempotency key of a signal: per run, so that purging the run finds its
/// signals' keys by prefix ([`signal_key_prefix`]). Run ids never hold `/`.
pub fn signal_key(run_id: &str, request_id: &str) -> String {
    format!("{}{request_id}", signal_key_prefix(run_id))
}

/// What every signal idempotency key of `run_id` starts with.
pub fn signal_key_prefix(run_id: &str) -> String {
    format!("signal/{run_id}/")
}

/// A consistent read view of the tables.
pub trait Snapshot: TriggerReads + BatchReads + WorkflowReads {
    /// The state row of a run.
    fn run(&self, key: &RunKey) -> Result<Option<RunState>, StorageError>;

    /// Events `from..` of a run (numbered from 1), at most `limit`.
    fn history(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<Event>, StorageError>;

    /// The checkpoint stored `at` the run, whole (its segments concatenated; empty
    /// when none).
    fn checkpoint(&self, key: &RunKey, at: CheckpointAt) -> Result<Vec<u8>, StorageError>;

    /// What is stored of the checkpoint `at` the run besides its bytes (`None`: none).
    fn checkpoint_head(&self, key: &RunKey, at: CheckpointAt)
    -> Result<Option<CheckpointHead>, StorageError>;

    /// Bytes `offset..offset + limit` of the checkpoint `at` the run and its whole
    /// length, reading its segments in order only up to the page's end, never the
    /// whole checkpoint into memory. The default (the reference backend) reads it whole.
    fn checkpoint_page(
        &self,
        key: &RunKey,
        at: CheckpointAt,
        offset: u64,
        limit: usize,
    ) -> Result<CheckpointPage, StorageError> {
        let whole = self.checkpoint(key, at)?;
        Ok(CheckpointPage::of(&whole, offset, limit, 1))
    }

    /// The heads of the checkpoints stored for steps `0..steps` of the run, in step
    /// order (one point read per step by default).
    fn step_checkpoint_heads(
        &self,
        key: &RunKey,
        steps: u32,
    ) -> Result<Vec<(u32, CheckpointHead)>, StorageError> {
        let mut out = Vec::new();
        for step in 0..steps {
            if let Some(head) = self.checkpoint_head(key, CheckpointAt::Step(step))? {
                out.push((step, head));
            }
        }
        Ok(out)
    }

    /// Where the checkpoint of the run's step in flight (`current_step`) is: where an
    /// older release kept it, when one is there, else the step's own place.
    fn checkpoint_in_flight_at(
        &self,
        key: &RunKey,
        current_step: usize,
    ) -> Result<CheckpointAt, StorageError> {
        Ok(match self.checkpoint_head(key, CheckpointAt::Run)? {
            Some(_) => CheckpointAt::Run,
            None => CheckpointAt::step(current_step),
        })
    }

    /// Runs of `ns` started at or after `from_ms` and strictly before `before`
    /// (start ms, run id), newest first, until `visit` returns false.
    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError>;

    /// Runs of `ns` indexed under `term` (one of [`railyard_model::query::index_terms`])
    /// started at or after `from_ms` and strictly before `before` (start ms, run id),
    /// newest first, until `visit` returns false. Every backend keeps this index in
    /// the transaction that saves the run ([`WriteTx::save_run`], and
    /// [`WriteTx::purge_run`]).
    fn runs_by_term(
        &self,
        ns: &str,
        term: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError>;

    /// How many runs of `ns` are indexed under `term`, counting index entries only
    /// (no run is read) and at most `cap` of them.
    fn term_count(&self, ns: &str, term: &str, cap: u64) -> Result<u64, StorageError>;

    /// The smallest index term of `ns` at `from` (when `inclusive`) or after it, if
    /// any: walking the distinct terms of a range (a search attribute's `<`, `>`,
    /// `STARTS_WITH`) one seek each, without reading runs.
    fn next_term(&self, ns: &str, from: &str, inclusive: bool) -> Result<Option<String>, StorageError>;

    /// Ids of the runs started by `parent`, in id order.
    fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError>;

    /// Every ready task, in (namespace, queue, sequence) order.
    fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError>;

    /// The state of every open run.
    fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError>;

    /// Open runs per namespace, every namespace listed (zero included), for
    /// `/metrics`. The default decodes every open run; a backend that can count
    /// keys alone overrides it.
    fn open_run_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        let mut counts: BTreeMap<String, u64> = self.namespaces()?.into_iter().map(|ns| (ns, 0)).collect();
        self.open_runs(&mut |run| *counts.entry(run.namespace).or_insert(0) += 1)?;
        Ok(counts)
    }

    /// Due time of the earliest timer.
    fn next_timer_due(&self) -> Result<Option<Millis>, StorageError>;

    /// At most `max` timers due at `now`, earliest first.
    fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError>;

    /// Names of every namespace.
    fn namespaces(&self) -> Result<Vec<String>, StorageError>;

    /// One namespace.
    fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError>;

    /// The run an idempotency key (`start:` / `signal:` + request id) points at.
    fn idempotency(&self, ns: &str, key: &str) -> Result<Option<String>, StorageError>;

    /// The highest task or timer sequence number in use (0 when none).
    fn max_seq(&self) -> Result<u64, StorageError>;

    /// A schedule.
    fn schedule(&self, ns: &str, schedule_id: &str) -> Result<Option<Schedule>, StorageError>;

    /// The schedules of `ns` whose ids sort after `after`, in id order, until
    /// `visit` returns false.
    fn schedules(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(Schedule) -> bool,
    ) -> Result<(), StorageError>;

    /// Schedules per namespace (namespaces without any are left out), for `/metrics`.
    fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError>;
    /// Closed runs of `ns` by close time (close ms, run id), oldest first: those
    /// closed at or before `up_to_ms` and after `after` (exclusive), at most `limit`.
    /// The retention purge finds its candidates here, never by scanning runs.
    fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError>;

    /// The API key stored under `key_id`.
    fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError>;

    /// API keys with ids after `after`, in id order, until `visit` returns false.
    fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError>;
}

/// A write transaction: reads see its own writes.
pub trait WriteTx: Snapshot + TriggerWrites + BatchWrites + WorkflowWrites {
    /// Writes a run's state row and appends its new events, together, and keeps its
    /// index terms ([`railyard_model::query::index_delta`]) in step.
    fn save_run(&mut self, run: &RunState, events: &[Event]) -> Result<(), StorageError>;

    /// Saves (`Some`: the bytes and their digest) or clears (`None`) the checkpoint
    /// `at` the run, replacing all its segments.
    fn set_checkpoint(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        checkpoint: Option<(&[u8], &CheckpointDigest)>,
    ) -> Result<(), StorageError>;

    /// Appends `bytes` to the checkpoint `at` the run as a new segment (the first,
    /// when there is none), writing O(`bytes`); `digest` is the whole checkpoint's
    /// after it. The caller decides when to compact
    /// ([`WriteTx::merge_checkpoint_tail`], or a full [`WriteTx::set_checkpoint`]).
    fn append_checkpoint(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError>;

    /// Appends `bytes` by merging them with segments `from..` (counted from 1; `from`
    /// at least 2, the first segment stays) into one segment, the new last, which
    /// counts as compacted (`merged` becomes `from`); `digest` is the whole's after.
    fn merge_checkpoint_tail(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        from: u32,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError>;

    /// Adds the run to, or removes it from, the open runs.
    fn set_open(&mut self, key: &RunKey, open: bool) -> Result<(), StorageError>;

    /// Adds a ready task row.
    fn insert_task(&mut self, ns: &str, queue: &str, seq: u64, run_id: &str) -> Result<(), StorageError>;

    /// Removes a ready task row (absent is fine).
    fn remove_task(&mut self, ns: &str, queue: &str, seq: u64) -> Result<(), StorageError>;

    /// Adds a durable timer row.
    fn insert_timer(&mut self, key: TimerKey, timer: &Timer) -> Result<(), StorageError>;

    /// Removes a timer row (absent is fine).
    fn remove_timer(&mut self, key: TimerKey) -> Result<(), StorageError>;

    /// Indexes a new run: by start time, and under its parent when it has one.
    fn index_run(
        &mut self,
        ns: &str,
        start_ms: Millis,
        run_id: &str,
        parent: &str,
    ) -> Result<(), StorageError>;

    /// Indexes a run that has just closed, by its close time.
    fn index_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError>;

    /// Removes a closed run whole: its state row, history and checkpoints, its
    /// entries in the start, close, term and children indexes, and the idempotency keys
    /// pointing at it (its start's, and its signals', `signal/<run id>/...`).
    fn purge_run(&mut self, run: &RunState) -> Result<(), StorageError>;

    /// Removes a run's close-index entry (absent is fine): for an entry whose run
    /// is gone.
    fn unindex_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError>;

    /// Records that an idempotency key points at `run_id`.
    fn insert_idempotency(&mut self, ns: &str, key: &str, run_id: &str) -> Result<(), StorageError>;

    /// Writes a schedule's row (new or changed).
    fn save_schedule(&mut self, schedule: &Schedule) -> Result<(), StorageError>;

    /// Removes a schedule's row (absent is fine).
    fn delete_schedule(&mut self, ns: &str, schedule_id: &str) -> Result<(), StorageError>;
    /// Writes an API key's row (a new key, or a revoked one).
    fn put_api_key(&mut self, key: &ApiKey) -> Result<(), StorageError>;

    /// Writes a namespace's row.
    fn put_namespace(&mut self, ns: &Namespace) -> Result<(), StorageError>;

    /// Removes a namespace's row (absent is fine).
    fn remove_namespace(&mut self, name: &str) -> Result<(), StorageError>;
}

/// The trigger tables' reads (a part of [`Snapshot`]).
pub trait TriggerReads {
    /// A trigger.
    fn trigger(&self, ns: &str, id: &str) -> Result<Option<Trigger>, StorageError>;

    /// The triggers of `ns` (of every namespace when `None`) whose ids sort after
    /// `after`, in (namespace, id) order, until `visit` returns false.
    fn triggers(
        &self,
        ns: Option<&str>,
        after: &str,
        visit: &mut dyn FnMut(Trigger) -> bool,
    ) -> Result<(), StorageError>;

    /// The delivery remembered under this delivery id.
    fn hook_delivery(
        &self,
        ns: &str,
        trigger: &str,
        delivery: &str,
    ) -> Result<Option<HookDelivery>, StorageError>;

    /// The run holding a concurrency key.
    fn trigger_key(&self, ns: &str, trigger: &str, key: &str) -> Result<Option<String>, StorageError>;

    /// The concurrency key a run holds.
    fn key_holder(&self, run: &RunKey) -> Result<Option<KeyHolder>, StorageError>;

    /// The first `max` starts waiting on a key, in arrival order, with their
    /// sequence numbers.
    fn queued_starts(
        &self,
        ns: &str,
        trigger: &str,
        key: &str,
        max: usize,
    ) -> Result<Vec<(u64, QueuedStart)>, StorageError>;
}

/// The trigger tables' writes (a part of [`WriteTx`]).
pub trait TriggerWrites {
    /// Writes a trigger's row (new or changed).
    fn save_trigger(&mut self, t: &Trigger) -> Result<(), StorageError>;

    /// Removes a trigger's row (absent is fine).
    fn delete_trigger(&mut self, ns: &str, id: &str) -> Result<(), StorageError>;

    /// Remembers a delivery id (and indexes it by time, for the purge).
    fn put_hook_delivery(
        &mut self,
        ns: &str,
        trigger: &str,
        delivery: &str,
        d: &HookDelivery,
    ) -> Result<(), StorageError>;

    /// Forgets at most `max` deliveries received before `before`, oldest first;
    /// answers how many.
    fn purge_hook_deliveries(&mut self, before: Millis, max: usize) -> Result<usize, StorageError>;

    /// Sets (`Some`) or clears the run holding a concurrency key.
    fn set_trigger_key(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        run_id: Option<&str>,
    ) -> Result<(), StorageError>;

    /// Sets (`Some`) or clears the key a run holds.
    fn set_key_holder(&mut self, run: &RunKey, holder: Option<&KeyHolder>) -> Result<(), StorageError>;

    /// Adds a start at the end of a key's queue; answers its sequence number (one
    /// past the key's last, so arrival order holds across restarts).
    fn push_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        q: &QueuedStart,
    ) -> Result<u64, StorageError>;

    /// Removes a waiting start (absent is fine).
    fn remove_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        seq: u64,
    ) -> Result<(), StorageError>;
}

/// The batch tables' reads (a part of [`Snapshot`]): `batches` (headers),
/// `batch_items` (one matched run each, by index) and the running batches.
pub trait BatchReads {
    /// A batch's header.
    fn batch(&self, ns: &str, batch_id: &str) -> Result<Option<Batch>, StorageError>;

    /// The batches of `ns` whose ids sort after `after`, in id order, until `visit`
    /// returns false.
    fn batches(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), StorageError>;

    /// (namespace, batch id) of every running batch, in that order.
    fn running_batches(&self) -> Result<Vec<(String, String)>, StorageError>;

    /// Items `from..` of a batch (by index, from 0), at most `limit`.
    fn batch_items(
        &self,
        ns: &str,
        batch_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, BatchItem)>, StorageError>;
}

/// The batch tables' writes (a part of [`WriteTx`]).
pub trait BatchWrites {
    /// Writes a batch's header (new or changed), and keeps it among the running
    /// batches exactly while its state is running.
    fn save_batch(&mut self, b: &Batch) -> Result<(), StorageError>;

    /// Writes one item of a batch.
    fn put_batch_item(
        &mut self,
        ns: &str,
        batch_id: &str,
        index: u64,
        item: &BatchItem,
    ) -> Result<(), StorageError>;

    /// Deletes a batch a slice at a time: up to `max_items` of its items (lowest
    /// indexes first), then, once none is left, its header (and its running entry).
    /// Answers the items deleted and whether the header is gone (a batch that does
    /// not exist is gone). Called by the retention purge on finished batches only.
    fn purge_batch(
        &mut self,
        ns: &str,
        batch_id: &str,
        max_items: usize,
    ) -> Result<(usize, bool), StorageError>;
}

/// The `workflows` table's reads (a part of [`Snapshot`]): the definitions
/// registered from code, by namespace and workflow id.
pub trait WorkflowReads {
    /// The workflow `id` registered in `ns`.
    fn registered_workflow(&self, ns: &str, id: &str) -> Result<Option<RegisteredWorkflow>, StorageError>;

    /// The workflows registered in `ns`, in id order, until `visit` returns false.
    fn registered_workflows(
        &self,
        ns: &str,
        visit: &mut dyn FnMut(RegisteredWorkflow) -> bool,
    ) -> Result<(), StorageError>;
}

/// The `workflows` table's writes (a part of [`WriteTx`]).
pub trait WorkflowWrites {
    /// Writes a registration (new or changed) and, unless the `definitions` table has
    /// it, its definition's row, which stays when the registration changes or goes
    /// (runs name it).
    fn put_registered_workflow(&mut self, w: &RegisteredWorkflow) -> Result<(), StorageError>;

    /// Removes a registration (absent is fine).
    fn delete_registered_workflow(&mut self, ns: &str, id: &str) -> Result<(), StorageError>;
}

/// Secret keys a database keeps for the servers that share it: the task-token
/// signing keys. Opaque bytes here; what signs with them is the server's business.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedKeys {
    /// Key id and key bytes, oldest first; every one verifies.
    pub keys: Vec<(String, Vec<u8>)>,
    /// The id of the key that signs (one of `keys`).
    pub active: String,
}

impl std::fmt::Debug for SharedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key bytes.
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("SharedKeys")
            .field("keys", &ids)
            .field("active", &self.active)
            .finish()
    }
}

/// What a backend says of itself for `/metrics`: plain numbers, read at scrape time.
/// An embedded database has none of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// The connection pool, when there is one.
    pub pool: Option<PoolStats>,
    /// Write transactions run again because the database asked, by cause
    /// (`serialization`, `deadlock`), since the backend opened.
    pub retries: Vec<(&'static str, u64)>,
    /// This server's claim on the database, when it makes one.
    pub claim: Option<ClaimStats>,
}

/// A connection pool's use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Most connections it may open.
    pub max: u64,
    /// Connections open.
    pub open: u64,
    /// Connections handed out.
    pub in_use: u64,
    /// Callers waiting for a connection.
    pub waiting: u64,
}

/// A server's claim on a shared database (its writer lease).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimStats {
    /// The id this server claimed the database as.
    pub node: String,
    /// The claim's epoch.
    pub epoch: i64,
    /// Whether it still holds the claim (false once another node took it).
    pub held: bool,
    /// Renewals of the claim (each write transaction renews it, and a timer while idle).
    pub renewals: u64,
    /// Renewals that found another node holding the claim (at most one: the server
    /// stops writing then).
    pub conflicts: u64,
}

/// A database the server can run on.
pub trait Backend: Send + Sync {
    /// Checks that the database answers, within `within`: for a database reached
    /// over the network, a trivial query on a connection of the pool; an embedded one
    /// always answers. Also fails once this server lost its claim on the database.
    fn ping(&self, within: std::time::Duration) -> Result<(), StorageError> {
        let _ = within;
        Ok(())
    }

    /// The backend's own numbers for `/metrics` (none for an embedded database).
    fn stats(&self) -> BackendStats {
        BackendStats::default()
    }

    /// The task-token signing keys, when this database keeps them (one several
    /// servers share, so that a token one signs verifies on every other), read
    /// afresh; `None`: it keeps none, and the server keeps its own in a file (redb,
    /// memory).
    fn shared_keys(&self) -> Result<Option<SharedKeys>, StorageError> {
        Ok(None)
    }

    /// The store as a dump's source, when the server exports it itself
    /// (`railyard store export --from-server`): a database only this process may
    /// open (redb). `None`: it is exported directly (PostgreSQL), or not at all.
    fn dump_source(&self) -> Option<&dyn crate::dump::DumpSource> {
        None
    }

    /// A consistent read view.
    fn snapshot(&self) -> Result<Box<dyn Snapshot>, StorageError>;

    /// Runs `f` in one write transaction and commits durably when it returns `Ok`;
    /// on `Err` (its own or the commit's) nothing of it is kept.
    ///
    /// A backend over a database that can ask for a transaction to be retried (a
    /// serialization failure, a deadlock) may run `f` again in a fresh transaction:
    /// each run of `f` must start from scratch, or fail.
    fn write(
        &self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StorageError>,
    ) -> Result<(), StorageError>;

    /// Counts the times the backend reopened its database after a failure (0 for a
    /// backend that never does). A commit that answered an error may still be found
    /// after a reopen (its sync failed, its pages did not), so whoever keeps state
    /// derived from the tables rebuilds it when this changes.
    fn incarnation(&self) -> u64 {
        0
    }
}
