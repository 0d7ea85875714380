//! The single writer. Every mutation is a command (one type per file in
//! `commands/`); the writer thread takes all commands waiting, applies them in one
//! write transaction through the storage [`Backend`](railyard_store::Backend), commits durably,
//! and only then applies the in-memory effects (matching, watchers, lease deadlines,
//! timer wake-ups) and answers each caller. While one commit syncs, the next batch
//! queues up: that is the group commit.
//!
//! A command that is refused (bad lease, closed run ...) writes nothing: the model
//! validates before any row is touched. A storage error fails the whole batch, and
//! every caller in it gets the error: nothing of it was committed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

mod commands;
mod cx;
mod limits;
#[cfg(test)]
mod tests;

use commands::Answer;
use cx::Transition;

pub(crate) use commands::batch::not_found as batch_not_found;
pub(crate) use commands::schedule::not_found as schedule_not_found;
pub(crate) use commands::trigger::not_found as trigger_not_found;
/// Every command's public types (the commands callers build, and what they answer)
/// at `writer::`, whichever file defines them.
pub use commands::*;
pub(crate) use cx::Cx;
pub(crate) use limits::StartLimits;

use railyard_model::run::Event;
use railyard_model::{Millis, Rejection, RunKey};
use railyard_store::{CheckpointHead, Snapshot, StorageError, Store, WriteTx};

use crate::clock::Clock;
use crate::leases::LeaseDeadlines;
use crate::matching::{Grant, Matching, TaskRef, Waiter};
use crate::metrics::Metrics;
use crate::registry::WorkflowRegistry;
use crate::watch::Watchers;
use railyard_model::run::{
    Effect, Lease, Out, PendingSignal, Phase, RunState, RunStatus, StartParams, StepFailure, Timer,
};
use railyard_model::token::TokenClaims;
use railyard_model::workflow::WorkflowDef;

/// What a writer call ends in when it does not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// The command was refused; it changed nothing.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// Storage failed; nothing of the batch was committed, unless the database's
    /// answer to its commit was lost (then it may have been). Shared, because a failed
    /// batch gives the same error to every caller in it.
    #[error(transparent)]
    Storage(Arc<StorageError>),
    /// The writer has stopped: the server is shutting down.
    #[error("the server is shutting down")]
    Stopped,
    /// A failure of the writer itself (its thread could not start).
    #[error("{0}")]
    Internal(String),
}

impl From<StorageError> for WriteError {
    fn from(e: StorageError) -> Self {
        Self::Storage(Arc::new(e))
    }
}

/// Where a command's answer goes.
pub type Reply<T> = oneshot::Sender<Result<T, WriteError>>;

/// Most commands applied in one transaction.
const MAX_BATCH: usize = 1024;

/// The answer to a start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub run_id: String,
    /// False when the request id matched an earlier start.
    pub started: bool,
}

impl Grant {
    fn handed(&self) -> Handed {
        Handed {
            run: self.run.key(),
            lease: self.lease.seq,
        }
    }
}

/// A worker's report that a step is done.
#[derive(Debug, Default)]
pub struct StepCompletion {
    pub notes: String,
    pub artifacts: Vec<String>,
    pub context: BTreeMap<String, String>,
    /// The structured result (a JSON object), checked against the step's output
    /// contract in the writer, where the lease is checked.
    pub result: Option<serde_json::Value>,
    /// Lease the next step to the same worker if it goes to the same queue.
    pub take_next: bool,
    /// The transcript that proposed the result, kept when the step is held for
    /// approval (so a rejection resumes from it); ignored otherwise.
    pub checkpoint: Vec<u8>,
    /// Search attributes the completion sets (name → text; empty text: unset), read
    /// by the namespace's declarations in the writer.
    pub attributes: BTreeMap<String, String>,
}

/// What a heartbeat learns.
#[derive(Debug)]
pub struct HeartbeatReply {
    pub cancel_requested: bool,
    pub signals: Vec<PendingSignal>,
    /// The run is paused: the worker should suspend the step at its next turn.
    pub pause_requested: bool,
    /// What the heartbeat's usage report added, and the run's workflow (for metrics).
    pub usage_added: railyard_model::run::Usage,
    pub workflow_id: String,
    /// Set when the usage passed the budget and the step was failed for it.
    pub budget_exceeded: Option<String>,
    /// When the heartbeat carried a checkpoint: the stored checkpoint's length and
    /// digest after it (the base of the worker's next append).
    pub checkpoint: Option<(u64, railyard_model::checkpoint::CheckpointDigest)>,
}

