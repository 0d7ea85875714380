//! Schedule specs (`model/src/schedule/spec.rs`): arbitrary JSON, arbitrary and
//! mutated cron expressions and intervals are checked without a panic; every
//! refusal starts with the field it is about, and a cron refusal names the index of
//! the first expression that is wrong on its own. An accepted spec answers
//! `next_after` / `upcoming` in bounded time with due times in order, after the
//! cursor and inside its start and end, and round-trips through JSON.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use railyard_model::schedule::{MAX_TIME, ScheduleSpec, SpecDoc, SpecError};

use crate::corpus;
use crate::targets::workflow::is_json_path;

/// Longest one `next_after` or `upcoming` call may take before it counts as a
/// hang: far above what they take (milliseconds; a few seconds at worst for a
/// sparse expression in a debug build on a loaded machine), so a slow machine does
/// not trip it. `RAILYARD_FUZZ_CALL_SECONDS` overrides it.
pub fn call_limit() -> Duration {
    let secs = std::env::var("RAILYARD_FUZZ_CALL_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// One input: a spec (as JSON text or as a document) and where to evaluate it.
#[derive(Debug, Clone)]
pub struct SpecInput {
    pub spec: SpecSource,
    pub after: i64,
    pub upcoming: usize,
    pub schedule_id: String,
}

#[derive(Debug, Clone)]
pub enum SpecSource {
    Json(String),
    Doc(SpecDoc),
}

fn cron_item() -> impl Strategy<Value = String> {
    let n = prop_oneof![3 => 0u32..61, 1 => 0u32..100_000];
    prop_oneof![
        4 => Just("*".to_string()),
        3 => n.clone().prop_map(|n| n.to_string()),
        2 => (n.clone(), n.clone()).prop_map(|(a, b)| format!("{a}-{b}")),
        2 => n.clone().prop_map(|s| format!("*/{s}")),
        1 => (n.clone(), n.clone(), n.clone()).prop_map(|(a, b, s)| format!("{a}-{b}/{s}")),
        1 => prop_oneof![
            Just("MON"), Just("fri"), Just("SUN-SAT"), Just("JAN"), Just("dec"), Just("L"), Just("LW"),
            Just("15W"), Just("5#3"), Just("5L"), Just("?"), Just("MON#5"), Just("FUNDAY"), Just("W"),
        ]
        .prop_map(str::to_string),
        1 => (n.clone(), n).prop_map(|(a, b)| format!("{a},{b}")),
    ]
}

/// Cron expressions: from the grammar (5 or 6 fields, sometimes another count),
/// corpus lines, and mutations of them.
pub fn cron_expression(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = String> {
    let grammar = (
        prop_oneof![4 => Just(5usize), 2 => Just(6), 1 => 0usize..9],
        prop::collection::vec(cron_item(), 9),
    )
        .prop_map(|(n, items)| items[..n].join(" "));
    let zone = prop_oneof![
        Just(""),
        Just("CRON_TZ=Europe/Berlin "),
        Just("TZ=America/New_York "),
        Just("CRON_TZ=Australia/Lord_Howe "),
        Just("CRON_TZ=Nowhere/City "),
    ];
    prop_oneof![
        3 => (zone, grammar).prop_map(|(z, g)| format!("{z}{g}")),
        2 => corpus::seed_text(seeds.clone()),
        3 => corpus::mutated_text(seeds),
    ]
}

fn time() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        2 => (0..=MAX_TIME).prop_map(|ms| chrono::DateTime::from_timestamp_millis(ms).map(|t| t.to_rfc3339())),
        1 => prop_oneof![
            Just("1969-12-31T23:59:59Z"),
            Just("10000-01-01T00:00:00Z"),
            Just("2026-03-29T02:30:00+01:00"),
            Just("yesterday"),
        ]
        .prop_map(|s| Some(s.to_string())),
        1 => ".{0,30}".prop_map(Some),
    ]
}

fn doc(seeds: Arc<Vec<Vec<u8>>>, intervals: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = SpecDoc> {
    let interval = prop_oneof![
        2 => Just(None),
        2 => corpus::seed_text(intervals.clone()).prop_map(Some),
        2 => corpus::mutated_text(intervals).prop_map(Some),
        1 => ("[0-9]{1,10}[smhdx]{0,2}", prop::option::of("[0-9]{1,10}[smhd]"))
            .prop_map(|(e, o)| Some(match o { Some(o) => format!("every {e} offset {o}"), None => format!("every {e}") })),
    ];
    let zone = prop_oneof![
        4 => Just(None),
        1 => prop_oneof![Just("Europe/Berlin"), Just("UTC"), Just("Asia/Kathmandu"), Just("America/St_Johns"), Just("Nope/Nope"), Just("")]
            .prop_map(|s| Some(s.to_string())),
        1 => ".{0,70}".prop_map(Some),
    ];
    let small =
        prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some), 2 => (0u64..100_000).prop_map(Some)];
    (
        prop_oneof![
            3 => prop::collection::vec(cron_expression(seeds.clone()), 0..4),
            1 => prop::collection::vec(cron_expression(seeds), 0..20),
        ],
        interval,
        zone,
        time(),
        time(),
        small.clone(),
        small,
    )
        .prop_map(
            |(cron, interval, time_zone, start_time, end_time, remaining_actions, jitter_seconds)| SpecDoc {
                cron,
                interval,
                time_zone,
                start_time,
                end_time,
                remaining_actions,
                jitter_seconds,
            },
        )
}

