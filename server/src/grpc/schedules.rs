//! `railyard.v1.Schedules`: each handler converts its request to a
//! [`railyard_engine::service::schedules`] call and the answer back.

use super::status;
use std::sync::Arc;

use chrono::DateTime;
use railyard_proto::v1::{self, schedules_server::Schedules};
use tonic::{Request, Response, Status};

use super::*;
use railyard_engine::service::schedules::{self as svc, PoliciesInput, ScheduleInput, SpecInput};
use railyard_model::schedule::state::{Action, MissReason, Origin};
use railyard_model::schedule::{Overlap, Schedule};

/// The `Schedules` service.
pub struct SchedulesService {
    pub core: Arc<Core>,
}

/// An overlap policy off the wire (`None`: unspecified).
fn overlap(field: &str, value: i32) -> Result<Option<Overlap>, ApiError> {
    use v1::OverlapPolicy as P;
    Ok(match P::try_from(value) {
        Ok(P::Unspecified) => None,
        Ok(P::Skip) => Some(Overlap::Skip),
        Ok(P::BufferOne) => Some(Overlap::BufferOne),
        Ok(P::BufferAll) => Some(Overlap::BufferAll),
        Ok(P::CancelOther) => Some(Overlap::CancelOther),
        Ok(P::TerminateOther) => Some(Overlap::TerminateOther),
        Ok(P::AllowAll) => Some(Overlap::AllowAll),
        Err(_) => return Err(ApiError::field(field, format!("unknown overlap policy {value}"))),
    })
}

fn overlap_to_proto(o: Overlap) -> v1::OverlapPolicy {
    use v1::OverlapPolicy as P;
    match o {
        Overlap::Skip => P::Skip,
        Overlap::BufferOne => P::BufferOne,
        Overlap::BufferAll => P::BufferAll,
        Overlap::CancelOther => P::CancelOther,
        Overlap::TerminateOther => P::TerminateOther,
        Overlap::AllowAll => P::AllowAll,
    }
}

fn schedule_input(
    spec: Option<v1::ScheduleSpec>,
    action: Option<v1::ScheduleAction>,
    policies: Option<v1::SchedulePolicies>,
    remaining_actions: u64,
    memo: String,
) -> Result<ScheduleInput, ApiError> {
    let spec = spec.ok_or_else(|| ApiError::field("spec", "missing"))?;
    let action = action.ok_or_else(|| ApiError::field("action", "missing"))?;
    let policies = policies.unwrap_or_default();
    Ok(ScheduleInput {
        spec: SpecInput {
            cron: spec.cron,
            interval: spec.interval,
            time_zone: spec.time_zone,
            start_ms: spec.start_time_unix_ms,
            end_ms: spec.end_time_unix_ms,
            jitter_ms: spec.jitter_ms,
        },
        action: Action {
            workflow_id: action.workflow_id,
            task_queue: action.task_queue,
            goal: action.goal,
            context: action.context.into_iter().collect(),
            attributes: action.search_attributes.into_iter().collect(),
            priority: action.priority,
            fairness_key: action.fairness_key,
        },
        policies: PoliciesInput {
            overlap: overlap("policies.overlap", policies.overlap)?,
            catchup_window_ms: policies.catchup_window_ms,
            pause_on_failure: policies.pause_on_failure,
        },
        remaining_actions,
        memo,
    })
}

fn rfc3339_ms(text: &Option<String>) -> i64 {
    text.as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map_or(0, |t| t.timestamp_millis())
}

fn spec_to_proto(s: &Schedule) -> v1::ScheduleSpec {
    let d = s.spec.doc();
    v1::ScheduleSpec {
        cron: d.cron.clone(),
        interval: d.interval.clone().unwrap_or_default(),
        time_zone: d.time_zone.clone().unwrap_or_default(),
        start_time_unix_ms: rfc3339_ms(&d.start_time),
        end_time_unix_ms: rfc3339_ms(&d.end_time),
        jitter_ms: d.jitter_seconds.unwrap_or(0) * 1000,
    }
}

fn origin(o: Origin) -> String {
    o.name().to_string()
}

fn action_result(a: &railyard_model::schedule::state::ActionRecord) -> v1::ScheduleActionResult {
    v1::ScheduleActionResult {
        scheduled_time_unix_ms: a.due,
        actual_time_unix_ms: a.actual,
        run_id: a.run_id.clone(),
        status: status_to_proto(a.status) as i32,
        origin: origin(a.origin),
    }
}

fn reason(r: MissReason) -> String {
    r.name().to_string()
}

