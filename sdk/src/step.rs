//! A leased step with its durable journal (`docs/step-journal.md`): [`Step`], made by
//! [`StepWorker::step`] from a polled task.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use railyard_proto::v1::{ChildRunSpec, HeartbeatStepTaskResponse, StepTask};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::journal::{Journal, Record, RecordError, outcomes_in};
use crate::{CheckpointSync, ClientError, Completion, CompletionReply, Failure, StepWorker};

/// The error type of the failure that suspends a step because its run was paused.
pub const PAUSED_ERROR_TYPE: &str = "paused";

/// Why a journaled call did not return its value.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The value is not JSON, or would pass the checkpoint's limit: nothing written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The journaled value does not decode as the type the call asks for (the step's
    /// code changed what the entry means).
    #[error("journal entry {entry}: the journaled value does not decode: {reason}")]
    Replay {
        /// The entry, as `run "name" #seq` or `state`.
        entry: String,
        /// serde's complaint.
        reason: String,
    },
    /// The server could not be reached or refused the call; whether a record was
    /// stored is unknown (the next write finds out).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The heartbeat's usage passed the token budget: the server failed the step and
    /// the lease is gone.
    #[error("the step is over its token budget: {0}")]
    BudgetExceeded(String),
}

/// A leased step with its journal: [`Step::run`] returns what an earlier attempt
/// journaled for a call instead of calling it again, and otherwise calls it and
/// journals the result (a heartbeat appending one record to the checkpoint) before
/// returning it. [`Step::complete`], [`Step::fail`], [`Step::pause`] and
/// [`Step::wait_for_children`] end the lease; the last three send the whole journal as
/// the checkpoint, so the next attempt replays it.
///
/// ```no_run
/// # use railyard_sdk::{Completion, StepError, StepWorker};
/// # async fn fetch(page: u32) -> Vec<String> { Vec::new() }
/// # async fn demo(worker: &StepWorker) -> Result<(), StepError> {
/// if let Some(task) = worker.poll(std::time::Duration::from_secs(30)).await? {
///     let mut step = worker.step(task);
///     let mut rows = Vec::new();
///     for page in 0..3 {
///         // The n-th call of "fetch" replays record {name: "fetch", seq: n}.
///         rows.extend(step.run("fetch", || fetch(page)).await?);
///     }
///     step.complete(Completion::notes(format!("{} rows", rows.len()))).await?;
/// }
/// # Ok(()) }
/// ```
pub struct Step {
    worker: StepWorker,
    task: StepTask,
    journal: Journal,
    sync: CheckpointSync,
    /// Calls so far in this attempt, by name: the next call's seq.
    runs: HashMap<String, u64>,
    spawns: HashMap<String, u64>,
    waits: HashMap<String, u64>,
    cancel_requested: bool,
    pause_requested: bool,
}

impl StepWorker {
    /// The leased `task` as a [`Step`] with the journal its checkpoint holds.
    pub fn step(&self, task: StepTask) -> Step {
        Step::new(self.clone(), task)
    }
}

impl Step {
    /// The leased `task`, worked through `worker`, with the journal its checkpoint
    /// holds (none when it holds something else).
    pub fn new(worker: StepWorker, task: StepTask) -> Self {
        let journal = Journal::read(&task.checkpoint);
        // The journal only grows, so appends are planned by length alone; a task whose
        // checkpoint is not this journal exactly gets it whole first.
        let mut sync = CheckpointSync::from_task(&task).growing();
        if !journal.appendable() {
            sync.reset();
        }
        Self {
            worker,
            task,
            journal,
            sync,
            runs: HashMap::new(),
            spawns: HashMap::new(),
            waits: HashMap::new(),
            cancel_requested: false,
            pause_requested: false,
        }
    }

    /// The leased task.
    pub fn task(&self) -> &StepTask {
        &self.task
    }

    /// The worker it reports through.
    pub fn worker(&self) -> &StepWorker {
        &self.worker
    }

    /// The journal: what earlier attempts and this one recorded.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// What sending the checkpoint cost so far (appends, whole sends, refusals).
    pub fn checkpoint_sync(&self) -> &CheckpointSync {
        &self.sync
    }

