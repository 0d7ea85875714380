//! Step tasks: workers long-poll a queue, then report on the lease they got.

use railyard_model::RunKey;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::caller::{self, Credentials, Operation, Principal};
use super::{Caller, Core};
use crate::error::ApiError;
use crate::matching::{Dispatch, Grant, QueueStats, TaskRef};
use crate::writer::{
    BeatCheckpoint, Complete, Completed, HeartbeatReply, StepCompletion, UsageReport, WriteError,
};
use railyard_model::Rejection;
use railyard_model::limits::{self, check_bytes, check_context, check_count, check_len, check_name};
use railyard_model::run::{StepFailure, StuckNote, Usage};
use railyard_model::token::TokenClaims;
use railyard_model::workflow::{DEFAULT_MAX_TURNS, PromptValues, render_values};

/// Poll wait when the request names none.
pub const DEFAULT_POLL_WAIT_MS: u32 = 20_000;
/// Longest poll wait.
pub const MAX_POLL_WAIT_MS: u32 = 60_000;

/// A step leased to a worker, with what it needs to run it.
#[derive(Debug)]
pub struct LeasedStep {
    /// The signed task token the worker reports with.
    pub task_token: String,
    /// The step's prompt, rendered over the run's goal and context.
    pub prompt: String,
    /// The agent loop's turn limit.
    pub max_turns: u32,
    /// The run as leased, the lease, and the checkpoint to resume from.
    pub grant: Grant,
}

impl LeasedStep {
    fn new(core: &Core, grant: Grant) -> Self {
        let run = &grant.run;
        let step = &run.definition.steps[run.current_step];
        let task_token = core.keys.sign(&TokenClaims {
            namespace: run.namespace.clone(),
            run_id: run.run_id.clone(),
            step: step.id.clone(),
            attempt: run.steps[run.current_step].attempt,
            lease: grant.lease.seq,
            kid: String::new(),
        });
        let results = run.earlier_results();
        let values = PromptValues {
            goal: &run.goal,
            context: &run.context,
            results: &results,
        };
        Self {
            task_token,
            prompt: render_values(&step.prompt, &values),
            max_turns: step.max_turns.unwrap_or(DEFAULT_MAX_TURNS),
            grant,
        }
    }
}

/// A long poll on a task queue.
#[derive(Debug, Clone, Default)]
pub struct Poll {
    pub task_queue: String,
    /// 0: [`DEFAULT_POLL_WAIT_MS`]; at most [`MAX_POLL_WAIT_MS`].
    pub wait_timeout_ms: u32,
    /// Non-empty: lease only this run's step, when it is ready on `task_queue`.
    pub run_id: String,
}

/// How often a run-specific poll looks again even without news of the run: a
/// backstop, since the run's watcher may fire a moment before its task is queued.
const RUN_POLL_RECHECK: Duration = Duration::from_millis(500);

