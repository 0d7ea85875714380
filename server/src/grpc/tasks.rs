//! `railyard.v1.Tasks`: workers long-poll for step tasks and report on their leases.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use railyard_proto::v1::{self, tasks_server::Tasks};
use tonic::{Request, Response, Status};

use super::*;
use crate::matching::Dispatch;
use crate::model::StepFailure;
use crate::store::writer::{Grant, StepCompletion};
use crate::token::TokenClaims;
use crate::workflow::{DEFAULT_MAX_TURNS, render};

/// Poll wait when the request names none.
const DEFAULT_POLL_WAIT_MS: u32 = 20_000;
/// Longest poll wait.
const MAX_POLL_WAIT_MS: u32 = 60_000;

/// The `Tasks` service.
pub struct TasksService {
    pub core: Arc<Core>,
}

impl TasksService {
    /// Verifies a token and checks that its namespace still exists.
    fn claims(&self, token: &str) -> Result<TokenClaims, ApiError> {
        let claims = self.core.keys.verify(token)?;
        self.core.namespace(&claims.namespace)?;
        Ok(claims)
    }

    fn step_task(&self, grant: Grant) -> v1::StepTask {
        let Grant {
            run,
            lease,
            checkpoint,
        } = grant;
        let index = run.current_step;
        let def = &run.definition;
        let step = &def.steps[index];
        let attempt = run.steps[index].attempt;
        let token = self.core.keys.sign(&TokenClaims {
            namespace: run.namespace.clone(),
            run_id: run.run_id.clone(),
            step: step.id.clone(),
            attempt,
            lease: lease.seq,
            kid: String::new(),
        });
        let prior_steps = def.steps[..index]
            .iter()
            .zip(&run.steps)
            .map(|(d, rec)| v1::PriorStep {
                step_id: d.id.clone(),
                title: d.title.clone(),
                notes: rec.notes.clone(),
                artifacts: rec.artifacts.clone(),
            })
            .collect();
        let ms = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        v1::StepTask {
            task_token: token,
            namespace: run.namespace.clone(),
            run_id: run.run_id.clone(),
            workflow_id: def.id.clone(),
            workflow_name: def.name.clone(),
            workflow_description: def.description.clone(),
            step_id: step.id.clone(),
            step_title: step.title.clone(),
            step_index: index as u32,
            step_count: def.steps.len() as u32,
            attempt,
            prompt: render(&step.prompt, &run.goal, &run.context),
            goal: run.goal.clone(),
            context: run.context.clone().into_iter().collect(),
            prior_steps,
            checkpoint,
            allowed_tools: step.allowed_tools.clone(),
            max_turns: step.max_turns.unwrap_or(DEFAULT_MAX_TURNS),
            start_to_close_timeout_ms: ms(step.timeout_ms()),
            heartbeat_timeout_ms: ms(lease.heartbeat_timeout_ms.unwrap_or(0)),
            require_confirmation: step.require_confirmation,
            last_failure: run.steps[index].last_failure.clone(),
            scheduled_time_unix_ms: lease.started_ms,
            signals: run
                .pending_signals
                .iter()
                .map(|s| v1::Signal {
                    name: s.name.clone(),
                    payload_json: s.payload_json.clone(),
                    event_id: s.event_id,
                })
                .collect(),
        }
    }
}

