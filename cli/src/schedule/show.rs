//! How schedules look: JSON values for `--output json`, and the human `describe`
//! and `list` renderings, with fire times in the schedule's own zone and in UTC.
//!
//! Stored fields (ids, goal, context, notes, memo, reasons) come from other users;
//! in human output they go through [`clean`] so that a control character cannot
//! move the cursor or recolour the terminal.

use std::str::FromStr;

use chrono_tz::Tz;
use railyard_proto::v1::{
    ScheduleActionResult, ScheduleBufferedStart, ScheduleInfo, ScheduleMissedFire, ScheduleSpec,
    ScheduleSummary,
};
use railyard_view::{TimeStyle, ZoneMark};
use serde_json::{Value, json};

use super::flags::overlap_name;
use crate::client::output::{Table, truncate};
use crate::client::timefmt::{rfc3339, rfc3339_or_null};
use crate::client::view::status_name;

/// `text` with every control character written as an escape (`\n`, `\t`, `\u{1b}`),
/// so that stored text prints as one inert line (the CLI's one [`escape`](crate::client::output::escape)).
pub(crate) fn clean(text: &str) -> String {
    crate::client::output::escape(text).into_owned()
}

/// The zone a schedule's cron expressions read (`--tz`), in which its fire times
/// are shown beside UTC: UTC for an interval, a spec without one, or a zone this
/// build does not know.
pub(crate) fn schedule_zone(spec: Option<&ScheduleSpec>) -> Tz {
    spec.and_then(|s| Tz::from_str(&s.time_zone).ok())
        .unwrap_or(Tz::UTC)
}

/// `2026-03-22 10:00:00 CET` for unix milliseconds in `zone` (`-` for unset).
pub(crate) fn local_time(unix_ms: i64, zone: Tz) -> String {
    railyard_view::time(unix_ms, TimeStyle::InZone(zone, ZoneMark::Abbreviation))
        .unwrap_or_else(|| "-".to_string())
}

/// A duration in milliseconds as the flags write it (`90s`, `1h30m`, `365d`).
pub(crate) fn short_duration(ms: u64) -> String {
    railyard_view::duration(
        std::time::Duration::from_millis(ms),
        railyard_view::DurationStyle::Exact,
    )
}

/// The spec as one line: `cron "0 9 * * *" in Europe/Berlin`, `every 15m offset 2m`.
pub(crate) fn spec_line(spec: &ScheduleSpec) -> String {
    let mut text = if spec.interval.is_empty() {
        let exprs: Vec<_> = spec.cron.iter().map(|c| format!("{:?}", clean(c))).collect();
        let zone = if spec.time_zone.is_empty() {
            "UTC".to_string()
        } else {
            clean(&spec.time_zone)
        };
        format!("cron {} in {zone}", exprs.join(", "))
    } else {
        clean(&spec.interval)
    };
    if spec.jitter_ms > 0 {
        text.push_str(&format!(", jitter up to {}", short_duration(spec.jitter_ms)));
    }
    text
}

