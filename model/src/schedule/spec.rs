//! A schedule's spec: when it fires. [`SpecDoc`] is the spec as a user writes it
//! (JSON, camelCase) and as it is stored; [`ScheduleSpec`] is the same spec checked
//! and ready to answer "when next?".

use chrono::DateTime;
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::MAX_TIME;
use super::cron::{CronEntry, CronProblem, parse_zone};
use super::interval::{Interval, IntervalProblem};
use crate::Millis;
use crate::text::clip;

/// Most cron expressions one spec may hold.
pub const MAX_CRON_EXPRESSIONS: usize = 16;
/// Largest jitter, in seconds (a day). An interval spec's jitter must also be shorter
/// than its interval, so a delayed fire never passes the next one.
pub const MAX_JITTER_SECONDS: u64 = 86_400;
/// Largest limit on remaining actions.
pub const MAX_REMAINING_ACTIONS: u64 = 1_000_000_000;
/// Longest time zone name or RFC 3339 time, in bytes.
const MAX_SHORT_TEXT: usize = 64;

/// A spec as the user writes it: cron expressions or an interval, and the bounds.
///
/// ```json
/// {"cron": ["0 9 * * MON-FRI"], "timeZone": "Europe/Berlin",
///  "startTime": "2026-01-01T00:00:00Z", "endTime": "2027-01-01T00:00:00Z",
///  "remainingActions": 100, "jitterSeconds": 30}
/// {"interval": "every 15m offset 2m"}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpecDoc {
    /// Cron expressions: 5 fields, 6 with seconds first, or an alias (`@daily` ...),
    /// each optionally prefixed `CRON_TZ=<IANA zone> ` to override `timeZone`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cron: Vec<String>,
    /// `every <duration> [offset <duration>]`, durations like `15m`, `1h30m`
    /// (units s, m, h, d). Fires at multiples of the interval since the Unix
    /// epoch, plus the offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// IANA time zone the cron expressions read (UTC when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// RFC 3339 time: no fire before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339 time: no fire after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// How many actions the schedule may still take (unlimited when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_actions: Option<u64>,
    /// Each fire is delayed by a deterministic amount below this bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_seconds: Option<u64>,
}

/// Why a spec was refused. Each names the field (and for cron, the expression's
/// index) and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The spec's JSON does not fit its shape.
    #[error("{path}: {message}")]
    Json {
        /// The JSON path of the problem.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Neither cron expressions nor an interval.
    #[error("spec: give cron expressions or an interval")]
    NoCalendar,
    /// Both cron expressions and an interval.
    #[error("spec: give cron expressions or an interval, not both")]
    CronAndInterval,
    /// More cron expressions than allowed.
    #[error("cron: {count} expressions; at most {MAX_CRON_EXPRESSIONS}")]
    TooManyCron {
        /// How many were given.
        count: usize,
    },
    /// A cron expression that does not parse or never fires.
    #[error("cron[{index}] {expression:?}: {problem}")]
    Cron {
        /// Its index in the list.
        index: usize,
        /// The expression.
        expression: String,
        /// What is wrong with it.
        problem: CronProblem,
    },
    /// An interval that does not parse or is out of range.
    #[error("interval {text:?}: {problem}")]
    Interval {
        /// The interval as given.
        text: String,
        /// What is wrong with it.
        problem: IntervalProblem,
    },
    /// A time zone the IANA database does not know.
    #[error("timeZone: unknown time zone {0:?}")]
    UnknownTimeZone(String),
    /// A time zone given with an interval.
    #[error("timeZone: applies to cron expressions only; an interval counts from the Unix epoch")]
    TimeZoneWithInterval,
    /// A start or end time that is not RFC 3339.
    #[error("{field}: {value:?} is not an RFC 3339 time ({reason})")]
    BadTime {
        /// `startTime` or `endTime`.
        field: &'static str,
        /// The value given.
        value: String,
        /// The parser's reason.
        reason: String,
    },
    /// A start or end time outside the years 1970 to 9999.
    #[error("{field}: {value:?} is outside 1970-01-01 to 9999-12-31")]
    TimeOutOfRange {
        /// `startTime` or `endTime`.
        field: &'static str,
        /// The value given.
        value: String,
    },
    /// An end time before the start time.
    #[error("endTime {end:?} is before startTime {start:?}")]
    EndBeforeStart {
        /// The start time given.
        start: String,
        /// The end time given.
        end: String,
    },
    /// Remaining actions out of range.
    #[error("remainingActions: must be 1 to {MAX_REMAINING_ACTIONS} (omit it for no limit), not {0}")]
    RemainingActions(u64),
    /// Jitter larger than allowed.
    #[error("jitterSeconds: {0} is more than {MAX_JITTER_SECONDS}")]
    JitterTooLarge(u64),
    /// Jitter not shorter than the interval.
    #[error("jitterSeconds: {jitter} must be shorter than the interval ({interval_seconds} s)")]
    JitterNotBelowInterval {
        /// The jitter, in seconds.
        jitter: u64,
        /// The interval, in seconds.
        interval_seconds: i64,
    },
}

