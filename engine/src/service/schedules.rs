//! Schedules: create, describe, list, update, patch (pause, unpause, trigger,
//! backfill) and delete. Every field is checked here, naming it; a bad spec's
//! error names the expression, its index and the problem (from `schedule::spec`).
//! The firing itself happens in the writer, off the durable timers.

use railyard_model::Rejection;
use railyard_model::RunKey;
use std::collections::BTreeMap;

use chrono::DateTime;

use super::{Caller, Core, workflows};
use crate::error::ApiError;
use crate::writer::{CreateSchedule, DeleteSchedule, PatchSchedule, Patched, UpdateSchedule};
use railyard_model::Millis;
use railyard_model::limits::{self, check_context, check_count, check_len, check_name};
use railyard_model::schedule::spec::{MAX_JITTER_SECONDS, MAX_REMAINING_ACTIONS};
use railyard_model::schedule::state::{
    Action, DEFAULT_CATCHUP_WINDOW_MS, MIN_CATCHUP_WINDOW_MS, NewSchedule, Policies, ScheduleUpdate,
};
use railyard_model::schedule::{
    Fire, MAX_SCHEDULE_ID, MAX_TIME, Overlap, Schedule, ScheduleSpec, SpecDoc, check_schedule_id,
};

/// Next fire times describe computes when the request names no count.
pub const DEFAULT_NEXT_FIRES: usize = 10;
/// Most next fire times describe computes.
pub const MAX_NEXT_FIRES: usize = 100;
/// Schedules in a listing page when the request names no size.
pub const DEFAULT_LIST_PAGE: usize = 100;
/// Most schedules in one listing page.
pub const MAX_LIST_PAGE: usize = 1000;
/// Largest action (goal, context keys and values together), in bytes: the
/// schedule's record is rewritten at every fire.
pub const MAX_ACTION_BYTES: usize = 64 * 1024;
/// Longest memo, in bytes.
pub const MAX_MEMO: usize = 4096;
/// Longest pause or unpause note, in bytes.
pub const MAX_NOTE: usize = 1024;
/// Longest cron expression, in bytes.
pub const MAX_CRON_LEN: usize = 256;
/// Longest interval or time zone text, in bytes.
const MAX_SHORT: usize = 64;
/// Most backfill ranges in one patch.
pub const MAX_BACKFILL_RANGES: usize = 16;
/// Longest catch-up window: ten years.
pub const MAX_CATCHUP_WINDOW_MS: u64 = 10 * 366 * 86_400_000;

/// A spec as the API carries it: times in unix ms (0: unbounded), jitter in ms.
#[derive(Debug, Clone, Default)]
pub struct SpecInput {
    pub cron: Vec<String>,
    pub interval: String,
    pub time_zone: String,
    pub start_ms: Millis,
    pub end_ms: Millis,
    pub jitter_ms: u64,
}

/// Policies as the API carries them (zero or `None`: the default).
#[derive(Debug, Clone, Default)]
pub struct PoliciesInput {
    pub overlap: Option<Overlap>,
    pub catchup_window_ms: u64,
    pub pause_on_failure: bool,
}

/// What a schedule is: spec, action, policies, limit, memo.
#[derive(Debug, Clone, Default)]
pub struct ScheduleInput {
    pub spec: SpecInput,
    pub action: Action,
    pub policies: PoliciesInput,
    /// 0: unlimited.
    pub remaining_actions: u64,
    pub memo: String,
}

/// A schedule to create.
#[derive(Debug, Clone, Default)]
pub struct CreateInput {
    pub schedule_id: String,
    pub schedule: ScheduleInput,
    pub paused: bool,
    pub note: String,
    pub request_id: String,
}

/// What to do to a schedule.
#[derive(Debug, Clone, Default)]
pub struct PatchInput {
    pub schedule_id: String,
    pub pause: bool,
    pub unpause: bool,
    pub note: String,
    /// Trigger now, under this policy (`None` inside: the schedule's).
    pub trigger: Option<Option<Overlap>>,
    /// Inclusive (start ms, end ms, policy) ranges.
    pub backfill: Vec<(Millis, Millis, Option<Overlap>)>,
    pub request_id: String,
}

