//! The flags that describe a schedule (shared by `create` and `update`), their value
//! parsers, and how they become, or are merged into, the wire messages.

use std::time::Duration;

use clap::Args;
use railyard_proto::v1::{OverlapPolicy, ScheduleAction, ScheduleInfo, SchedulePolicies, ScheduleSpec};

use crate::client::args;
use crate::client::timefmt;

/// What a schedule does and when; every flag is optional so that `update` changes
/// only what is given.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct SpecFlags {
    /// The run's goal; may use {{scheduledTime}} (the due time, RFC 3339 UTC) and {{scheduleId}}.
    #[arg(long, value_name = "TEXT")]
    pub goal: Option<String>,
    /// A context entry of the run (templates like --goal); repeatable.
    #[arg(long = "context", value_name = "KEY=VALUE", value_parser = args::key_value)]
    pub context: Vec<(String, String)>,
    /// A search attribute of each run it starts (the namespace must declare it); repeatable.
    #[arg(long = "attr", value_name = "NAME=VALUE", value_parser = args::key_value)]
    pub attrs: Vec<(String, String)>,
    /// Task queue of the run's steps (default: the workflow's own).
    #[arg(long, value_name = "Q")]
    pub queue: Option<String>,
    /// Dispatch priority of each run it starts, 1 (first) to 5 (last) [default: 3].
    #[arg(long, value_name = "N")]
    pub priority: Option<u32>,
    /// Fairness key of each run it starts (docs/flow-control.md).
    #[arg(long, value_name = "KEY")]
    pub fairness_key: Option<String>,
    /// A cron expression: 5 fields, 6 with seconds first, or an alias (@hourly, @daily ...); repeatable.
    #[arg(long = "cron", value_name = "EXPR", conflicts_with = "interval")]
    pub cron: Vec<String>,
    /// An interval instead of cron: 'every 15m', 'every 1h offset 5m'.
    #[arg(long, value_name = "SPEC")]
    pub interval: Option<String>,
    /// IANA time zone the cron expressions read (default UTC), e.g. Europe/Berlin.
    #[arg(long = "tz", value_name = "ZONE")]
    pub time_zone: Option<String>,
    /// No fire before this time: RFC 3339, or a duration from now (2h); `none` clears it.
    #[arg(long, value_name = "TIME", value_parser = future_time)]
    pub start: Option<Bound>,
    /// No fire after this time: RFC 3339, or a duration from now (90d); `none` clears it.
    #[arg(long, value_name = "TIME", value_parser = future_time)]
    pub end: Option<Bound>,
    /// Stop after this many more actions; `none` for no limit.
    #[arg(long, value_name = "N", value_parser = remaining)]
    pub remaining: Option<u64>,
    /// Delay each fire by a deterministic random amount below this, in whole seconds (30s, 5m; 0s for none).
    #[arg(long, value_name = "DURATION", value_parser = timefmt::parse_duration)]
    pub jitter: Option<Duration>,
    /// What a fire does while an earlier run is still open.
    #[arg(long, value_name = "POLICY", value_parser = overlap, help = OVERLAP_HELP)]
    pub overlap: Option<OverlapPolicy>,
    /// Fires missed while the server was down are taken if no older than this (default 1y as 365d).
    #[arg(long, value_name = "DURATION", value_parser = timefmt::parse_duration)]
    pub catchup_window: Option<Duration>,
    /// Pause the schedule when one of its runs fails or times out (`--pause-on-failure=false` to stop).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub pause_on_failure: Option<bool>,
    /// A free-form description shown by describe and list.
    #[arg(long, value_name = "TEXT")]
    pub memo: Option<String>,
}

/// Help of every `--overlap` flag.
pub(crate) const OVERLAP_HELP: &str =
    "skip (default), buffer-one, buffer-all, cancel-other, terminate-other or allow-all";

/// A `--start` / `--end` value: a time, or `none` to clear the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Unix milliseconds.
    At(i64),
    /// No bound.
    None,
}

impl Bound {
    fn unix_ms(self) -> i64 {
        match self {
            Self::At(ms) => ms,
            Self::None => 0,
        }
    }
}

/// The overlap policies by the names the flags take.
const OVERLAP_NAMES: [(&str, OverlapPolicy); 6] = [
    ("SKIP", OverlapPolicy::Skip),
    ("BUFFER_ONE", OverlapPolicy::BufferOne),
    ("BUFFER_ALL", OverlapPolicy::BufferAll),
    ("CANCEL_OTHER", OverlapPolicy::CancelOther),
    ("TERMINATE_OTHER", OverlapPolicy::TerminateOther),
    ("ALLOW_ALL", OverlapPolicy::AllowAll),
];

