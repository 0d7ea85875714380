//! Cron expressions against an independent crontab(5) evaluator: a brute-force
//! matcher written from the manual page (each field a set of numbers; the day
//! matches if either day field does, unless one of them starts with `*`, and then
//! both must, as Vixie cron and cronie do), stepping day by day and minute by
//! minute. Generated expressions (ranges, lists, steps, `*`, `*/N`, names) must give
//! the same next fires from generated times, in UTC.

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, TimeDelta};
use proptest::prelude::*;

use super::{CronProblem, ScheduleSpec, SpecDoc, SpecError};
use crate::Millis;

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// How far the evaluator looks for a fire: eight years covers 29 February.
const HORIZON_DAYS: i64 = 8 * 366;

/// One crontab line's five fields as sets of numbers.
struct Crontab {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days_of_month: Vec<bool>,
    months: Vec<bool>,
    /// 0 and 7 are both Sunday; stored as 0..=6.
    days_of_week: Vec<bool>,
    /// Either day field starts with `*`: then a day must match both.
    day_star: bool,
}

/// A number or a name (`names[i]` is `first + i`).
fn number(text: &str, first: u32, names: &[&str]) -> u32 {
    match names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        Some(i) => first + i as u32,
        None => text.parse().unwrap(),
    }
}

/// A field as crontab(5) reads it: a comma list of `*`, `N`, `N-M`, each with an
/// optional `/step`.
fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Vec<bool> {
    let mut set = vec![false; max as usize + 1];
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, step.parse::<usize>().unwrap()),
            None => (item, 1),
        };
        let (low, high) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (number(a, min, names), number(b, min, names))
        } else {
            let n = number(range, min, names);
            (n, n)
        };
        for value in (low..=high).step_by(step) {
            set[value as usize] = true;
        }
    }
    set
}

impl Crontab {
    fn parse(line: &str) -> Self {
        let f: Vec<&str> = line.split_whitespace().collect();
        let mut days_of_week = field(f[4], 0, 7, &DAYS);
        days_of_week[0] |= days_of_week[7];
        days_of_week.truncate(7);
        Self {
            minutes: field(f[0], 0, 59, &[]),
            hours: field(f[1], 0, 23, &[]),
            days_of_month: field(f[2], 1, 31, &[]),
            months: field(f[3], 1, 12, &MONTHS),
            days_of_week,
            day_star: f[2].starts_with('*') || f[4].starts_with('*'),
        }
    }

    fn day_matches(&self, day: NaiveDate) -> bool {
        let dom = self.days_of_month[day.day() as usize];
        let dow = self.days_of_week[day.weekday().num_days_from_sunday() as usize];
        self.months[day.month() as usize] && if self.day_star { dom && dow } else { dom || dow }
    }

    /// The first minute strictly after `after` the line matches, looking up to
    /// [`HORIZON_DAYS`] ahead: every day, and every minute of a matching day.
    fn next_after(&self, after: Millis) -> Option<Millis> {
        let first = (after.div_euclid(60_000) + 1) * 60_000;
        let start_day = DateTime::from_timestamp_millis(first)?.date_naive();
        (0..HORIZON_DAYS)
            .map(|d| start_day + TimeDelta::days(d))
            .filter(|&day| self.day_matches(day))
            .find_map(|day| {
                let midnight = day.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
                (0..24 * 60)
                    .map(|m| (m, midnight + m * 60_000))
                    .find(|&(m, at)| {
                        at >= first && self.hours[(m / 60) as usize] && self.minutes[(m % 60) as usize]
                    })
                    .map(|(_, at)| at)
            })
    }
}

fn spec(line: &str) -> Result<ScheduleSpec, SpecError> {
    ScheduleSpec::new(SpecDoc {
        cron: vec![line.to_string()],
        ..SpecDoc::default()
    })
}