/// Generated and mutated specs. `crons`: corpus cron lines; `intervals`: corpus
/// interval lines; `json`: corpus spec files.
pub fn strategy(
    crons: Arc<Vec<Vec<u8>>>,
    intervals: Arc<Vec<Vec<u8>>>,
    json: Arc<Vec<Vec<u8>>>,
) -> impl Strategy<Value = SpecInput> {
    let source = prop_oneof![
        4 => doc(crons, intervals).prop_map(SpecSource::Doc),
        1 => corpus::seed_text(json.clone()).prop_map(SpecSource::Json),
        2 => corpus::mutated_text(json).prop_map(SpecSource::Json),
        1 => crate::targets::workflow::json_value().prop_map(|v| SpecSource::Json(v.to_string())),
    ];
    let after = prop_oneof![
        4 => 1_700_000_000_000i64..1_900_000_000_000,
        1 => any::<i64>(),
        1 => prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(-1), Just(0), Just(MAX_TIME - 1), Just(MAX_TIME)],
    ];
    (source, after, 0usize..12, "[a-z0-9-]{1,12}").prop_map(|(spec, after, upcoming, schedule_id)| {
        SpecInput {
            spec,
            after,
            upcoming,
            schedule_id,
        }
    })
}

/// The fields a refusal may start with.
const FIELDS: &[&str] = &[
    "spec",
    "cron",
    "interval",
    "timeZone",
    "startTime",
    "endTime",
    "remainingActions",
    "jitterSeconds",
];

fn check_refusal(doc: Option<&SpecDoc>, e: &SpecError) -> Result<(), TestCaseError> {
    let text = e.to_string();
    match e {
        SpecError::Json { path, message } => {
            prop_assert!(
                is_json_path(path, message),
                "the refusal names no JSON path: {text}"
            );
        }
        SpecError::Cron { index, .. } => {
            let Some(doc) = doc else { return Ok(()) };
            prop_assert!(*index < doc.cron.len(), "index out of range: {text}");
            prop_assert!(text.starts_with(&format!("cron[{index}] ")), "{text}");
            // The index is the first expression that is wrong on its own.
            let only = |cron: Vec<String>| SpecDoc {
                cron,
                interval: None,
                ..doc.clone()
            };
            let alone = ScheduleSpec::new(only(vec![doc.cron[*index].clone()]));
            prop_assert!(
                matches!(alone, Err(SpecError::Cron { index: 0, .. })),
                "cron[{index}] alone gives {alone:?}, yet {text}"
            );
            if *index > 0 {
                let before = ScheduleSpec::new(only(doc.cron[..*index].to_vec()));
                prop_assert!(
                    !matches!(before, Err(SpecError::Cron { .. })),
                    "an earlier expression is wrong too: {before:?}; reported {text}"
                );
            }
        }
        _ => {
            let field = text.split([':', ' ', '[']).next().unwrap_or("");
            prop_assert!(FIELDS.contains(&field), "the refusal names no field: {text}");
        }
    }
    prop_assert!(text.len() <= 1024, "a refusal of {} bytes", text.len());
    Ok(())
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
    let t = Instant::now();
    let out = f();
    let took = t.elapsed();
    prop_assert!(took <= call_limit(), "{what} took {took:?}");
    Ok(out)
}

/// The property (see the module docs).
pub fn check(input: &SpecInput) -> Result<(), TestCaseError> {
    let (parsed, doc) = match &input.spec {
        SpecSource::Json(text) => (ScheduleSpec::from_json(text), None),
        SpecSource::Doc(doc) => (ScheduleSpec::new(doc.clone()), Some(doc)),
    };
    let spec = match parsed {
        Ok(spec) => spec,
        Err(e) => return check_refusal(doc, &e),
    };
    let json = serde_json::to_string(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let again = ScheduleSpec::from_json(&json);
    prop_assert_eq!(
        again.as_ref().ok(),
        Some(&spec),
        "does not round-trip: {} gives {:?}",
        json,
        again
    );

    let start = spec.doc().start_time.as_deref().and_then(millis);
    let end = spec
        .doc()
        .end_time
        .as_deref()
        .and_then(millis)
        .unwrap_or(MAX_TIME)
        .min(MAX_TIME);
    let after = input.after;
    let next = timed("next_after", || spec.next_after(after))?;
    if let Some(next) = next {
        prop_assert!(
            next > after && next <= end,
            "next_after({after}) = {next}, end {end}"
        );
        if let Some(start) = start {
            prop_assert!(
                next >= start,
                "next_after({after}) = {next} before the start {start}"
            );
        }
        let jitter = spec.jitter_for(&input.schedule_id, next);
        prop_assert!(
            jitter == 0 || (0..spec.jitter_bound_ms()).contains(&jitter),
            "jitter {jitter} outside [0, {})",
            spec.jitter_bound_ms()
        );
    }
    let times = timed("upcoming", || spec.upcoming(after, input.upcoming))?;
    prop_assert!(times.len() <= input.upcoming);
    prop_assert_eq!(
        times.first().copied(),
        if input.upcoming > 0 { next } else { None }
    );
    prop_assert!(times.windows(2).all(|w| w[0] < w[1]), "not in order: {times:?}");
    let limited = spec.upcoming_limited(after, input.upcoming, Some(2));
    prop_assert_eq!(&limited[..], &times[..times.len().min(2)]);
    Ok(())
}

fn millis(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}
