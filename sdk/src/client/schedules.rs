//! The `Schedules` calls of [`Client`]. A create names a request id (one is made
//! when the request has none), so a retry never creates a schedule twice.

use railyard_proto::v1::*;
use tonic::Code;

use super::{Client, ClientError, stub};

impl Client {
    /// Creates a schedule. A request id is generated when the request has none, so
    /// a retry inside this call never creates it twice nor reports a duplicate.
    pub async fn create_schedule(&self, mut req: CreateScheduleRequest) -> Result<(), ClientError> {
        if req.request_id.is_empty() {
            req.request_id = uuid::Uuid::new_v4().to_string();
        }
        self.call(stub::Schedules::create_schedule, req).await.map(|_| ())
    }

    /// A schedule's spec, policies, state, next fire times and recent actions;
    /// `next_fire_count` 0 asks for the server's default number of next fire times.
    pub async fn describe_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        next_fire_count: u32,
    ) -> Result<ScheduleInfo, ClientError> {
        let req = DescribeScheduleRequest {
            namespace: namespace.into(),
            schedule_id: schedule_id.into(),
            next_fire_count,
        };
        let resp = self.call(stub::Schedules::describe_schedule, req).await?;
        resp.schedule.ok_or_else(|| ClientError::Other {
            code: Code::Internal,
            message: format!("the server described schedule {schedule_id:?} without a schedule"),
        })
    }

    /// One page of a namespace's schedules.
    pub async fn list_schedules(
        &self,
        req: ListSchedulesRequest,
    ) -> Result<ListSchedulesResponse, ClientError> {
        self.call(stub::Schedules::list_schedules, req).await
    }

    /// Replaces a schedule's spec, action and policies (its state is kept). Safe to
    /// repeat: the same request leaves the same schedule.
    pub async fn update_schedule(&self, req: UpdateScheduleRequest) -> Result<(), ClientError> {
        self.call(stub::Schedules::update_schedule, req).await.map(|_| ())
    }

    /// Pauses, unpauses, triggers or backfills a schedule. A request id is generated
    /// when the request has none, so a retry inside this call applies it once.
    pub async fn patch_schedule(
        &self,
        mut req: PatchScheduleRequest,
    ) -> Result<PatchScheduleResponse, ClientError> {
        if req.request_id.is_empty() {
            req.request_id = uuid::Uuid::new_v4().to_string();
        }
        self.call(stub::Schedules::patch_schedule, req).await
    }

    /// Deletes a schedule; the runs it started are left as they are.
    pub async fn delete_schedule(&self, namespace: &str, schedule_id: &str) -> Result<(), ClientError> {
        self.delete_schedule_with(DeleteScheduleRequest {
            namespace: namespace.into(),
            schedule_id: schedule_id.into(),
            identity: String::new(),
        })
        .await
    }

    /// Deletes a schedule from a full request (with the caller's identity). A retry
    /// that finds the schedule gone after a try whose answer was lost counts as done.
    pub async fn delete_schedule_with(&self, req: DeleteScheduleRequest) -> Result<(), ClientError> {
        self.call_delete(stub::Schedules::delete_schedule, req).await
    }
}