    /// A heartbeat since the lease began asked to cancel the step.
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested
    }

    /// A heartbeat since the lease began said the run is paused: the step should
    /// [`Step::pause`] at its next turn.
    pub fn pause_requested(&self) -> bool {
        self.pause_requested
    }

    /// Returns the value journaled for this call (the `n`-th of `name` in this
    /// attempt: record `{name, seq: n}`) without calling `f`; otherwise calls `f`,
    /// heartbeating meanwhile, journals its value and returns it once the server
    /// acknowledged the heartbeat that carried it. A value that is not JSON is
    /// refused ([`StepError::Record`]) and nothing is written.
    pub async fn run<T, F, Fut>(&mut self, name: &str, f: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        match self
            .try_run(name, || async { Ok::<_, Infallible>(f().await) })
            .await?
        {
            Ok(value) => Ok(value),
            Err(never) => match never {},
        }
    }

    /// [`Step::run`] for a fallible `f`: an `Ok` value is journaled, an error is
    /// returned as the inner `Err` and not journaled (a resumed attempt calls `f`
    /// again).
    pub async fn try_run<T, E, F, Fut>(&mut self, name: &str, f: F) -> Result<Result<T, E>, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let seq = next(&mut self.runs, name);
        let entry = || {
            Record::Run {
                name: name.into(),
                seq,
                value: serde_json::Value::Null,
            }
            .entry()
        };
        if let Some(value) = self.journal.run(name, seq) {
            return decode(value, entry).map(Ok);
        }
        let value = match self.beating(f()).await {
            Ok(value) => value,
            Err(e) => return Ok(Err(e)),
        };
        let json = Journal::value(entry, &value)?;
        self.write(Record::Run {
            name: name.into(),
            seq,
            value: json,
        })
        .await?;
        Ok(Ok(value))
    }

    /// Journals `value` as the step's state (a `state` record); [`Step::state`] of a
    /// resumed attempt answers the last one saved.
    pub async fn save_state<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), StepError> {
        let value = Journal::value(|| "state".into(), value)?;
        self.write(Record::State { value }).await
    }

    /// The last state saved, by this attempt or an earlier one.
    pub fn state<T: DeserializeOwned>(&self) -> Result<Option<T>, StepError> {
        self.journal
            .state()
            .map(|v| decode(v, || "state".into()))
            .transpose()
    }

    /// Starts child runs and journals their run ids (a `spawn` record), answered in
    /// the order requested; the `n`-th call of `name` in a resumed attempt answers the
    /// ids journaled without starting them again. Children started whose record was
    /// not acknowledged (the worker stopped in between) are not started again: the
    /// request's id ([`railyard_proto::spawn_request_id`]) makes the server answer the
    /// same children.
    pub async fn spawn(&mut self, name: &str, children: Vec<ChildRunSpec>) -> Result<Vec<String>, StepError> {
        let seq = next(&mut self.spawns, name);
        if let Some(ids) = self.journal.spawned(name, seq) {
            return Ok(ids.to_vec());
        }
        let request_id = railyard_proto::spawn_request_id(&self.task.step_id, name, seq);
        let run_ids = self
            .worker
            .spawn_keyed(&self.task.task_token, children, request_id)
            .await?;
        self.write(Record::Spawn {
            name: name.into(),
            seq,
            run_ids: run_ids.clone(),
        })
        .await?;
        Ok(run_ids)
    }

    /// The outcomes the `n`-th wait of `name` for the children `run_ids` ended with:
    /// journaled ones (an `outcomes` record), or those of the task's resume messages,
    /// journaled now; none when this attempt was not resumed from that wait (then
    /// [`Step::wait_for_children`] is the next call). The answer is
    /// `{"children": [...], "stillRunning": [...]}`, each in the order of `run_ids`.
    pub async fn waited(
        &mut self,
        name: &str,
        run_ids: &[String],
    ) -> Result<Option<serde_json::Value>, StepError> {
        let seq = next(&mut self.waits, name);
        if let Some(value) = self.journal.outcomes(name, seq) {
            return Ok(Some(value.clone()));
        }
        let Some(value) = outcomes_in(&self.task.resume_messages, run_ids) else {
            return Ok(None);
        };
        self.write(Record::Outcomes {
            name: name.into(),
            seq,
            value: value.clone(),
        })
        .await?;
        Ok(Some(value))
    }

    /// Ends the lease with the step waiting until the children `run_ids` closed,
    /// sending the whole journal as the checkpoint. The step is leased again then,
    /// their outcomes in [`StepTask::resume_messages`]; its code runs from the top,
    /// replaying the journal, and [`Step::waited`] then answers them.
    pub async fn wait_for_children(self, run_ids: Vec<String>) -> Result<(), StepError> {
        self.worker
            .spawn_children(
                &self.task.task_token,
                Vec::new(),
                true,
                run_ids,
                self.journal.bytes().to_vec(),
            )
            .await?;
        Ok(())
    }

    /// Extends the lease (nothing journaled); answers pending signals and whether
    /// cancellation or a pause was requested.
    pub async fn heartbeat(&mut self) -> Result<HeartbeatStepTaskResponse, StepError> {
        let resp = self.worker.heartbeat(&self.task.task_token).send().await?;
        self.note(&resp)?;
        Ok(resp)
    }

    /// Completes the step, sending the journal as the checkpoint a rejection of a
    /// result held for approval resumes from.
    pub async fn complete(self, completion: Completion) -> Result<CompletionReply, StepError> {
        Ok(self
            .worker
            .complete_with_checkpoint(
                &self.task.task_token,
                completion,
                self.journal.bytes().to_vec(),
                false,
            )
            .await?)
    }

    /// Reports a failure with the whole journal as its checkpoint (in place of
    /// `failure.checkpoint`), so the next attempt replays it; answers whether the
    /// server scheduled another attempt.
    pub async fn fail(self, failure: Failure) -> Result<bool, StepError> {
        let failure = Failure {
            checkpoint: self.journal.bytes().to_vec(),
            ..failure
        };
        Ok(self.worker.fail(&self.task.task_token, failure).await?)
    }

    /// Suspends the step because its run was paused ([`Step::pause_requested`]): a
    /// failure of type [`PAUSED_ERROR_TYPE`] with the whole journal, which uses up no
    /// attempt; unpausing resumes it from the journal.
    pub async fn pause(self) -> Result<(), StepError> {
        let failure = Failure {
            error_type: PAUSED_ERROR_TYPE.into(),
            message: "the run was paused; the step suspended".into(),
            ..Default::default()
        };
        self.fail(failure).await.map(|_| ())
    }

    /// Sends `record` with a heartbeat appending it to the journal the server holds
    /// (whole when it holds none, or refused the base); the journal takes it once the
    /// server acknowledged it.
    async fn write(&mut self, record: Record) -> Result<(), StepError> {
        let bytes = self.journal.record(&record)?;
        let resp = self
            .worker
            .heartbeat(&self.task.task_token)
            .checkpoint(bytes.as_slice())
            .sync(&mut self.sync)
            .send()
            .await?;
        self.note(&resp)?;
        self.journal.push(record, bytes);
        Ok(())
    }

    /// Takes what a heartbeat answered.
    fn note(&mut self, resp: &HeartbeatStepTaskResponse) -> Result<(), StepError> {
        self.cancel_requested |= resp.cancel_requested;
        self.pause_requested |= resp.pause_requested;
        if resp.budget_exceeded.is_empty() {
            Ok(())
        } else {
            Err(StepError::BudgetExceeded(resp.budget_exceeded.clone()))
        }
    }

    /// Awaits `work`, heartbeating every third of the heartbeat timeout meanwhile so
    /// a long call keeps the lease. A heartbeat that fails is logged: the write after
    /// `work` reports what matters.
    async fn beating<O>(&mut self, work: impl Future<Output = O>) -> O {
        let every = Duration::from_millis(u64::from(self.task.heartbeat_timeout_ms) / 3);
        if every.is_zero() {
            return work.await;
        }
        let (worker, token) = (&self.worker, self.task.task_token.as_str());
        // What the heartbeats answered, folded: cancel, pause, over budget.
        let mut seen = HeartbeatStepTaskResponse::default();
        let beats = async {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tick.tick().await;
                match worker.heartbeat(token).send().await {
                    Ok(resp) => {
                        seen.cancel_requested |= resp.cancel_requested;
                        seen.pause_requested |= resp.pause_requested;
                        if !resp.budget_exceeded.is_empty() {
                            seen.budget_exceeded = resp.budget_exceeded;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "heartbeat during a journaled call failed"),
                }
            }
        };
        let out = tokio::select! {
            out = work => out,
            _ = beats => unreachable!("heartbeats go on until the call returns"),
        };
        // Over budget: the lease is gone, and the write after this says so.
        let _ = self.note(&seen);
        out
    }
}

/// The next seq of `name`, counted.
fn next(counts: &mut HashMap<String, u64>, name: &str) -> u64 {
    let n = counts.entry(name.to_string()).or_default();
    let seq = *n;
    *n += 1;
    seq
}

fn decode<T: DeserializeOwned>(
    value: &serde_json::Value,
    entry: impl FnOnce() -> String,
) -> Result<T, StepError> {
    T::deserialize(value).map_err(|e| StepError::Replay {
        entry: entry(),
        reason: e.to_string(),
    })
}