fn show(ms: Option<Millis>) -> String {
    ms.and_then(DateTime::from_timestamp_millis)
        .map_or("none".into(), |t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// The next `n` fires of `line` after `after` by both, as text.
fn both(line: &str, after: Millis, n: usize) -> (Vec<String>, Vec<String>) {
    let crontab = Crontab::parse(line);
    let spec = spec(line).unwrap();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut a, mut b) = (after, after);
    for _ in 0..n {
        let expected = crontab.next_after(b);
        theirs.push(show(expected));
        // Past the evaluator's horizon, only "not before it" can be compared.
        let got = spec
            .next_after(a)
            .filter(|&t| expected.is_some() || t <= b + HORIZON_DAYS * 86_400_000);
        ours.push(show(got));
        let (Some(x), Some(y)) = (got, expected) else {
            break;
        };
        (a, b) = (x, y);
    }
    (ours, theirs)
}

fn t(text: &str) -> Millis {
    DateTime::parse_from_rfc3339(text).unwrap().timestamp_millis()
}

#[test]
fn a_day_field_starting_with_a_star_makes_both_day_fields_count() {
    // 2027-01-01 is a Friday the 1st: day-of-month */11 matches, day-of-week */3
    // (Sunday, Wednesday, Saturday) does not, so cron waits for Saturday the 23rd.
    let (ours, theirs) = both("14-30 * */11 * */3", t("2026-12-31T12:00:00Z"), 2);
    assert_eq!(theirs, ["2027-01-23T00:14:00Z", "2027-01-23T00:15:00Z"]);
    assert_eq!(ours, theirs);
    // Neither starts with a star: either field is enough (1 March 2026 is a Sunday,
    // Monday the 2nd matches by weekday).
    let (ours, theirs) = both("0 0 1 * MON", t("2026-02-28T00:00:00Z"), 2);
    assert_eq!(theirs, ["2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z"]);
    assert_eq!(ours, theirs);
    // A stepped star in a list counts too: `*/10,5` starts with one.
    // Days 1, 5, 11, 21, 31 that are Mondays.
    let (ours, theirs) = both("0 0 */10,5 * 1", t("2026-03-01T00:00:00Z"), 2);
    assert_eq!(theirs, ["2026-05-11T00:00:00Z", "2026-06-01T00:00:00Z"]);
    assert_eq!(ours, theirs);
    // croner refuses a bare star in a list, naming the field.
    let refused = spec("0 0 *,5 * 1").unwrap_err().to_string();
    assert!(refused.contains("day-of-month field \"*,5\""), "{refused}");
}

#[test]
fn sunday_to_sunday_is_sunday_alone() {
    for line in ["0 0 * * SUN-SUN", "0 0 * * 0-SUN", "0 0 * * sun-sun/2"] {
        let (ours, theirs) = both(line, t("2026-01-01T00:00:00Z"), 2);
        assert_eq!(theirs, ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"], "{line}");
        assert_eq!(ours, theirs, "{line}");
    }
    let refused = spec("0 0 * * SUN-SUN,XYZ").unwrap_err().to_string();
    assert!(refused.contains("day-of-week field \"SUN-SUN,XYZ\""), "{refused}");
}

#[test]
fn an_expression_that_never_fires_is_refused_and_the_evaluator_agrees() {
    let line = "0 0 30 FEB *";
    assert!(matches!(
        spec(line),
        Err(SpecError::Cron {
            problem: CronProblem::NeverFires,
            ..
        })
    ));
    assert_eq!(Crontab::parse(line).next_after(0), None);
}

#[test]
fn whether_an_expression_ever_fires_is_decided_within_the_calendars_cycle() {
    // The existence check searches 400 years (the Gregorian cycle); rare dates are
    // inside it, impossible ones are not.
    for line in ["0 0 29 FEB *", "0 0 31 DEC *", "0 0 29 2 */7", "0 0 0 29 2 *"] {
        let parsed = spec(line);
        assert!(parsed.is_ok(), "{line}: {parsed:?}");
        if line.split(' ').count() == 5 {
            let (ours, theirs) = both(line, t("2026-01-01T00:00:00Z"), 2);
            assert_eq!(ours, theirs, "{line}");
        }
    }
    for line in ["0 0 31 4,6,9,11 *", "0 0 30,31 2 *", "0 0 0 31 FEB *"] {
        assert!(
            matches!(
                spec(line),
                Err(SpecError::Cron {
                    problem: CronProblem::NeverFires,
                    ..
                })
            ),
            "{line}"
        );
    }
}

/// One item of a list: `*/N`, `N`, `N-M` or `N-M/S`, numbers or names. (croner
/// refuses a bare `*` in a list, which crontab(5) allows but which means the same as
/// a bare `*` field.)
fn item(min: u32, max: u32, names: &'static [&'static str]) -> impl Strategy<Value = String> {
    let value = move |n: u32| -> String {
        let i = (n - min) as usize;
        if i < names.len() && n.is_multiple_of(2) {
            names[i].to_string()
        } else {
            n.to_string()
        }
    };
    let span = max - min + 1;
    prop_oneof![
        (1..=span).prop_map(|s| format!("*/{s}")),
        (min..=max).prop_map(value),
        (min..=max, min..=max).prop_map(move |(a, b)| format!("{}-{}", value(a.min(b)), value(a.max(b)))),
        (min..=max, min..=max, 1..=span).prop_map(move |(a, b, s)| format!("{}-{}/{s}", a.min(b), a.max(b))),
    ]
}

/// A field: `*`, one item, or a list of two or three.
fn cron_field(min: u32, max: u32, names: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("*".to_string()),
        3 => prop::collection::vec(item(min, max, names), 1..=3).prop_map(|items| items.join(",")),
    ]
}

fn line() -> impl Strategy<Value = String> {
    (
        cron_field(0, 59, &[]),
        cron_field(0, 23, &[]),
        cron_field(1, 31, &[]),
        cron_field(1, 12, &MONTHS),
        cron_field(0, 7, &DAYS),
    )
        .prop_map(|(m, h, dom, mon, dow)| format!("{m} {h} {dom} {mon} {dow}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The next five fires of a generated expression from a generated time between
    /// 2026 and 2036 agree with the brute-force crontab(5) evaluator.
    #[test]
    fn generated_expressions_fire_when_crontab_says(
        line in line(),
        after in t("2026-01-01T00:00:00Z")..t("2036-01-01T00:00:00Z"),
    ) {
        match spec(&line) {
            Err(SpecError::Cron { problem: CronProblem::NeverFires, .. }) => {
                prop_assert_eq!(Crontab::parse(&line).next_after(after), None, "{}", line);
            }
            Err(other) => prop_assert!(false, "{line:?} refused: {other}"),
            Ok(_) => {
                let (ours, theirs) = both(&line, after, 5);
                prop_assert_eq!(ours, theirs, "{} after {}", line, show(Some(after)));
            }
        }
    }
}
