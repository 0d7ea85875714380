//! One cron expression: parsed by croner, with each field checked first so that an
//! error names the field, and evaluated on the wall clock of its time zone.
//!
//! Evaluation searches the wall clock (croner over a zone-free calendar) and then maps
//! each wall-clock match to an instant in the zone itself, so the daylight-saving rules
//! are ours rather than the parser's: a wall-clock time skipped by spring-forward fires
//! no time, and one repeated by fall-back fires once, at its first instant.

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};

use crate::Millis;

/// Longest cron expression, in bytes, including a `CRON_TZ=` prefix.
pub const MAX_EXPRESSION_LEN: usize = 256;

/// The aliases an expression may be instead of fields, and what each stands for.
const ALIASES: [(&str, &str); 6] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Longest run of skipped or repeated wall-clock time a zone may have. Real zones
/// shift by at most two hours; a day is a wide margin for the bisection that finds
/// the end of one.
const MAX_SHIFT_SECONDS: i64 = 86_400;

/// Searches one `next_after` may make: each either answers or steps over one
/// daylight-saving shift, and shifts are months apart.
const MAX_SEARCHES: usize = 16;

/// A field of a cron expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronField {
    /// Seconds (six-field expressions only).
    Second,
    /// Minutes.
    Minute,
    /// Hours.
    Hour,
    /// Days of the month.
    DayOfMonth,
    /// Months.
    Month,
    /// Days of the week.
    DayOfWeek,
}

impl CronField {
    /// The field's name as messages spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::DayOfMonth => "day-of-month",
            Self::Month => "month",
            Self::DayOfWeek => "day-of-week",
        }
    }

    /// The numbers the field accepts (7 is Sunday, like 0).
    fn range(self) -> (u64, u64) {
        match self {
            Self::Second | Self::Minute => (0, 59),
            Self::Hour => (0, 23),
            Self::DayOfMonth => (1, 31),
            Self::Month => (1, 12),
            Self::DayOfWeek => (0, 7),
        }
    }
}

impl std::fmt::Display for CronField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

const FIVE_FIELDS: [CronField; 5] = [
    CronField::Minute,
    CronField::Hour,
    CronField::DayOfMonth,
    CronField::Month,
    CronField::DayOfWeek,
];
const SIX_FIELDS: [CronField; 6] = [
    CronField::Second,
    CronField::Minute,
    CronField::Hour,
    CronField::DayOfMonth,
    CronField::Month,
    CronField::DayOfWeek,
];

/// Why a cron expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronProblem {
    /// The expression is empty.
    #[error("the expression is empty")]
    Empty,
    /// The expression is too long.
    #[error("{len} bytes; at most {MAX_EXPRESSION_LEN}")]
    TooLong {
        /// Its length, in bytes.
        len: usize,
    },
    /// Neither 5 nor 6 fields.
    #[error("{found} fields; expected 5 (minute hour day-of-month month day-of-week) or 6 (second first)")]
    FieldCount {
        /// How many there are.
        found: usize,
    },
    /// An `@` alias that does not exist.
    #[error("unknown alias {0:?}; known: @yearly @annually @monthly @weekly @daily @hourly")]
    UnknownAlias(String),
    /// A time zone the IANA database does not know.
    #[error("unknown time zone {0:?}")]
    UnknownTimeZone(String),
    /// A value outside its field's range.
    #[error("{field} field: {value} is out of range {min}-{max}")]
    OutOfRange {
        /// The field.
        field: CronField,
        /// The value as written.
        value: String,
        /// The field's least value.
        min: u64,
        /// The field's greatest value.
        max: u64,
    },
    /// A field that does not parse.
    #[error("{field} field {text:?}: {reason}")]
    Field {
        /// The field.
        field: CronField,
        /// The field as written.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Refused by the cron parser, with its message.
    #[error("{0}")]
    Invalid(String),
    /// The expression matches no date.
    #[error("matches no date (like 30 February)")]
    NeverFires,
}

/// A parsed cron expression and the zone whose wall clock it reads.
#[derive(Debug, Clone)]
pub struct CronEntry {
    cron: Cron,
    zone: Tz,
}