/// A schedule as describe shows it.
#[derive(Debug, Clone)]
pub struct Described {
    pub schedule: Schedule,
    /// Coming fire times (jitter included), soonest first.
    pub next_fires: Vec<Millis>,
}

/// A page of schedules.
#[derive(Debug, Clone)]
pub struct ScheduleListing {
    pub schedules: Vec<Schedule>,
    /// Empty when this is the last page.
    pub next_page_token: String,
}

fn ms_to_rfc3339(field: &str, ms: Millis) -> Result<String, ApiError> {
    DateTime::from_timestamp_millis(ms)
        .filter(|_| (0..=MAX_TIME).contains(&ms))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .ok_or_else(|| ApiError::field(field, format!("{ms} is outside 1970-01-01 to 9999-12-31")))
}

/// Checks a spec; the errors name the field and, for cron, the expression.
pub fn check_spec(s: &SpecInput) -> Result<ScheduleSpec, ApiError> {
    check_count(
        "spec.cron",
        s.cron.len(),
        railyard_model::schedule::spec::MAX_CRON_EXPRESSIONS,
    )?;
    for (i, c) in s.cron.iter().enumerate() {
        check_len(&format!("spec.cron[{i}]"), c, MAX_CRON_LEN)?;
    }
    check_len("spec.interval", &s.interval, MAX_SHORT)?;
    check_len("spec.time_zone", &s.time_zone, MAX_SHORT)?;
    if !s.jitter_ms.is_multiple_of(1000) {
        return Err(ApiError::field(
            "spec.jitter_ms",
            format!("{} is not whole seconds", s.jitter_ms),
        ));
    }
    if s.jitter_ms / 1000 > MAX_JITTER_SECONDS {
        return Err(ApiError::field(
            "spec.jitter_ms",
            format!("{} is more than a day", s.jitter_ms),
        ));
    }
    let some = |t: &str| (!t.is_empty()).then(|| t.to_string());
    let doc = SpecDoc {
        cron: s.cron.clone(),
        interval: some(&s.interval),
        time_zone: some(&s.time_zone),
        start_time: (s.start_ms != 0)
            .then(|| ms_to_rfc3339("spec.start_time_unix_ms", s.start_ms))
            .transpose()?,
        end_time: (s.end_ms != 0)
            .then(|| ms_to_rfc3339("spec.end_time_unix_ms", s.end_ms))
            .transpose()?,
        remaining_actions: None,
        jitter_seconds: (s.jitter_ms > 0).then_some(s.jitter_ms / 1000),
    };
    ScheduleSpec::new(doc).map_err(|e| ApiError::Rejected(Rejection::InvalidArgument(format!("spec: {e}"))))
}

fn check_action(core: &Core, ns: &str, schedule_id: &str, a: &Action) -> Result<(), ApiError> {
    check_name("action.workflow_id", &a.workflow_id)?;
    if let Err(e) = workflows::get(core, ns, &a.workflow_id) {
        let ApiError::Rejected(Rejection::NotFound(_)) = e else {
            return Err(e);
        };
        return Err(ApiError::field(
            "action.workflow_id",
            format!(
                "workflow {:?} is neither loaded nor registered (known: {})",
                a.workflow_id,
                workflows::known(core, ns)?
            ),
        ));
    }
    if !a.task_queue.is_empty() {
        check_name("action.task_queue", &a.task_queue)?;
    }
    railyard_model::flow::Flow::from_request(a.priority, &a.fairness_key, 0, "")
        .map_err(|e| ApiError::field("action", e))?;
    check_len("action.goal", &a.goal, limits::GOAL)?;
    check_context("action.context", &a.context)?;
    let size = a.goal.len() + a.context.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    if size > MAX_ACTION_BYTES {
        return Err(ApiError::field(
            "action",
            format!("goal and context are {size} bytes; at most {MAX_ACTION_BYTES}"),
        ));
    }
    // What a fire renders must still be a valid start: check the longest rendering.
    let fire = Fire::new(schedule_id, MAX_TIME).map_err(|e| ApiError::field("schedule_id", e))?;
    check_len("action.goal (rendered)", &fire.render(&a.goal), limits::GOAL)?;
    let rendered: BTreeMap<String, String> = a
        .context
        .iter()
        .map(|(k, v)| (k.clone(), fire.render(v)))
        .collect();
    check_context("action.context (rendered)", &rendered)?;
    // Read as a start would: each declared and of its type (checked again at each
    // fire, where a declaration removed since makes the fire a failed start).
    let declared = super::attributes::declared(core, ns)?;
    railyard_model::attributes::parse_set(&declared, &a.attributes, "action.attributes")?;
    Ok(())
}

