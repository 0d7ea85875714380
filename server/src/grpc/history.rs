//! `railyard.v1.History`: starting, reading, listing and steering runs. Each handler
//! converts its request to a [`railyard_engine::service::runs`] or [`railyard_engine::service::workflows`]
//! call and the answer back.

use super::status;
use railyard_model::Rejection;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use railyard_proto::v1::{self, history_server::History};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::*;
use railyard_engine::service::approvals;
use railyard_engine::service::checkpoint;
use railyard_engine::service::reset;
use railyard_engine::service::runs::{self, IdReusePolicy};
use railyard_engine::service::workflows;
use railyard_model::run::ResetKind;

/// The `History` service.
pub struct HistoryService {
    pub core: Arc<Core>,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<v1::HistoryEvent, Status>> + Send>>;

fn id_reuse_policy(value: i32) -> Result<IdReusePolicy, ApiError> {
    match v1::IdReusePolicy::try_from(value) {
        Ok(v1::IdReusePolicy::Unspecified | v1::IdReusePolicy::RejectDuplicate) => {
            Ok(IdReusePolicy::RejectDuplicate)
        }
        Ok(v1::IdReusePolicy::AllowDuplicate) => Ok(IdReusePolicy::AllowDuplicate),
        Err(_) => Err(ApiError::field(
            "id_reuse_policy",
            format!("unknown value {value}"),
        )),
    }
}

/// A run and its definition, as compact JSON: written pretty, a definition with deeply
/// nested output schemas grew from under 1 MB to more than the message limit. The
/// definition's bound at load (`workflow::MAX_DEFINITION_JSON`) and the run's own
/// limits keep the answer within [`railyard_proto::MAX_MESSAGE_BYTES`];
/// should the two together ever pass it, the definition is left out (and a warning
/// logged) so the run is still described.
fn describe_response(run: &railyard_model::run::RunState) -> v1::DescribeRunResponse {
    use prost::Message;
    let mut response = v1::DescribeRunResponse {
        run: Some(run_info(run)),
        definition_json: serde_json::to_string(&*run.definition).unwrap_or_default(),
    };
    let bytes = response.encoded_len();
    if bytes > railyard_proto::MAX_MESSAGE_BYTES {
        tracing::warn!(
            run_id = %run.run_id,
            bytes,
            definition_bytes = response.definition_json.len(),
            "DescribeRun: the run and its definition pass the message limit; the definition is left out"
        );
        response.definition_json.clear();
    }
    response
}

fn session_node(tree: runs::SessionTree) -> v1::SessionNode {
    v1::SessionNode {
        run: Some(run_summary(&tree.run)),
        children: tree.children.into_iter().map(session_node).collect(),
    }
}

/// The trace a started run joins: `StartRunRequest.traceparent` (an invalid one is
/// refused), else the `traceparent` metadata (ignored when invalid, as W3C Trace
/// Context asks of a header), else none (the run's own, derived from its id).
fn start_trace(
    field: &str,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<Option<railyard_model::trace::TraceContext>, Status> {
    use railyard_model::trace::TraceContext;
    if !field.is_empty() {
        // The error names the field: `traceparent "...": why`.
        return TraceContext::parse(field)
            .map(Some)
            .map_err(|e| status(ApiError::Rejected(Rejection::InvalidArgument(e.to_string()))));
    }
    Ok(metadata
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| TraceContext::parse(v).ok()))
}

fn reset_response(d: reset::ResetDone) -> v1::ResetRunResponse {
    v1::ResetRunResponse {
        run_id: d.run_id,
        started: d.started,
        step_id: d.step_id,
        carried_steps: u32::try_from(d.carried).unwrap_or(u32::MAX),
        terminated: d.terminated,
    }
}

#[tonic::async_trait]
impl History for HistoryService {
    async fn start_run(
        &self,
        req: Request<v1::StartRunRequest>,
    ) -> Result<Response<v1::StartRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::StartRun,
        )?;
        let start = runs::StartRun {
            workflow_id: r.workflow_id,
            run_id: r.run_id,
            goal: r.goal,
            context: r.context.into_iter().collect(),
            request_id: r.request_id,
            id_reuse_policy: id_reuse_policy(r.id_reuse_policy).map_err(status)?,
            parent_run_id: r.parent_run_id,
            callback_url: r.callback_url,
            task_queue: r.task_queue,
            budget: railyard_model::run::RunBudget {
                max_tokens: (r.max_tokens > 0).then_some(r.max_tokens),
                // 0 (and anything not above it) is "the definition's"; a NaN is refused.
                max_cost_usd: (r.max_cost_usd != 0.0).then_some(r.max_cost_usd),
            },
            trace: start_trace(&r.traceparent, &metadata)?,
            attributes: r.search_attributes.into_iter().collect(),
            priority: r.priority,
            fairness_key: r.fairness_key,
            fairness_weight: r.fairness_weight,
            concurrency_key: r.concurrency_key,
        };
        let started = runs::start(&self.core, &caller, start).await.map_err(status)?;
        Ok(Response::new(v1::StartRunResponse {
            run_id: started.run_id,
            started: started.started,
        }))
    }

    async fn describe_run(
        &self,
        req: Request<v1::DescribeRunRequest>,
    ) -> Result<Response<v1::DescribeRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::DescribeRun,
        )?;
        let run = runs::describe(&self.core, &caller, &r.run_id).map_err(status)?;
        let mut response = describe_response(&run);
        if let Some(info) = response.run.as_mut() {
            info.flow_wait = runs::flow_wait(&self.core, &run);
        }
        Ok(Response::new(response))
    }

    async fn get_history(
        &self,
        req: Request<v1::GetHistoryRequest>,
    ) -> Result<Response<v1::GetHistoryResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::GetHistory,
        )?;
        let query = runs::HistoryQuery {
            run_id: r.run_id,
            from_event_id: r.from_event_id,
            page_size: r.page_size,
            wait_timeout_ms: r.wait_timeout_ms,
        };
        let page = runs::history(&self.core, &caller, query).await.map_err(status)?;
        Ok(Response::new(v1::GetHistoryResponse {
            events: page.events.iter().map(event_to_proto).collect(),
            next_event_id: page.next_event_id,
            status: status_to_proto(page.status) as i32,
        }))
    }

    async fn get_step_checkpoint(
        &self,
        req: Request<v1::GetStepCheckpointRequest>,
    ) -> Result<Response<v1::GetStepCheckpointResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::GetHistory,
        )?;
        let page = checkpoint::page(&self.core, &caller, &r.run_id, &r.step_id, r.offset, r.max_bytes)
            .map_err(status)?;
        Ok(Response::new(v1::GetStepCheckpointResponse {
            step_id: page.step_id,
            attempt: page.attempt,
            total_bytes: page.total,
            data: page.bytes,
            next_offset: page.next_offset,
        }))
    }

    type WatchRunStream = EventStream;
    type WatchOutputStream = super::output::OutputStream;

    async fn watch_output(
        &self,
        req: Request<v1::WatchOutputRequest>,
    ) -> Result<Response<Self::WatchOutputStream>, Status> {
        super::output::watch_output(&self.core, req).await
    }

    async fn watch_run(
        &self,
        req: Request<v1::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::WatchRun,
        )?;
        let events = runs::watch(&self.core, &caller, &r.run_id, r.from_event_id).map_err(status)?;
        let stream = ReceiverStream::new(events).map(|ev| ev.map(|ev| event_to_proto(&ev)).map_err(status));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_runs(
        &self,
        req: Request<v1::ListRunsRequest>,
    ) -> Result<Response<v1::ListRunsResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::ListRuns,
        )?;
        let list = runs::ListRuns {
            status: status_from_proto(r.status).map_err(status)?,
            workflow_id: r.workflow_id,
            parent_run_id: r.parent_run_id,
            started_after_ms: r.started_after_unix_ms,
            started_before_ms: r.started_before_unix_ms,
            has_issues: r.has_issues,
            page_token: r.page_token,
            page_size: r.page_size,
            query: r.query,
        };
        let page = runs::list(&self.core, &caller, list).map_err(status)?;
        Ok(Response::new(v1::ListRunsResponse {
            runs: page.runs.iter().map(run_summary).collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn count_runs(
        &self,
        req: Request<v1::CountRunsRequest>,
    ) -> Result<Response<v1::CountRunsResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::ListRuns,
        )?;
        let count = railyard_engine::service::queries::CountRuns {
            query: r.query,
            group_by: r.group_by,
        };
        let c = railyard_engine::service::queries::count(&self.core, &caller, count).map_err(status)?;
        Ok(Response::new(v1::CountRunsResponse {
            count: c.count,
            groups: c
                .groups
                .into_iter()
                .map(|(value, count)| v1::CountRunsGroup {
                    is_null: value.is_none(),
                    value: value.unwrap_or_default(),
                    count,
                })
                .collect(),
            other_count: c.other_count,
            other_groups: c.other_groups,
        }))
    }

    async fn signal_run(
        &self,
        req: Request<v1::SignalRunRequest>,
    ) -> Result<Response<v1::SignalRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::SignalRun,
        )?;
        let signal = runs::SignalRun {
            run_id: r.run_id,
            name: r.signal_name,
            payload_json: r.payload_json,
            request_id: r.request_id,
        };
        runs::signal(&self.core, &caller, signal).await.map_err(status)?;
        Ok(Response::new(v1::SignalRunResponse {}))
    }

    async fn cancel_run(
        &self,
        req: Request<v1::CancelRunRequest>,
    ) -> Result<Response<v1::CancelRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::CancelRun,
        )?;
        runs::cancel(&self.core, &caller, r.run_id, r.reason)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::CancelRunResponse {}))
    }

    async fn terminate_run(
        &self,
        req: Request<v1::TerminateRunRequest>,
    ) -> Result<Response<v1::TerminateRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::TerminateRun,
        )?;
        runs::terminate(&self.core, &caller, r.run_id, r.reason)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::TerminateRunResponse {}))
    }

    async fn reset_run(
        &self,
        req: Request<v1::ResetRunRequest>,
    ) -> Result<Response<v1::ResetRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::ResetRun,
        )?;
        let reset = reset::Reset {
            kind: ResetKind::Reset,
            run_id: r.run_id,
            to_step: r.to_step,
            reason: r.reason,
            goal: r.goal,
            context: r.context.into_iter().collect(),
            new_run_id: r.new_run_id,
            request_id: r.request_id,
        };
        let done = reset::reset(&self.core, &caller, reset).await.map_err(status)?;
        Ok(Response::new(reset_response(done)))
    }

    async fn rerun_run(
        &self,
        req: Request<v1::RerunRunRequest>,
    ) -> Result<Response<v1::ResetRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::RerunRun,
        )?;
        let rerun = reset::Reset {
            kind: ResetKind::Rerun,
            run_id: r.run_id,
            to_step: String::new(),
            reason: r.reason,
            goal: r.goal,
            context: r.context.into_iter().collect(),
            new_run_id: r.new_run_id,
            request_id: r.request_id,
        };
        let done = reset::reset(&self.core, &caller, rerun).await.map_err(status)?;
        Ok(Response::new(reset_response(done)))
    }

    async fn pause_run(
        &self,
        req: Request<v1::PauseRunRequest>,
    ) -> Result<Response<v1::PauseRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::PauseRun,
        )?;
        let changed = runs::pause(&self.core, &caller, r.run_id, r.reason, true)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::PauseRunResponse { changed }))
    }

    async fn unpause_run(
        &self,
        req: Request<v1::UnpauseRunRequest>,
    ) -> Result<Response<v1::UnpauseRunResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::UnpauseRun,
        )?;
        let changed = runs::pause(&self.core, &caller, r.run_id, String::new(), false)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::UnpauseRunResponse { changed }))
    }

    async fn register_workflow(
        &self,
        req: Request<v1::RegisterWorkflowRequest>,
    ) -> Result<Response<v1::RegisterWorkflowResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::RegisterWorkflow,
        )?;
        let registered = workflows::register(&self.core, &caller, r.definition_json)
            .await
            .map_err(status)?;
        let w = registered.workflow;
        let listed = workflows::ListedWorkflow {
            definition: w.definition.clone(),
            source_file: workflows::registered_source(&w.namespace, &w.definition.id),
            registered: Some(w),
        };
        Ok(Response::new(v1::RegisterWorkflowResponse {
            workflow: Some(workflow_info(&listed)),
            changed: registered.changed,
        }))
    }

    async fn list_workflows(
        &self,
        req: Request<v1::ListWorkflowsRequest>,
    ) -> Result<Response<v1::ListWorkflowsResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::ListWorkflows,
        )?;
        let listing = workflows::list(&self.core, &caller).map_err(status)?;
        let workflows = listing.workflows.iter().map(workflow_info).collect();
        let invalid = listing
            .invalid
            .into_iter()
            .map(|i| v1::InvalidWorkflow {
                source_file: i.file.display().to_string(),
                error: i.error,
            })
            .collect();
        Ok(Response::new(v1::ListWorkflowsResponse { workflows, invalid }))
    }

    async fn get_session_tree(
        &self,
        req: Request<v1::GetSessionTreeRequest>,
    ) -> Result<Response<v1::GetSessionTreeResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            String::new(),
            Operation::GetSessionTree,
        )?;
        let tree = runs::session_tree(&self.core, &caller, &r.run_id).map_err(status)?;
        Ok(Response::new(v1::GetSessionTreeResponse {
            root: Some(session_node(tree)),
        }))
    }

    async fn redeliver_result(
        &self,
        req: Request<v1::RedeliverResultRequest>,
    ) -> Result<Response<v1::RedeliverResultResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::RedeliverResult,
        )?;
        let targets = runs::redeliver(&self.core, &caller, &r.run_id, &r.target)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::RedeliverResultResponse { targets }))
    }

    async fn approve_step(
        &self,
        req: Request<v1::ApproveStepRequest>,
    ) -> Result<Response<v1::ApproveStepResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::ApproveStep,
        )?;
        let answer = approvals::Answer {
            run_id: r.run_id,
            step_id: r.step_id,
            text: r.note,
        };
        approvals::approve(&self.core, &caller, answer)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::ApproveStepResponse {}))
    }

    async fn reject_step(
        &self,
        req: Request<v1::RejectStepRequest>,
    ) -> Result<Response<v1::RejectStepResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = caller_of(
            &self.core,
            &metadata,
            r.namespace,
            r.identity,
            Operation::RejectStep,
        )?;
        let answer = approvals::Answer {
            run_id: r.run_id,
            step_id: r.step_id,
            text: r.feedback,
        };
        approvals::reject(&self.core, &caller, answer)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::RejectStepResponse {}))
    }
}

/// A definition a namespace offers, on the wire.
fn workflow_info(w: &workflows::ListedWorkflow) -> v1::WorkflowInfo {
    let def = &w.definition;
    v1::WorkflowInfo {
        id: def.id.clone(),
        version: def.version.clone(),
        name: def.name.clone(),
        description: def.description.clone(),
        step_ids: def.steps.iter().map(|s| s.id.clone()).collect(),
        source_file: w.source_file.display().to_string(),
        registered: w.registered.is_some(),
        content_hash: w.registered.as_ref().map(|r| r.hash.clone()).unwrap_or_default(),
        register_time_unix_ms: w.registered.as_ref().map_or(0, |r| r.registered_ms),
    }
}