#[tonic::async_trait]
impl Tasks for TasksService {
    async fn poll_step_task(
        &self,
        req: Request<v1::PollStepTaskRequest>,
    ) -> Result<Response<v1::PollStepTaskResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        check_name("task_queue", &r.task_queue)?;
        let identity = identity(r.identity, "unknown-worker")?;
        let wait_ms = if r.wait_timeout_ms == 0 {
            DEFAULT_POLL_WAIT_MS
        } else {
            r.wait_timeout_ms.min(MAX_POLL_WAIT_MS)
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms.into());
        let core = &self.core;
        core.metrics.polls.fetch_add(1, Relaxed);
        loop {
            let task =
                match core
                    .matching
                    .take_or_park(&ns, &r.task_queue, &identity, core.clock.now_ms(), deadline)
                {
                    Ok(task) => task,
                    Err(mut parked) => {
                        let woken = tokio::select! {
                            r = tokio::time::timeout_at(deadline, &mut parked) => r.ok().and_then(Result::ok),
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
                                        return Ok(Response::new(v1::PollStepTaskResponse { task: None }));
                                    }
                                }
                            }
                        };
                        match dispatch {
                            Dispatch::Task(task) => task,
                            // Leased to this poll by the writer, already committed.
                            Dispatch::Leased(grant) => {
                                return Ok(Response::new(v1::PollStepTaskResponse {
                                    task: Some(self.step_task(*grant)),
                                }));
                            }
                        }
                    }
                };
            match core.writer.lease(task.clone(), identity.clone()).await {
                Ok(grant) => {
                    tracing::debug!(run_id = %task.run_id, queue = %task.queue, worker = %identity, "step leased");
                    return Ok(Response::new(v1::PollStepTaskResponse {
                        task: Some(self.step_task(grant)),
                    }));
                }
                // The run moved on since the task was queued: take the next one.
                Err(ApiError::FailedPrecondition(_) | ApiError::NotFound(_)) => continue,
                Err(e) => {
                    // Nothing was committed: the task is still ready.
                    core.matching.push(task);
                    return Err(e.into());
                }
            }
        }
    }

    async fn heartbeat_step_task(
        &self,
        req: Request<v1::HeartbeatStepTaskRequest>,
    ) -> Result<Response<v1::HeartbeatStepTaskResponse>, Status> {
        let r = req.into_inner();
        let claims = self.claims(&r.task_token)?;
        check_bytes("checkpoint", &r.checkpoint, limits::CHECKPOINT)?;
        check_count("notes", r.notes.len(), limits::COORDINATOR_NOTES)?;
        for (i, n) in r.notes.iter().enumerate() {
            check_name(&format!("notes[{i}].kind"), &n.kind)?;
            check_len(&format!("notes[{i}].message"), &n.message, limits::MESSAGE)?;
        }
        let identity = identity(r.identity, "worker")?;
        let notes = r.notes.into_iter().map(|n| (n.kind, n.message)).collect();
        let reply = self
            .core
            .writer
            .heartbeat(claims, identity, r.checkpoint, notes, r.acked_signal_event_id)
            .await?;
        Ok(Response::new(v1::HeartbeatStepTaskResponse {
            cancel_requested: reply.cancel_requested,
            signals: reply
                .signals
                .into_iter()
                .map(|s| v1::Signal {
                    name: s.name,
                    payload_json: s.payload_json,
                    event_id: s.event_id,
                })
                .collect(),
        }))
    }

    async fn complete_step_task(
        &self,
        req: Request<v1::CompleteStepTaskRequest>,
    ) -> Result<Response<v1::CompleteStepTaskResponse>, Status> {
        let r = req.into_inner();
        let claims = self.claims(&r.task_token)?;
        check_len("notes", &r.notes, limits::NOTES)?;
        check_count("artifacts", r.artifacts.len(), limits::ARTIFACTS)?;
        for (i, a) in r.artifacts.iter().enumerate() {
            check_len(&format!("artifacts[{i}]"), a, limits::ARTIFACT)?;
        }
        let context = check_context("context_updates", r.context_updates)?;
        let identity = identity(r.identity, "worker")?;
        let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
        let completion = StepCompletion {
            notes: r.notes,
            artifacts: r.artifacts,
            context,
            take_next: r.take_next,
        };
        let next = self.core.writer.complete(claims, identity, completion).await?;
        tracing::debug!(%run_id, %step, attempt, eager = next.is_some(), "step completed");
        Ok(Response::new(v1::CompleteStepTaskResponse {
            next_task: next.map(|g| self.step_task(g)),
        }))
    }

    async fn fail_step_task(
        &self,
        req: Request<v1::FailStepTaskRequest>,
    ) -> Result<Response<v1::FailStepTaskResponse>, Status> {
        let r = req.into_inner();
        let claims = self.claims(&r.task_token)?;
        let error_type = if r.error_type.is_empty() {
            "error".to_string()
        } else {
            r.error_type
        };
        check_name("error_type", &error_type)?;
        check_len("message", &r.message, limits::MESSAGE)?;
        check_bytes("checkpoint", &r.checkpoint, limits::CHECKPOINT)?;
        let identity = identity(r.identity, "worker")?;
        let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
        let failure = StepFailure {
            error_type,
            message: r.message,
            non_retryable: r.non_retryable,
            checkpoint: r.checkpoint,
        };
        let will_retry = self.core.writer.fail(claims, identity, failure).await?;
        tracing::info!(%run_id, %step, attempt, will_retry, "step failed");
        Ok(Response::new(v1::FailStepTaskResponse { will_retry }))
    }

    async fn describe_task_queue(
        &self,
        req: Request<v1::DescribeTaskQueueRequest>,
    ) -> Result<Response<v1::DescribeTaskQueueResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        check_name("task_queue", &r.task_queue)?;
        let stats = self
            .core
            .matching
            .stats(&ns, &r.task_queue, self.core.clock.now_ms());
        Ok(Response::new(v1::DescribeTaskQueueResponse {
            backlog: stats.backlog as u64,
            pollers: stats
                .pollers
                .into_iter()
                .map(|(identity, last)| v1::PollerInfo {
                    identity,
                    last_access_unix_ms: last,
                })
                .collect(),
            dispatched_total: stats.dispatched,
        }))
    }
}
