//! `railyard.v1.History`: starting, reading, listing and steering runs.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use railyard_proto::v1::{self, history_server::History};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::*;
use crate::model::StartParams;
use crate::store::RunFilter;
use crate::store::writer::{StartCommand, Stop};

/// Most events in one `GetHistory` page.
const MAX_PAGE: usize = 1000;
/// Longest `GetHistory` wait.
const MAX_WAIT_MS: u32 = 60_000;
/// Deepest session tree returned.
const MAX_TREE_DEPTH: usize = 32;

/// The `History` service.
pub struct HistoryService {
    pub core: Arc<Core>,
}

fn run_not_found(ns: &str, run_id: &str) -> ApiError {
    ApiError::NotFound(format!("run {run_id:?} not found in namespace {ns:?}"))
}

impl HistoryService {
    fn load(&self, ns: &str, run_id: &str) -> Result<RunState, ApiError> {
        check_name("run_id", run_id)?;
        self.core
            .store
            .run(ns, run_id)?
            .ok_or_else(|| run_not_found(ns, run_id))
    }

    async fn stop(
        &self,
        how: Stop,
        ns: &str,
        run_id: String,
        reason: String,
        who: String,
    ) -> Result<(), ApiError> {
        let ns = self.core.namespace(ns)?;
        check_name("run_id", &run_id)?;
        check_len("reason", &reason, limits::MESSAGE)?;
        let who = identity(who, "client")?;
        self.core.writer.stop(how, ns, run_id, who, reason).await
    }

    fn tree(&self, ns: &str, run: RunState, depth: usize) -> Result<v1::SessionNode, ApiError> {
        let mut children = Vec::new();
        if depth < MAX_TREE_DEPTH {
            for id in self.core.store.children(ns, &run.run_id)? {
                if let Some(child) = self.core.store.run(ns, &id)? {
                    children.push(self.tree(ns, child, depth + 1)?);
                }
            }
        }
        Ok(v1::SessionNode {
            run: Some(run_info(&run)),
            children,
        })
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<v1::HistoryEvent, Status>> + Send>>;

#[tonic::async_trait]
impl History for HistoryService {
    async fn start_run(
        &self,
        req: Request<v1::StartRunRequest>,
    ) -> Result<Response<v1::StartRunResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        check_name("workflow_id", &r.workflow_id)?;
        let definition = self.core.workflows.get(&r.workflow_id).cloned().ok_or_else(|| {
            let known: Vec<_> = self.core.workflows.valid.keys().map(String::as_str).collect();
            ApiError::NotFound(format!(
                "workflow {:?} not found (known: {})",
                r.workflow_id,
                known.join(", ")
            ))
        })?;
        check_len("goal", &r.goal, limits::GOAL)?;
        let context = check_context("context", r.context)?;
        check_len("request_id", &r.request_id, limits::REQUEST_ID)?;
        match v1::IdReusePolicy::try_from(r.id_reuse_policy) {
            Ok(v1::IdReusePolicy::Unspecified | v1::IdReusePolicy::RejectDuplicate) => {}
            Ok(v1::IdReusePolicy::AllowDuplicate) => {
                return Err(ApiError::field(
                    "id_reuse_policy",
                    "ALLOW_DUPLICATE is not supported yet: a run id names one run for good within its namespace",
                )
                .into());
            }
            Err(_) => {
                let msg = format!("unknown value {}", r.id_reuse_policy);
                return Err(ApiError::field("id_reuse_policy", msg).into());
            }
        }
        let run_id = if r.run_id.is_empty() {
            uuid::Uuid::now_v7().to_string()
        } else {
            check_name("run_id", &r.run_id)?;
            r.run_id
        };
        if !r.parent_run_id.is_empty() {
            check_name("parent_run_id", &r.parent_run_id)?;
        }
        let identity = identity(r.identity, "client")?;
        check_len("callback_url", &r.callback_url, limits::URL)?;
        if !r.callback_url.is_empty()
            && !r.callback_url.starts_with("http://")
            && !r.callback_url.starts_with("https://")
        {
            return Err(ApiError::field("callback_url", "must be an http:// or https:// URL").into());
        }
        let params = StartParams {
            namespace: ns,
            run_id,
            goal: r.goal,
            context,
            request_id: r.request_id,
            parent_run_id: r.parent_run_id,
            callback_url: r.callback_url,
            identity,
        };
        let started = self
            .core
            .writer
            .start(StartCommand { params, definition })
            .await?;
        tracing::info!(run_id = %started.run_id, workflow = %r.workflow_id, started = started.started, "run started");
        Ok(Response::new(v1::StartRunResponse {
            run_id: started.run_id,
            started: started.started,
        }))
    }

    async fn describe_run(
        &self,
        req: Request<v1::DescribeRunRequest>,
    ) -> Result<Response<v1::DescribeRunResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        let run = self.load(&ns, &r.run_id)?;
        let definition_json = serde_json::to_string_pretty(&*run.definition).unwrap_or_default();
        Ok(Response::new(v1::DescribeRunResponse {
            run: Some(run_info(&run)),
            definition_json,
        }))
    }

