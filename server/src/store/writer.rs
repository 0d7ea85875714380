//! The single writer. Every mutation is a [`Command`]; the writer thread takes all
//! commands waiting, applies them in one redb write transaction, commits durably,
//! and only then answers each caller and applies the in-memory effects (matching,
//! watchers, timer wake-ups). While one commit syncs, the next batch queues up:
//! that is the group commit.
//!
//! A command that is refused (bad lease, closed run ...) writes nothing: the model
//! validates before any row is touched. A storage error fails the whole batch, and
//! every caller in it gets the error: nothing of it was committed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use redb::{ReadableTable, Table};
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::clock::Clock;
use crate::matching::{Matching, TaskRef, Waiter};
use crate::metrics::Metrics;
use crate::model::{Effect, Lease, Out, PendingSignal, Phase, RunState, StartParams, StepFailure, Timer};
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
    /// A step leased in this batch to a claimed poll.
    HandOff(Waiter, Box<Grant>),
    Notify {
        ns: String,
        run_id: String,
        last_event_id: u64,
    },
    WakeTimers,
}

/// A caller's answer, held until commit.
type Answer = Box<dyn FnOnce(Option<ApiError>) + Send>;

fn answer<T: Send + 'static>(reply: Reply<T>, result: Result<T, ApiError>) -> Answer {
    Box::new(move |storage_error| {
        let _ = reply.send(match storage_error {
            Some(e) => Err(e),
            None => result,
        });
    })
}

struct WriterLoop {
    store: Store,
    hooks: Hooks,
    next_seq: u64,
}

struct Tables<'t> {
    runs: Table<'t, (&'static str, &'static str), &'static [u8]>,
    history: Table<'t, (&'static str, &'static str, u64), &'static [u8]>,
    tasks: Table<'t, (&'static str, &'static str, u64), &'static str>,
    timers: Table<'t, (i64, u64), &'static [u8]>,
    idempotency: Table<'t, (&'static str, &'static str), &'static str>,
    by_start: Table<'t, (&'static str, i64, &'static str), ()>,
    children: Table<'t, (&'static str, &'static str, &'static str), ()>,
    checkpoints: Table<'t, (&'static str, &'static str), &'static [u8]>,
}

