//! Playing worker: poll a queue, heartbeat, complete or fail the leased step.

use std::collections::HashMap;
use std::time::Duration;

use railyard_proto::v1::*;

use crate::heartbeat::Heartbeat;
use crate::{Client, ClientError};

/// The error type of the failure that parks a step for a provider's rate limit
/// ([`StepWorker::park_rate_limited`]).
pub const RATE_LIMITED_ERROR_TYPE: &str = "rate_limited";

/// What a worker reports when a step is done.
#[derive(Debug, Clone, Default)]
pub struct Completion {
    /// What the step did, for the run's history and the next step's prompt.
    pub notes: String,
    /// Paths or URLs of what the step produced.
    pub artifacts: Vec<String>,
    /// Context entries to set on the run for the steps after this one.
    pub context_updates: HashMap<String, String>,
    /// The structured result, a JSON object as text (empty: none). A step with an
    /// output contract refuses a result that breaks it: `ClientError::InvalidArgument`
    /// listing each violation, and nothing completes.
    pub result_json: String,
    /// Search attributes to set on the run with the result (name → text; empty
    /// text: unset), as the namespace declares them.
    pub search_attributes: HashMap<String, String>,
}

impl Completion {
    /// A completion with notes only.
    pub fn notes(notes: impl Into<String>) -> Self {
        Self {
            notes: notes.into(),
            ..Default::default()
        }
    }
}

/// The server's answer to a completion.
#[derive(Debug, Clone, Default)]
pub struct CompletionReply {
    /// The run's next step, leased to this worker (eager dispatch).
    pub next_task: Option<StepTask>,
    /// The step requires confirmation: its result is held for approval (the lease is
    /// over; a person approves or rejects it).
    pub held_for_approval: bool,
}

/// What a worker reports when a step failed.
#[derive(Debug, Clone, Default)]
pub struct Failure {
    /// Matched against the step's non-retryable error types.
    pub error_type: String,
    /// What went wrong, for people.
    pub message: String,
    /// Fail without further attempts.
    pub non_retryable: bool,
    /// Handed to the next attempt.
    pub checkpoint: Vec<u8>,
}

/// A worker's view of one task queue.
#[derive(Clone)]
pub struct StepWorker {
    client: Client,
    namespace: String,
    queue: String,
    identity: String,
}