/// When a schedule fires.
#[derive(Debug, Clone)]
enum Calendar {
    Cron(Vec<CronEntry>),
    Interval(Interval),
}

/// A checked spec. Serializes as the [`SpecDoc`] it came from, and deserializes by
/// checking one, so a stored spec is always a valid one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "SpecDoc", into = "SpecDoc")]
pub struct ScheduleSpec {
    doc: SpecDoc,
    calendar: Calendar,
    start: Option<Millis>,
    end: Option<Millis>,
    jitter_ms: Millis,
}

impl PartialEq for ScheduleSpec {
    fn eq(&self, other: &Self) -> bool {
        self.doc == other.doc
    }
}

impl TryFrom<SpecDoc> for ScheduleSpec {
    type Error = SpecError;

    fn try_from(doc: SpecDoc) -> Result<Self, SpecError> {
        Self::new(doc)
    }
}

impl From<ScheduleSpec> for SpecDoc {
    fn from(spec: ScheduleSpec) -> Self {
        spec.doc
    }
}

impl ScheduleSpec {
    /// Checks `doc`; the first problem found is the error.
    pub fn new(doc: SpecDoc) -> Result<Self, SpecError> {
        let calendar = match (&doc.cron[..], &doc.interval) {
            ([], None) => return Err(SpecError::NoCalendar),
            ([_, ..], Some(_)) => return Err(SpecError::CronAndInterval),
            (crons, None) => {
                if crons.len() > MAX_CRON_EXPRESSIONS {
                    return Err(SpecError::TooManyCron { count: crons.len() });
                }
                let zone = match &doc.time_zone {
                    None => Tz::UTC,
                    Some(name) if name.len() > MAX_SHORT_TEXT => {
                        return Err(SpecError::UnknownTimeZone(clip(name)));
                    }
                    Some(name) => parse_zone(name).ok_or_else(|| SpecError::UnknownTimeZone(name.clone()))?,
                };
                let entries = crons
                    .iter()
                    .enumerate()
                    .map(|(index, source)| {
                        CronEntry::parse(source, zone).map_err(|problem| SpecError::Cron {
                            index,
                            expression: clip(source),
                            problem,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Calendar::Cron(entries)
            }
            ([], Some(text)) => {
                if doc.time_zone.is_some() {
                    return Err(SpecError::TimeZoneWithInterval);
                }
                let interval = Interval::parse(text).map_err(|problem| SpecError::Interval {
                    text: clip(text),
                    problem,
                })?;
                Calendar::Interval(interval)
            }
        };
        let start = doc
            .start_time
            .as_deref()
            .map(|t| parse_time("startTime", t))
            .transpose()?;
        let end = doc
            .end_time
            .as_deref()
            .map(|t| parse_time("endTime", t))
            .transpose()?;
        if let (Some(s), Some(e), Some(start_text), Some(end_text)) =
            (start, end, &doc.start_time, &doc.end_time)
            && e < s
        {
            return Err(SpecError::EndBeforeStart {
                start: start_text.clone(),
                end: end_text.clone(),
            });
        }
        if let Some(n) = doc.remaining_actions
            && !(1..=MAX_REMAINING_ACTIONS).contains(&n)
        {
            return Err(SpecError::RemainingActions(n));
        }
        let jitter = doc.jitter_seconds.unwrap_or(0);
        if jitter > MAX_JITTER_SECONDS {
            return Err(SpecError::JitterTooLarge(jitter));
        }
        let jitter_ms = jitter as Millis * 1000;
        if let Calendar::Interval(interval) = &calendar
            && jitter_ms >= interval.every_ms()
        {
            return Err(SpecError::JitterNotBelowInterval {
                jitter,
                interval_seconds: interval.every_ms() / 1000,
            });
        }
        Ok(Self {
            doc,
            calendar,
            start,
            end,
            jitter_ms,
        })
    }

    /// Reads and checks a spec written as JSON; an error names the JSON path.
    pub fn from_json(text: &str) -> Result<Self, SpecError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let doc: SpecDoc = serde_path_to_error::deserialize(de).map_err(|e| SpecError::Json {
            path: crate::workflow::json_path(e.path()),
            message: crate::error::parser_message(&e.inner().to_string()),
        })?;
        Self::new(doc)
    }

    /// The spec as the user wrote it.
    pub fn doc(&self) -> &SpecDoc {
        &self.doc
    }

    /// The first time strictly after `after` that the schedule is due: the earliest
    /// across its cron expressions (or its interval's next), not before the start
    /// time, not after the end time (both inclusive), not after year 9999.
    pub fn next_after(&self, after: Millis) -> Option<Millis> {
        let after = match self.start {
            Some(start) => after.max(start.saturating_sub(1)),
            None => after,
        };
        let next = match &self.calendar {
            Calendar::Cron(entries) => entries.iter().filter_map(|e| e.next_after(after)).min(),
            Calendar::Interval(interval) => interval.next_after(after),
        }?;
        (next <= self.end.unwrap_or(MAX_TIME).min(MAX_TIME)).then_some(next)
    }

    /// Up to `n` due times strictly after `after`, in order, without duplicates
    /// (two expressions due at the same instant fire once).
    pub fn upcoming(&self, after: Millis, n: usize) -> Vec<Millis> {
        let mut times = Vec::with_capacity(n.min(1024));
        let mut cursor = after;
        while times.len() < n {
            let Some(next) = self.next_after(cursor) else {
                break;
            };
            times.push(next);
            cursor = next;
        }
        times
    }

    /// Like [`upcoming`](Self::upcoming), but no more than `remaining` actions (a
    /// schedule's current count, which starts at [`remaining_actions`](Self::remaining_actions)).
    pub fn upcoming_limited(&self, after: Millis, n: usize, remaining: Option<u64>) -> Vec<Millis> {
        let cap = remaining.map_or(n, |r| n.min(usize::try_from(r).unwrap_or(usize::MAX)));
        self.upcoming(after, cap)
    }

    /// The limit on actions the spec starts with (`None`: unlimited).
    pub fn remaining_actions(&self) -> Option<u64> {
        self.doc.remaining_actions
    }

    /// The jitter bound in milliseconds (0: no jitter).
    pub fn jitter_bound_ms(&self) -> Millis {
        self.jitter_ms
    }

    /// The delay of the fire due at `due`, in `[0, jitter bound)`: a hash of the
    /// schedule id and the due time, so it is the same after a restart.
    pub fn jitter_for(&self, schedule_id: &str, due: Millis) -> Millis {
        if self.jitter_ms <= 0 {
            return 0;
        }
        let mut hash = Sha256::new();
        hash.update((schedule_id.len() as u64).to_be_bytes());
        hash.update(schedule_id.as_bytes());
        hash.update(due.to_be_bytes());
        let digest = hash.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        // The bias of a modulo of 2^64 by at most 86.4 million is below 1e-11.
        (u64::from_be_bytes(first) % self.jitter_ms as u64) as Millis
    }
}

/// An RFC 3339 time in milliseconds, within 1970 to 9999.
fn parse_time(field: &'static str, text: &str) -> Result<Millis, SpecError> {
    if text.len() > MAX_SHORT_TEXT {
        return Err(SpecError::BadTime {
            field,
            value: clip(text),
            reason: format!("longer than {MAX_SHORT_TEXT} bytes"),
        });
    }
    let ms = DateTime::parse_from_rfc3339(text)
        .map_err(|e| SpecError::BadTime {
            field,
            value: text.to_string(),
            reason: e.to_string(),
        })?
        .timestamp_millis();
    if !(0..=MAX_TIME).contains(&ms) {
        return Err(SpecError::TimeOutOfRange {
            field,
            value: text.to_string(),
        });
    }
    Ok(ms)
}