impl WriterLoop {
    fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        while let Some(first) = rx.blocking_recv() {
            let mut batch = vec![first];
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
                for a in answers {
                    a(None);
                }
                for effect in after {
                    match effect {
                        After::Enqueue(task) => self.hooks.matching.push(task),
                        After::HandOff(waiter, grant) => {
                            let run_id = grant.run.run_id.clone();
                            if !waiter.hand(grant) {
                                // The poll went away as the commit finished: the lease
                                // ends by its deadline, like a worker that died with it.
                                tracing::warn!(%run_id, "a handed-off step found its poll gone");
                            }
                        }
                        After::Notify {
                            ns,
                            run_id,
                            last_event_id,
                        } => self.hooks.watchers.notify(&ns, &run_id, last_event_id),
                        After::WakeTimers => self.hooks.timer_wake.notify_one(),
                    }
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
                    a(Some(e.clone()));
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
                history: tx.open_table(HISTORY)?,
                tasks: tx.open_table(TASKS)?,
                timers: tx.open_table(TIMERS)?,
                idempotency: tx.open_table(IDEMPOTENCY)?,
                by_start: tx.open_table(RUNS_BY_START)?,
                children: tx.open_table(CHILDREN)?,
                checkpoints: tx.open_table(CHECKPOINTS)?,
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
                };
                answers.push(cx.apply(cmd)?);
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// One command's view of the open transaction.
struct Cx<'a, 't> {
    t: &'a mut Tables<'t>,
    next_seq: &'a mut u64,
    after: &'a mut Vec<After>,
    now: Millis,
    metrics: &'a Metrics,
    matching: &'a Matching,
}

impl Cx<'_, '_> {
    /// Applies one command. `Err` only for storage errors (which abort the batch);
    /// a refused command yields an answer carrying its error.
    fn apply(&mut self, cmd: Command) -> Result<Answer, ApiError> {
        Ok(match cmd {
            Command::Start(c, reply) => {
                let r = self.start(c)?;
                answer(reply, r)
            }
            Command::Lease(task, worker, reply) => {
                let r = self.lease(task, &worker)?;
                answer(reply, r)
            }
            Command::Heartbeat {
                claims,
                identity,
                checkpoint,
                notes,
                acked,
                reply,
            } => {
                let r = self.with_run(&claims.namespace.clone(), &claims.run_id.clone(), |run, out| {
                    let signals = run.heartbeat(&claims, &identity, checkpoint, notes, acked, out)?;
                    Ok(HeartbeatReply {
                        cancel_requested: run.cancel_requested,
                        signals,
                    })
                })?;
                answer(reply, r)
            }
            Command::Complete {
                claims,
                identity,
                completion,
                reply,
            } => {
                let r = self.complete(claims, &identity, completion)?;
                if r.is_ok() {
                    self.metrics
                        .steps_completed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                answer(reply, r)
            }
            Command::Fail {
                claims,
                identity,
                failure,
                reply,
            } => {
                let r = self.with_run(&claims.namespace.clone(), &claims.run_id.clone(), |run, out| {
                    run.fail(&claims, &identity, failure, out)
                })?;
                answer(reply, r)
            }
            Command::Signal {
                ns,
                run_id,
                identity,
                name,
                payload,
                request_id,
                reply,
            } => {
                let key = format!("signal:{request_id}");
                if !request_id.is_empty() && self.t.idempotency.get((ns.as_str(), key.as_str()))?.is_some() {
                    answer(reply, Ok(()))
                } else {
                    let r =
                        self.with_run(&ns, &run_id, |run, out| run.signal(&identity, name, payload, out))?;
                    if r.is_ok() && !request_id.is_empty() {
                        self.t
                            .idempotency
                            .insert((ns.as_str(), key.as_str()), run_id.as_str())?;
                    }
                    answer(reply, r)
                }
            }
            Command::Stop {
                how,
                ns,
                run_id,
                identity,
                reason,
                reply,
            } => {
                let r = self.with_run(&ns, &run_id, |run, out| match how {
                    Stop::Cancel => run.cancel(&identity, reason, out),
                    Stop::Terminate => run.terminate(&identity, reason, out),
                })?;
                answer(reply, r)
            }
            Command::FireTimers(reply) => {
                let r = self.fire_timers()?;
                answer(reply, Ok(r))
            }
        })
    }

    fn load(&self, ns: &str, run_id: &str) -> Result<Option<RunState>, ApiError> {
        self.t
            .runs
            .get((ns, run_id))?
            .map(|v| decode(v.value(), "run"))
            .transpose()
    }

    /// Loads a run, applies `f`, and saves the result when `f` accepted it. The outer
    /// `Result` is storage; the inner one is the command's own answer.
    fn with_run<T>(
        &mut self,
        ns: &str,
        run_id: &str,
        f: impl FnOnce(&mut RunState, &mut Out) -> Result<T, ApiError>,
    ) -> Result<Result<T, ApiError>, ApiError> {
        let Some(mut run) = self.load(ns, run_id)? else {
            return Ok(Err(ApiError::NotFound(format!(
                "run {run_id:?} not found in namespace {ns:?}"
            ))));
        };
        let mut out = Out::new(self.now, self.next_seq);
        match f(&mut run, &mut out) {
            Ok(v) => {
                let handoff = Self::sync_match(self.matching, &mut run, &mut out);
                let (events, effects) = (out.events, out.effects);
                self.save(&run, events, effects)?;
                self.hand_off(run, handoff)?;
                Ok(Ok(v))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// If the transition left a step ready and a poll is parked on its queue, leases
    /// the step to that poll in this same transaction.
    fn sync_match(matching: &Matching, run: &mut RunState, out: &mut Out) -> Option<(Waiter, Lease)> {
        let Phase::Scheduled { queue, task_seq } = &run.phase else {
            return None;
        };
        let (queue, task_seq) = (queue.clone(), *task_seq);
        let waiter = matching.claim(&run.namespace, &queue)?;
        match run.lease(task_seq, &waiter.identity, out) {
            Ok(lease) => Some((waiter, lease)),
            Err(_) => {
                matching.unclaim(&run.namespace, &queue, waiter);
                None
            }
        }
    }

    /// Queues the hand-off of a sync-matched lease for after the commit.
    fn hand_off(&mut self, run: RunState, handoff: Option<(Waiter, Lease)>) -> Result<(), ApiError> {
        let Some((waiter, lease)) = handoff else {
            return Ok(());
        };
        let checkpoint = self
            .t
            .checkpoints
            .get((run.namespace.as_str(), run.run_id.as_str()))?
            .map(|v| v.value().to_vec())
            .unwrap_or_default();
        self.after.push(After::HandOff(
            waiter,
            Box::new(Grant {
                run,
                lease,
                checkpoint,
            }),
        ));
        Ok(())
    }

    /// Writes a transition: its events, the state row and its effects.
    fn save(
        &mut self,
        run: &RunState,
        events: Vec<crate::model::Event>,
        effects: Vec<Effect>,
    ) -> Result<(), ApiError> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        // A task enqueued and leased in the same transition (eager dispatch) never
        // becomes a row.
        let leased_at_once: Vec<u64> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::RemoveTask { task_seq, .. } => Some(*task_seq),
                _ => None,
            })
            .filter(|seq| {
                effects
                    .iter()
                    .any(|e| matches!(e, Effect::EnqueueTask { task_seq, .. } if task_seq == seq))
            })
            .collect();
        let effects = effects.into_iter().filter(|e| match e {
            Effect::EnqueueTask { task_seq, .. } | Effect::RemoveTask { task_seq, .. } => {
                !leased_at_once.contains(task_seq)
            }
            _ => true,
        });
        for ev in &events {
            self.t.history.insert((ns, id, ev.id), encode(ev)?.as_slice())?;
        }
        self.t.runs.insert((ns, id), encode(run)?.as_slice())?;
        for effect in effects {
            match effect {
                Effect::EnqueueTask { queue, task_seq } => {
                    self.t.tasks.insert((ns, queue.as_str(), task_seq), id)?;
                    self.after.push(After::Enqueue(TaskRef {
                        namespace: ns.into(),
                        queue,
                        task_seq,
                        run_id: id.into(),
                    }));
                }
                Effect::RemoveTask { queue, task_seq } => {
                    self.t.tasks.remove((ns, queue.as_str(), task_seq))?;
                }
                Effect::Timer { due_ms, timer } => {
                    *self.next_seq += 1;
                    self.t
                        .timers
                        .insert((due_ms, *self.next_seq), encode(&timer)?.as_slice())?;
                    self.after.push(After::WakeTimers);
                }
                Effect::SaveCheckpoint(bytes) => {
                    self.t.checkpoints.insert((ns, id), bytes.as_slice())?;
                }
                Effect::ClearCheckpoint => {
                    // Only touch the table (and dirty its pages) when there is a row.
                    if self.t.checkpoints.get((ns, id))?.is_some() {
                        self.t.checkpoints.remove((ns, id))?;
                    }
                }
            }
        }
        if !events.is_empty() {
            self.after.push(After::Notify {
                ns: ns.into(),
                run_id: id.into(),
                last_event_id: run.last_event_id,
            });
        }
        Ok(())
    }

    fn start(&mut self, c: StartCommand) -> Result<Result<Started, ApiError>, ApiError> {
        let ns = c.params.namespace.clone();
        let idem_key = format!("start:{}", c.params.request_id);
        if !c.params.request_id.is_empty()
            && let Some(existing) = self.t.idempotency.get((ns.as_str(), idem_key.as_str()))?
        {
            return Ok(Ok(Started {
                run_id: existing.value().to_string(),
                started: false,
            }));
        }
        if let Some(existing) = self.load(&ns, &c.params.run_id)? {
            let msg = if existing.status.is_open() {
                format!("run {:?} is already running", c.params.run_id)
            } else {
                format!(
                    "run {:?} already exists ({}); run ids are unique within a namespace",
                    c.params.run_id,
                    existing.status.name()
                )
            };
            return Ok(Err(ApiError::AlreadyExists(msg)));
        }
        let parent = c.params.parent_run_id.clone();
        if !parent.is_empty() && self.load(&ns, &parent)?.is_none() {
            return Ok(Err(ApiError::field(
                "parent_run_id",
                format!("run {parent:?} not found"),
            )));
        }
        let mut out = Out::new(self.now, self.next_seq);
        let mut run = RunState::start(c.params, (*c.definition).clone(), &mut out);
        let handoff = Self::sync_match(self.matching, &mut run, &mut out);
        let (events, effects) = (out.events, out.effects);
        self.save(&run, events, effects)?;
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        self.t.by_start.insert((ns, run.start_ms, id), ())?;
        if !run.request_id.is_empty() {
            self.t.idempotency.insert((ns, idem_key.as_str()), id)?;
        }
        if !parent.is_empty() {
            self.t.children.insert((ns, parent.as_str(), id), ())?;
        }
        self.metrics
            .runs_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let run_id = run.run_id.clone();
        self.hand_off(run, handoff)?;
        Ok(Ok(Started {
            run_id,
            started: true,
        }))
    }

    fn complete(
        &mut self,
        claims: TokenClaims,
        identity: &str,
        c: StepCompletion,
    ) -> Result<Result<Option<Grant>, ApiError>, ApiError> {
        let r = self.with_run(&claims.namespace.clone(), &claims.run_id.clone(), |run, out| {
            let queue = run.current_queue();
            run.complete(&claims, identity, c.notes, c.artifacts, c.context, out)?;
            let next_seq = match &run.phase {
                Phase::Scheduled { queue: q, task_seq } if c.take_next && Some(q) == queue.as_ref() => {
                    *task_seq
                }
                _ => return Ok(None),
            };
            let lease = run.lease(next_seq, identity, out)?;
            Ok(Some((run.clone(), lease)))
        })?;
        // A new step starts with no checkpoint.
        Ok(r.map(|next| {
            next.map(|(run, lease)| Grant {
                run,
                lease,
                checkpoint: Vec::new(),
            })
        }))
    }

    fn lease(&mut self, task: TaskRef, worker: &str) -> Result<Result<Grant, ApiError>, ApiError> {
        let r = self.with_run(&task.namespace, &task.run_id, |run, out| {
            let lease = run.lease(task.task_seq, worker, out)?;
            Ok((run.clone(), lease))
        })?;
        let (run, lease) = match r {
            Ok(v) => v,
            Err(e) => {
                // The run moved on (or is gone): drop the row if it is still there.
                self.t
                    .tasks
                    .remove((task.namespace.as_str(), task.queue.as_str(), task.task_seq))?;
                return Ok(Err(e));
            }
        };
        let checkpoint = self
            .t
            .checkpoints
            .get((run.namespace.as_str(), run.run_id.as_str()))?
            .map(|v| v.value().to_vec())
            .unwrap_or_default();
        Ok(Ok(Grant {
            run,
            lease,
            checkpoint,
        }))
    }

    fn fire_timers(&mut self) -> Result<usize, ApiError> {
        let mut due = Vec::new();
        for row in self.t.timers.range(..=(self.now, u64::MAX))?.take(MAX_TIMERS) {
            let row = row?;
            due.push((row.0.value(), row.1.value().to_vec()));
        }
        for (key, _) in &due {
            self.t.timers.remove(*key)?;
        }
        let fired = due.len();
        for (_, bytes) in due {
            let timer: Timer = match decode(&bytes, "timer") {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, "dropping an unreadable timer");
                    continue;
                }
            };
            // A timer for a run that is gone, or whose lease moved on, does nothing.
            match timer {
                Timer::LeaseCheck {
                    namespace,
                    run_id,
                    lease,
                } => {
                    let _ = self.with_run(&namespace, &run_id, |run, out| {
                        run.lease_timer(lease, out);
                        Ok(())
                    })?;
                }
                Timer::Backoff {
                    namespace,
                    run_id,
                    step_index,
                    attempt,
                } => {
                    let _ = self.with_run(&namespace, &run_id, |run, out| {
                        run.backoff_timer(step_index, attempt, out);
                        Ok(())
                    })?;
                }
            }
        }
        if fired > 0 {
            self.after.push(After::WakeTimers);
        }
        Ok(fired)
    }
}