/// The handle request handlers use to reach the writer. Cheap to clone.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Command>,
}

/// What the writer touches after a commit.
pub struct Hooks {
    pub matching: Arc<Matching>,
    pub watchers: Arc<Watchers>,
    pub timer_wake: Arc<tokio::sync::Notify>,
    pub leases: Arc<LeaseDeadlines>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
    /// The loaded definitions: a schedule's fire starts its workflow from here.
    pub workflows: Arc<WorkflowRegistry>,
    /// Bytes of finished steps' checkpoints (their transcripts) a run keeps, oldest
    /// dropped first past it; 0 keeps none ([`DEFAULT_KEPT_CHECKPOINT_BYTES`]).
    pub kept_checkpoint_bytes: u64,
}

/// The default bound on a run's kept checkpoints: 64 MiB.
pub const DEFAULT_KEPT_CHECKPOINT_BYTES: u64 = 64 << 20;

impl Writer {
    /// Starts the writer thread, handing started delivery attempts to `delivery`'s
    /// sender. It stops when every handle is dropped.
    pub fn spawn_with_delivery(
        store: Store,
        hooks: Hooks,
        delivery: crate::delivery::DeliveryHook,
    ) -> Result<(Self, std::thread::JoinHandle<()>), WriteError> {
        let next_seq = store.next_seq()?;
        let limits = StartLimits::new(store.open_run_counts()?);
        let (tx, rx) = mpsc::channel(16 * 1024);
        let handle = std::thread::Builder::new()
            .name("railyard-writer".into())
            .spawn(move || {
                WriterLoop {
                    store,
                    hooks,
                    delivery,
                    next_seq,
                    follow_ups: Vec::new(),
                    limits,
                    incarnation: 0,
                }
                .run(rx)
            })
            .map_err(|e| WriteError::Internal(format!("cannot start the writer thread: {e}")))?;
        Ok((Self { tx }, handle))
    }