/// Leases the next step of `task_queue` to the caller, waiting for one up to the
/// poll's wait. `None` when none came (or the server began shutting down).
pub async fn poll(core: &Core, caller: &Caller, p: Poll) -> Result<Option<LeasedStep>, ApiError> {
    check_name("task_queue", &p.task_queue)?;
    caller.check_queue(&p.task_queue)?;
    let (ns, queue, identity) = (&caller.namespace, &p.task_queue, &caller.identity);
    let wait_ms = if p.wait_timeout_ms == 0 {
        DEFAULT_POLL_WAIT_MS
    } else {
        p.wait_timeout_ms.min(MAX_POLL_WAIT_MS)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms.into());
    core.metrics.polls.fetch_add(1, Relaxed);
    if !p.run_id.is_empty() {
        check_name("run_id", &p.run_id)?;
        return poll_run(core, caller, queue, &p.run_id, deadline).await;
    }
    loop {
        let task = match core
            .matching
            .take_or_park(ns, queue, identity, core.clock.now_ms(), deadline)
        {
            Ok(task) => task,
            Err(parked) => {
                let mut parked = Parked { core, rx: parked };
                let parked = &mut parked.rx;
                let woken = tokio::select! {
                    r = tokio::time::timeout_at(deadline, &mut *parked) => r.ok().and_then(Result::ok),
                    _ = core.shutting_down() => None,
                };
                // A task handed over just as the wait ended is still ours to take.
                let dispatch = match woken {
                    Some(d) => d,
                    None => {
                        parked.close();
                        match parked.try_recv() {
                            Ok(d) => d,
                            Err(_) => {
                                core.metrics.polls_empty.fetch_add(1, Relaxed);
                                return Ok(None);
                            }
                        }
                    }
                };
                match dispatch {
                    Dispatch::Task(task) => task,
                    // Leased to this poll by the writer, already committed.
                    Dispatch::Leased(grant) => return Ok(Some(LeasedStep::new(core, *grant))),
                }
            }
        };
        let taken = Taken {
            core,
            task: Some(task.clone()),
        };
        let leased = core
            .writer
            .call(crate::writer::LeaseTask {
                task: task.clone(),
                worker: identity.clone(),
            })
            .await;
        taken.disarm();
        match leased {
            Ok(grant) => {
                tracing::debug!(run_id = %task.run_id, queue = %task.queue, worker = %identity, "step leased");
                return Ok(Some(LeasedStep::new(core, grant)));
            }
            // The run moved on since the task was queued: take the next one.
            Err(WriteError::Rejected(Rejection::FailedPrecondition(_) | Rejection::NotFound(_))) => {
                core.matching.release(ns, &task.run_id);
                continue;
            }
            Err(e) => {
                // Nothing was committed: the task is still ready.
                core.matching.release(ns, &task.run_id);
                core.matching.push(task);
                return Err(e.into());
            }
        }
    }
}

/// A task taken from matching while its lease is asked for. Dropped before the
/// answer (the caller went away), it gives the task and its slot back: if the lease
/// commits after all, the commit takes the slot again and the task is stale.
struct Taken<'a> {
    core: &'a Core,
    task: Option<TaskRef>,
}

impl Taken<'_> {
    fn disarm(mut self) {
        self.task = None;
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.core.matching.release(&task.namespace, &task.run_id);
            self.core.matching.push(task);
        }
    }
}

/// A parked poll's receiver. Dropped with a task in it (the caller went away as
/// it arrived), it gives the task and its slot back to matching.
struct Parked<'a> {
    core: &'a Core,
    rx: tokio::sync::oneshot::Receiver<Dispatch>,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.rx.close();
        if let Ok(Dispatch::Task(task)) = self.rx.try_recv() {
            self.core.matching.release(&task.namespace, &task.run_id);
            self.core.matching.push(task);
        }
    }
}

/// Leases `run_id`'s step once it is ready on `queue`, waiting until `deadline` for
/// it (a step still leased to a gateway that died becomes ready again when its
/// lease expires and the retry is scheduled). `None` when the wait ends first, at
/// once if the run is closed; `NOT_FOUND` if there is no such run. Other runs'
/// tasks on the queue stay where they are.
async fn poll_run(
    core: &Core,
    caller: &Caller,
    queue: &str,
    run_id: &str,
    deadline: tokio::time::Instant,
) -> Result<Option<LeasedStep>, ApiError> {
    let (ns, identity) = (&caller.namespace, &caller.identity);
    let key = RunKey::new(ns, run_id);
    let mut changes = core.watchers.subscribe(&key);
    loop {
        // Look after subscribing, so a change committed in between is not missed.
        let Some(run) = core.store.run(&key)? else {
            return Err(ApiError::Rejected(Rejection::NotFound(format!(
                "run {run_id:?} not found"
            ))));
        };
        if !run.status.is_open() {
            return Ok(None);
        }
        if let Some(task) = core
            .matching
            .take_run(ns, queue, run_id, identity, core.clock.now_ms())
        {
            let taken = Taken {
                core,
                task: Some(task.clone()),
            };
            let leased = core
                .writer
                .call(crate::writer::LeaseTask {
                    task: task.clone(),
                    worker: identity.clone(),
                })
                .await;
            taken.disarm();
            match leased {
                Ok(grant) => {
                    tracing::debug!(%run_id, %queue, worker = %identity, "step leased by run");
                    return Ok(Some(LeasedStep::new(core, grant)));
                }
                // The run moved on since the task was queued: look again.
                Err(WriteError::Rejected(Rejection::FailedPrecondition(_) | Rejection::NotFound(_))) => {
                    core.matching.release(ns, run_id);
                    continue;
                }
                Err(e) => {
                    core.matching.release(ns, run_id);
                    core.matching.push(task);
                    return Err(e.into());
                }
            }
        }
        let recheck = (tokio::time::Instant::now() + RUN_POLL_RECHECK).min(deadline);
        let woken = async {
            if let Ok(Err(_)) = tokio::time::timeout_at(recheck, changes.changed()).await {
                // No more news of this run will come: wait out the recheck instead.
                tokio::time::sleep_until(recheck).await;
            }
        };
        tokio::select! {
            _ = woken => {}
            _ = core.shutting_down() => return Ok(None),
        }
        if tokio::time::Instant::now() >= deadline {
            core.metrics.polls_empty.fetch_add(1, Relaxed);
            return Ok(None);
        }
    }
}