/// A schedule as JSON: proto field names, times both as unix ms and RFC 3339.
pub(crate) fn schedule_json(info: &ScheduleInfo) -> Value {
    let spec = info.spec.clone().unwrap_or_default();
    let action = info.action.clone().unwrap_or_default();
    let policies = info.policies.unwrap_or_default();
    let state = info.state.clone().unwrap_or_default();
    json!({
        "namespace": info.namespace,
        "schedule_id": info.schedule_id,
        "spec": {
            "cron": spec.cron,
            "interval": spec.interval,
            "time_zone": spec.time_zone,
            "start_time": rfc3339_or_null(spec.start_time_unix_ms),
            "start_time_unix_ms": spec.start_time_unix_ms,
            "end_time": rfc3339_or_null(spec.end_time_unix_ms),
            "end_time_unix_ms": spec.end_time_unix_ms,
            "jitter_ms": spec.jitter_ms,
        },
        "action": {
            "workflow_id": action.workflow_id,
            "task_queue": action.task_queue,
            "goal": action.goal,
            "context": action.context,
            "search_attributes": action.search_attributes,
            "priority": action.priority,
            "fairness_key": action.fairness_key,
        },
        "policies": {
            "overlap": overlap_name(policies.overlap),
            "catchup_window_ms": policies.catchup_window_ms,
            "pause_on_failure": policies.pause_on_failure,
        },
        "state": {
            "paused": state.paused,
            "note": state.note,
            "limited_actions": state.limited_actions,
            "remaining_actions": state.remaining_actions,
            "skipped_overlap": state.skipped_overlap,
            "missed_catchup_window": state.missed_catchup_window,
            "buffer_overflow": state.buffer_overflow,
            "start_failed": state.start_failed,
            "total_actions": state.total_actions,
            "running_run_ids": state.running_run_ids,
        },
        "next_fire_times": info.next_fire_times_unix_ms.iter().map(|&t| rfc3339_or_null(t)).collect::<Vec<_>>(),
        "next_fire_times_unix_ms": info.next_fire_times_unix_ms,
        "recent_actions": info.recent_actions.iter().map(action_json).collect::<Vec<_>>(),
        "recent_missed": info.recent_missed.iter().map(missed_json).collect::<Vec<_>>(),
        "buffered": info.buffered.iter().map(buffered_json).collect::<Vec<_>>(),
        "create_time": rfc3339_or_null(info.create_time_unix_ms),
        "create_time_unix_ms": info.create_time_unix_ms,
        "update_time": rfc3339_or_null(info.update_time_unix_ms),
        "update_time_unix_ms": info.update_time_unix_ms,
        "memo": info.memo,
    })
}

/// A fire that started a run, as JSON.
pub(crate) fn action_json(a: &ScheduleActionResult) -> Value {
    json!({
        "scheduled_time": rfc3339_or_null(a.scheduled_time_unix_ms),
        "scheduled_time_unix_ms": a.scheduled_time_unix_ms,
        "actual_time": rfc3339_or_null(a.actual_time_unix_ms),
        "actual_time_unix_ms": a.actual_time_unix_ms,
        "run_id": a.run_id,
        "status": status_name(a.status),
        "origin": a.origin,
    })
}

fn missed_json(m: &ScheduleMissedFire) -> Value {
    json!({
        "scheduled_time": rfc3339_or_null(m.scheduled_time_unix_ms),
        "scheduled_time_unix_ms": m.scheduled_time_unix_ms,
        "reason": m.reason,
        "recorded_time": rfc3339_or_null(m.recorded_time_unix_ms),
        "recorded_time_unix_ms": m.recorded_time_unix_ms,
    })
}

fn buffered_json(b: &ScheduleBufferedStart) -> Value {
    json!({
        "scheduled_time": rfc3339_or_null(b.scheduled_time_unix_ms),
        "scheduled_time_unix_ms": b.scheduled_time_unix_ms,
        "overlap": overlap_name(b.overlap),
        "origin": b.origin,
    })
}

/// A list row as JSON.
pub(crate) fn summary_json(s: &ScheduleSummary) -> Value {
    json!({
        "schedule_id": s.schedule_id,
        "workflow_id": s.workflow_id,
        "spec_summary": s.spec_summary,
        "paused": s.paused,
        "note": s.note,
        "next_fire_time": rfc3339_or_null(s.next_fire_time_unix_ms),
        "next_fire_time_unix_ms": s.next_fire_time_unix_ms,
        "last_action": s.last_action.as_ref().map(action_json),
        "skipped_overlap": s.skipped_overlap,
        "missed_catchup_window": s.missed_catchup_window,
        "buffer_overflow": s.buffer_overflow,
        "memo": s.memo,
    })
}