fn check_policies(p: &PoliciesInput) -> Result<Policies, ApiError> {
    let window = match p.catchup_window_ms {
        0 => DEFAULT_CATCHUP_WINDOW_MS,
        w if w < MIN_CATCHUP_WINDOW_MS as u64 => {
            return Err(ApiError::field(
                "policies.catchup_window_ms",
                format!("{w} is less than the minimum, {MIN_CATCHUP_WINDOW_MS}"),
            ));
        }
        w if w > MAX_CATCHUP_WINDOW_MS => {
            return Err(ApiError::field(
                "policies.catchup_window_ms",
                format!("{w} is more than ten years ({MAX_CATCHUP_WINDOW_MS})"),
            ));
        }
        w => w as Millis,
    };
    Ok(Policies {
        overlap: p.overlap.unwrap_or_default(),
        catchup_window_ms: window,
        pause_on_failure: p.pause_on_failure,
    })
}

fn check_remaining(n: u64) -> Result<Option<u64>, ApiError> {
    match n {
        0 => Ok(None),
        n if n > MAX_REMAINING_ACTIONS => Err(ApiError::field(
            "remaining_actions",
            format!("{n} is more than {MAX_REMAINING_ACTIONS}"),
        )),
        n => Ok(Some(n)),
    }
}

fn check_id(schedule_id: &str) -> Result<(), ApiError> {
    check_schedule_id(schedule_id).map_err(|e| ApiError::field("schedule_id", e))
}

/// Checks what a schedule is made of.
fn check_schedule(
    core: &Core,
    ns: &str,
    schedule_id: &str,
    s: ScheduleInput,
) -> Result<ScheduleUpdate, ApiError> {
    let spec = check_spec(&s.spec)?;
    check_action(core, ns, schedule_id, &s.action)?;
    let policies = check_policies(&s.policies)?;
    let remaining = check_remaining(s.remaining_actions)?;
    check_len("memo", &s.memo, MAX_MEMO)?;
    Ok(ScheduleUpdate {
        spec,
        action: s.action,
        policies,
        remaining,
        memo: s.memo,
    })
}

/// Creates a schedule (`ALREADY_EXISTS` if its id is taken in the namespace).
pub async fn create(core: &Core, caller: &Caller, r: CreateInput) -> Result<(), ApiError> {
    check_id(&r.schedule_id)?;
    let u = check_schedule(core, &caller.namespace, &r.schedule_id, r.schedule)?;
    check_len("note", &r.note, MAX_NOTE)?;
    check_len("request_id", &r.request_id, limits::REQUEST_ID)?;
    limits::check_storable("request_id", &r.request_id)?;
    let new = NewSchedule {
        namespace: caller.namespace.clone(),
        id: r.schedule_id,
        spec: u.spec,
        action: u.action,
        policies: u.policies,
        memo: u.memo,
        paused: r.paused,
        note: r.note,
        remaining: u.remaining,
    };
    core.writer
        .call(CreateSchedule {
            new,
            request_id: r.request_id,
        })
        .await
        .map_err(ApiError::from)
}

/// A schedule with its next `next_fire_count` fire times (0: [`DEFAULT_NEXT_FIRES`],
/// at most [`MAX_NEXT_FIRES`]); recent actions show each run's current status.
pub fn describe(
    core: &Core,
    caller: &Caller,
    schedule_id: &str,
    next_fire_count: u32,
) -> Result<Described, ApiError> {
    check_id(schedule_id)?;
    let ns = &caller.namespace;
    let mut schedule = core
        .store
        .schedule(ns, schedule_id)?
        .ok_or_else(|| crate::writer::schedule_not_found(ns, schedule_id))?;
    for a in schedule.recent_actions.iter_mut().filter(|a| a.status.is_open()) {
        if let Some(run) = core.store.run(&RunKey::new(ns, &a.run_id))? {
            a.status = run.status;
        }
    }
    let n = match next_fire_count as usize {
        0 => DEFAULT_NEXT_FIRES,
        n => n.min(MAX_NEXT_FIRES),
    };
    let next_fires = schedule.next_fires(n);
    Ok(Described { schedule, next_fires })
}