/// The caller of a report on a lease, and the lease its token claims. The
/// credentials are checked first, then the token (`PERMISSION_DENIED` if forged),
/// which names the namespace; a worker key limited to some task queues must hold
/// one of them for the step's queue.
pub fn lease_holder(
    core: &Core,
    credentials: &Credentials,
    task_token: &str,
    identity: String,
) -> Result<(Caller, TokenClaims), ApiError> {
    let principal = caller::authenticate(core, credentials)?;
    let claims = core.keys.verify(task_token)?;
    let caller = caller::resolve_as(
        core,
        principal,
        claims.namespace.clone(),
        identity,
        None,
        Operation::ReportTask,
    )?;
    if let Principal::Key(k) = &caller.principal
        && !k.queues.is_empty()
        && let Some(run) = core.store.run(&claims.run_key())?
        && let Some(step) = run.definition.steps.iter().find(|s| s.id == claims.step)
    {
        // A run that is gone is left for the writer to refuse as not found.
        caller.check_queue(step.queue(&run.definition, &run.task_queue))?;
    }
    Ok((caller, claims))
}

/// A note for the coordinator, sent with a heartbeat.
pub use railyard_model::run::HeartbeatNote as CoordinatorNote;

/// A heartbeat on a lease.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    /// Empty: keep the last one.
    pub checkpoint: Vec<u8>,
    /// Bytes to append to the stored checkpoint instead (not with `checkpoint`).
    pub append: Option<CheckpointAppend>,
    pub notes: Vec<CoordinatorNote>,
    /// Signals up to this event id have been consumed.
    pub acked_signal_event_id: u64,
    /// The attempt's token usage so far (cumulative; none: not reported).
    pub usage: Option<Usage>,
    /// The model the usage is from.
    pub model: String,
    /// Signs of a stuck agent since the last heartbeat.
    pub stuck: Vec<StuckNote>,
}

/// A heartbeat's append to the stored checkpoint, and the base it extends.
#[derive(Debug, Clone, Default)]
pub struct CheckpointAppend {
    pub base_length: u64,
    /// 32 bytes (`railyard_model::checkpoint`).
    pub base_digest: Vec<u8>,
    pub bytes: Vec<u8>,
}

/// The checkpoint a heartbeat carries, checked: at most one of whole or appended, an
/// append naming a well-formed base, and the whole it makes within the limit.
fn beat_checkpoint(
    checkpoint: Vec<u8>,
    append: Option<CheckpointAppend>,
) -> Result<BeatCheckpoint, ApiError> {
    check_bytes("checkpoint", &checkpoint, limits::CHECKPOINT)?;
    let Some(a) = append else {
        return Ok(BeatCheckpoint::from(checkpoint));
    };
    if !checkpoint.is_empty() {
        return Err(ApiError::field(
            "checkpoint_append",
            "cannot be sent with checkpoint: send the checkpoint whole or an append to it",
        ));
    }
    if a.bytes.is_empty() {
        return Err(ApiError::field("checkpoint_append.bytes", "must not be empty"));
    }
    let base_digest = <[u8; 32]>::try_from(a.base_digest.as_slice()).map_err(|_| {
        ApiError::field(
            "checkpoint_append.base_digest",
            format!("is {} bytes; a checkpoint digest is 32", a.base_digest.len()),
        )
    })?;
    let whole = a.base_length.saturating_add(a.bytes.len() as u64);
    if whole > limits::CHECKPOINT as u64 {
        return Err(ApiError::field(
            "checkpoint_append",
            format!(
                "would make the checkpoint {whole} bytes, more than the limit of {}",
                limits::CHECKPOINT
            ),
        ));
    }
    Ok(BeatCheckpoint::Append {
        base_len: a.base_length,
        base_digest,
        bytes: a.bytes,
    })
}

