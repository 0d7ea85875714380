//! The single writer. Every mutation is a command (one type per file in
//! `commands/`); the writer thread takes all commands waiting, applies them in one
//! write transaction through the storage [`Backend`], commits durably,
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
#[cfg(test)]
mod tests;

use commands::{Answer, Apply, Command, Handed};
use cx::Transition;

pub(crate) use commands::schedule::not_found as schedule_not_found;
pub use commands::trigger::MAX_QUEUED_PER_KEY;
pub(crate) use commands::trigger::not_found as trigger_not_found;
pub use commands::{
    CreateSchedule, DeleteSchedule, PatchSchedule, Patched, Replaced, StartCommand, StartReplacing, Stop,
    UpdateSchedule,
};
pub use commands::{
    CreateTrigger, DeleteTrigger, DeliverHook, Delivered, PurgeHookDeliveries, SyncConfigTriggers,
    UpdateTrigger,
};
pub(crate) use cx::Cx;

use super::*;
use crate::clock::{Clock, Millis};
use crate::matching::{Matching, TaskRef, Waiter};
use crate::metrics::Metrics;
use crate::model::{
    Effect, Lease, Out, PendingSignal, Phase, RunState, RunStatus, StartParams, StepFailure, Timer,
};
use crate::timers::LeaseDeadlines;
use crate::token::TokenClaims;
use crate::watch::Watchers;
use crate::workflow::{WorkflowDef, WorkflowRegistry};

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// Most commands applied in one transaction.
const MAX_BATCH: usize = 1024;

/// The answer to a start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub run_id: String,
    /// False when the request id matched an earlier start.
    pub started: bool,
}

/// A granted lease, with what the worker needs to run the step.
#[derive(Debug)]
pub struct Grant {
    pub run: RunState,
    pub lease: Lease,
    pub checkpoint: Vec<u8>,
}

impl Grant {
    fn handed(&self) -> Handed {
        (
            self.run.namespace.clone(),
            self.run.run_id.clone(),
            self.lease.seq,
        )
    }
}

/// A worker's report that a step is done.
#[derive(Debug, Default)]
pub struct StepCompletion {
    pub notes: String,
    pub artifacts: Vec<String>,
    pub context: BTreeMap<String, String>,
    /// Lease the next step to the same worker if it goes to the same queue.
    pub take_next: bool,
}

/// What a heartbeat learns.
#[derive(Debug)]
pub struct HeartbeatReply {
    pub cancel_requested: bool,
    pub signals: Vec<PendingSignal>,
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
}

impl Writer {
    /// Starts the writer thread. It stops when every handle is dropped.
    pub fn spawn(store: Store, hooks: Hooks) -> Result<(Self, std::thread::JoinHandle<()>), ApiError> {
        let next_seq = store.next_seq()?;
        let (tx, rx) = mpsc::channel(16 * 1024);
        let handle = std::thread::Builder::new()
            .name("railyard-writer".into())
            .spawn(move || {
                WriterLoop {
                    store,
                    hooks,
                    next_seq,
                    follow_ups: Vec::new(),
                }
                .run(rx)
            })
            .map_err(|e| ApiError::Internal(format!("cannot start the writer thread: {e}")))?;
        Ok((Self { tx }, handle))
    }

