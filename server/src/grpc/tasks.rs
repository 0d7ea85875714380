//! `railyard.v1.Tasks`: workers long-poll for step tasks and report on their leases.
//! Each handler converts its request to a [`railyard_engine::service::tasks`] call and the
//! answer back.

use super::status;
use std::sync::Arc;

use railyard_proto::v1::{self, tasks_server::Tasks};
use tonic::{Request, Response, Status};

use super::*;
use railyard_engine::service::tasks::{self, LeasedStep};
use railyard_model::run::{PendingSignal, RATE_LIMITED_ERROR_TYPE, StepFailure};

/// The `Tasks` service.
pub struct TasksService {
    pub core: Arc<Core>,
}

fn signal_to_proto(s: PendingSignal) -> v1::Signal {
    v1::Signal {
        name: s.name,
        payload_json: s.payload_json,
        event_id: s.event_id,
    }
}

/// A leased step on the wire.
fn step_task(leased: LeasedStep) -> v1::StepTask {
    let LeasedStep {
        task_token,
        prompt,
        max_turns,
        grant,
    } = leased;
    let (run, lease, checkpoint) = (grant.run, grant.lease, grant.checkpoint);
    let checkpoint_digest = grant.checkpoint_digest.map(|d| d.to_vec()).unwrap_or_default();
    let index = run.current_step;
    let def = &run.definition;
    let step = &def.steps[index];
    let prior_steps = def.steps[..index]
        .iter()
        .zip(&run.steps)
        .map(|(d, rec)| v1::PriorStep {
            step_id: d.id.clone(),
            title: d.title.clone(),
            notes: rec.notes.clone(),
            artifacts: rec.artifacts.clone(),
            result_json: rec.result.clone(),
        })
        .collect();
    let ms = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
    v1::StepTask {
        task_token,
        namespace: run.namespace.clone(),
        run_id: run.run_id.clone(),
        workflow_id: def.id.clone(),
        workflow_name: def.name.clone(),
        workflow_description: def.description.clone(),
        step_id: step.id.clone(),
        step_title: step.title.clone(),
        step_index: index as u32,
        step_count: def.steps.len() as u32,
        attempt: run.steps[index].attempt,
        prompt,
        goal: run.goal.clone(),
        context: run.context.clone().into_iter().collect(),
        prior_steps,
        checkpoint,
        checkpoint_digest,
        allowed_tools: step.allowed_tools.clone(),
        max_turns,
        start_to_close_timeout_ms: ms(step.timeout_ms()),
        heartbeat_timeout_ms: ms(lease.heartbeat_timeout_ms.unwrap_or(0)),
        require_confirmation: step.require_confirmation,
        last_failure: run.steps[index].last_failure.clone(),
        scheduled_time_unix_ms: lease.started_ms,
        signals: run.pending_signals.iter().cloned().map(signal_to_proto).collect(),
        resume_messages: run.resume_input.clone(),
        depth: run.depth,
        output_schema_json: step.output.as_ref().map(|o| o.to_json()).unwrap_or_default(),
        required_artifacts: step.required_artifacts.patterns().to_vec(),
        budget: budget_to_proto(&run, index),
        stuck: step.stuck.map(|s| v1::StuckThresholds {
            repeated_calls: s.repeated_calls.unwrap_or(0),
            repeated_errors: s.repeated_errors.unwrap_or(0),
            no_progress_turns: s.no_progress_turns.unwrap_or(0),
        }),
        traceparent: railyard_engine::trace::attempt_traceparent(
            &run.trace,
            &run.namespace,
            &run.run_id,
            lease.seq,
        ),
        principles: run.principles.clone(),
        model: step
            .model
            .clone()
            .or_else(|| def.model.clone())
            .unwrap_or_default(),
        provider: step
            .provider
            .clone()
            .or_else(|| def.provider.clone())
            .unwrap_or_default(),
        fallback_models: if step.fallback_models.is_empty() {
            &def.fallback_models
        } else {
            &step.fallback_models
        }
        .iter()
        .map(|m| v1::ModelChoice {
            model: m.model().to_string(),
            provider: m.provider().unwrap_or_default().to_string(),
        })
        .collect(),
        mcp_servers_json: mcp_servers_json(def, step),
    }
}