/// Extends the lease, saves the checkpoint (whole, or appended to the stored one),
/// records notes; answers whether the run's cancellation was requested and the
/// signals still pending.
pub async fn heartbeat(
    core: &Core,
    caller: &Caller,
    claims: TokenClaims,
    h: Heartbeat,
) -> Result<HeartbeatReply, ApiError> {
    let checkpoint = beat_checkpoint(h.checkpoint, h.append)?;
    check_count("notes", h.notes.len(), limits::COORDINATOR_NOTES)?;
    for (i, n) in h.notes.iter().enumerate() {
        check_name(&format!("notes[{i}].kind"), &n.kind)?;
        check_len(&format!("notes[{i}].message"), &n.message, limits::MESSAGE)?;
    }
    check_len("model", &h.model, limits::MODEL_NAME)?;
    check_count("stuck", h.stuck.len(), limits::STUCK_REPORTS)?;
    for (i, s) in h.stuck.iter().enumerate() {
        check_name(&format!("stuck[{i}].signal"), &s.signal)?;
        check_len(&format!("stuck[{i}].message"), &s.message, limits::MESSAGE)?;
    }
    let report = UsageReport {
        usage: h.usage,
        model: h.model.clone(),
        stuck: h.stuck,
    };
    let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
    let reply = core
        .writer
        .call(crate::writer::Heartbeat {
            claims,
            identity: caller.identity.clone(),
            checkpoint,
            notes: h.notes,
            acked: h.acked_signal_event_id,
            report,
        })
        .await?;
    if !reply.usage_added.is_zero() {
        core.metrics
            .record_tokens(&reply.workflow_id, &h.model, &reply.usage_added);
    }
    if let Some(why) = &reply.budget_exceeded {
        tracing::warn!(%run_id, %step, attempt, reason = %why, "step failed on its heartbeat: token budget exceeded");
    }
    Ok(reply)
}

/// A step's result.
#[derive(Debug, Clone, Default)]
pub struct Completion {
    pub notes: String,
    pub artifacts: Vec<String>,
    pub context_updates: BTreeMap<String, String>,
    /// The structured result, a JSON object as text (empty: none). Checked by the
    /// writer against the step's output contract: a mismatch is `INVALID_ARGUMENT`
    /// listing each violation, and is recorded in history.
    pub result_json: String,
    /// Lease the run's next step to the caller at once if it goes to the same queue.
    pub take_next: bool,
    /// The transcript that proposed the result: stored when the step's result is held
    /// for approval, so a rejection resumes from it (empty: the last heartbeat's).
    pub checkpoint: Vec<u8>,
    /// Search attributes to set on the run with the result (name → text; empty
    /// text: unset), checked by the namespace's declarations.
    pub search_attributes: BTreeMap<String, String>,
}

/// What an accepted completion came to.
#[derive(Debug)]
pub struct CompletionAnswer {
    /// The run's next step, leased to the caller (eager dispatch).
    pub next: Option<LeasedStep>,
    /// The step's result is held for approval (`requireConfirmation`): it completes
    /// when a person approves it.
    pub held_for_approval: bool,
}

/// Records a step's result; with `take_next`, answers the next step leased to the
/// caller (eager dispatch) when there is one on the same queue.
pub async fn complete(
    core: &Core,
    caller: &Caller,
    claims: TokenClaims,
    c: Completion,
) -> Result<Option<LeasedStep>, ApiError> {
    Ok(complete_step(core, caller, claims, c).await?.next)
}