impl CronEntry {
    /// Parses `source`: an optional `CRON_TZ=<zone> ` (or `TZ=<zone> `) prefix, then
    /// an alias or 5 fields (6 with seconds first). `zone` applies when the
    /// expression names none.
    pub fn parse(source: &str, zone: Tz) -> Result<Self, CronProblem> {
        if source.len() > MAX_EXPRESSION_LEN {
            return Err(CronProblem::TooLong { len: source.len() });
        }
        let mut expression = source.trim();
        let mut zone = zone;
        if let Some(rest) = expression
            .strip_prefix("CRON_TZ=")
            .or_else(|| expression.strip_prefix("TZ="))
        {
            let (name, fields) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            zone = parse_zone(name).ok_or_else(|| CronProblem::UnknownTimeZone(name.to_string()))?;
            expression = fields.trim();
        }
        if expression.is_empty() {
            return Err(CronProblem::Empty);
        }
        if expression.starts_with('@') {
            expression = ALIASES
                .iter()
                .find(|(alias, _)| alias.eq_ignore_ascii_case(expression))
                .map(|(_, fields)| *fields)
                .ok_or_else(|| CronProblem::UnknownAlias(expression.to_string()))?;
        }
        let mut fields: Vec<&str> = expression.split_whitespace().collect();
        let names: &[CronField] = match fields.len() {
            5 => &FIVE_FIELDS,
            6 => &SIX_FIELDS,
            found => return Err(CronProblem::FieldCount { found }),
        };
        for (&field, text) in names.iter().zip(&fields) {
            check_numbers(field, text)?;
        }
        let day_rule = DayRule::of(fields[fields.len() - 3], fields[fields.len() - 1]);
        // Errors quote the fields as written.
        let written = fields.clone();
        let day_of_week = sunday_to_sunday(fields[fields.len() - 1]);
        if let Some(last) = fields.last_mut() {
            *last = &day_of_week;
        }
        let cron = parser(day_rule).parse(&fields.join(" ")).map_err(|whole| {
            // croner does not say which field it refused: find the one that fails
            // on its own, the others being `*`.
            names
                .iter()
                .enumerate()
                .find_map(|(i, &field)| {
                    let probe: Vec<&str> = (0..fields.len())
                        .map(|j| if i == j { fields[j] } else { "*" })
                        .collect();
                    parser(day_rule)
                        .parse(&probe.join(" "))
                        .err()
                        .map(|e| CronProblem::Field {
                            field,
                            text: written[i].to_string(),
                            reason: reason(&e),
                        })
                })
                .unwrap_or_else(|| CronProblem::Invalid(reason(&whole)))
        })?;
        let entry = Self { cron, zone };
        if !entry.fires_at_all(&fields, day_rule) {
            return Err(CronProblem::NeverFires);
        }
        Ok(entry)
    }

    /// Whether the expression (its `fields` as croner parsed them) matches any time.
    /// The Gregorian calendar repeats every 400 years, weekdays included (146,097 days
    /// are 20,871 weeks), so a search bounded to 400 years answers: croner's own goes
    /// on to the year 5000, day by day for an impossible date (`30 FEB`), 7.5 times
    /// the work (most of what the schedule fuzzer spent).
    fn fires_at_all(&self, fields: &[&str], day_rule: DayRule) -> bool {
        let seconds = if fields.len() == 5 { "0 " } else { "" };
        let bounded = format!("{seconds}{} 1970-2369", fields.join(" "));
        let probe = CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Required)
            .dom_and_dow(day_rule == DayRule::Both)
            .build()
            .parse(&bounded);
        match probe {
            Ok(probe) => probe.find_next_occurrence(&DateTime::UNIX_EPOCH, false).is_ok(),
            Err(_) => self.wall_clock_next(DateTime::UNIX_EPOCH.naive_utc()).is_some(),
        }
    }

    /// The zone whose wall clock this expression reads.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first fire strictly after `after`, or `None` if there is none before the
    /// end of croner's calendar (year 5000).
    pub fn next_after(&self, after: Millis) -> Option<Millis> {
        // Nothing fires before 1970; found by fuzzing: `i64::MIN` overflowed below.
        let after = after.max(-1);
        // Whole seconds: croner's exclusive search steps off the cursor's second,
        // and every match is a whole second, so a later match is after `after`.
        let second = DateTime::from_timestamp_millis(after.div_euclid(1000) * 1000)?;
        let mut cursor = second.with_timezone(&self.zone).naive_local();
        for _ in 0..MAX_SEARCHES {
            let wall = self.wall_clock_next(cursor)?;
            match self.zone.from_local_datetime(&wall) {
                LocalResult::Single(at) if at.timestamp_millis() > after => {
                    return Some(at.timestamp_millis());
                }
                LocalResult::Single(_) => cursor = wall,
                // A repeated wall-clock time fires at its first instant only; once
                // that has passed, every time in the repeated range has.
                LocalResult::Ambiguous(first, _) if first.timestamp_millis() > after => {
                    return Some(first.timestamp_millis());
                }
                LocalResult::Ambiguous(..) => {
                    cursor = self.end_of(wall, |r| matches!(r, LocalResult::Ambiguous(..)))?;
                }
                // A skipped wall-clock time fires no time.
                LocalResult::None => {
                    cursor = self.end_of(wall, |r| matches!(r, LocalResult::None))?;
                }
            }
        }
        None
    }

    /// The first wall-clock time strictly after `cursor` that the expression matches.
    fn wall_clock_next(&self, cursor: NaiveDateTime) -> Option<NaiveDateTime> {
        // UTC has no daylight saving: searching it is searching the bare calendar.
        let start = Utc.from_utc_datetime(&cursor);
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|t| t.naive_utc())
    }

    /// The last second of the run of skipped (or repeated) wall-clock time that
    /// `inside` is in, found by bisection: a search from there lands past the run.
    fn end_of(
        &self,
        inside: NaiveDateTime,
        is_in_run: impl Fn(LocalResult<DateTime<Tz>>) -> bool,
    ) -> Option<NaiveDateTime> {
        let at = |seconds: i64| inside.checked_add_signed(TimeDelta::seconds(seconds));
        let in_run = |seconds: i64| at(seconds).map(|t| is_in_run(self.zone.from_local_datetime(&t)));
        if in_run(MAX_SHIFT_SECONDS)? {
            return None;
        }
        let (mut low, mut high) = (0, MAX_SHIFT_SECONDS);
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if in_run(middle)? {
                low = middle;
            } else {
                high = middle;
            }
        }
        at(low)
    }
}

