//! `railyard.v1.Batches`: each handler converts its request to a
//! [`railyard_engine::service::batches`] call and the answer back.

use super::status;
use std::sync::Arc;

use railyard_proto::v1::{self, batches_server::Batches};
use tonic::{Request, Response, Status};

use super::*;
use railyard_engine::service::batches::{self as svc, StartBatch};
use railyard_model::batch::{Batch, BatchAction, BatchItem};

/// The `Batches` service.
pub struct BatchesService {
    pub core: Arc<Core>,
}

fn action_from_proto(r: &v1::StartBatchRequest) -> Result<BatchAction, ApiError> {
    use v1::BatchAction as A;
    Ok(match A::try_from(r.action) {
        Ok(A::Cancel) => BatchAction::Cancel,
        Ok(A::Terminate) => BatchAction::Terminate,
        Ok(A::Reset) => BatchAction::Reset {
            to_step: (!r.to_step.is_empty()).then(|| r.to_step.clone()),
        },
        Ok(A::Rerun) => BatchAction::Rerun,
        Ok(A::Signal) => BatchAction::Signal {
            name: r.signal_name.clone(),
            payload_json: r.signal_payload_json.clone(),
        },
        Ok(A::Unspecified) => {
            return Err(ApiError::field(
                "action",
                "must be one of cancel, terminate, reset, rerun, signal",
            ));
        }
        Err(_) => {
            return Err(ApiError::field(
                "action",
                format!("unknown batch action {}", r.action),
            ));
        }
    })
}

fn action_to_proto(a: &BatchAction) -> v1::BatchAction {
    match a {
        BatchAction::Cancel => v1::BatchAction::Cancel,
        BatchAction::Terminate => v1::BatchAction::Terminate,
        BatchAction::Reset { .. } => v1::BatchAction::Reset,
        BatchAction::Rerun => v1::BatchAction::Rerun,
        BatchAction::Signal { .. } => v1::BatchAction::Signal,
    }
}

/// A batch as the API shows it.
pub fn batch_info(b: &Batch) -> v1::BatchInfo {
    let (to_step, signal_name) = match &b.action {
        BatchAction::Reset { to_step } => (to_step.clone().unwrap_or_default(), String::new()),
        BatchAction::Signal { name, .. } => (String::new(), name.clone()),
        _ => (String::new(), String::new()),
    };
    v1::BatchInfo {
        namespace: b.namespace.clone(),
        batch_id: b.batch_id.clone(),
        action: action_to_proto(&b.action).into(),
        query: b.query.clone(),
        reason: b.reason.clone(),
        rate_per_second: b.rate,
        identity: b.identity.clone(),
        state: b.state.name().to_string(),
        create_time_unix_ms: b.created_ms,
        close_time_unix_ms: b.closed_ms.unwrap_or(0),
        total: b.total,
        reached: b.next,
        succeeded: b.succeeded,
        skipped: b.skipped,
        failed: b.failed,
        to_step,
        signal_name,
        stopped_by: b.stopped_by.clone(),
        stop_reason: b.stop_reason.clone(),
    }
}

fn outcome(index: u64, item: &BatchItem) -> v1::BatchRunOutcome {
    let (name, reason, new_run_id) = match &item.outcome {
        None => ("", "", ""),
        Some(o @ railyard_model::batch::Outcome::Done { new_run_id }) => (o.name(), "", new_run_id.as_str()),
        Some(o) => (o.name(), o.reason(), ""),
    };
    v1::BatchRunOutcome {
        index,
        run_id: item.run_id.clone(),
        outcome: name.to_string(),
        reason: reason.to_string(),
        new_run_id: new_run_id.to_string(),
        time_unix_ms: item.at_ms.unwrap_or(0),
    }
}

impl BatchesService {
    fn caller(&self, metadata: &MetadataMap, namespace: String, identity: String) -> Result<Caller, Status> {
        caller_of(
            &self.core,
            metadata,
            namespace,
            identity,
            Operation::ManageBatches,
        )
    }
}

#[tonic::async_trait]
impl Batches for BatchesService {
    async fn start_batch(
        &self,
        req: Request<v1::StartBatchRequest>,
    ) -> Result<Response<v1::StartBatchResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace.clone(), r.identity.clone())?;
        let action = action_from_proto(&r).map_err(status)?;
        let s = svc::start(
            &self.core,
            &caller,
            StartBatch {
                action,
                query: r.query,
                reason: r.reason,
                rate: r.rate_per_second,
                dry_run: r.dry_run,
                batch_id: r.batch_id,
            },
        )
        .await
        .map_err(status)?;
        Ok(Response::new(v1::StartBatchResponse {
            matched: s.matched,
            over_limit: s.over_limit,
            sample_run_ids: s.sample,
            batch: s.batch.as_ref().map(batch_info),
            created: s.created,
        }))
    }

    async fn describe_batch(
        &self,
        req: Request<v1::DescribeBatchRequest>,
    ) -> Result<Response<v1::DescribeBatchResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, String::new())?;
        let d = svc::describe(&self.core, &caller, &r.batch_id).map_err(status)?;
        Ok(Response::new(v1::DescribeBatchResponse {
            batch: Some(batch_info(&d.batch)),
            problems: d.problems.iter().map(|(i, it)| outcome(*i, it)).collect(),
        }))
    }

    async fn list_batches(
        &self,
        req: Request<v1::ListBatchesRequest>,
    ) -> Result<Response<v1::ListBatchesResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, String::new())?;
        let (batches, next) = svc::list(&self.core, &caller, r.page_size, &r.page_token).map_err(status)?;
        Ok(Response::new(v1::ListBatchesResponse {
            batches: batches.iter().map(batch_info).collect(),
            next_page_token: next,
        }))
    }

    async fn stop_batch(
        &self,
        req: Request<v1::StopBatchRequest>,
    ) -> Result<Response<v1::StopBatchResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        let b = svc::stop(&self.core, &caller, r.batch_id, r.reason)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::StopBatchResponse {
            batch: Some(batch_info(&b)),
        }))
    }
}