/// [`complete`], saying whether the result was held for approval.
pub async fn complete_step(
    core: &Core,
    caller: &Caller,
    claims: TokenClaims,
    c: Completion,
) -> Result<CompletionAnswer, ApiError> {
    check_len("notes", &c.notes, limits::NOTES)?;
    check_bytes("checkpoint", &c.checkpoint, limits::CHECKPOINT)?;
    limits::check_artifacts("artifacts", &c.artifacts)?;
    check_context("context_updates", &c.context_updates)?;
    let result = limits::check_result("result_json", &c.result_json)?;
    let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
    let completion = StepCompletion {
        notes: c.notes,
        artifacts: c.artifacts,
        context: c.context_updates,
        result,
        take_next: c.take_next,
        checkpoint: c.checkpoint,
        attributes: c.search_attributes,
    };
    let refused = |why: &str| {
        tracing::info!(%run_id, %step, attempt, why = %railyard_model::text::cut(why, 512, "…"), "completion refused");
    };
    let identity = caller.identity.clone();
    let outcome = core
        .writer
        .call(Complete {
            claims,
            identity,
            completion,
        })
        .await
        .inspect_err(|e| {
            if let WriteError::Rejected(Rejection::InvalidArgument(why)) = e {
                refused(why);
            }
        })?;
    match outcome {
        // Recorded in history, and refused all the same.
        Completed::Refused(why) => {
            refused(&why);
            Err(Rejection::InvalidArgument(why).into())
        }
        Completed::Done(next) => {
            tracing::debug!(%run_id, %step, attempt, eager = next.is_some(), "step completed");
            Ok(CompletionAnswer {
                next: next.map(|g| LeasedStep::new(core, *g)),
                held_for_approval: false,
            })
        }
        Completed::Held => {
            tracing::info!(%run_id, %step, attempt, "step result held for approval");
            Ok(CompletionAnswer {
                next: None,
                held_for_approval: true,
            })
        }
    }
}

/// Records a failed attempt; answers whether another attempt follows.
/// An empty `error_type` means `error`; an empty checkpoint keeps the last one.
pub async fn fail(
    core: &Core,
    caller: &Caller,
    claims: TokenClaims,
    mut failure: StepFailure,
) -> Result<bool, ApiError> {
    if failure.error_type.is_empty() {
        failure.error_type = "error".to_string();
    }
    check_name("error_type", &failure.error_type)?;
    check_len("message", &failure.message, limits::MESSAGE)?;
    check_bytes("checkpoint", &failure.checkpoint, limits::CHECKPOINT)?;
    let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
    let will_retry = core
        .writer
        .call(crate::writer::Fail {
            claims,
            identity: caller.identity.clone(),
            failure,
        })
        .await?;
    tracing::info!(%run_id, %step, attempt, will_retry, "step failed");
    Ok(will_retry)
}

/// Parks the leased step for a provider's rate limit under `key` until `until_ms`
/// (the worker's `FailStepTask` with error type `rate_limited` and a reset time): the
/// lease and its slot are freed, no attempt is used up, and the step is dispatched
/// again then, resuming from `checkpoint` (empty: the last heartbeat's). A reset more
/// than a day ahead is refused; one past dispatches the step again at once.
pub async fn park_rate_limited(
    core: &Core,
    caller: &Caller,
    claims: TokenClaims,
    checkpoint: Vec<u8>,
    key: String,
    until_ms: railyard_model::Millis,
) -> Result<(), ApiError> {
    railyard_model::flow::check_key("rate_limit_key", &key, false)?;
    check_bytes("checkpoint", &checkpoint, limits::CHECKPOINT)?;
    let now = core.clock.now_ms();
    if until_ms > now + railyard_model::run::MAX_RATE_LIMIT_PARK_MS {
        return Err(ApiError::field("park_until_unix_ms", "is more than a day ahead"));
    }
    let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
    core.writer
        .call(crate::writer::ParkRateLimited {
            claims,
            identity: caller.identity.clone(),
            checkpoint,
            key: key.clone(),
            until_ms,
        })
        .await?;
    tracing::info!(%run_id, %step, attempt, %key, wait_ms = until_ms - now, "step parked for a rate limit");
    Ok(())
}

/// A queue's backlog, recent pollers and dispatch count.
pub fn describe_queue(core: &Core, caller: &Caller, task_queue: &str) -> Result<QueueStats, ApiError> {
    check_name("task_queue", task_queue)?;
    Ok(core
        .matching
        .stats(&caller.namespace, task_queue, core.clock.now_ms()))
}