/// The human rendering of `schedule describe`, fire times in the schedule's zone and UTC.
pub(crate) fn describe_lines(info: &ScheduleInfo) -> Vec<String> {
    let zone = schedule_zone(info.spec.as_ref());
    let spec = info.spec.clone().unwrap_or_default();
    let action = info.action.clone().unwrap_or_default();
    let policies = info.policies.unwrap_or_default();
    let state = info.state.clone().unwrap_or_default();
    let mut fields: Vec<(&str, String)> = vec![("schedule", clean(&info.schedule_id))];
    let queue = if action.task_queue.is_empty() {
        "the workflow's own queue".to_string()
    } else {
        format!("queue {}", clean(&action.task_queue))
    };
    fields.push(("workflow", format!("{} ({queue})", clean(&action.workflow_id))));
    if action.priority != 0 {
        fields.push(("priority", action.priority.to_string()));
    }
    if !action.fairness_key.is_empty() {
        fields.push(("fairness key", clean(&action.fairness_key)));
    }
    if !action.goal.is_empty() {
        fields.push(("goal", clean(&action.goal)));
    }
    let mut context: Vec<_> = action.context.iter().collect();
    context.sort();
    for (k, v) in context {
        fields.push(("context", format!("{}={}", clean(k), clean(v))));
    }
    let mut attributes: Vec<_> = action.search_attributes.iter().collect();
    attributes.sort();
    for (k, v) in attributes {
        fields.push(("attribute", format!("{}={}", clean(k), clean(v))));
    }
    fields.push(("spec", spec_line(&spec)));
    if spec.start_time_unix_ms != 0 || spec.end_time_unix_ms != 0 {
        fields.push((
            "window",
            format!(
                "from {} to {}",
                rfc3339(spec.start_time_unix_ms),
                rfc3339(spec.end_time_unix_ms)
            ),
        ));
    }
    fields.push(("overlap", overlap_name(policies.overlap)));
    let window = match policies.catchup_window_ms {
        0 => "default (1 year)".to_string(),
        ms => short_duration(ms),
    };
    fields.push(("catch-up", window));
    let on_failure = if policies.pause_on_failure {
        "pause"
    } else {
        "keep firing"
    };
    fields.push(("on failure", on_failure.to_string()));
    let status = match (state.paused, state.note.is_empty()) {
        (false, _) => "active".to_string(),
        (true, true) => "PAUSED".to_string(),
        (true, false) => format!("PAUSED: {}", clean(&state.note)),
    };
    fields.push(("state", status));
    let left = if state.limited_actions {
        format!("{} left", state.remaining_actions)
    } else {
        "no limit".to_string()
    };
    fields.push(("actions", format!("{} taken, {left}", state.total_actions)));
    let mut not_started = format!(
        "{} skipped (overlap), {} missed (catch-up window), {} dropped (buffer full)",
        state.skipped_overlap, state.missed_catchup_window, state.buffer_overflow
    );
    if state.start_failed > 0 {
        not_started.push_str(&format!(", {} refused (start failed)", state.start_failed));
    }
    fields.push(("not started", not_started));
    if !state.running_run_ids.is_empty() {
        let ids: Vec<_> = state.running_run_ids.iter().map(|r| clean(r)).collect();
        fields.push(("running", ids.join(", ")));
    }
    if !info.memo.is_empty() {
        fields.push(("memo", clean(&info.memo)));
    }
    fields.push(("created", rfc3339(info.create_time_unix_ms)));
    fields.push(("updated", rfc3339(info.update_time_unix_ms)));

    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut lines: Vec<String> = fields
        .iter()
        .map(|(label, value)| format!("{label:<width$}  {value}").trim_end().to_string())
        .collect();

    lines.push(String::new());
    if info.next_fire_times_unix_ms.is_empty() {
        lines.push("next fires: none".to_string());
    } else {
        lines.push(format!(
            "next fires (the schedule's zone, {}, and UTC)",
            zone.name()
        ));
        let mut table = Table::new(["  IN ZONE", "UTC"]);
        for &t in &info.next_fire_times_unix_ms {
            table.row([format!("  {}", local_time(t, zone)), rfc3339(t)]);
        }
        lines.extend(table.render());
    }
    if !info.recent_actions.is_empty() {
        lines.push(String::new());
        lines.push("recent actions".to_string());
        let mut table = Table::new(["  DUE (UTC)", "STARTED", "RUN ID", "STATUS", "ORIGIN"]);
        for a in &info.recent_actions {
            table.row([
                format!("  {}", rfc3339(a.scheduled_time_unix_ms)),
                rfc3339(a.actual_time_unix_ms),
                clean(&a.run_id),
                status_name(a.status),
                clean(&a.origin),
            ]);
        }
        lines.extend(table.render());
    }
    if !info.recent_missed.is_empty() {
        lines.push(String::new());
        lines.push("fires that started no run".to_string());
        let mut table = Table::new(["  DUE (UTC)", "REASON", "RECORDED"]);
        for m in &info.recent_missed {
            table.row([
                format!("  {}", rfc3339(m.scheduled_time_unix_ms)),
                clean(&m.reason),
                rfc3339(m.recorded_time_unix_ms),
            ]);
        }
        lines.extend(table.render());
    }
    if !info.buffered.is_empty() {
        lines.push(String::new());
        lines.push("buffered starts (waiting for the open run)".to_string());
        let mut table = Table::new(["  DUE (UTC)", "OVERLAP", "ORIGIN"]);
        for b in &info.buffered {
            table.row([
                format!("  {}", rfc3339(b.scheduled_time_unix_ms)),
                overlap_name(b.overlap),
                clean(&b.origin),
            ]);
        }
        lines.extend(table.render());
    }
    lines
}