    /// Sends a command and waits for its answer, which comes after its commit.
    async fn call<C: Apply>(&self, c: C) -> Result<C::Output, ApiError>
    where
        Command: From<(C, Reply<C::Output>)>,
    {
        let (reply, rx) = oneshot::channel();
        let gone = || ApiError::Unavailable("the server is shutting down".into());
        self.tx
            .send(Command::from((c, reply)))
            .await
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    pub async fn start(&self, cmd: StartCommand) -> Result<Started, ApiError> {
        self.call(cmd).await
    }

    /// Terminates one run if it is open and starts another, in one commit; if the
    /// start is refused, the other run is left as it was.
    pub async fn start_replacing(&self, cmd: StartReplacing) -> Result<Replaced, ApiError> {
        self.call(cmd).await
    }

    pub async fn lease(&self, task: TaskRef, worker: String) -> Result<Grant, ApiError> {
        self.call(commands::LeaseTask { task, worker }).await
    }

    pub async fn heartbeat(
        &self,
        claims: TokenClaims,
        identity: String,
        checkpoint: Vec<u8>,
        notes: Vec<(String, String)>,
        acked: u64,
    ) -> Result<HeartbeatReply, ApiError> {
        self.call(commands::Heartbeat {
            claims,
            identity,
            checkpoint,
            notes,
            acked,
        })
        .await
    }

    /// Records a completion; with `take_next`, also leases the run's next step to the
    /// same worker when it goes to the same queue (eager dispatch).
    pub async fn complete(
        &self,
        claims: TokenClaims,
        identity: String,
        completion: StepCompletion,
    ) -> Result<Option<Grant>, ApiError> {
        self.call(commands::Complete {
            claims,
            identity,
            completion,
        })
        .await
    }

    pub async fn fail(
        &self,
        claims: TokenClaims,
        identity: String,
        failure: StepFailure,
    ) -> Result<bool, ApiError> {
        self.call(commands::Fail {
            claims,
            identity,
            failure,
        })
        .await
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn signal(
        &self,
        ns: String,
        run_id: String,
        identity: String,
        name: String,
        payload: String,
        request_id: String,
    ) -> Result<(), ApiError> {
        self.call(commands::Signal {
            ns,
            run_id,
            identity,
            name,
            payload,
            request_id,
        })
        .await
    }

    /// Cancels (asks the worker to stop, or closes at once when no step is leased)
    /// or terminates (closes at once) a run.
    pub async fn stop(
        &self,
        how: Stop,
        ns: String,
        run_id: String,
        identity: String,
        reason: String,
    ) -> Result<(), ApiError> {
        self.call(commands::StopRun {
            how,
            ns,
            run_id,
            identity,
            reason,
        })
        .await
    }

    /// Creates a schedule (`ALREADY_EXISTS` when its id is taken).
    pub async fn create_schedule(&self, cmd: CreateSchedule) -> Result<(), ApiError> {
        self.call(cmd).await
    }

    /// Replaces a schedule's spec, action and policies.
    pub async fn update_schedule(&self, cmd: UpdateSchedule) -> Result<(), ApiError> {
        self.call(cmd).await
    }

    /// Deletes a schedule and its timer.
    pub async fn delete_schedule(&self, cmd: DeleteSchedule) -> Result<(), ApiError> {
        self.call(cmd).await
    }

    /// Pauses, unpauses, triggers or backfills a schedule.
    pub async fn patch_schedule(&self, cmd: PatchSchedule) -> Result<Patched, ApiError> {
        self.call(cmd).await
    }

    /// Stores a new API key; refused if its id is taken.
    pub async fn create_api_key(&self, key: crate::auth::ApiKey) -> Result<crate::auth::ApiKey, ApiError> {
        self.call(commands::CreateApiKey { key }).await
    }

    /// Revokes an API key (a no-op if it already is); answers the key as stored.
    pub async fn revoke_api_key(&self, key_id: String) -> Result<crate::auth::ApiKey, ApiError> {
        self.call(commands::RevokeApiKey { key_id }).await
    }

    /// Creates a namespace; refused if it exists.
    pub async fn create_namespace(
        &self,
        name: String,
        description: String,
    ) -> Result<crate::namespace::Namespace, ApiError> {
        self.call(commands::CreateNamespace { name, description }).await
    }

    /// Changes a namespace's settings.
    pub async fn update_namespace(
        &self,
        name: String,
        description: String,
    ) -> Result<crate::namespace::Namespace, ApiError> {
        self.call(commands::UpdateNamespace { name, description }).await
    }

    /// Deletes an empty namespace and revokes its keys.
    pub async fn delete_namespace(&self, name: String) -> Result<(), ApiError> {
        self.call(commands::DeleteNamespace { name }).await
    }

    /// Stores a new trigger (`ALREADY_EXISTS` when its id is taken).
    pub async fn create_trigger(&self, cmd: CreateTrigger) -> Result<crate::trigger::Trigger, ApiError> {
        self.call(cmd).await
    }

    /// Replaces an API-made trigger's definition.
    pub async fn update_trigger(&self, cmd: UpdateTrigger) -> Result<crate::trigger::Trigger, ApiError> {
        self.call(cmd).await
    }

    /// Deletes an API-made trigger.
    pub async fn delete_trigger(&self, cmd: DeleteTrigger) -> Result<(), ApiError> {
        self.call(cmd).await
    }

    /// Writes the configuration's triggers into storage; answers (saved, deleted).
    pub async fn sync_config_triggers(&self, cmd: SyncConfigTriggers) -> Result<(usize, usize), ApiError> {
        self.call(cmd).await
    }

    /// Applies a webhook delivery: dedup, concurrency key, start or queue.
    pub async fn deliver_hook(&self, cmd: DeliverHook) -> Result<Delivered, ApiError> {
        self.call(cmd).await
    }

    /// Forgets at most `max` delivery ids received before `before`.
    pub async fn purge_hook_deliveries(&self, before: Millis, max: usize) -> Result<usize, ApiError> {
        self.call(PurgeHookDeliveries { before, max }).await
    }

    /// Fires every timer due now; returns how many fired.
    pub async fn fire_timers(&self) -> Result<usize, ApiError> {
        self.call(commands::FireTimers).await
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
        ns: String,
        run_id: String,
        last_event_id: u64,
    },
    WakeTimers,
    /// The run's lease deadline as its state now says (`None`: no lease in flight).
    Lease {
        ns: String,
        run_id: String,
        deadline: Option<(Millis, u64)>,
    },
}

struct WriterLoop {
    store: Store,
    hooks: Hooks,
    next_seq: u64,
    /// Commands the writer gives itself, applied in the next batch.
    follow_ups: Vec<Command>,
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
            self.apply_batch(batch);
        }
        tracing::debug!("writer stopped");
    }

