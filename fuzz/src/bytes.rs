//! The targets driven by raw bytes, for coverage-guided fuzzers (`cargo fuzz`,
//! libFuzzer: `fuzz/libfuzzer/`), with the same properties as the proptest runs.
//!
//! `service` reads its request sequence straight from the bytes
//! ([`service::decode`]). For the others, the first byte chooses how the rest is read:
//! - even: as the target's text itself (a token, a definition, a template, a spec's
//!   JSON, a webhook template, a list query), so the fuzzer's mutations are mutations of that text;
//! - odd: as the seed of a ChaCha generator driving the target's proptest strategy,
//!   so the structured inputs (signed and spliced tokens, edited definitions, request
//!   sequences) are reached too. A real generator, not the bytes themselves: read
//!   straight from a finite stream, a strategy's rejection sampling never ends once
//!   the stream runs out.
//!
//! [`run`] answers `Err` with the property that failed; a panic is a finding too.

use std::cell::RefCell;
use std::fmt::Debug;
use std::sync::Arc;

use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use crate::corpus;
use crate::targets::{hook, query, service, spec, template, token, workflow};

/// The targets [`run`] knows, as `cargo fuzz` names them.
pub const NAMES: &[&str] = &[
    "token", "workflow", "template", "spec", "service", "hook", "query",
];

/// Runs target `name` on `data`.
pub fn run(name: &str, data: &[u8]) -> Result<(), String> {
    let Some((&mode, rest)) = data.split_first() else {
        return Ok(());
    };
    let direct = mode % 2 == 0;
    let text = String::from_utf8_lossy(rest).into_owned();
    let result = match name {
        "token" => with_fixture(|f| {
            if direct {
                token::check(&f.keys, &token::TokenInput::Raw(text))
            } else {
                generated(&f.token, rest).and_then(|i| token::check(&f.keys, &i))
            }
        }),
        "workflow" => with_fixture(|f| {
            let input = if direct {
                workflow::WorkflowInput {
                    source: workflow::Source::Text(text),
                    values: template::Values::default(),
                }
            } else {
                generated(&f.workflow, rest)?
            };
            workflow::check(&f.workflow_seeds, &input)
        }),
        "template" => with_fixture(|f| {
            let input = if direct {
                template::TemplateInput {
                    template: text,
                    values: template::Values {
                        goal: "g".into(),
                        context: [("k".to_string(), "v".to_string())].into(),
                    },
                    schedule_id: "s".into(),
                    due: 1_764_000_000_000,
                }
            } else {
                generated(&f.template, rest)?
            };
            template::check(&input)
        }),
        "spec" => with_fixture(|f| {
            let input = if direct {
                spec::SpecInput {
                    spec: spec::SpecSource::Json(text),
                    after: 1_764_000_000_000,
                    upcoming: 4,
                    schedule_id: "s".into(),
                }
            } else {
                generated(&f.spec, rest)?
            };
            spec::check(&input)
        }),
        "service" => with_fixture(|f| {
            let input = service::decode(data, &f.service_lines);
            f.service_cases.check(&f.rt, &input)
        }),
        "hook" => with_fixture(|f| {
            let input = if direct {
                hook::HookInput {
                    template: text,
                    payload: f.hook_payload.clone(),
                    max: 4096,
                    signature: String::new(),
                }
            } else {
                generated(&f.hook, rest)?
            };
            hook::check(&input)
        }),
        "query" => with_fixture(|f| {
            let input = if direct { text } else { generated(&f.query, rest)? };
            query::check(&input)
        }),
        other => return Err(format!("no target {other:?}; the targets: {}", NAMES.join(", "))),
    };
    result.map_err(|e| format!("{name}: {e}"))
}

/// A value of `strategy` drawn by a ChaCha generator seeded from `bytes`.
fn generated<T: Debug>(strategy: &BoxedStrategy<T>, bytes: &[u8]) -> Result<T, TestCaseError> {
    let mut seed = [0u8; 32];
    for (i, b) in bytes.iter().enumerate() {
        seed[i % 32] = seed[i % 32].rotate_left(3) ^ b;
    }
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    strategy
        .new_tree(&mut runner)
        .map(|tree| tree.current())
        .map_err(|e| TestCaseError::fail(format!("the strategy gave no value: {e}")))
}

/// What the targets need, built once per process (a fuzzer runs one thread).
struct Fixture {
    keys: token::Keys,
    token: BoxedStrategy<token::TokenInput>,
    workflow_seeds: Arc<Vec<Vec<u8>>>,
    workflow: BoxedStrategy<workflow::WorkflowInput>,
    template: BoxedStrategy<template::TemplateInput>,
    spec: BoxedStrategy<spec::SpecInput>,
    rt: tokio::runtime::Runtime,
    service_lines: Arc<Vec<Vec<u8>>>,
    service_cases: service::Shared,
    hook_payload: serde_json::Value,
    hook: BoxedStrategy<hook::HookInput>,
    query: BoxedStrategy<String>,
}

thread_local! {
    static FIXTURE: RefCell<Option<Fixture>> = const { RefCell::new(None) };
}

fn with_fixture<R>(f: impl FnOnce(&mut Fixture) -> R) -> R {
    FIXTURE.with(|cell| {
        let mut slot = cell.borrow_mut();
        f(slot.get_or_insert_with(Fixture::new))
    })
}

impl Fixture {
    fn new() -> Self {
        hook::setup();
        let spec_files = corpus::files(&corpus::dir("spec"));
        let hook_files = corpus::files(&corpus::dir("hook"));
        let json_files = |files: &[(std::path::PathBuf, Vec<u8>)]| {
            files
                .iter()
                .filter(|(p, _)| p.extension().is_some_and(|e| e == "json"))
                .map(|(_, b)| b.clone())
                .collect::<Vec<_>>()
        };
        let payloads: Vec<serde_json::Value> = json_files(&hook_files)
            .iter()
            .filter_map(|b| serde_json::from_slice(b).ok())
            .collect();
        let workflow_seeds = workflow::seeds();
        Self {
            keys: token::Keys::load(),
            token: token::strategy(corpus::as_seeds(&corpus::lines("token"))).boxed(),
            workflow: workflow::strategy(workflow_seeds.clone()).boxed(),
            workflow_seeds,
            template: template::strategy(corpus::as_seeds(&corpus::lines("template"))).boxed(),
            spec: spec::strategy(
                corpus::as_seeds(&corpus::lines_of("spec", |n| n.starts_with("cron"))),
                corpus::as_seeds(&corpus::lines_of("spec", |n| n.starts_with("interval"))),
                Arc::new(json_files(&spec_files)),
            )
            .boxed(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime"),
            service_lines: corpus::as_seeds(&corpus::lines("service")),
            service_cases: service::Shared::default(),
            hook_payload: payloads
                .first()
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"number": 7, "title": "t"})),
            hook: hook::strategy(corpus::as_seeds(&corpus::lines("hook")), Arc::new(payloads)).boxed(),
            query: query::strategy(corpus::as_seeds(&corpus::lines("query"))).boxed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_takes_empty_short_and_structured_inputs() {
        for name in NAMES {
            for data in [
                &b""[..],
                b"\x00",
                b"\x01",
                b"\x00{\"cron\":[\"* * * * *\"]}",
                b"\x01abcdef",
            ] {
                run(name, data).unwrap_or_else(|e| panic!("{name} on {data:?}: {e}"));
            }
        }
        assert!(run("nope", b"\x00").is_err());
    }
}