/// An IANA zone by name.
pub(crate) fn parse_zone(name: &str) -> Option<Tz> {
    name.parse::<Tz>().ok()
}

/// How the day-of-month and day-of-week fields combine: crontab(5)'s rule, as Vixie
/// cron and cronie implement it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DayRule {
    /// Neither field starts with `*`: a day matches if either field matches it.
    Either,
    /// One field starts with `*` (`*`, `*/2`, ...; `?` is croner's `*`): counted as
    /// unrestricted, so a day must match both. croner by itself treats only a bare
    /// `*` so, and would fire `*/11` day-of-month days whatever the weekday.
    Both,
}

impl DayRule {
    fn of(day_of_month: &str, day_of_week: &str) -> Self {
        let star = |text: &str| text.starts_with(['*', '?']);
        if star(day_of_month) || star(day_of_week) {
            Self::Both
        } else {
            Self::Either
        }
    }
}

/// `SUN-SUN` (or `0-SUN`) as `0-0`: croner reads a range's `-SUN` as 7, which makes
/// it every day, where crontab(5) means Sunday alone.
fn sunday_to_sunday(day_of_week: &str) -> String {
    day_of_week
        .split(',')
        .map(|item| {
            let end = item.find(['/', '#']).unwrap_or(item.len());
            let (range, rest) = item.split_at(end);
            match range.to_ascii_uppercase().as_str() {
                "SUN-SUN" | "0-SUN" => format!("0-0{rest}"),
                _ => item.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The one parser configuration: seconds optional, no year field, and the day rule
/// of the expression.
fn parser(day_rule: DayRule) -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .dom_and_dow(day_rule == DayRule::Both)
        .build()
}

/// croner's message without its prefix and final period.
fn reason(error: &CronError) -> String {
    let text = match error {
        CronError::InvalidPattern(m) | CronError::IllegalCharacters(m) | CronError::ComponentError(m) => {
            m.clone()
        }
        other => other.to_string(),
    };
    text.trim_end_matches('.').to_string()
}

/// Refuses a plain number outside the field's range, naming it; croner says only
/// "out of bounds". Names, `L`, `W`, `#` and steps are left to croner.
fn check_numbers(field: CronField, text: &str) -> Result<(), CronProblem> {
    let (min, max) = field.range();
    for item in text.split(',') {
        let item = item.strip_prefix('+').unwrap_or(item);
        let base = item.split('/').next().unwrap_or(item);
        let values = base.split('#').next().unwrap_or(base);
        for value in values.split('-') {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let n = value.parse::<u64>().unwrap_or(u64::MAX);
            if n < min || n > max {
                return Err(CronProblem::OutOfRange {
                    field,
                    value: value.to_string(),
                    min,
                    max,
                });
            }
        }
    }
    Ok(())
}
