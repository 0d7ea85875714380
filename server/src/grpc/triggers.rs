//! `railyard.v1.Triggers`: each handler converts its request to a
//! [`railyard_engine::service::triggers`] call and the answer back.

use super::status;
use std::sync::Arc;

use railyard_proto::v1::{self, triggers_server::Triggers};
use tonic::{Request, Response, Status};

use super::*;
use railyard_engine::service::triggers::{self as svc, TriggerInput};
use railyard_model::trigger::{Mode, Source, Trigger};

/// The `Triggers` service.
pub struct TriggersService {
    pub core: Arc<Core>,
}

fn mode_from_proto(value: i32) -> Result<String, ApiError> {
    use v1::TriggerMode as M;
    Ok(match M::try_from(value) {
        Ok(M::Unspecified) => "",
        Ok(M::Parallel) => "parallel",
        Ok(M::Serial) => "serial",
        Ok(M::Replace) => "replace",
        Err(_) => {
            return Err(ApiError::field(
                "spec.mode",
                format!("unknown trigger mode {value}"),
            ));
        }
    }
    .to_string())
}

fn mode_to_proto(m: Mode) -> v1::TriggerMode {
    match m {
        Mode::Parallel => v1::TriggerMode::Parallel,
        Mode::Serial => v1::TriggerMode::Serial,
        Mode::Replace => v1::TriggerMode::Replace,
    }
}

fn input(trigger_id: String, spec: Option<v1::TriggerSpec>) -> Result<TriggerInput, ApiError> {
    let s = spec.ok_or_else(|| ApiError::field("spec", "missing"))?;
    Ok(TriggerInput {
        namespace: String::new(),
        id: trigger_id,
        workflow_id: s.workflow_id,
        task_queue: s.task_queue,
        goal: s.goal,
        context: s.context.into_iter().collect(),
        attributes: s.search_attributes.into_iter().collect(),
        callback_url: s.callback_url,
        signature_secret: s.signature_secret,
        signature_header: s.signature_header,
        bearer_token: s.bearer_token,
        dedup_header: s.dedup_header,
        concurrency_key: s.concurrency_key,
        mode: mode_from_proto(s.mode)?,
        description: s.description,
        poll: s.poll.map(|p| svc::PollInput {
            source: p.source,
            repo: p.repo,
            base_url: p.base_url,
            token: p.token,
            labels: p.labels,
            state: p.state,
            author: p.author,
            events: p.events,
            every: p.every,
        }),
    })
}

/// A trigger as the API shows it.
pub fn trigger_info(t: &Trigger) -> v1::TriggerInfo {
    v1::TriggerInfo {
        namespace: t.namespace.clone(),
        trigger_id: t.id.clone(),
        spec: Some(v1::TriggerSpec {
            search_attributes: t.attributes.clone().into_iter().collect(),
            workflow_id: t.workflow_id.clone(),
            task_queue: t.task_queue.clone(),
            goal: t.goal.clone(),
            context: t.context.clone().into_iter().collect(),
            callback_url: t.callback_url.clone(),
            signature_secret: t.signature_secret.clone(),
            signature_header: t.signature_header.clone(),
            bearer_token: t.bearer_token.clone(),
            dedup_header: t.dedup_header.clone(),
            concurrency_key: t.concurrency_key.clone(),
            mode: mode_to_proto(t.mode).into(),
            description: t.description.clone(),
            poll: t.poll.as_ref().map(|p| {
                let i = svc::poll_input(p);
                v1::TriggerPollSource {
                    source: i.source,
                    repo: i.repo,
                    base_url: i.base_url,
                    token: i.token,
                    labels: i.labels,
                    state: i.state,
                    author: i.author,
                    events: i.events,
                    every: i.every,
                }
            }),
        }),
        from_config: t.source == Source::Config,
        create_time_unix_ms: t.created_ms,
        update_time_unix_ms: t.updated_ms,
        hook_path: if t.poll.is_some() {
            String::new()
        } else {
            format!("/hooks/{}/{}", t.namespace, t.id)
        },
        recent_deliveries: t
            .recent
            .iter()
            .map(|d| v1::TriggerDelivery {
                received_time_unix_ms: d.received_ms,
                delivery_id: d.delivery_id.clone(),
                run_id: d.run_id.clone(),
                outcome: d.outcome.clone(),
            })
            .collect(),
        // The node's memory, not the trigger's row: added by `with_refusals`.
        recent_refusals: Vec::new(),
        poll_status: t.poll.as_ref().map(|_| {
            let s = &t.poll_state;
            v1::TriggerPollStatus {
                last_poll_unix_ms: s.last_poll_ms,
                next_poll_unix_ms: s.next_poll_ms,
                last_error: s.last_error.clone(),
                last_error_unix_ms: s.last_error_ms,
                errors_in_row: s.errors,
                polls: s.polls,
                items_seen: s.items_seen,
                runs_started: s.runs_started,
                cursor: s.since.clone(),
            }
        }),
    }
}

impl TriggersService {
    fn caller(&self, metadata: &MetadataMap, namespace: String, identity: String) -> Result<Caller, Status> {
        caller_of(
            &self.core,
            metadata,
            namespace,
            identity,
            Operation::ManageTriggers,
        )
    }
}

/// The trigger's info with the refusals its node remembers.
fn with_refusals(core: &railyard_engine::service::Core, t: &Trigger) -> v1::TriggerInfo {
    let mut info = trigger_info(t);
    info.recent_refusals = svc::refusals(core, t)
        .into_iter()
        .map(|r| v1::TriggerRefusal {
            received_time_unix_ms: r.received_ms,
            delivery_id: r.delivery_id,
            kind: r.kind.to_string(),
            reason: r.reason,
        })
        .collect();
    info
}

#[tonic::async_trait]
impl Triggers for TriggersService {
    async fn create_trigger(
        &self,
        req: Request<v1::CreateTriggerRequest>,
    ) -> Result<Response<v1::CreateTriggerResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        let t = svc::create(&self.core, &caller, input(r.trigger_id, r.spec).map_err(status)?)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::CreateTriggerResponse {
            trigger: Some(with_refusals(&self.core, &t)),
        }))
    }

    async fn describe_trigger(
        &self,
        req: Request<v1::DescribeTriggerRequest>,
    ) -> Result<Response<v1::DescribeTriggerResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, String::new())?;
        let t = svc::describe(&self.core, &caller, &r.trigger_id).map_err(status)?;
        Ok(Response::new(v1::DescribeTriggerResponse {
            trigger: Some(with_refusals(&self.core, &t)),
        }))
    }

    async fn list_triggers(
        &self,
        req: Request<v1::ListTriggersRequest>,
    ) -> Result<Response<v1::ListTriggersResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, String::new())?;
        let page = svc::list(&self.core, &caller, r.page_size, &r.page_token).map_err(status)?;
        Ok(Response::new(v1::ListTriggersResponse {
            triggers: page
                .triggers
                .iter()
                .map(|t| with_refusals(&self.core, t))
                .collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn update_trigger(
        &self,
        req: Request<v1::UpdateTriggerRequest>,
    ) -> Result<Response<v1::UpdateTriggerResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        let t = svc::update(&self.core, &caller, input(r.trigger_id, r.spec).map_err(status)?)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::UpdateTriggerResponse {
            trigger: Some(with_refusals(&self.core, &t)),
        }))
    }

    async fn delete_trigger(
        &self,
        req: Request<v1::DeleteTriggerRequest>,
    ) -> Result<Response<v1::DeleteTriggerResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        svc::delete(&self.core, &caller, &r.trigger_id)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::DeleteTriggerResponse {}))
    }
}