/// Parses an overlap policy: `skip`, `buffer-one`, `BUFFER_ONE` ... (case and `-`/`_` free).
pub(crate) fn overlap(text: &str) -> Result<OverlapPolicy, String> {
    let name = text.trim().to_ascii_uppercase().replace('-', "_");
    OVERLAP_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .ok_or_else(|| format!("unknown overlap policy {text:?} (one of {OVERLAP_HELP})"))
}

/// The short name of a wire overlap policy (`SKIP` when unspecified, the server's default).
pub(crate) fn overlap_name(policy: i32) -> String {
    match OverlapPolicy::try_from(policy) {
        Ok(OverlapPolicy::Unspecified) => "SKIP".to_string(),
        Ok(p) => OVERLAP_NAMES
            .iter()
            .find(|(_, q)| *q == p)
            .map_or_else(|| format!("UNKNOWN({policy})"), |(n, _)| (*n).to_string()),
        Err(_) => format!("UNKNOWN({policy})"),
    }
}

/// Parses a time bound of a schedule: RFC 3339, a duration from now, or `none`.
pub(crate) fn future_time(text: &str) -> Result<Bound, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(Bound::None);
    }
    time_or_offset(text, 1).map(Bound::At)
}

/// Parses a past time (a backfill's range): RFC 3339, or a duration back from now (2h).
pub(crate) fn past_time(text: &str) -> Result<i64, String> {
    time_or_offset(text, -1)
}

/// RFC 3339, or a duration added to now in the direction of `sign`.
fn time_or_offset(text: &str, sign: i64) -> Result<i64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("now") {
        return Ok(timefmt::now_unix_ms());
    }
    if t.len() >= 10 && t.as_bytes()[4] == b'-' {
        return timefmt::parse_rfc3339(t);
    }
    let d = timefmt::parse_duration(t).map_err(|_| {
        format!("{text:?} is neither an RFC 3339 time (2026-05-01T09:00:00Z) nor a duration (15m, 2h, 90d)")
    })?;
    let ms = i64::try_from(d.as_millis()).map_err(|_| format!("{text:?} is too far away"))?;
    Ok(timefmt::now_unix_ms().saturating_add(sign * ms))
}

