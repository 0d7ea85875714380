//! Fuzz targets for Railyard, on stable Rust.
//!
//! Each target in [`targets`] is a proptest strategy (inputs generated, and mutated
//! from the checked-in corpus under `fuzz/corpus/<target>/`) and a `check` function
//! holding the property every input must keep. [`harness::run`] drives one for a
//! budget of cases or of time and reports executions and findings; [`TARGETS`] runs
//! them by name. `cargo test -p railyard-fuzz` runs each for a small budget;
//! `RAILYARD_FUZZ_SECONDS=N` gives each N seconds instead (see `docs/testing.md`, "Fuzzing").

pub mod bytes;
pub mod corpus;
pub mod harness;
pub mod targets;

use harness::{Budget, Report};
use targets::{hook, query, service, spec, template, token, workflow};

/// Runs the token target for `budget`: corpus tokens, mutated, and generated.
pub fn fuzz_token(budget: Budget) -> Report {
    let keys = token::Keys::load();
    let seeds = corpus::as_seeds(&corpus::lines("token"));
    harness::run("token", token::strategy(seeds), budget, |input| {
        token::check(&keys, &input)
    })
}

/// Runs the workflow-definition target for `budget`.
pub fn fuzz_workflow(budget: Budget) -> Report {
    let seeds = workflow::seeds();
    let strategy = workflow::strategy(seeds.clone());
    harness::run("workflow", strategy, budget, |input| {
        workflow::check(&seeds, &input)
    })
}

/// Runs the template target (prompt rendering and `Fire::render`) for `budget`.
pub fn fuzz_template(budget: Budget) -> Report {
    let seeds = corpus::as_seeds(&corpus::lines("template"));
    harness::run("template", template::strategy(seeds), budget, |input| {
        template::check(&input)
    })
}

/// Runs the schedule-spec target (cron, interval, `SpecDoc`) for `budget`.
pub fn fuzz_spec(budget: Budget) -> Report {
    let crons = corpus::as_seeds(&corpus::lines_of("spec", |n| n.starts_with("cron")));
    let intervals = corpus::as_seeds(&corpus::lines_of("spec", |n| n.starts_with("interval")));
    let json = std::sync::Arc::new(
        corpus::files(&corpus::dir("spec"))
            .into_iter()
            .filter(|(p, _)| p.extension().is_some_and(|e| e == "json"))
            .map(|(_, b)| b)
            .collect::<Vec<_>>(),
    );
    harness::run("spec", spec::strategy(crons, intervals, json), budget, |input| {
        spec::check(&input)
    })
}

/// Runs the service-layer target (every request type) for `budget`.
pub fn fuzz_service(budget: Budget) -> Report {
    let lines = corpus::as_seeds(&corpus::lines("service"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    harness::run("service", service::strategy(lines), budget, |input| {
        service::check(&rt, &input)
    })
}

/// Runs the webhook target (payload templates and signature checks) for `budget`.
pub fn fuzz_hook(budget: Budget) -> Report {
    hook::setup();
    let seeds = corpus::as_seeds(&corpus::lines("hook"));
    let payloads = std::sync::Arc::new(
        corpus::files(&corpus::dir("hook"))
            .into_iter()
            .filter(|(p, _)| p.extension().is_some_and(|e| e == "json"))
            .filter_map(|(_, b)| serde_json::from_slice(&b).ok())
            .collect::<Vec<_>>(),
    );
    harness::run("hook", hook::strategy(seeds, payloads), budget, |input| {
        hook::check(&input)
    })
}

/// Runs the list-query target (`railyard_model::query`) for `budget`.
pub fn fuzz_query(budget: Budget) -> Report {
    let seeds = corpus::as_seeds(&corpus::lines("query"));
    harness::run("query", query::strategy(seeds), budget, |input| {
        query::check(&input)
    })
}

/// A target's entry point: run for a budget, report.
pub type Target = fn(Budget) -> Report;

/// Every target by name.
pub const TARGETS: &[(&str, Target)] = &[
    ("token", fuzz_token),
    ("workflow", fuzz_workflow),
    ("template", fuzz_template),
    ("spec", fuzz_spec),
    ("service", fuzz_service),
    ("hook", fuzz_hook),
    ("query", fuzz_query),
];
