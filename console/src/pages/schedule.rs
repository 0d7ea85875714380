//! `GET /ui/schedules/{schedule}` (admins): one schedule. Its spec, state and
//! policies, its next fires in the schedule's time zone and in UTC, the runs it
//! started lately (with their status as last seen), and the fires that started no
//! run with the reason each was skipped or missed; the server keeps both lists
//! bounded in the schedule's state (`docs/schedules.md`). Budget: [`api::SYSTEM`],
//! one `DescribeSchedule`.

use axum::extract::Path;
use axum::response::Response;
use maud::{Markup, html};
use railyard_proto::v1 as pb;
use railyard_view::{TimeStyle, ZoneMark};

use super::system::{done, start};
use crate::api;
use crate::layout::{self, encode};
use crate::session::Viewer;

/// Next fire times asked for.
pub const NEXT_FIRES: u32 = 10;

/// `GET /ui/schedules/{schedule}`.
pub(crate) async fn page(viewer: Viewer, Path(id): Path<String>) -> Response {
    let api = match start(&viewer, api::SYSTEM, true) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    let s = match api.describe_schedule(&id, NEXT_FIRES).await {
        Ok(s) => s,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let spec = s.spec.clone().unwrap_or_default();
    let zone: Option<chrono_tz::Tz> = spec.time_zone.parse().ok();
    let state = s.state.clone().unwrap_or_default();
    let action = s.action.clone().unwrap_or_default();
    let run_link = |run: &str| {
        html! { a href={ "/ui/runs/" (encode(run)) "?ns=" (encode(&viewer.ns)) } { (run) } }
    };
    let body = html! {
        h1 { "Schedule " (s.schedule_id) }
        @if !s.memo.is_empty() { p { (s.memo) } }
        dl.facts {
            dt { "Spec" } dd {
                @for c in &spec.cron { code { (c) } " " }
                @if !spec.interval.is_empty() { code { (spec.interval) } }
                @if !spec.time_zone.is_empty() { " in " (spec.time_zone) }
                @if spec.jitter_ms > 0 { " (jitter below " (layout::duration(spec.jitter_ms as i64)) ")" }
            }
            dt { "Starts" } dd { "workflow " (action.workflow_id) @if !action.goal.is_empty() { ", goal " q { (action.goal) } } }
            dt { "State" } dd {
                @if state.paused { "paused" @if !state.note.is_empty() { ": " (state.note) } } @else { "active" }
                @if state.limited_actions { ", " (state.remaining_actions) " actions left" }
            }
            dt { "Counted" } dd {
                (state.total_actions) " runs started, " (state.skipped_overlap) " skipped (overlap), "
                (state.missed_catchup_window) " missed (past the catch-up window), "
                (state.buffer_overflow) " dropped (buffer full), " (state.start_failed) " starts refused"
            }
            @if !state.running_run_ids.is_empty() {
                dt { "Open runs" } dd { @for r in &state.running_run_ids { (run_link(r)) " " } }
            }
        }
        h2 { "Next fires" }
        @if s.next_fire_times_unix_ms.is_empty() { p.muted { "None: paused, ended or out of actions." } }
        @else {
            table {
                thead { tr { th { "In " (zone.map_or("UTC".to_string(), |z| z.name().to_string())) } th { "UTC" } } }
                tbody { @for ms in &s.next_fire_times_unix_ms { tr { td { (in_zone(*ms, zone)) } td { (layout::time(*ms)) } } } }
            }
        }
        h2 { "Recent actions" }
        @if s.recent_actions.is_empty() { p.muted { "None yet." } }
        @else {
            div.scroll { table {
                thead { tr { th { "Due (UTC)" } th { "Started (UTC)" } th { "Run" } th { "Status" } th { "Origin" } } }
                tbody { @for a in s.recent_actions.iter().rev() { (action_row(a, &run_link)) } }
            } }
        }
        h2 { "Skipped and missed fires" }
        @if s.recent_missed.is_empty() { p.muted { "None." } }
        @else {
            div.scroll { table {
                thead { tr { th { "Due (UTC)" } th { "Reason" } th { "Recorded (UTC)" } } }
                tbody { @for m in s.recent_missed.iter().rev() { tr {
                    td { (layout::time(m.scheduled_time_unix_ms)) }
                    td { (reason(&m.reason)) }
                    td { (layout::time(m.recorded_time_unix_ms)) }
                } } }
            } }
        }
        p { a href=(layout::nav_href("/ui/schedules", &viewer.ns)) { "All schedules" } }
    };
    done(&viewer, &api, &format!("Schedule {id}"), body)
}

fn action_row(a: &pb::ScheduleActionResult, run_link: &dyn Fn(&str) -> Markup) -> Markup {
    html! { tr {
        td { (layout::time(a.scheduled_time_unix_ms)) }
        td { (layout::time(a.actual_time_unix_ms)) }
        td { (run_link(&a.run_id)) }
        td { (layout::status_name(a.status)) }
        td { (a.origin) }
    } }
}

/// A missed fire's reason, in words.
fn reason(r: &str) -> String {
    match r {
        "skipped_overlap" => "skipped: the last run was still open (overlap policy)".into(),
        "missed_catchup_window" => "missed: the server was down past the catch-up window".into(),
        "buffer_overflow" => "dropped: the buffer of waiting starts was full".into(),
        "start_failed" => "the start was refused (the workflow is neither loaded nor registered)".into(),
        other => other.to_string(),
    }
}

/// `ms` in `zone` (`YYYY-MM-DD HH:MM:SS ±hh:mm`), or in UTC without one.
fn in_zone(ms: i64, zone: Option<chrono_tz::Tz>) -> String {
    zone.and_then(|z| railyard_view::time(ms, TimeStyle::InZone(z, ZoneMark::Offset)))
        .unwrap_or_else(|| layout::time(ms))
}
