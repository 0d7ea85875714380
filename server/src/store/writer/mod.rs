//! The single writer. Every mutation is a [`Command`]; the writer thread takes all
//! commands waiting, applies them in one redb write transaction, commits durably,
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

use redb::{ReadableTable, Table};
use tokio::sync::{mpsc, oneshot};

mod apply;
#[cfg(test)]
mod tests;

use apply::Cx;

use super::*;
use crate::clock::{Clock, Millis};
use crate::matching::{Matching, TaskRef, Waiter};
use crate::metrics::Metrics;
use crate::model::{Effect, Lease, Out, PendingSignal, Phase, RunState, StartParams, StepFailure, Timer};
use crate::timers::LeaseDeadlines;
use crate::token::TokenClaims;
use crate::watch::Watchers;
use crate::workflow::WorkflowDef;

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// Most commands applied in one transaction.
const MAX_BATCH: usize = 1024;
/// Most timers fired in one transaction.
const MAX_TIMERS: usize = 512;

/// A new run to start.
#[derive(Debug)]
pub struct StartCommand {
    pub params: StartParams,
    pub definition: Arc<WorkflowDef>,
}

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

/// How a run is stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Cancel,
    Terminate,
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

enum Command {
    Start(StartCommand, Reply<Started>),
    Lease(TaskRef, String, Reply<Grant>),
    Heartbeat {
        claims: TokenClaims,
        identity: String,
        checkpoint: Vec<u8>,
        notes: Vec<(String, String)>,
        acked: u64,
        reply: Reply<HeartbeatReply>,
    },
    Complete {
        claims: TokenClaims,
        identity: String,
        completion: StepCompletion,
        reply: Reply<Option<Grant>>,
    },
    Fail {
        claims: TokenClaims,
        identity: String,
        failure: StepFailure,
        reply: Reply<bool>,
    },
    Signal {
        ns: String,
        run_id: String,
        identity: String,
        name: String,
        payload: String,
        request_id: String,
        reply: Reply<()>,
    },
    Stop {
        how: Stop,
        ns: String,
        run_id: String,
        identity: String,
        reason: String,
        reply: Reply<()>,
    },
    FireTimers(Reply<usize>),
    /// The writer's own follow-up: a sync-matched lease whose poll was gone.
    Undelivered {
        ns: String,
        run_id: String,
        lease: u64,
    },
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

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        let gone = || ApiError::Unavailable("the server is shutting down".into());
        self.tx.send(make(reply)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    pub async fn start(&self, cmd: StartCommand) -> Result<Started, ApiError> {
        self.call(|r| Command::Start(cmd, r)).await
    }

    pub async fn lease(&self, task: TaskRef, worker: String) -> Result<Grant, ApiError> {
        self.call(|r| Command::Lease(task, worker, r)).await
    }

    pub async fn heartbeat(
        &self,
        claims: TokenClaims,
        identity: String,
        checkpoint: Vec<u8>,
        notes: Vec<(String, String)>,
        acked: u64,
    ) -> Result<HeartbeatReply, ApiError> {
        self.call(|reply| Command::Heartbeat {
            claims,
            identity,
            checkpoint,
            notes,
            acked,
            reply,
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
        self.call(|reply| Command::Complete {
            claims,
            identity,
            completion,
            reply,
        })
        .await
    }

    pub async fn fail(
        &self,
        claims: TokenClaims,
        identity: String,
        failure: StepFailure,
    ) -> Result<bool, ApiError> {
        self.call(|reply| Command::Fail {
            claims,
            identity,
            failure,
            reply,
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
        self.call(|reply| Command::Signal {
            ns,
            run_id,
            identity,
            name,
            payload,
            request_id,
            reply,
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
        self.call(|reply| Command::Stop {
            how,
            ns,
            run_id,
            identity,
            reason,
            reply,
        })
        .await
    }

    /// Fires every timer due now; returns how many fired.
    pub async fn fire_timers(&self) -> Result<usize, ApiError> {
        self.call(Command::FireTimers).await
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

/// A caller's answer, held until commit. Given the storage error if the commit
/// failed; returns a follow-up command when the answer carried a lease that its
/// caller was no longer there to take.
type Answer = Box<dyn FnOnce(Option<ApiError>) -> Option<Command> + Send>;

fn answer<T: Send + 'static>(reply: Reply<T>, result: Result<T, ApiError>) -> Answer {
    answer_lease(reply, result, |_| None)
}

/// A lease handed out in an answer: (namespace, run id, lease).
type Handed = (String, String, u64);

/// Like [`answer`], for an answer that may carry a committed lease (a poll's lease,
/// or the next step of an eager completion). If the caller went away while the
/// commit ran (its client gave up), nobody holds the lease: end it at once rather
/// than at its deadline.
fn answer_lease<T: Send + 'static>(
    reply: Reply<T>,
    result: Result<T, ApiError>,
    handed: impl FnOnce(&T) -> Option<Handed> + Send + 'static,
) -> Answer {
    Box::new(move |storage_error| {
        let leased = match (&storage_error, &result) {
            (None, Ok(value)) => handed(value),
            _ => None,
        };
        let delivered = reply
            .send(match storage_error {
                Some(e) => Err(e),
                None => result,
            })
            .is_ok();
        let (ns, run_id, lease) = leased.filter(|_| !delivered)?;
        tracing::warn!(%run_id, lease, "a leased step's caller was gone when the commit finished");
        Some(Command::Undelivered { ns, run_id, lease })
    })
}

struct WriterLoop {
    store: Store,
    hooks: Hooks,
    next_seq: u64,
    /// Commands the writer gives itself, applied in the next batch.
    follow_ups: Vec<Command>,
}

struct Tables<'t> {
    runs: Table<'t, (&'static str, &'static str, u64), &'static [u8]>,
    open_runs: Table<'t, (&'static str, &'static str), ()>,
    tasks: Table<'t, (&'static str, &'static str, u64), &'static str>,
    timers: Table<'t, (i64, u64), &'static [u8]>,
    idempotency: Table<'t, (&'static str, &'static str), &'static str>,
    by_start: Table<'t, (&'static str, i64, &'static str), ()>,
    children: Table<'t, (&'static str, &'static str, &'static str), ()>,
    /// Written only by a start whose definition is new to storage.
    definitions: Table<'t, records::DefinitionTableKey, &'static [u8]>,
    defs: Arc<records::Definitions>,
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
                                self.follow_ups.push(Command::Undelivered { ns, run_id, lease });
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
                    self.follow_ups.extend(a(None));
                }
                self.hooks.metrics.record_commit(size, started.elapsed());
            }
            Err(e) => {
                tracing::error!(error = %e, batch = size, "write transaction failed; nothing in it was committed");
                self.next_seq = seq_before;
                for effect in after {
                    if let After::HandOff(waiter, grant) = effect {
                        let queue = grant.run.current_queue().unwrap_or_default();
                        self.hooks.matching.unclaim(&grant.run.namespace, &queue, waiter);
                    }
                }
                for a in answers {
                    let _ = a(Some(e.clone()));
                }
            }
        }
    }

    fn transact(
        &mut self,
        batch: Vec<Command>,
        answers: &mut Vec<Answer>,
        after: &mut Vec<After>,
    ) -> Result<(), ApiError> {
        let tx = self.store.db().begin_write()?;
        {
            let mut t = Tables {
                runs: tx.open_table(RUNS)?,
                open_runs: tx.open_table(OPEN_RUNS)?,
                tasks: tx.open_table(TASKS)?,
                timers: tx.open_table(TIMERS)?,
                idempotency: tx.open_table(IDEMPOTENCY)?,
                by_start: tx.open_table(RUNS_BY_START)?,
                children: tx.open_table(CHILDREN)?,
                definitions: tx.open_table(DEFINITIONS)?,
                defs: self.store.definitions().clone(),
            };
            let now = self.hooks.clock.now_ms();
            for cmd in batch {
                let mut cx = Cx {
                    t: &mut t,
                    next_seq: &mut self.next_seq,
                    after,
                    now,
                    metrics: &self.hooks.metrics,
                    matching: &self.hooks.matching,
                    leases: &self.hooks.leases,
                };
                answers.push(cx.apply(cmd)?);
            }
        }
        tx.commit()?;
        Ok(())
    }
}
