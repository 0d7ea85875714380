//! Inputs the fuzz targets found, kept as tests.

use std::collections::BTreeMap;

use railyard_engine::error::ApiError;
use railyard_engine::service::runs::{self, StartRun};
use railyard_engine::service::{CallerInput, Operation, caller, workflows};
use railyard_fuzz::targets::service::{Fixture, MAX_MESSAGE};
use railyard_model::namespace::DEFAULT_NAMESPACE;
use railyard_model::schedule::{ScheduleSpec, SpecError};

/// Fixed: a syntax error between keys was reported at serde_path_to_error's `?`
/// (and one at the top at `.`), which is no JSON path.
#[test]
fn a_spec_syntax_error_names_the_object_it_is_in() {
    let e = ScheduleSpec::from_json(r#"{"cron": ["0 9 * * *"], "startTime": "2026-01-01T00:00:00Z""#)
        .unwrap_err();
    assert!(matches!(&e, SpecError::Json { path, .. } if path == "$"), "{e}");
    let e = ScheduleSpec::from_json("").unwrap_err();
    assert!(matches!(&e, SpecError::Json { path, .. } if path == "$"), "{e}");
}

/// Fixed: a cron spec asked for the next time after `i64::MIN` overflowed (a panic
/// in a debug build, a wrong answer in a release one).
#[test]
fn a_cron_spec_answers_after_the_earliest_time() {
    let spec = ScheduleSpec::from_json(r#"{"cron": ["* * * */1 *"]}"#).unwrap();
    assert_eq!(spec.next_after(i64::MIN), Some(0));
    assert_eq!(spec.upcoming(i64::MIN, 2), [0, 60_000]);
}

fn short(r: Result<impl std::fmt::Debug, ApiError>) {
    let message = r.expect_err("refused").to_string();
    assert!(
        message.len() <= MAX_MESSAGE,
        "an error of {} bytes",
        message.len()
    );
}

/// A namespace that does not exist was echoed whole, 70 KB of it here.
#[test]
fn an_unknown_namespace_is_echoed_short() {
    let fx = Fixture::new(false);
    let input = CallerInput {
        namespace: "¡".repeat(35_000),
        identity: String::new(),
        ..Default::default()
    };
    short(caller::resolve(&fx.core, input, Operation::StartRun));
}

/// `workflows::get` echoed the id whole (through
/// `StartRun` the id is checked as a name first, so only a direct caller sees it).
#[test]
fn an_unknown_workflow_is_echoed_short() {
    let fx = Fixture::new(false);
    short(workflows::get(&fx.core, DEFAULT_NAMESPACE, &"¡".repeat(35_000)));
}

/// A context key over the limit was echoed whole.
#[tokio::test]
async fn a_long_context_key_is_echoed_short() {
    let fx = Fixture::new(false);
    let c = caller::resolve(&fx.core, CallerInput::default(), Operation::StartRun).unwrap();
    let start = StartRun {
        workflow_id: "two".into(),
        goal: "g".into(),
        context: BTreeMap::from([("A".repeat(70_000), "v".to_string())]),
        ..Default::default()
    };
    short(runs::start(&fx.core, &c, start).await);
}

/// An unknown key holding `": "` made the refusal's JSON path unreadable (found by CI's
/// fuzz run): odd keys are quoted now.
#[test]
fn an_odd_unknown_key_is_quoted_in_the_json_path() {
    let err = railyard_model::workflow::parse_definition("{\": [\"x\"] }").unwrap_err();
    assert!(err.starts_with("[\": [\"]: unknown field"), "{err}");
}

/// Found by libFuzzer (`spec`): serde's message quotes the value it refused whole, so
/// a spec (or a definition) that was one long JSON string made an error of its length.
#[test]
fn a_refused_json_value_is_quoted_short() {
    let long = format!("\"{}\"", "\u{fffd}".repeat(10_000));
    let e = ScheduleSpec::from_json(&long).unwrap_err().to_string();
    assert!(e.len() < 200 && e.starts_with("$: invalid type: string"), "{e}");
    let e = railyard_model::workflow::parse_definition(&long).unwrap_err();
    assert!(e.len() < 200 && e.starts_with("$: invalid type: string"), "{e}");
}

/// What libFuzzer found (`cargo fuzz`, `fuzz/libfuzzer/`), kept as its raw input
/// under `fuzz/regressions/<target>/` and replayed through the same entry point.
#[test]
fn libfuzzer_findings_stay_fixed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    for target in railyard_fuzz::bytes::NAMES {
        let dir = root.join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let data = std::fs::read(entry.path()).unwrap();
            if let Err(finding) = railyard_fuzz::bytes::run(target, &data) {
                panic!("{}: {finding}", entry.path().display());
            }
        }
    }
}
