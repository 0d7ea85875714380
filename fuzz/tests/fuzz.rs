//! Each fuzz target for a small budget of cases (`cargo test -p railyard-fuzz`),
//! or for `RAILYARD_FUZZ_SECONDS` each (CI's fuzz step). A target passes when it
//! had no finding; the report (executions, findings) is printed either way.

use railyard_fuzz::harness::{Budget, Report};

fn run(f: fn(Budget) -> Report, cases: u64) {
    let report = f(Budget::from_env(Budget::Cases(cases)));
    println!("{report}");
    assert!(report.findings.is_empty(), "{report}");
    assert!(report.executions > 0, "{report}");
}

#[test]
fn token() {
    run(railyard_fuzz::fuzz_token, 512);
}

#[test]
fn workflow() {
    run(railyard_fuzz::fuzz_workflow, 512);
}

#[test]
fn template() {
    run(railyard_fuzz::fuzz_template, 512);
}

#[test]
fn spec() {
    run(railyard_fuzz::fuzz_spec, 256);
}

#[test]
fn hook() {
    run(railyard_fuzz::fuzz_hook, 512);
}

#[test]
fn query() {
    run(railyard_fuzz::fuzz_query, 512);
}

#[test]
fn service() {
    run(railyard_fuzz::fuzz_service, 64);
}

/// The corpus tokens are real: the valid ones verify under the fuzz keys, the
/// others are refused.
#[test]
fn corpus_tokens_are_what_they_say() {
    use railyard_fuzz::corpus;
    use railyard_fuzz::targets::token::Keys;
    let keys = Keys::load();
    let valid = corpus::lines_of("token", |n| n == "valid.txt");
    assert!(valid.len() >= 4);
    for t in &valid {
        assert!(keys.server.verify(t).is_ok(), "{t}");
    }
    let refused = corpus::lines_of("token", |n| n == "refused.txt");
    assert!(refused.len() >= 10);
    for t in &refused {
        assert!(keys.server.verify(t).is_err(), "{t}");
    }
}