/// The step's MCP servers as JSON (empty when it has none).
fn mcp_servers_json(
    def: &railyard_model::workflow::WorkflowDef,
    step: &railyard_model::workflow::StepDef,
) -> String {
    let servers = railyard_model::agent::step_servers(&def.mcp_servers, &step.mcp_servers);
    if servers.is_empty() {
        return String::new();
    }
    serde_json::to_string(&servers).unwrap_or_default()
}

/// The step's and run's budget, and what was used of it, when there is one.
fn budget_to_proto(run: &railyard_model::run::RunState, index: usize) -> Option<v1::TokenBudget> {
    let step_max = run.definition.steps[index].max_tokens;
    let b = run.budget;
    if step_max.is_none() && b.max_tokens.is_none() && b.max_cost_usd.is_none() {
        return None;
    }
    Some(v1::TokenBudget {
        step_max_tokens: step_max.unwrap_or(0),
        run_max_tokens: b.max_tokens.unwrap_or(0),
        run_max_cost_usd: b.max_cost_usd.unwrap_or(0.0),
        step_used: usage_to_proto(&run.steps[index].usage),
        run_used: usage_to_proto(&run.usage),
    })
}

#[tonic::async_trait]
impl Tasks for TasksService {
    async fn poll_step_task(
        &self,
        req: Request<v1::PollStepTaskRequest>,
    ) -> Result<Response<v1::PollStepTaskResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::PollTask,
        )?;
        let poll = tasks::Poll {
            task_queue: r.task_queue,
            wait_timeout_ms: r.wait_timeout_ms,
            run_id: r.run_id,
        };
        let leased = tasks::poll(&self.core, &caller, poll).await.map_err(status)?;
        Ok(Response::new(v1::PollStepTaskResponse {
            task: leased.map(step_task),
        }))
    }

    async fn heartbeat_step_task(
        &self,
        req: Request<v1::HeartbeatStepTaskRequest>,
    ) -> Result<Response<v1::HeartbeatStepTaskResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (caller, claims) =
            tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
                .map_err(status)?;
        let heartbeat = tasks::Heartbeat {
            checkpoint: r.checkpoint,
            append: r.checkpoint_append.map(|a| tasks::CheckpointAppend {
                base_length: a.base_length,
                base_digest: a.base_digest,
                bytes: a.bytes,
            }),
            notes: r
                .notes
                .into_iter()
                .map(|n| tasks::CoordinatorNote {
                    kind: n.kind,
                    message: n.message,
                })
                .collect(),
            acked_signal_event_id: r.acked_signal_event_id,
            usage: usage_from_proto(r.usage.as_ref()),
            model: r.model,
            stuck: r
                .stuck
                .into_iter()
                .map(|s| railyard_model::run::StuckNote {
                    signal: s.signal,
                    message: s.message,
                    fatal: s.fatal,
                })
                .collect(),
        };
        let reply = tasks::heartbeat(&self.core, &caller, claims, heartbeat)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::HeartbeatStepTaskResponse {
            cancel_requested: reply.cancel_requested,
            signals: reply.signals.into_iter().map(signal_to_proto).collect(),
            pause_requested: reply.pause_requested,
            budget_exceeded: reply.budget_exceeded.unwrap_or_default(),
            checkpoint_length: reply.checkpoint.map_or(0, |(len, _)| len),
            checkpoint_digest: reply.checkpoint.map(|(_, d)| d.to_vec()).unwrap_or_default(),
        }))
    }

    async fn complete_step_task(
        &self,
        req: Request<v1::CompleteStepTaskRequest>,
    ) -> Result<Response<v1::CompleteStepTaskResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (caller, claims) =
            tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
                .map_err(status)?;
        let completion = tasks::Completion {
            notes: r.notes,
            artifacts: r.artifacts,
            context_updates: r.context_updates.into_iter().collect(),
            result_json: r.result_json,
            take_next: r.take_next,
            checkpoint: r.checkpoint,
            search_attributes: r.search_attributes.into_iter().collect(),
        };
        let ended = claims.clone();
        let answer = tasks::complete_step(&self.core, &caller, claims, completion)
            .await
            .map_err(status)?;
        self.core.output.attempt_ended(&ended);
        Ok(Response::new(v1::CompleteStepTaskResponse {
            next_task: answer.next.map(step_task),
            held_for_approval: answer.held_for_approval,
        }))
    }

    async fn fail_step_task(
        &self,
        req: Request<v1::FailStepTaskRequest>,
    ) -> Result<Response<v1::FailStepTaskResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (caller, claims) =
            tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
                .map_err(status)?;
        if r.park_until_unix_ms != 0 {
            if r.error_type != RATE_LIMITED_ERROR_TYPE {
                return Err(status(ApiError::field(
                    "park_until_unix_ms",
                    format!("is only for error_type {RATE_LIMITED_ERROR_TYPE:?}"),
                )));
            }
            let ended = claims.clone();
            tasks::park_rate_limited(
                &self.core,
                &caller,
                claims,
                r.checkpoint,
                r.rate_limit_key,
                r.park_until_unix_ms,
            )
            .await
            .map_err(status)?;
            self.core.output.attempt_ended(&ended);
            return Ok(Response::new(v1::FailStepTaskResponse { will_retry: true }));
        }
        let failure = StepFailure {
            error_type: r.error_type,
            message: r.message,
            non_retryable: r.non_retryable,
            checkpoint: r.checkpoint,
        };
        let ended = claims.clone();
        let will_retry = tasks::fail(&self.core, &caller, claims, failure)
            .await
            .map_err(status)?;
        self.core.output.attempt_ended(&ended);
        Ok(Response::new(v1::FailStepTaskResponse { will_retry }))
    }

    async fn spawn_child_runs(
        &self,
        req: Request<v1::SpawnChildRunsRequest>,
    ) -> Result<Response<v1::SpawnChildRunsResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (caller, claims) =
            tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
                .map_err(status)?;
        let spawn = railyard_engine::service::children::Spawn {
            children: r
                .children
                .into_iter()
                .map(|c| railyard_engine::service::children::ChildRequest {
                    workflow_id: c.workflow_id,
                    goal: c.goal,
                    context: c.context.into_iter().collect(),
                    parent_close_policy: c.parent_close_policy,
                })
                .collect(),
            wait: r.wait,
            await_run_ids: r.await_run_ids,
            checkpoint: r.checkpoint,
            request_id: r.request_id,
        };
        let spawned = railyard_engine::service::children::spawn(&self.core, &caller, claims, spawn)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::SpawnChildRunsResponse {
            child_run_ids: spawned.child_run_ids,
        }))
    }

    async fn upsert_search_attributes(
        &self,
        req: Request<v1::UpsertSearchAttributesRequest>,
    ) -> Result<Response<v1::UpsertSearchAttributesResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (caller, claims) =
            tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
                .map_err(status)?;
        let changed = railyard_engine::service::attributes::upsert(
            &self.core,
            &caller,
            claims,
            r.search_attributes.into_iter().collect(),
        )
        .await
        .map_err(status)?;
        Ok(Response::new(v1::UpsertSearchAttributesResponse {
            changed: u32::try_from(changed).unwrap_or(u32::MAX),
        }))
    }

    async fn report_issue(
        &self,
        req: Request<v1::ReportIssueRequest>,
    ) -> Result<Response<v1::ReportIssueResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (caller, claims) =
            tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
                .map_err(status)?;
        let answer = railyard_engine::service::issues::report_issue(
            &self.core,
            &caller,
            claims,
            &r.severity,
            r.summary,
            r.details,
        )
        .await
        .map_err(status)?;
        Ok(Response::new(v1::ReportIssueResponse {
            recorded: answer.recorded,
            step_issues: answer.step_issues,
        }))
    }

    async fn append_step_output(
        &self,
        req: Request<v1::AppendStepOutputRequest>,
    ) -> Result<Response<v1::AppendStepOutputResponse>, Status> {
        super::output::append_step_output(&self.core, req).await
    }

    async fn describe_task_queue(
        &self,
        req: Request<v1::DescribeTaskQueueRequest>,
    ) -> Result<Response<v1::DescribeTaskQueueResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::DescribeTaskQueue,
        )?;
        let stats = tasks::describe_queue(&self.core, &caller, &r.task_queue).map_err(status)?;
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
            keys: stats
                .keys
                .into_iter()
                .map(|(key, queued, load)| v1::QueueKeyInfo {
                    key,
                    queued: queued as u64,
                    running: load.running,
                    limit: load.limit.unwrap_or(0),
                })
                .collect(),
        }))
    }
}