    async fn get_history(
        &self,
        req: Request<v1::GetHistoryRequest>,
    ) -> Result<Response<v1::GetHistoryResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        let mut run = self.load(&ns, &r.run_id)?;
        let from = r.from_event_id.max(1);
        let limit = if r.page_size == 0 {
            MAX_PAGE
        } else {
            (r.page_size as usize).min(MAX_PAGE)
        };
        let mut events = self.core.store.history(&ns, &r.run_id, from, limit)?;
        if events.is_empty() && run.status.is_open() && r.wait_timeout_ms > 0 {
            let mut changes = self.core.watchers.subscribe(&ns, &r.run_id);
            let wait = Duration::from_millis(r.wait_timeout_ms.min(MAX_WAIT_MS).into());
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                // Re-read after subscribing so an event committed in between is not missed.
                events = self.core.store.history(&ns, &r.run_id, from, limit)?;
                if !events.is_empty() {
                    break;
                }
                if tokio::time::timeout_at(deadline, changes.changed())
                    .await
                    .is_err()
                {
                    break;
                }
            }
            run = self.load(&ns, &r.run_id)?;
        }
        let last_sent = events.last().map(|e| e.id).unwrap_or(from - 1);
        let next_event_id = if !run.status.is_open() && last_sent >= run.last_event_id {
            0
        } else {
            last_sent + 1
        };
        Ok(Response::new(v1::GetHistoryResponse {
            events: events.iter().map(event_to_proto).collect(),
            next_event_id,
            status: status_to_proto(run.status) as i32,
        }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        req: Request<v1::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        self.load(&ns, &r.run_id)?;
        let core = self.core.clone();
        let (tx, rx) = mpsc::channel(256);
        let mut changes = core.watchers.subscribe(&ns, &r.run_id);
        let mut from = r.from_event_id.max(1);
        tokio::spawn(async move {
            loop {
                let events = match core.store.history(&ns, &r.run_id, from, MAX_PAGE) {
                    Ok(events) => events,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                let got = events.len();
                for ev in events {
                    from = ev.id + 1;
                    if tx.send(Ok(event_to_proto(&ev))).await.is_err() {
                        return;
                    }
                }
                if got > 0 {
                    continue;
                }
                let closed = matches!(core.store.run(&ns, &r.run_id), Ok(Some(run)) if !run.status.is_open());
                if closed {
                    // Everything up to the close event has been sent.
                    if core
                        .store
                        .history(&ns, &r.run_id, from, 1)
                        .map(|e| e.is_empty())
                        .unwrap_or(true)
                    {
                        return;
                    }
                    continue;
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    _ = tx.closed() => return,
                    _ = core.shutting_down() => {
                        let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_runs(
        &self,
        req: Request<v1::ListRunsRequest>,
    ) -> Result<Response<v1::ListRunsResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        let non_empty = |s: String| (!s.is_empty()).then_some(s);
        let filter = RunFilter {
            status: status_from_proto(r.status)?,
            workflow_id: non_empty(r.workflow_id),
            parent_run_id: non_empty(r.parent_run_id),
            started_after_ms: (r.started_after_unix_ms != 0).then_some(r.started_after_unix_ms),
            started_before_ms: (r.started_before_unix_ms != 0).then_some(r.started_before_unix_ms),
        };
        if let (Some(after), Some(before)) = (filter.started_after_ms, filter.started_before_ms)
            && before <= after
        {
            return Err(ApiError::field(
                "started_before_unix_ms",
                format!("{before} is not after started_after_unix_ms {after}"),
            )
            .into());
        }
        let after = if r.page_token.is_empty() {
            None
        } else {
            let bad = || ApiError::field("page_token", "is not a token this server handed out");
            let (ms, id) = r.page_token.split_once(':').ok_or_else(bad)?;
            Some((ms.parse::<i64>().map_err(|_| bad())?, id.to_string()))
        };
        let limit = if r.page_size == 0 {
            100
        } else {
            (r.page_size as usize).min(1000)
        };
        let (runs, next) = self.core.store.list_runs(&ns, &filter, after, limit)?;
        Ok(Response::new(v1::ListRunsResponse {
            runs: runs.iter().map(run_info).collect(),
            next_page_token: next.map(|(ms, id)| format!("{ms}:{id}")).unwrap_or_default(),
        }))
    }

    async fn signal_run(
        &self,
        req: Request<v1::SignalRunRequest>,
    ) -> Result<Response<v1::SignalRunResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        check_name("run_id", &r.run_id)?;
        check_name("signal_name", &r.signal_name)?;
        check_len("payload_json", &r.payload_json, limits::SIGNAL_PAYLOAD)?;
        if !r.payload_json.is_empty() {
            serde_json::from_str::<serde_json::Value>(&r.payload_json)
                .map_err(|e| ApiError::field("payload_json", format!("is not valid JSON: {e}")))?;
        }
        check_len("request_id", &r.request_id, limits::REQUEST_ID)?;
        let identity = identity(r.identity, "client")?;
        self.core
            .writer
            .signal(
                ns,
                r.run_id,
                identity,
                r.signal_name,
                r.payload_json,
                r.request_id,
            )
            .await?;
        Ok(Response::new(v1::SignalRunResponse {}))
    }

    async fn cancel_run(
        &self,
        req: Request<v1::CancelRunRequest>,
    ) -> Result<Response<v1::CancelRunResponse>, Status> {
        let r = req.into_inner();
        self.stop(Stop::Cancel, &r.namespace, r.run_id, r.reason, r.identity)
            .await?;
        Ok(Response::new(v1::CancelRunResponse {}))
    }

    async fn terminate_run(
        &self,
        req: Request<v1::TerminateRunRequest>,
    ) -> Result<Response<v1::TerminateRunResponse>, Status> {
        let r = req.into_inner();
        self.stop(Stop::Terminate, &r.namespace, r.run_id, r.reason, r.identity)
            .await?;
        Ok(Response::new(v1::TerminateRunResponse {}))
    }

    async fn list_workflows(
        &self,
        req: Request<v1::ListWorkflowsRequest>,
    ) -> Result<Response<v1::ListWorkflowsResponse>, Status> {
        self.core.namespace(&req.into_inner().namespace)?;
        let reg = &self.core.workflows;
        let workflows = reg
            .valid
            .values()
            .map(|(def, file)| v1::WorkflowInfo {
                id: def.id.clone(),
                version: def.version.clone(),
                name: def.name.clone(),
                description: def.description.clone(),
                step_ids: def.steps.iter().map(|s| s.id.clone()).collect(),
                source_file: file.display().to_string(),
            })
            .collect();
        let invalid = reg
            .invalid
            .iter()
            .map(|i| v1::InvalidWorkflow {
                source_file: i.file.display().to_string(),
                error: i.error.clone(),
            })
            .collect();
        Ok(Response::new(v1::ListWorkflowsResponse { workflows, invalid }))
    }

    async fn get_session_tree(
        &self,
        req: Request<v1::GetSessionTreeRequest>,
    ) -> Result<Response<v1::GetSessionTreeResponse>, Status> {
        let r = req.into_inner();
        let ns = self.core.namespace(&r.namespace)?;
        let run = self.load(&ns, &r.run_id)?;
        Ok(Response::new(v1::GetSessionTreeResponse {
            root: Some(self.tree(&ns, run, 0)?),
        }))
    }
}