    /// Sends a command and waits for its answer, which comes after its commit: the
    /// one way to reach the writer, for every command in `commands/`.
    pub async fn call<C: Apply>(&self, c: C) -> Result<C::Output, WriteError>
    where
        Command: From<(C, Reply<C::Output>)>,
    {
        let (reply, rx) = oneshot::channel();
        let gone = || WriteError::Stopped;
        self.tx
            .send(Command::from((c, reply)))
            .await
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// In-memory work to do once the batch is durable.
enum After {
    Enqueue(TaskRef),
    /// A task row removed before any poll took it.
    Dequeue {
        ns: String,
        queue: String,
        task_seq: u64,
    },
    /// A step leased in this batch to a claimed poll.
    HandOff(Waiter, Box<Grant>),
    Notify {
        run: RunKey,
        last_event_id: u64,
    },
    WakeTimers,
    /// A result delivery attempt for the sender.
    Deliver(Box<crate::delivery::Job>),
    /// A step attempt ended: its span, to record once committed.
    AttemptEnded(Box<crate::trace::EndedAttempt>),
    /// The run's lease deadline as its state now says (`None`: no lease in flight).
    Lease {
        run: RunKey,
        deadline: Option<(Millis, u64)>,
    },
    /// Whether a run with concurrency key `key` now holds a lease, for matching's
    /// slot counts.
    Holds {
        run: RunKey,
        key: String,
        leased: bool,
    },
    /// A namespace's flow-control rules as committed.
    Rules {
        ns: String,
        rules: railyard_model::flow::KeyRules,
    },
}

struct WriterLoop {
    store: Store,
    hooks: Hooks,
    delivery: crate::delivery::DeliveryHook,
    next_seq: u64,
    /// Commands the writer gives itself, applied in the next batch.
    follow_ups: Vec<Command>,
    /// Open runs per namespace and start buckets, for the start limits.
    limits: StartLimits,
    /// The backend's [`incarnation`](railyard_store::Backend::incarnation) that
    /// matching, lease deadlines and the counts here were last built from.
    incarnation: u64,
}

impl WriterLoop {
    fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        loop {
            let mut batch = std::mem::take(&mut self.follow_ups);
            if batch.is_empty() {
                match rx.blocking_recv() {
                    Some(first) => batch.push(first),
                    None => break,
                }
            }
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => batch.push(cmd),
                    Err(_) => break,
                }
            }
            self.turn(batch);
        }
        tracing::debug!("writer stopped");
    }

    /// Applies one batch, then rebuilds memory if the backend reopened: now rather
    /// than before the next batch only, so that matching and the timers have what
    /// the tables hold while no command comes.
    fn turn(&mut self, batch: Vec<Command>) {
        self.apply_batch(batch);
        let _ = self.resync_if_reopened();
    }

    /// After the backend reopened its database (a failed disk that came back), what
    /// memory holds may be behind the tables: a batch whose commit answered an error
    /// may be on disk all the same (its sync failed, its writes did not). The tables
    /// are the truth: offer every ready task to matching again, set every lease
    /// deadline, recount open runs, wake the timers and every watcher. A stale entry
    /// this leaves finds its run moved on and does nothing (ARCHITECTURE.md, rule 7).
    ///
    /// No batch is applied on memory that is behind: a lost commit may have taken
    /// sequence numbers the next batch would hand out again, and a task row written
    /// twice under one number loses the first run's step.
    fn resync_if_reopened(&mut self) -> Result<(), StorageError> {
        let now = self.store.backend().incarnation();
        if now == self.incarnation {
            return Ok(());
        }
        match self.resync() {
            Ok(()) => {
                self.incarnation = now;
                tracing::warn!(
                    incarnation = now,
                    "memory rebuilt from storage after the database reopened"
                );
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot rebuild memory from storage yet");
                Err(e)
            }
        }
    }

    fn resync(&mut self) -> Result<(), StorageError> {
        let snapshot = self.store.snapshot()?;
        self.next_seq = self.next_seq.max(snapshot.max_seq()?);
        self.limits = StartLimits::new(snapshot.open_run_counts()?);
        crate::matching::rebuild(&self.hooks.matching, &*snapshot)?;
        for (due, ns, run_id, lease) in self.store.lease_deadlines()? {
            self.hooks.leases.set(RunKey::new(ns, run_id), Some((due, lease)));
        }
        for key in self.hooks.watchers.watched() {
            if let Some(run) = snapshot.run(&key)? {
                self.hooks.watchers.notify(&key, run.last_event_id);
            }
        }
        self.hooks.timer_wake.notify_one();
        Ok(())
    }

    fn apply_batch(&mut self, batch: Vec<Command>) {
        let started = Instant::now();
        let size = batch.len();
        let _span = tracing::info_span!("batch", size).entered();
        if let Err(e) = self.resync_if_reopened() {
            let e = WriteError::from(e);
            for cmd in batch {
                let a = cmd.unapplied();
                self.hooks.metrics.record_command(a.name, false);
                let _ = (a.send)(Some(e.clone()));
            }
            return;
        }
        let seq_before = self.next_seq;
        let incarnation_before = self.store.backend().incarnation();
        let mut answers = Vec::with_capacity(size);
        let mut after = Vec::new();
        let outcome = self.transact(batch, &mut answers, &mut after);
        match outcome {
            Ok(()) => {
                self.limits.commit();
                // Memory first, so that nothing a caller reads after its answer is
                // behind what the answer said.
                for effect in after {
                    match effect {
                        After::Enqueue(task) => self.hooks.matching.push(task),
                        After::Dequeue { ns, queue, task_seq } => {
                            self.hooks.matching.remove(&ns, &queue, task_seq)
                        }
                        After::HandOff(waiter, grant) => {
                            let handed = grant.handed();
                            if !waiter.hand(grant) {
                                let (run_id, lease) = (&handed.run.run_id, handed.lease);
                                // The poll went away as the commit finished: nobody holds
                                // the lease, so end it now rather than at its deadline.
                                tracing::warn!(%run_id, lease, "a handed-off step found its poll gone");
                                self.follow_ups
                                    .push(Command::Undelivered(commands::Undelivered(handed), None));
                            }
                        }
                        After::Notify { run, last_event_id } => {
                            self.hooks.watchers.notify(&run, last_event_id)
                        }
                        After::WakeTimers => self.hooks.timer_wake.notify_one(),
                        After::Deliver(job) => self.delivery.send(*job),
                        After::AttemptEnded(a) => crate::trace::record(&a),
                        After::Lease { run, deadline } => {
                            if self.hooks.leases.set(run, deadline) {
                                self.hooks.timer_wake.notify_one();
                            }
                        }
                        After::Holds { run, key, leased } => {
                            self.hooks.matching.set_leased(run, &key, leased)
                        }
                        After::Rules { ns, rules } => self.hooks.matching.set_rules(&ns, rules),
                    }
                }
                for a in answers {
                    self.hooks.metrics.record_command(a.name, a.accepted);
                    self.follow_ups.extend((a.send)(None));
                }
                self.hooks.metrics.record_commit(size, started.elapsed());
            }
            Err(e) => {
                // A commit whose answer was lost may hold the batch's numbers: they
                // are not handed out again.
                let unsure = self.store.backend().incarnation() != incarnation_before;
                if unsure {
                    tracing::error!(error = %e, batch = size, "write transaction failed; it may have committed");
                } else {
                    tracing::error!(error = %e, batch = size, "write transaction failed; nothing in it was committed");
                    self.next_seq = seq_before;
                }
                let e = WriteError::from(e);
                self.limits.rollback();
                for effect in after {
                    if let After::HandOff(waiter, grant) = effect {
                        let queue = grant.run.current_queue().unwrap_or_default();
                        self.hooks
                            .matching
                            .unclaim(&grant.run.namespace, &queue, waiter, &grant.run.run_id);
                    }
                }
                for a in answers {
                    self.hooks.metrics.record_command(a.name, false);
                    let _ = (a.send)(Some(e.clone()));
                }
            }
        }
    }

    /// Applies the batch in one write transaction and commits it. Every command
    /// leaves an answer in `answers`, also when the batch fails part way.
    fn transact(
        &mut self,
        batch: Vec<Command>,
        answers: &mut Vec<Answer>,
        after: &mut Vec<After>,
    ) -> Result<(), StorageError> {
        let now = self.hooks.clock.now_ms();
        let hooks = &self.hooks;
        let delivery = &self.delivery;
        let next_seq = &mut self.next_seq;
        let limits = &mut self.limits;
        let mut batch = Some(batch);
        let outcome = self.store.backend().write(&mut |tx| {
            // A backend runs this again when the database asks for the transaction to
            // be retried (a serialization failure): the first run has consumed the
            // commands and given each its answer, so it cannot start over. Failing
            // here fails the batch whole (nothing of it is committed) and every caller
            // is told, as for any storage error.
            let Some(batch) = batch.take() else {
                return Err(StorageError::Backend(
                    "the database asked to retry the write transaction, and a batch is applied only once"
                        .into(),
                ));
            };
            let mut failed = None;
            for cmd in batch {
                if failed.is_some() {
                    answers.push(cmd.unapplied());
                    continue;
                }
                let _span = tracing::debug_span!("command", command = cmd.name()).entered();
                let mut closed = Vec::new();
                let mut family = Vec::new();
                let mut cx = Cx {
                    tx: &mut *tx,
                    next_seq: &mut *next_seq,
                    after: &mut *after,
                    now,
                    metrics: &hooks.metrics,
                    matching: &hooks.matching,
                    leases: &hooks.leases,
                    workflows: &hooks.workflows,
                    closed: &mut closed,
                    limits: &mut *limits,
                    family: &mut family,
                    delivery,
                    kept_checkpoint_bytes: hooks.kept_checkpoint_bytes,
                };
                let (answer, mut error) = cmd.apply(&mut cx);
                // Runs that closed in this command tell what started them (their
                // schedule, their trigger key) in the same transaction, whichever way
                // they closed; likewise the parents and children of runs of a tree.
                // Either may close more runs, so both go on until neither has news.
                while error.is_none() && (!cx.family.is_empty() || !cx.closed.is_empty()) {
                    if let Err(e) =
                        commands::children::settle(&mut cx).and_then(|()| commands::settle(&mut cx))
                    {
                        error = Some(e);
                    }
                }
                answers.push(answer);
                failed = error;
            }
            failed.map_or(Ok(()), Err)
        });
        // The transaction could not even begin: nothing was applied.
        for cmd in batch.into_iter().flatten() {
            answers.push(cmd.unapplied());
        }
        outcome
    }
}