/// The human table of `schedule list`.
pub(crate) fn list_table(schedules: &[ScheduleSummary]) -> Table {
    let mut table = Table::new([
        "SCHEDULE",
        "WORKFLOW",
        "SPEC",
        "STATE",
        "NEXT FIRE (UTC)",
        "LAST RUN",
        "NOT STARTED",
        "MEMO",
    ]);
    for s in schedules {
        let state = match (s.paused, s.note.is_empty()) {
            (false, _) => "active".to_string(),
            (true, true) => "PAUSED".to_string(),
            (true, false) => format!("PAUSED: {}", truncate(&clean(&s.note), 30)),
        };
        let last = s.last_action.as_ref().map_or_else(
            || "-".to_string(),
            |a| format!("{} {}", clean(&a.run_id), status_name(a.status)),
        );
        let not_started = s.skipped_overlap + s.missed_catchup_window + s.buffer_overflow;
        table.row([
            clean(&s.schedule_id),
            clean(&s.workflow_id),
            truncate(&clean(&s.spec_summary), 40),
            state,
            rfc3339(s.next_fire_time_unix_ms),
            last,
            not_started.to_string(),
            truncate(&clean(&s.memo), 30),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_proto::v1::{OverlapPolicy, RunStatus, ScheduleAction, SchedulePolicies, ScheduleState};

    #[test]
    fn cleans_control_characters() {
        assert_eq!(clean("plain text é"), "plain text é");
        assert_eq!(clean("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(clean("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(clean("x\u{7f}\u{9b}"), "x\\u{7f}\\u{9b}");
        assert_eq!(clean("\u{202e}evil"), "\\u{202e}evil");
    }

    #[test]
    fn durations_and_times() {
        assert_eq!(short_duration(0), "0s");
        assert_eq!(short_duration(30_000), "30s");
        assert_eq!(short_duration(5_400_000), "1h30m");
        assert_eq!(short_duration(31_536_000_000), "365d");
        assert_eq!(short_duration(1_500), "1s500ms");
        let berlin = Tz::from_str("Europe/Berlin").unwrap();
        assert_eq!(local_time(1_774_170_000_000, berlin), "2026-03-22 10:00:00 CET");
        assert_eq!(local_time(1_774_170_000_000, Tz::UTC), "2026-03-22 09:00:00 UTC");
        assert_eq!(local_time(0, berlin), "-");
    }

    #[test]
    fn spec_lines() {
        let spec = ScheduleSpec {
            cron: vec!["0 9 * * *".into(), "30 17 * * FRI".into()],
            time_zone: "Europe/Berlin".into(),
            jitter_ms: 30_000,
            ..Default::default()
        };
        assert_eq!(
            spec_line(&spec),
            r#"cron "0 9 * * *", "30 17 * * FRI" in Europe/Berlin, jitter up to 30s"#
        );
        let spec = ScheduleSpec {
            interval: "every 15m offset 2m".into(),
            ..Default::default()
        };
        assert_eq!(spec_line(&spec), "every 15m offset 2m");
    }

    fn sample() -> ScheduleInfo {
        ScheduleInfo {
            namespace: "default".into(),
            schedule_id: "nightly".into(),
            spec: Some(ScheduleSpec {
                cron: vec!["0 9 * * *".into()],
                time_zone: "Europe/Berlin".into(),
                ..Default::default()
            }),
            action: Some(ScheduleAction {
                workflow_id: "demo".into(),
                goal: "report\u{1b}[2J".into(),
                search_attributes: [("priority", "2"), ("customer", "acme")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            policies: Some(SchedulePolicies {
                overlap: OverlapPolicy::BufferOne as i32,
                ..Default::default()
            }),
            state: Some(ScheduleState {
                paused: true,
                note: "maintenance\nwindow".into(),
                total_actions: 2,
                skipped_overlap: 1,
                ..Default::default()
            }),
            next_fire_times_unix_ms: vec![1_774_170_000_000],
            recent_actions: vec![ScheduleActionResult {
                scheduled_time_unix_ms: 1_774_083_600_000,
                actual_time_unix_ms: 1_774_083_600_020,
                run_id: "nightly-2026-03-21T09:00:00.000Z".into(),
                status: RunStatus::Completed as i32,
                origin: "schedule".into(),
            }],
            recent_missed: vec![ScheduleMissedFire {
                scheduled_time_unix_ms: 1_774_083_600_000,
                reason: "skipped_overlap".into(),
                recorded_time_unix_ms: 1_774_083_600_001,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn describes_a_schedule() {
        let lines = describe_lines(&sample());
        let text = lines.join("\n");
        assert!(
            lines[0].starts_with("schedule") && lines[0].ends_with("nightly"),
            "{text}"
        );
        assert!(text.contains("goal         report\\u{1b}[2J"), "{text}");
        assert!(
            text.contains("attribute    customer=acme\nattribute    priority=2"),
            "the action's search attributes, sorted: {text}"
        );
        assert!(text.contains(r#"cron "0 9 * * *" in Europe/Berlin"#), "{text}");
        assert!(text.contains("overlap      BUFFER_ONE"), "{text}");
        assert!(text.contains("PAUSED: maintenance\\nwindow"), "{text}");
        assert!(text.contains("2 taken, no limit"), "{text}");
        assert!(text.contains("1 skipped (overlap)"), "{text}");
        assert!(
            text.contains("next fires (the schedule's zone, Europe/Berlin, and UTC)"),
            "{text}"
        );
        assert!(
            text.contains("  2026-03-22 10:00:00 CET  2026-03-22T09:00:00Z"),
            "{text}"
        );
        assert!(
            text.contains("nightly-2026-03-21T09:00:00.000Z  COMPLETED  schedule"),
            "{text}"
        );
        assert!(text.contains("2026-03-21T09:00:00Z  skipped_overlap"), "{text}");
        assert!(!text.contains('\u{1b}'), "no raw escape reaches the terminal");
    }

    #[test]
    fn schedule_as_json() {
        let v = schedule_json(&sample());
        assert_eq!(v["schedule_id"], "nightly");
        assert_eq!(v["action"]["search_attributes"]["customer"], "acme");
        assert_eq!(v["policies"]["overlap"], "BUFFER_ONE");
        assert_eq!(v["state"]["paused"], true);
        assert_eq!(v["next_fire_times"][0], "2026-03-22T09:00:00.000Z");
        assert_eq!(v["recent_actions"][0]["status"], "COMPLETED");
        assert_eq!(v["recent_missed"][0]["reason"], "skipped_overlap");
        assert_eq!(v["spec"]["start_time"], Value::Null);
    }

    #[test]
    fn lists_schedules() {
        let rows = [ScheduleSummary {
            schedule_id: "nightly".into(),
            workflow_id: "demo".into(),
            spec_summary: "cron 0 9 * * * Europe/Berlin".into(),
            paused: true,
            note: "ops".into(),
            next_fire_time_unix_ms: 1_774_170_000_000,
            skipped_overlap: 2,
            buffer_overflow: 1,
            ..Default::default()
        }];
        let lines = list_table(&rows).render();
        assert!(lines[0].starts_with("SCHEDULE  WORKFLOW"), "{lines:?}");
        assert!(
            lines[1].contains("nightly")
                && lines[1].contains("PAUSED: ops")
                && lines[1].contains("2026-03-22T09:00:00Z"),
            "{lines:?}"
        );
        assert!(
            lines[1].ends_with("  3"),
            "not-started fires are summed: {lines:?}"
        );
    }
}