impl StepWorker {
    /// A worker polling `queue` of `namespace` as `identity`.
    pub fn new(client: Client, namespace: &str, queue: &str, identity: &str) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            queue: queue.into(),
            identity: identity.into(),
        }
    }

    /// The client it calls through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The identity it polls and reports as.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The task queue it polls.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Long-polls for a step; `None` when `wait` passed with nothing to do.
    pub async fn poll(&self, wait: Duration) -> Result<Option<StepTask>, ClientError> {
        self.client
            .poll_step_task(PollStepTaskRequest {
                namespace: self.namespace.clone(),
                task_queue: self.queue.clone(),
                identity: self.identity.clone(),
                wait_timeout_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
                run_id: String::new(),
            })
            .await
    }

    /// A heartbeat of the step `task_token` leases, to fill in and send: extends the
    /// lease and answers pending signals and whether cancellation was requested.
    pub fn heartbeat<'a>(&'a self, task_token: &'a str) -> Heartbeat<'a> {
        Heartbeat::new(self, task_token)
    }

    /// Completes the step with `completion`.
    pub async fn complete(&self, task_token: &str, completion: Completion) -> Result<(), ClientError> {
        self.report_completion(task_token, completion, false)
            .await
            .map(|_| ())
    }

    /// Completes the step and, when the run's next step goes to this worker's queue,
    /// takes it at once (eager dispatch): one round trip and one commit instead of a
    /// completion, a poll and a lease.
    pub async fn complete_and_take_next(
        &self,
        task_token: &str,
        completion: Completion,
    ) -> Result<Option<StepTask>, ClientError> {
        self.report_completion(task_token, completion, true).await
    }

    async fn report_completion(
        &self,
        task_token: &str,
        completion: Completion,
        take_next: bool,
    ) -> Result<Option<StepTask>, ClientError> {
        self.complete_with_checkpoint(task_token, completion, Vec::new(), take_next)
            .await
            .map(|reply| reply.next_task)
    }

    /// Completes the step, sending `checkpoint` (the transcript that proposed the
    /// result; the server keeps it only when the step requires confirmation, so a
    /// rejection resumes from it), with eager dispatch when `take_next`. The answer
    /// says whether the result is held for approval.
    pub async fn complete_with_checkpoint(
        &self,
        task_token: &str,
        completion: Completion,
        checkpoint: Vec<u8>,
        take_next: bool,
    ) -> Result<CompletionReply, ClientError> {
        let resp = self
            .client
            .complete_step_task(CompleteStepTaskRequest {
                task_token: task_token.into(),
                notes: completion.notes,
                artifacts: completion.artifacts,
                context_updates: completion.context_updates,
                identity: self.identity.clone(),
                take_next,
                result_json: completion.result_json,
                checkpoint,
                search_attributes: completion.search_attributes,
            })
            .await?;
        Ok(CompletionReply {
            next_task: resp.next_task,
            held_for_approval: resp.held_for_approval,
        })
    }

    /// Starts child runs under the lease (the task token is the authority); with
    /// `wait`, ends the lease with the step waiting for them and `await_run_ids`.
    /// Answers the new children's run ids. Tried once: see [`Self::spawn_keyed`].
    pub async fn spawn_children(
        &self,
        task_token: &str,
        children: Vec<ChildRunSpec>,
        wait: bool,
        await_run_ids: Vec<String>,
        checkpoint: Vec<u8>,
    ) -> Result<Vec<String>, ClientError> {
        self.spawn(SpawnChildRunsRequest {
            task_token: task_token.into(),
            children,
            wait,
            await_run_ids,
            checkpoint,
            ..Default::default()
        })
        .await
    }

    /// Starts child runs under the lease, their run ids derived from `request_id`
    /// (non-empty): a repeat answers the same children and starts none, so the call
    /// is retried on a transient error and a step resumed after a crash gets the
    /// children its earlier attempt started.
    pub async fn spawn_keyed(
        &self,
        task_token: &str,
        children: Vec<ChildRunSpec>,
        request_id: String,
    ) -> Result<Vec<String>, ClientError> {
        self.spawn(SpawnChildRunsRequest {
            task_token: task_token.into(),
            children,
            request_id,
            ..Default::default()
        })
        .await
    }

    async fn spawn(&self, mut req: SpawnChildRunsRequest) -> Result<Vec<String>, ClientError> {
        req.identity = self.identity.clone();
        Ok(self.client.spawn_child_runs(req).await?.child_run_ids)
    }

    /// Records an issue the agent reported without ending the step; answers whether
    /// it was recorded (at most 10 per attempt) and the step's issues so far.
    pub async fn report_issue(
        &self,
        task_token: &str,
        severity: String,
        summary: String,
        details: String,
    ) -> Result<ReportIssueResponse, ClientError> {
        self.client
            .report_issue(ReportIssueRequest {
                task_token: task_token.into(),
                identity: self.identity.clone(),
                severity,
                summary,
                details,
            })
            .await
    }

    /// Sets search attributes of the step's run mid-step; answers how many changed.
    pub async fn upsert_search_attributes(
        &self,
        task_token: &str,
        search_attributes: HashMap<String, String>,
    ) -> Result<u32, ClientError> {
        Ok(self
            .client
            .upsert_search_attributes(railyard_proto::v1::UpsertSearchAttributesRequest {
                task_token: task_token.into(),
                identity: self.identity.clone(),
                search_attributes,
            })
            .await?
            .changed)
    }

    /// Reports a failure; returns whether the server scheduled another attempt.
    pub async fn fail(&self, task_token: &str, failure: Failure) -> Result<bool, ClientError> {
        Ok(self
            .client
            .fail_step_task(FailStepTaskRequest {
                task_token: task_token.into(),
                error_type: failure.error_type,
                message: failure.message,
                non_retryable: failure.non_retryable,
                identity: self.identity.clone(),
                checkpoint: failure.checkpoint,
                ..Default::default()
            })
            .await?
            .will_retry)
    }

    /// Parks the step for a provider's rate limit under `key` until `until_unix_ms`
    /// (its reset): the lease and its slot are given back with `checkpoint`, no
    /// attempt is used up, and the server dispatches the step again then.
    pub async fn park_rate_limited(
        &self,
        task_token: &str,
        checkpoint: Vec<u8>,
        key: &str,
        until_unix_ms: i64,
    ) -> Result<(), ClientError> {
        self.client
            .fail_step_task(FailStepTaskRequest {
                task_token: task_token.into(),
                error_type: RATE_LIMITED_ERROR_TYPE.into(),
                message: format!("parked until the rate limit resets at {until_unix_ms} ms"),
                identity: self.identity.clone(),
                checkpoint,
                park_until_unix_ms: until_unix_ms,
                rate_limit_key: key.into(),
                ..Default::default()
            })
            .await?;
        Ok(())
    }
}
