//! The `Capacity` service: rate limits the fleet shares, converting only; the
//! rules are `railyard_engine::service::flow`'s.

use std::sync::Arc;

use railyard_engine::matching::Capacity as Answer;
use railyard_engine::service::{Core, flow, tasks};
use railyard_proto::v1::{self, capacity_server::Capacity};
use tonic::{Request, Response, Status};

use super::{credentials, status};

/// `railyard.v1.Capacity`.
pub struct CapacityService {
    pub core: Arc<Core>,
}

#[tonic::async_trait]
impl Capacity for CapacityService {
    async fn acquire_capacity(
        &self,
        req: Request<v1::AcquireCapacityRequest>,
    ) -> Result<Response<v1::AcquireCapacityResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (_, claims) = tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
            .map_err(status)?;
        let capacity = flow::acquire(&self.core, &claims, &r.key, r.tokens).map_err(status)?;
        Ok(Response::new(match capacity {
            Answer::Go => v1::AcquireCapacityResponse {
                go: true,
                retry_at_unix_ms: 0,
            },
            Answer::WaitUntil(at) => v1::AcquireCapacityResponse {
                go: false,
                retry_at_unix_ms: at,
            },
        }))
    }

    async fn report_rate_limited(
        &self,
        req: Request<v1::ReportRateLimitedRequest>,
    ) -> Result<Response<v1::ReportRateLimitedResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let (_, claims) = tasks::lease_holder(&self.core, &credentials(&metadata), &r.task_token, r.identity)
            .map_err(status)?;
        flow::rate_limited(&self.core, &claims, &r.key, r.reset_time_unix_ms).map_err(status)?;
        Ok(Response::new(v1::ReportRateLimitedResponse {}))
    }
}