    fn apply_batch(&mut self, batch: Vec<Command>) {
        let started = Instant::now();
        let size = batch.len();
        let _span = tracing::info_span!("batch", size).entered();
        let seq_before = self.next_seq;
        let mut answers = Vec::with_capacity(size);
        let mut after = Vec::new();
        let outcome = self.transact(batch, &mut answers, &mut after);
        match outcome {
            Ok(()) => {
                // Memory first, so that nothing a caller reads after its answer is
                // behind what the answer said.
                for effect in after {
                    match effect {
                        After::Enqueue(task) => self.hooks.matching.push(task),
                        After::Dequeue { ns, queue, task_seq } => {
                            self.hooks.matching.remove(&ns, &queue, task_seq)
                        }
                        After::HandOff(waiter, grant) => {
                            let (ns, run_id) = (grant.run.namespace.clone(), grant.run.run_id.clone());
                            let lease = grant.lease.seq;
                            if !waiter.hand(grant) {
                                // The poll went away as the commit finished: nobody holds
                                // the lease, so end it now rather than at its deadline.
                                tracing::warn!(%run_id, lease, "a handed-off step found its poll gone");
                                self.follow_ups.push(Command::Undelivered(
                                    commands::Undelivered { ns, run_id, lease },
                                    None,
                                ));
                            }
                        }
                        After::Notify {
                            ns,
                            run_id,
                            last_event_id,
                        } => self.hooks.watchers.notify(&ns, &run_id, last_event_id),
                        After::WakeTimers => self.hooks.timer_wake.notify_one(),
                        After::Lease { ns, run_id, deadline } => {
                            if self.hooks.leases.set(&ns, &run_id, deadline) {
                                self.hooks.timer_wake.notify_one();
                            }
                        }
                    }
                }
                for a in answers {
                    self.hooks.metrics.record_command(a.name, a.accepted);
                    self.follow_ups.extend((a.send)(None));
                }
                self.hooks.metrics.record_commit(size, started.elapsed());
            }
            Err(e) => {
                tracing::error!(error = %e, batch = size, "write transaction failed; nothing in it was committed");
                let e = ApiError::from(e);
                self.next_seq = seq_before;
                for effect in after {
                    if let After::HandOff(waiter, grant) = effect {
                        let queue = grant.run.current_queue().unwrap_or_default();
                        self.hooks.matching.unclaim(&grant.run.namespace, &queue, waiter);
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
        let next_seq = &mut self.next_seq;
        let mut batch = Some(batch);
        let outcome = self.store.backend().write(&mut |tx| {
            let Some(batch) = batch.take() else {
                return Ok(());
            };
            let mut failed = None;
            for cmd in batch {
                if failed.is_some() {
                    answers.push(cmd.unapplied());
                    continue;
                }
                let _span = tracing::debug_span!("command", command = cmd.name()).entered();
                let mut closed = Vec::new();
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
                };
                let (answer, mut error) = cmd.apply(&mut cx);
                // Runs that closed in this command tell what started them in the
                // same transaction, whichever way they closed.
                if error.is_none()
                    && let Err(e) = commands::settle(&mut cx)
                {
                    error = Some(e);
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