/// A page of the namespace's schedules, in id order. The page token is the last
/// id of the previous page.
pub fn list(
    core: &Core,
    caller: &Caller,
    page_size: u32,
    page_token: &str,
) -> Result<ScheduleListing, ApiError> {
    if !page_token.is_empty() {
        check_len("page_token", page_token, MAX_SCHEDULE_ID)?;
        check_id(page_token).map_err(|_| ApiError::field("page_token", "not a token this server gave"))?;
    }
    let size = match page_size as usize {
        0 => DEFAULT_LIST_PAGE,
        n => n.min(MAX_LIST_PAGE),
    };
    let mut schedules = core.store.schedules(&caller.namespace, page_token, size + 1)?;
    let next_page_token = if schedules.len() > size {
        schedules.truncate(size);
        schedules.last().map(|s| s.id.clone()).unwrap_or_default()
    } else {
        String::new()
    };
    Ok(ScheduleListing {
        schedules,
        next_page_token,
    })
}

/// Replaces a schedule's spec, action, policies, limit and memo.
pub async fn update(
    core: &Core,
    caller: &Caller,
    schedule_id: &str,
    s: ScheduleInput,
) -> Result<(), ApiError> {
    check_id(schedule_id)?;
    let update = check_schedule(core, &caller.namespace, schedule_id, s)?;
    core.writer
        .call(UpdateSchedule {
            ns: caller.namespace.clone(),
            schedule_id: schedule_id.to_string(),
            update,
        })
        .await
        .map_err(ApiError::from)
}

/// Pauses, unpauses, triggers or backfills a schedule.
pub async fn patch(core: &Core, caller: &Caller, p: PatchInput) -> Result<Patched, ApiError> {
    check_id(&p.schedule_id)?;
    if p.pause && p.unpause {
        return Err(ApiError::field("pause", "pause and unpause together"));
    }
    if !p.pause && !p.unpause && p.trigger.is_none() && p.backfill.is_empty() {
        return Err(ApiError::Rejected(Rejection::InvalidArgument(
            "nothing to do: give pause, unpause, trigger or backfill".into(),
        )));
    }
    check_len("note", &p.note, MAX_NOTE)?;
    check_len("request_id", &p.request_id, limits::REQUEST_ID)?;
    limits::check_storable("request_id", &p.request_id)?;
    check_count("backfill", p.backfill.len(), MAX_BACKFILL_RANGES)?;
    for (i, (start, end, _)) in p.backfill.iter().enumerate() {
        ms_to_rfc3339(&format!("backfill[{i}].start_time_unix_ms"), *start)?;
        ms_to_rfc3339(&format!("backfill[{i}].end_time_unix_ms"), *end)?;
    }
    core.writer
        .call(PatchSchedule {
            ns: caller.namespace.clone(),
            schedule_id: p.schedule_id,
            pause: p.pause,
            unpause: p.unpause,
            note: p.note,
            trigger: p.trigger,
            backfill: p.backfill,
            request_id: p.request_id,
        })
        .await
        .map_err(ApiError::from)
}

/// Deletes a schedule; the runs it started go on.
pub async fn delete(core: &Core, caller: &Caller, schedule_id: &str) -> Result<(), ApiError> {
    check_id(schedule_id)?;
    core.writer
        .call(DeleteSchedule {
            ns: caller.namespace.clone(),
            schedule_id: schedule_id.to_string(),
        })
        .await
        .map_err(ApiError::from)
}

/// The spec in one line: `cron 0 9 * * * Europe/Berlin`, `every 15m offset 2m`.
pub fn spec_summary(spec: &ScheduleSpec) -> String {
    let d = spec.doc();
    let mut out = match &d.interval {
        Some(i) => i.clone(),
        None => format!("cron {}", d.cron.join(" | ")),
    };
    if let Some(z) = &d.time_zone {
        out.push(' ');
        out.push_str(z);
    }
    out
}
