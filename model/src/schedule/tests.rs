use std::collections::HashSet;

use chrono::{DateTime, SecondsFormat};

use super::spec::{MAX_CRON_EXPRESSIONS, MAX_JITTER_SECONDS};
use super::*;
use crate::ids::check_name;

/// An RFC 3339 time in ms.
fn t(text: &str) -> Millis {
    DateTime::parse_from_rfc3339(text).unwrap().timestamp_millis()
}

/// A time in ms as RFC 3339 UTC.
fn s(ms: Millis) -> String {
    DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn cron(exprs: &[&str]) -> SpecDoc {
    SpecDoc {
        cron: exprs.iter().map(|e| e.to_string()).collect(),
        ..SpecDoc::default()
    }
}

fn interval(text: &str) -> SpecDoc {
    SpecDoc {
        interval: Some(text.to_string()),
        ..SpecDoc::default()
    }
}

fn spec(doc: SpecDoc) -> ScheduleSpec {
    ScheduleSpec::new(doc).unwrap()
}

fn refused(doc: SpecDoc) -> String {
    ScheduleSpec::new(doc).unwrap_err().to_string()
}

fn upcoming(doc: SpecDoc, after: &str, n: usize) -> Vec<String> {
    spec(doc).upcoming(t(after), n).into_iter().map(s).collect()
}

// ---- parse errors ----

#[test]
fn out_of_range_number_names_index_field_and_range() {
    assert_eq!(
        refused(cron(&["0 9 * * *", "0 25 * * *"])),
        r#"cron[1] "0 25 * * *": hour field: 25 is out of range 0-23"#
    );
    assert_eq!(
        refused(cron(&["0 0 32 * *"])),
        r#"cron[0] "0 0 32 * *": day-of-month field: 32 is out of range 1-31"#
    );
    assert_eq!(
        refused(cron(&["61 * * * * *"])),
        r#"cron[0] "61 * * * * *": second field: 61 is out of range 0-59"#
    );
    assert_eq!(
        refused(cron(&["0 0 * 1-13 *"])),
        r#"cron[0] "0 0 * 1-13 *": month field: 13 is out of range 1-12"#
    );
}

#[test]
fn parser_errors_name_the_field_and_give_the_parsers_reason() {
    let step = refused(cron(&["*/0 * * * *"]));
    assert!(
        step.starts_with(r#"cron[0] "*/0 * * * *": minute field "*/0": "#) && step.contains("zero"),
        "{step}"
    );
    let bad = refused(cron(&["0 9 * * FUNDAY"]));
    assert!(
        bad.starts_with(r#"cron[0] "0 9 * * FUNDAY": day-of-week field "FUNDAY": "#) && bad.contains("'F'"),
        "{bad}"
    );
    let nth = refused(cron(&["0 9 * * 5#6"]));
    assert!(
        nth.starts_with(r#"cron[0] "0 9 * * 5#6": day-of-week field "5#6": "#),
        "{nth}"
    );
}

#[test]
fn field_counts_aliases_and_emptiness_are_checked() {
    assert_eq!(
        refused(cron(&["0 9 * *"])),
        r#"cron[0] "0 9 * *": 4 fields; expected 5 (minute hour day-of-month month day-of-week) or 6 (second first)"#
    );
    // A year field (7 fields) is not part of the spec language.
    assert!(refused(cron(&["0 0 9 * * * 2027"])).contains("7 fields; expected 5"));
    assert_eq!(
        refused(cron(&["@fortnightly"])),
        r#"cron[0] "@fortnightly": unknown alias "@fortnightly"; known: @yearly @annually @monthly @weekly @daily @hourly"#
    );
    assert_eq!(refused(cron(&["  "])), r#"cron[0] "  ": the expression is empty"#);
    assert_eq!(
        refused(cron(&["0 0 30 2 *"])),
        r#"cron[0] "0 0 30 2 *": matches no date (like 30 February)"#
    );
}

#[test]
fn unknown_time_zones_are_named() {
    let mut doc = cron(&["0 9 * * *"]);
    doc.time_zone = Some("Mars/Olympus".into());
    assert_eq!(refused(doc), r#"timeZone: unknown time zone "Mars/Olympus""#);
    assert_eq!(
        refused(cron(&["0 9 * * *", "CRON_TZ=Mars/Olympus 0 9 * * *"])),
        r#"cron[1] "CRON_TZ=Mars/Olympus 0 9 * * *": unknown time zone "Mars/Olympus""#
    );
    let mut doc = interval("every 1h");
    doc.time_zone = Some("UTC".into());
    assert_eq!(
        refused(doc),
        "timeZone: applies to cron expressions only; an interval counts from the Unix epoch"
    );
}

#[test]
fn sizes_are_bounded() {
    assert_eq!(
        refused(cron(&["0 9 * * *"; MAX_CRON_EXPRESSIONS + 1])),
        "cron: 17 expressions; at most 16"
    );
    assert!(ScheduleSpec::new(cron(&["0 9 * * *"; MAX_CRON_EXPRESSIONS])).is_ok());
    let long = format!("0 9 * * {}", "1,".repeat(200));
    let message = refused(cron(&[&long]));
    assert!(message.starts_with("cron[0] "), "{message}");
    assert!(
        message.ends_with(&format!(": {} bytes; at most 256", long.len())),
        "{message}"
    );
    // The message quotes a clipped expression, not all of it.
    assert!(message.len() < 160, "{message}");
    assert!(refused(interval(&format!("every {}", "1".repeat(80)))).ends_with("bytes; at most 64"));
}

#[test]
fn calendar_is_cron_or_interval() {
    assert_eq!(
        refused(SpecDoc::default()),
        "spec: give cron expressions or an interval"
    );
    let mut both = cron(&["0 9 * * *"]);
    both.interval = Some("every 1h".into());
    assert_eq!(
        refused(both),
        "spec: give cron expressions or an interval, not both"
    );
}

#[test]
fn interval_errors() {
    assert_eq!(
        refused(interval("every 0m")),
        r#"interval "every 0m": the interval is zero"#
    );
    assert_eq!(
        refused(interval("every 15m offset 15m")),
        r#"interval "every 15m offset 15m": the offset (15m) is not smaller than the interval (15m)"#
    );
    assert_eq!(
        refused(interval("every 15m offset 1h")),
        r#"interval "every 15m offset 1h": the offset (1h) is not smaller than the interval (15m)"#
    );
    assert!(refused(interval("each 15m")).contains("expected `every <duration>`"));
    assert!(refused(interval("every 15x")).contains(r#""15x" is not a duration: unknown unit"#));
    assert!(refused(interval("every 15")).contains("a number needs a unit"));
    assert!(refused(interval("every m")).contains("a unit must follow a number"));
    assert!(refused(interval("every 367d")).contains("longer than 366 days"));
}

#[test]
fn time_bounds_and_limits_are_checked() {
    let mut doc = interval("every 1h");
    doc.start_time = Some("2026-06-01T00:00:00Z".into());
    doc.end_time = Some("2026-01-01T00:00:00Z".into());
    assert_eq!(
        refused(doc),
        r#"endTime "2026-01-01T00:00:00Z" is before startTime "2026-06-01T00:00:00Z""#
    );
    let mut doc = interval("every 1h");
    doc.start_time = Some("yesterday".into());
    assert!(refused(doc).starts_with(r#"startTime: "yesterday" is not an RFC 3339 time ("#));
    let mut doc = interval("every 1h");
    doc.end_time = Some("1969-12-31T23:00:00Z".into());
    assert_eq!(
        refused(doc),
        r#"endTime: "1969-12-31T23:00:00Z" is outside 1970-01-01 to 9999-12-31"#
    );
    let mut doc = interval("every 1h");
    doc.remaining_actions = Some(0);
    assert_eq!(
        refused(doc),
        "remainingActions: must be 1 to 1000000000 (omit it for no limit), not 0"
    );
    let mut doc = cron(&["0 9 * * *"]);
    doc.jitter_seconds = Some(MAX_JITTER_SECONDS + 1);
    assert_eq!(refused(doc), "jitterSeconds: 86401 is more than 86400");
    let mut doc = interval("every 1m");
    doc.jitter_seconds = Some(60);
    assert_eq!(
        refused(doc),
        "jitterSeconds: 60 must be shorter than the interval (60 s)"
    );
}

#[test]
fn json_is_camel_case_and_errors_name_the_path() {
    let spec = ScheduleSpec::from_json(
        r#"{"cron": ["0 9 * * MON-FRI"], "timeZone": "Europe/Berlin",
            "startTime": "2026-01-01T00:00:00Z", "endTime": "2027-01-01T00:00:00Z",
            "remainingActions": 10, "jitterSeconds": 30}"#,
    )
    .unwrap();
    assert_eq!(spec.doc().time_zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(spec.remaining_actions(), Some(10));
    assert_eq!(spec.jitter_bound_ms(), 30_000);
    // It serializes as written and reads back to an equal spec.
    let json = serde_json::to_string(&spec).unwrap();
    assert!(json.contains(r#""timeZone":"Europe/Berlin""#), "{json}");
    assert!(!json.contains("interval"), "{json}");
    let back: ScheduleSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, spec);

    let e = ScheduleSpec::from_json(r#"{"cron": "0 9 * * *"}"#).unwrap_err();
    assert!(
        matches!(&e, SpecError::Json { path, .. } if path == "cron"),
        "{e}"
    );
    let e = ScheduleSpec::from_json(r#"{"cron": ["0 9 * * *"], "timezone": "UTC"}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `timezone`"), "{e}");
    // Deserializing a stored spec checks it too.
    let e = serde_json::from_str::<ScheduleSpec>(r#"{"interval": "every 0s"}"#).unwrap_err();
    assert!(e.to_string().contains("the interval is zero"), "{e}");
}

// ---- next fire times ----

#[test]
fn five_fields_in_utc_and_in_a_named_zone() {
    assert_eq!(
        upcoming(cron(&["0 9 * * *"]), "2026-01-01T09:00:00.500Z", 2),
        ["2026-01-02T09:00:00Z", "2026-01-03T09:00:00Z"]
    );
    let mut doc = cron(&["0 9 * * *"]);
    doc.time_zone = Some("America/New_York".into());
    assert_eq!(upcoming(doc, "2026-01-01T00:00:00Z", 1), ["2026-01-01T14:00:00Z"]);
}

#[test]
fn cron_with_seconds() {
    assert_eq!(
        upcoming(cron(&["*/20 * * * * *"]), "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-01T00:00:20Z",
            "2026-01-01T00:00:40Z",
            "2026-01-01T00:01:00Z"
        ]
    );
    assert_eq!(
        upcoming(cron(&["30 0 9 * * *"]), "2026-01-01T00:00:00Z", 1),
        ["2026-01-01T09:00:30Z"]
    );
}

#[test]
fn aliases() {
    let from = "2026-01-01T10:15:00Z"; // a Thursday
    assert_eq!(upcoming(cron(&["@hourly"]), from, 1), ["2026-01-01T11:00:00Z"]);
    assert_eq!(upcoming(cron(&["@daily"]), from, 1), ["2026-01-02T00:00:00Z"]);
    assert_eq!(upcoming(cron(&["@DAILY"]), from, 1), ["2026-01-02T00:00:00Z"]);
    assert_eq!(upcoming(cron(&["@weekly"]), from, 1), ["2026-01-04T00:00:00Z"]);
    assert_eq!(upcoming(cron(&["@monthly"]), from, 1), ["2026-02-01T00:00:00Z"]);
    assert_eq!(upcoming(cron(&["@yearly"]), from, 1), ["2027-01-01T00:00:00Z"]);
    assert_eq!(upcoming(cron(&["@annually"]), from, 1), ["2027-01-01T00:00:00Z"]);
}

#[test]
fn last_day_and_nth_weekday() {
    assert_eq!(
        upcoming(cron(&["0 0 L * *"]), "2026-02-10T00:00:00Z", 2),
        ["2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z"]
    );
    // The second Friday of the month.
    assert_eq!(
        upcoming(cron(&["0 0 * * 5#2"]), "2026-01-01T00:00:00Z", 2),
        ["2026-01-09T00:00:00Z", "2026-02-13T00:00:00Z"]
    );
    // The last Friday of the month.
    assert_eq!(
        upcoming(cron(&["0 0 * * FRI#L"]), "2026-01-01T00:00:00Z", 2),
        ["2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z"]
    );
}

#[test]
fn lists_ranges_and_steps() {
    // Hours 9 to 17 every 4, on Mondays and Wednesdays (5 January 2026 is a Monday).
    assert_eq!(
        upcoming(cron(&["0 9-17/4 * * MON,WED"]), "2026-01-01T00:00:00Z", 4),
        [
            "2026-01-05T09:00:00Z",
            "2026-01-05T13:00:00Z",
            "2026-01-05T17:00:00Z",
            "2026-01-07T09:00:00Z"
        ]
    );
    assert_eq!(
        upcoming(cron(&["5,10-12 0 1 * *"]), "2026-01-01T00:00:00Z", 5),
        [
            "2026-01-01T00:05:00Z",
            "2026-01-01T00:10:00Z",
            "2026-01-01T00:11:00Z",
            "2026-01-01T00:12:00Z",
            "2026-02-01T00:05:00Z"
        ]
    );
}

fn zoned(exprs: &[&str], zone: &str) -> SpecDoc {
    let mut doc = cron(exprs);
    doc.time_zone = Some(zone.into());
    doc
}

#[test]
fn spring_forward_skipped_local_time_fires_no_time() {
    // New York, 8 March 2026: 02:00 EST becomes 03:00 EDT; 02:30 does not exist.
    assert_eq!(
        upcoming(
            zoned(&["30 2 * * *"], "America/New_York"),
            "2026-03-07T12:00:00Z",
            2
        ),
        ["2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]
    );
    // Every half hour: 01:30 EST, then 03:00 EDT; 02:00 and 02:30 are skipped.
    assert_eq!(
        upcoming(
            zoned(&["*/30 * * * *"], "America/New_York"),
            "2026-03-08T06:15:00Z",
            3
        ),
        [
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:30:00Z"
        ]
    );
    // Berlin, 29 March 2026, with seconds: 02:30:00 local does not exist.
    assert_eq!(
        upcoming(
            zoned(&["0 30 2 * * *"], "Europe/Berlin"),
            "2026-03-28T12:00:00Z",
            1
        ),
        ["2026-03-30T00:30:00Z"]
    );
}

#[test]
fn fall_back_repeated_local_time_fires_once() {
    // New York, 1 November 2026: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    assert_eq!(
        upcoming(
            zoned(&["30 1 * * *"], "America/New_York"),
            "2026-10-31T12:00:00Z",
            2
        ),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
    // Every half hour: 01:00 and 01:30 fire on the first pass only.
    assert_eq!(
        upcoming(
            zoned(&["*/30 * * * *"], "America/New_York"),
            "2026-11-01T04:45:00Z",
            4
        ),
        [
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T07:00:00Z",
            "2026-11-01T07:30:00Z"
        ]
    );
    // Asked from inside the second pass, the next is past the repeated range.
    assert_eq!(
        upcoming(
            zoned(&["*/30 * * * *"], "America/New_York"),
            "2026-11-01T06:10:00Z",
            1
        ),
        ["2026-11-01T07:00:00Z"]
    );
    // Berlin, 25 October 2026, every second: from the second pass over 02:00-02:59,
    // the next is 03:00:00 CET; the search steps over the hour at once.
    assert_eq!(
        upcoming(
            zoned(&["* * * * * *"], "Europe/Berlin"),
            "2026-10-25T01:00:05Z",
            2
        ),
        ["2026-10-25T02:00:00Z", "2026-10-25T02:00:01Z"]
    );
    assert_eq!(
        upcoming(
            zoned(&["0 30 2 * * *"], "Europe/Berlin"),
            "2026-10-24T12:00:00Z",
            2
        ),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    );
}

#[test]
fn interval_with_offset_is_aligned_to_the_epoch() {
    assert_eq!(
        upcoming(interval("every 15m offset 2m"), "2026-01-01T10:00:00Z", 5),
        [
            "2026-01-01T10:02:00Z",
            "2026-01-01T10:17:00Z",
            "2026-01-01T10:32:00Z",
            "2026-01-01T10:47:00Z",
            "2026-01-01T11:02:00Z"
        ]
    );
    // Strictly after: a due time is not its own next.
    assert_eq!(
        upcoming(interval("every 15m offset 2m"), "2026-01-01T10:02:00Z", 1),
        ["2026-01-01T10:17:00Z"]
    );
    assert_eq!(
        upcoming(interval("EVERY 1h30m"), "2026-01-01T00:00:00Z", 2),
        ["2026-01-01T01:30:00Z", "2026-01-01T03:00:00Z"]
    );
    assert_eq!(
        upcoming(interval("every 1s"), "2026-01-01T00:00:00.999Z", 1),
        ["2026-01-01T00:00:01Z"]
    );
}

#[test]
fn start_and_end_time_bound_the_fires() {
    let mut doc = interval("every 1h");
    doc.start_time = Some("2026-01-01T05:00:00Z".into());
    doc.end_time = Some("2026-01-01T07:00:00Z".into());
    // Both ends inclusive.
    assert_eq!(
        upcoming(doc.clone(), "2026-01-01T00:00:00Z", 10),
        [
            "2026-01-01T05:00:00Z",
            "2026-01-01T06:00:00Z",
            "2026-01-01T07:00:00Z"
        ]
    );
    assert_eq!(spec(doc).next_after(t("2026-01-01T07:00:00Z")), None);
    let mut doc = cron(&["0 9 * * *"]);
    doc.start_time = Some("2026-01-05T09:00:00.001Z".into());
    assert_eq!(upcoming(doc, "2026-01-01T00:00:00Z", 1), ["2026-01-06T09:00:00Z"]);
}

#[test]
fn remaining_actions_limit_the_upcoming_fires() {
    let mut doc = interval("every 1h");
    doc.remaining_actions = Some(2);
    let spec = spec(doc);
    assert_eq!(spec.remaining_actions(), Some(2));
    let from = t("2026-01-01T00:00:00Z");
    assert_eq!(spec.upcoming_limited(from, 10, spec.remaining_actions()).len(), 2);
    assert_eq!(
        spec.upcoming_limited(from, 10, Some(1)),
        [t("2026-01-01T01:00:00Z")]
    );
    assert!(spec.upcoming_limited(from, 10, Some(0)).is_empty());
    assert_eq!(spec.upcoming_limited(from, 10, None).len(), 10);
}

#[test]
fn several_expressions_merge_in_order_without_duplicates() {
    // 04:00 in New York in January is 09:00 UTC: three expressions due at once fire once.
    let doc = cron(&["0 9 * * *", "0 9,12 * * *", "CRON_TZ=America/New_York 0 4 * * *"]);
    assert_eq!(
        upcoming(doc, "2026-01-01T00:00:00Z", 4),
        [
            "2026-01-01T09:00:00Z",
            "2026-01-01T12:00:00Z",
            "2026-01-02T09:00:00Z",
            "2026-01-02T12:00:00Z"
        ]
    );
    // A CRON_TZ prefix overrides timeZone for its expression only.
    let doc = zoned(&["0 9 * * *", "TZ=UTC 0 9 * * *"], "Europe/Berlin");
    assert_eq!(
        upcoming(doc, "2026-01-01T00:00:00Z", 2),
        ["2026-01-01T08:00:00Z", "2026-01-01T09:00:00Z"]
    );
}

// ---- jitter ----

#[test]
fn jitter_is_deterministic_bounded_and_differs_per_fire() {
    let mut doc = interval("every 1h");
    doc.jitter_seconds = Some(60);
    let spec = spec(doc);
    let first = t("2026-01-01T00:00:00Z");
    let dues: Vec<Millis> = (0..1000).map(|i| first + i * 3_600_000).collect();
    let jitters: Vec<Millis> = dues.iter().map(|&d| spec.jitter_for("nightly", d)).collect();
    assert!(jitters.iter().all(|j| (0..60_000).contains(j)));
    // The same fire gets the same delay: a restart does not re-roll it.
    let again: Vec<Millis> = dues.iter().map(|&d| spec.jitter_for("nightly", d)).collect();
    assert_eq!(jitters, again);
    // Different fires, and different schedules, get different delays.
    assert!(jitters.iter().collect::<HashSet<_>>().len() > 950);
    let other: Vec<Millis> = dues.iter().map(|&d| spec.jitter_for("hourly", d)).collect();
    assert!(jitters.iter().zip(&other).filter(|(a, b)| a == b).count() < 10);
    // They spread over the bound.
    assert!(jitters.iter().any(|&j| j < 10_000) && jitters.iter().any(|&j| j >= 50_000));
    // No bound, no delay.
    assert_eq!(self::spec(interval("every 1h")).jitter_for("nightly", first), 0);
}

// ---- fires: run ids and templates ----

#[test]
fn run_ids_are_unique_per_due_time_and_valid_run_ids() {
    let fire = Fire::new("nightly", t("2026-03-22T09:00:00Z")).unwrap();
    assert_eq!(fire.run_id(), "nightly-2026-03-22T09:00:00.000Z");
    assert_eq!(
        Fire::new("nightly", t("2026-03-22T09:00:00.123Z"))
            .unwrap()
            .run_id(),
        "nightly-2026-03-22T09:00:00.123Z"
    );
    let first = t("2026-01-01T00:00:00Z");
    let ids: HashSet<String> = (0..1000)
        .map(|i| Fire::new("nightly", first + i * 1001).unwrap().run_id())
        .collect();
    assert_eq!(ids.len(), 1000);
    assert!(ids.iter().all(|id| check_name(id).is_ok()));
    // The same fire always has the same run id.
    assert_eq!(
        Fire::new("nightly", first).unwrap().run_id(),
        Fire::new("nightly", first).unwrap().run_id()
    );

    // The longest schedule id still makes a valid run id, at the latest due time.
    let longest = "s".repeat(MAX_SCHEDULE_ID);
    let id = Fire::new(&longest, MAX_TIME).unwrap().run_id();
    assert_eq!(id.len(), crate::ids::MAX_NAME);
    assert_eq!(check_name(&id), Ok(()));
    assert_eq!(
        Fire::new(&"s".repeat(MAX_SCHEDULE_ID + 1), first).unwrap_err(),
        FireError::ScheduleIdTooLong {
            len: MAX_SCHEDULE_ID + 1
        }
    );
    assert!(
        Fire::new(&"s".repeat(MAX_SCHEDULE_ID + 1), first)
            .unwrap_err()
            .to_string()
            .starts_with("schedule id is 104 bytes; at most 103")
    );
    assert_eq!(Fire::new("", first).unwrap_err(), FireError::EmptyScheduleId);
    assert_eq!(
        Fire::new("a/b", first).unwrap_err(),
        FireError::ScheduleIdCharacter
    );
    assert_eq!(Fire::new("a", -1).unwrap_err(), FireError::DueOutOfRange(-1));
    assert_eq!(
        Fire::new("a", MAX_TIME + 1).unwrap_err(),
        FireError::DueOutOfRange(MAX_TIME + 1)
    );
}

#[test]
fn templates_render_schedule_time_and_id() {
    let fire = Fire::new("nightly", t("2026-03-22T09:00:00Z")).unwrap();
    assert_eq!(
        fire.render("Report for {{scheduledTime}} ({{scheduleId}}); {{context.repo}} {{scheduledTime}}"),
        "Report for 2026-03-22T09:00:00Z (nightly); {{context.repo}} 2026-03-22T09:00:00Z"
    );
    let fire = Fire::new("nightly", t("2026-03-22T09:00:00.250Z")).unwrap();
    assert_eq!(fire.scheduled_time(), "2026-03-22T09:00:00.250Z");
    assert_eq!(fire.render("no placeholders"), "no placeholders");
}

/// Every minute of the days around each 2026 transition in three zones (New York and
/// Berlin shift an hour, Lord Howe half an hour), checked one by one: a minute fires
/// when its local time matches and it is that local time's first instant. The
/// spec's search must give exactly those minutes.
#[test]
fn daylight_saving_matches_a_minute_by_minute_oracle() {
    use chrono::{LocalResult, TimeZone, Utc};
    use chrono_tz::Tz;

    let windows = [
        ("America/New_York", "2026-03-07T00:00:00Z"),
        ("America/New_York", "2026-10-31T00:00:00Z"),
        ("Europe/Berlin", "2026-03-28T00:00:00Z"),
        ("Europe/Berlin", "2026-10-24T00:00:00Z"),
        ("Australia/Lord_Howe", "2026-04-04T00:00:00Z"),
        ("Australia/Lord_Howe", "2026-10-03T00:00:00Z"),
    ];
    let patterns = [
        "*/15 * * * *",
        "30 1,2,3 * * *",
        "0 * * * *",
        "*/7 1-3 * * *",
        "45 2 * * SUN",
    ];
    for (zone_name, from) in windows {
        let zone: Tz = zone_name.parse().unwrap();
        let (start, end) = (t(from), t(from) + 3 * 86_400_000);
        for pattern in patterns {
            let bare: croner::Cron = pattern.parse().unwrap();
            let expected: Vec<Millis> = (start..=end)
                .step_by(60_000)
                .filter(|&m| {
                    let local = DateTime::from_timestamp_millis(m)
                        .unwrap()
                        .with_timezone(&zone)
                        .naive_local();
                    let first = match zone.from_local_datetime(&local) {
                        LocalResult::Single(_) => true,
                        LocalResult::Ambiguous(earlier, _) => earlier.timestamp_millis() == m,
                        LocalResult::None => unreachable!("an instant's own local time exists"),
                    };
                    first && bare.is_time_matching(&Utc.from_utc_datetime(&local)).unwrap()
                })
                .collect();
            let spec = spec(zoned(&[pattern], zone_name));
            let mut actual = Vec::new();
            let mut cursor = start - 1;
            while let Some(next) = spec.next_after(cursor).filter(|&n| n <= end) {
                actual.push(next);
                cursor = next;
            }
            assert_eq!(
                actual.iter().map(|&m| s(m)).collect::<Vec<_>>(),
                expected.iter().map(|&m| s(m)).collect::<Vec<_>>(),
                "{pattern} in {zone_name} from {from}"
            );
        }
    }
}