fn schedule_info(s: &Schedule, next_fires: Vec<i64>) -> v1::ScheduleInfo {
    v1::ScheduleInfo {
        namespace: s.namespace.clone(),
        schedule_id: s.id.clone(),
        spec: Some(spec_to_proto(s)),
        action: Some(v1::ScheduleAction {
            search_attributes: s.action.attributes.clone().into_iter().collect(),
            workflow_id: s.action.workflow_id.clone(),
            task_queue: s.action.task_queue.clone(),
            goal: s.action.goal.clone(),
            context: s.action.context.clone().into_iter().collect(),
            priority: s.action.priority,
            fairness_key: s.action.fairness_key.clone(),
        }),
        policies: Some(v1::SchedulePolicies {
            overlap: overlap_to_proto(s.policies.overlap) as i32,
            catchup_window_ms: s.policies.catchup_window_ms as u64,
            pause_on_failure: s.policies.pause_on_failure,
        }),
        state: Some(v1::ScheduleState {
            paused: s.paused,
            note: s.note.clone(),
            limited_actions: s.remaining.is_some(),
            remaining_actions: s.remaining.unwrap_or(0),
            skipped_overlap: s.counters.skipped_overlap,
            missed_catchup_window: s.counters.missed_catchup_window,
            buffer_overflow: s.counters.buffer_overflow,
            total_actions: s.counters.taken,
            running_run_ids: s.running.clone(),
            start_failed: s.counters.start_failed,
        }),
        next_fire_times_unix_ms: next_fires,
        recent_actions: s.recent_actions.iter().map(action_result).collect(),
        recent_missed: s
            .recent_missed
            .iter()
            .map(|m| v1::ScheduleMissedFire {
                scheduled_time_unix_ms: m.due,
                reason: reason(m.reason),
                recorded_time_unix_ms: m.recorded,
            })
            .collect(),
        buffered: s
            .buffer
            .iter()
            .map(|b| v1::ScheduleBufferedStart {
                scheduled_time_unix_ms: b.due,
                overlap: overlap_to_proto(b.overlap.unwrap_or(s.policies.overlap)) as i32,
                origin: origin(b.origin),
            })
            .collect(),
        create_time_unix_ms: s.create_ms,
        update_time_unix_ms: s.update_ms,
        memo: s.memo.clone(),
    }
}

impl SchedulesService {
    /// The caller of a `Schedules` call: every one is `ManageSchedules`.
    fn caller(&self, metadata: &MetadataMap, namespace: String, identity: String) -> Result<Caller, Status> {
        caller_of(
            &self.core,
            metadata,
            namespace,
            identity,
            Operation::ManageSchedules,
        )
    }
}

#[tonic::async_trait]
impl Schedules for SchedulesService {
    async fn create_schedule(
        &self,
        req: Request<v1::CreateScheduleRequest>,
    ) -> Result<Response<v1::CreateScheduleResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        let input = svc::CreateInput {
            schedule_id: r.schedule_id,
            schedule: schedule_input(r.spec, r.action, r.policies, r.remaining_actions, r.memo)
                .map_err(status)?,
            paused: r.paused,
            note: r.note,
            request_id: r.request_id,
        };
        svc::create(&self.core, &caller, input).await.map_err(status)?;
        Ok(Response::new(v1::CreateScheduleResponse {}))
    }

    async fn describe_schedule(
        &self,
        req: Request<v1::DescribeScheduleRequest>,
    ) -> Result<Response<v1::DescribeScheduleResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, String::new())?;
        let d = svc::describe(&self.core, &caller, &r.schedule_id, r.next_fire_count).map_err(status)?;
        Ok(Response::new(v1::DescribeScheduleResponse {
            schedule: Some(schedule_info(&d.schedule, d.next_fires)),
        }))
    }

    async fn list_schedules(
        &self,
        req: Request<v1::ListSchedulesRequest>,
    ) -> Result<Response<v1::ListSchedulesResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, String::new())?;
        let page = svc::list(&self.core, &caller, r.page_size, &r.page_token).map_err(status)?;
        Ok(Response::new(v1::ListSchedulesResponse {
            schedules: page
                .schedules
                .iter()
                .map(|s| v1::ScheduleSummary {
                    schedule_id: s.id.clone(),
                    workflow_id: s.action.workflow_id.clone(),
                    spec_summary: svc::spec_summary(&s.spec),
                    paused: s.paused,
                    note: s.note.clone(),
                    next_fire_time_unix_ms: s.next_fire().unwrap_or(0),
                    last_action: s.recent_actions.back().map(action_result),
                    skipped_overlap: s.counters.skipped_overlap,
                    missed_catchup_window: s.counters.missed_catchup_window,
                    buffer_overflow: s.counters.buffer_overflow,
                    memo: s.memo.clone(),
                })
                .collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn update_schedule(
        &self,
        req: Request<v1::UpdateScheduleRequest>,
    ) -> Result<Response<v1::UpdateScheduleResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        let input =
            schedule_input(r.spec, r.action, r.policies, r.remaining_actions, r.memo).map_err(status)?;
        svc::update(&self.core, &caller, &r.schedule_id, input)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::UpdateScheduleResponse {}))
    }

    async fn patch_schedule(
        &self,
        req: Request<v1::PatchScheduleRequest>,
    ) -> Result<Response<v1::PatchScheduleResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        let trigger = r
            .trigger
            .map(|t| overlap("trigger.overlap", t.overlap))
            .transpose()
            .map_err(status)?;
        let backfill = r
            .backfill
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let o = overlap(&format!("backfill[{i}].overlap"), b.overlap)?;
                Ok((b.start_time_unix_ms, b.end_time_unix_ms, o))
            })
            .collect::<Result<Vec<_>, ApiError>>()
            .map_err(status)?;
        let patched = svc::patch(
            &self.core,
            &caller,
            svc::PatchInput {
                schedule_id: r.schedule_id,
                pause: r.pause,
                unpause: r.unpause,
                note: r.note,
                trigger,
                backfill,
                request_id: r.request_id,
            },
        )
        .await
        .map_err(status)?;
        Ok(Response::new(v1::PatchScheduleResponse {
            triggered_run_id: patched.triggered_run_id.unwrap_or_default(),
        }))
    }

    async fn delete_schedule(
        &self,
        req: Request<v1::DeleteScheduleRequest>,
    ) -> Result<Response<v1::DeleteScheduleResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let caller = self.caller(&metadata, r.namespace, r.identity)?;
        svc::delete(&self.core, &caller, &r.schedule_id)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::DeleteScheduleResponse {}))
    }
}