/// Parses `--remaining`: a positive count, or `none` (0 on the wire: unlimited).
pub(crate) fn remaining(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(0);
    }
    match t.parse::<u64>() {
        Ok(0) | Err(_) => Err(format!("{text:?} is not a positive count (or none for no limit)")),
        Ok(n) => Ok(n),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The parts of a schedule the flags describe, as the wire wants them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parts {
    pub spec: ScheduleSpec,
    pub action: ScheduleAction,
    pub policies: SchedulePolicies,
    /// 0: unlimited.
    pub remaining_actions: u64,
    pub memo: String,
}

impl SpecFlags {
    /// A new schedule's parts: the flags over the defaults.
    pub(crate) fn to_parts(&self, workflow: &str) -> Parts {
        let mut parts = Parts {
            spec: ScheduleSpec::default(),
            action: ScheduleAction {
                workflow_id: workflow.to_string(),
                ..Default::default()
            },
            policies: SchedulePolicies::default(),
            remaining_actions: 0,
            memo: String::new(),
        };
        self.apply(&mut parts);
        parts
    }

    /// An existing schedule's parts with the given flags applied and nothing else changed.
    ///
    /// `UpdateSchedule` reads a remaining-actions count of 0 as "unlimited", so a
    /// schedule that has used up its actions cannot be sent back unchanged: that
    /// update is refused unless `--remaining` says what it should become.
    pub(crate) fn merged(
        &self,
        current: &ScheduleInfo,
        workflow: Option<&str>,
        clear_context: bool,
    ) -> Result<Parts, String> {
        let remaining = match current.state.as_ref().filter(|s| s.limited_actions) {
            None => 0,
            Some(s) if s.remaining_actions > 0 => s.remaining_actions,
            Some(_) if self.remaining.is_some() => 0,
            Some(_) => {
                return Err(
                    "the schedule has no actions left, which an update cannot keep as it is: \
                     give --remaining N (or --remaining none for no limit)"
                        .to_string(),
                );
            }
        };
        let mut parts = Parts {
            spec: current.spec.clone().unwrap_or_default(),
            action: current.action.clone().unwrap_or_default(),
            policies: current.policies.unwrap_or_default(),
            remaining_actions: remaining,
            memo: current.memo.clone(),
        };
        if let Some(wf) = workflow {
            parts.action.workflow_id = wf.to_string();
        }
        if clear_context {
            parts.action.context.clear();
        }
        self.apply(&mut parts);
        Ok(parts)
    }

    fn apply(&self, parts: &mut Parts) {
        let (spec, action, policies) = (&mut parts.spec, &mut parts.action, &mut parts.policies);
        if let Some(goal) = &self.goal {
            action.goal = goal.clone();
        }
        action.context.extend(self.context.iter().cloned());
        action.search_attributes.extend(self.attrs.iter().cloned());
        if let Some(queue) = &self.queue {
            action.task_queue = queue.clone();
        }
        if let Some(p) = self.priority {
            action.priority = p;
        }
        if let Some(k) = &self.fairness_key {
            action.fairness_key = k.clone();
        }
        if !self.cron.is_empty() {
            spec.cron = self.cron.clone();
            spec.interval.clear();
        }
        if let Some(interval) = &self.interval {
            spec.interval = interval.clone();
            spec.cron.clear();
            // A zone applies to cron only; switching to an interval drops it.
            spec.time_zone.clear();
        }
        if let Some(zone) = &self.time_zone {
            spec.time_zone = zone.clone();
        }
        if let Some(start) = self.start {
            spec.start_time_unix_ms = start.unix_ms();
        }
        if let Some(end) = self.end {
            spec.end_time_unix_ms = end.unix_ms();
        }
        if let Some(jitter) = self.jitter {
            spec.jitter_ms = millis(jitter);
        }
        if let Some(policy) = self.overlap {
            policies.overlap = policy as i32;
        }
        if let Some(window) = self.catchup_window {
            policies.catchup_window_ms = millis(window);
        }
        if let Some(pause) = self.pause_on_failure {
            policies.pause_on_failure = pause;
        }
        if let Some(n) = self.remaining {
            parts.remaining_actions = n;
        }
        if let Some(memo) = &self.memo {
            parts.memo = memo.clone();
        }
    }

    /// Whether any flag was given (an `update` with none would change nothing).
    pub(crate) fn is_empty(&self) -> bool {
        let Self {
            goal,
            context,
            attrs,
            queue,
            priority,
            fairness_key,
            cron,
            interval,
            time_zone,
            start,
            end,
            remaining,
            jitter,
            overlap,
            catchup_window,
            pause_on_failure,
            memo,
        } = self;
        goal.is_none()
            && context.is_empty()
            && attrs.is_empty()
            && queue.is_none()
            && priority.is_none()
            && fairness_key.is_none()
            && cron.is_empty()
            && interval.is_none()
            && time_zone.is_none()
            && start.is_none()
            && end.is_none()
            && remaining.is_none()
            && jitter.is_none()
            && overlap.is_none()
            && catchup_window.is_none()
            && pause_on_failure.is_none()
            && memo.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_proto::v1::ScheduleState;

    #[test]
    fn overlap_names() {
        assert_eq!(overlap("skip"), Ok(OverlapPolicy::Skip));
        assert_eq!(overlap("buffer-one"), Ok(OverlapPolicy::BufferOne));
        assert_eq!(overlap("BUFFER_ALL"), Ok(OverlapPolicy::BufferAll));
        assert_eq!(overlap("Terminate-Other"), Ok(OverlapPolicy::TerminateOther));
        assert_eq!(overlap("allow_all"), Ok(OverlapPolicy::AllowAll));
        let err = overlap("sometimes").unwrap_err();
        assert!(
            err.contains("\"sometimes\"") && err.contains("buffer-one"),
            "{err}"
        );
        assert_eq!(overlap_name(0), "SKIP");
        assert_eq!(overlap_name(OverlapPolicy::CancelOther as i32), "CANCEL_OTHER");
        assert_eq!(overlap_name(42), "UNKNOWN(42)");
    }

    #[test]
    fn time_values() {
        assert_eq!(
            future_time("2026-05-01T09:00:00Z"),
            Ok(Bound::At(1_777_626_000_000))
        );
        assert_eq!(future_time("none"), Ok(Bound::None));
        let now = timefmt::now_unix_ms();
        let Ok(Bound::At(later)) = future_time("1h") else {
            panic!("a duration is a time from now")
        };
        assert!(later >= now + 3_600_000 && later < now + 3_700_000);
        let earlier = past_time("1h").unwrap();
        assert!(earlier <= now - 3_500_000 && earlier > now - 3_700_000);
        assert!(
            future_time("tomorrow")
                .unwrap_err()
                .contains("neither an RFC 3339")
        );
        assert!(
            past_time("2026-05-01T09:00:00")
                .unwrap_err()
                .contains("time zone")
        );
    }

    #[test]
    fn remaining_values() {
        assert_eq!(remaining("5"), Ok(5));
        assert_eq!(remaining("none"), Ok(0));
        assert!(remaining("0").is_err());
        assert!(remaining("-1").is_err());
    }

    #[test]
    fn new_parts_from_flags() {
        let flags = SpecFlags {
            goal: Some("report for {{scheduledTime}}".into()),
            context: vec![("team".into(), "infra".into())],
            cron: vec!["0 9 * * *".into()],
            time_zone: Some("Europe/Berlin".into()),
            jitter: Some(Duration::from_secs(30)),
            overlap: Some(OverlapPolicy::BufferOne),
            catchup_window: Some(Duration::from_secs(86_400)),
            pause_on_failure: Some(true),
            remaining: Some(3),
            ..Default::default()
        };
        let parts = flags.to_parts("demo");
        assert_eq!(parts.action.workflow_id, "demo");
        assert_eq!(parts.action.goal, "report for {{scheduledTime}}");
        assert_eq!(parts.action.context["team"], "infra");
        assert_eq!(parts.spec.cron, vec!["0 9 * * *"]);
        assert_eq!(parts.spec.time_zone, "Europe/Berlin");
        assert_eq!(parts.spec.jitter_ms, 30_000);
        assert_eq!(parts.policies.overlap, OverlapPolicy::BufferOne as i32);
        assert_eq!(parts.policies.catchup_window_ms, 86_400_000);
        assert!(parts.policies.pause_on_failure);
        assert_eq!(parts.remaining_actions, 3);
        assert!(!flags.is_empty());
        assert!(SpecFlags::default().is_empty());
    }

    #[test]
    fn update_changes_only_what_is_given() {
        let current = ScheduleInfo {
            schedule_id: "nightly".into(),
            spec: Some(ScheduleSpec {
                cron: vec!["0 9 * * *".into()],
                time_zone: "Europe/Berlin".into(),
                end_time_unix_ms: 5_000,
                jitter_ms: 1_000,
                ..Default::default()
            }),
            action: Some(ScheduleAction {
                workflow_id: "demo".into(),
                goal: "g".into(),
                context: [("a".to_string(), "1".to_string())].into(),
                task_queue: "q".into(),
                search_attributes: Default::default(),
                priority: 2,
                fairness_key: "tenant:a".into(),
            }),
            policies: Some(SchedulePolicies {
                overlap: OverlapPolicy::AllowAll as i32,
                catchup_window_ms: 60_000,
                pause_on_failure: true,
            }),
            state: Some(ScheduleState {
                limited_actions: true,
                remaining_actions: 7,
                ..Default::default()
            }),
            memo: "m".into(),
            ..Default::default()
        };
        let flags = SpecFlags {
            context: vec![("b".into(), "2".into())],
            end: Some(Bound::None),
            pause_on_failure: Some(false),
            ..Default::default()
        };
        let parts = flags.merged(&current, None, false).unwrap();
        assert_eq!(parts.spec.cron, vec!["0 9 * * *"]);
        assert_eq!(parts.spec.time_zone, "Europe/Berlin");
        assert_eq!(parts.spec.end_time_unix_ms, 0, "none clears the end");
        assert_eq!(parts.spec.jitter_ms, 1_000);
        assert_eq!(parts.action.goal, "g");
        assert_eq!(parts.action.task_queue, "q");
        assert_eq!(
            (parts.action.priority, parts.action.fairness_key.as_str()),
            (2, "tenant:a"),
            "kept"
        );
        assert_eq!(parts.action.context.len(), 2);
        assert_eq!(parts.policies.overlap, OverlapPolicy::AllowAll as i32);
        assert!(!parts.policies.pause_on_failure);
        assert_eq!(parts.remaining_actions, 7, "the current count is kept");
        assert_eq!(parts.memo, "m");

        // An interval replaces the cron expressions and the zone that only they read.
        let flags = SpecFlags {
            interval: Some("every 15m offset 2m".into()),
            ..Default::default()
        };
        let parts = flags.merged(&current, Some("other"), true).unwrap();
        assert!(parts.spec.cron.is_empty() && parts.spec.time_zone.is_empty());
        assert_eq!(parts.spec.interval, "every 15m offset 2m");
        assert_eq!(parts.action.workflow_id, "other");
        assert!(parts.action.context.is_empty());

        // Used up: 0 would read as "unlimited", so the update must say.
        let mut spent = current.clone();
        spent.state.as_mut().unwrap().remaining_actions = 0;
        let err = SpecFlags::default().merged(&spent, None, false).unwrap_err();
        assert!(err.contains("--remaining"), "{err}");
        let flags = SpecFlags {
            remaining: Some(2),
            ..Default::default()
        };
        assert_eq!(flags.merged(&spent, None, false).unwrap().remaining_actions, 2);
    }
}
