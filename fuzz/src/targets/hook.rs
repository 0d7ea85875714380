//! Webhook payload templates (`{{$.pull_request.title}}`, `template::payload`) and
//! delivery verification (`trigger::signature::verify`): any template parses or is
//! refused without a panic; a parsed one renders over any payload without a panic,
//! within its byte limit, and a missing path is reported as a path the template
//! names; any signature header is refused or accepted without a panic, and only
//! the real signature is accepted.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use railyard_engine::secrets::SecretPolicy;
use railyard_engine::signature::{sign, verify};
use railyard_model::template::payload::{RenderError, Template};
use railyard_model::trigger::{Source, Trigger};
use serde_json::Value;

use crate::corpus;

/// One input: a template, a payload, a render limit, and a signature header.
#[derive(Debug, Clone)]
pub struct HookInput {
    pub template: String,
    pub payload: Value,
    pub max: usize,
    pub signature: String,
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![Just("a".to_string()), Just("number".to_string()), ".{0,6}"],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Generated and mutated inputs; `seeds` are corpus templates, `payloads` corpus JSON.
pub fn strategy(seeds: Arc<Vec<Vec<u8>>>, payloads: Arc<Vec<Value>>) -> impl Strategy<Value = HookInput> {
    let piece = prop_oneof![
        Just("{{$.a}}".to_string()),
        Just("{{ $.number }}".to_string()),
        Just("{{$.a[0]}}".to_string()),
        Just("{{$[\"a\"]}}".to_string()),
        Just("{{$.pull_request.title}}".to_string()),
        Just("{{$".to_string()),
        Just("{{".to_string()),
        Just("}}".to_string()),
        Just("[".to_string()),
        Just(".".to_string()),
        ".{0,6}",
    ];
    let template = prop_oneof![
        3 => prop::collection::vec(piece, 0..12).prop_map(|p| p.concat()),
        2 => corpus::mutated_text(seeds.clone()),
        1 => corpus::seed_text(seeds),
        1 => ".{0,40}",
    ];
    let n = payloads.len().max(1);
    let payload = prop_oneof![
        2 => json_value(),
        1 => (0..n).prop_map(move |i| payloads.get(i).cloned().unwrap_or(Value::Null)),
    ];
    let max = prop_oneof![Just(0usize), 1usize..64, Just(64 * 1024)];
    let signature = prop_oneof![
        Just(String::new()),
        Just("sha256=".to_string()),
        "sha256=[0-9a-f]{0,70}",
        ".{0,80}",
    ];
    (template, payload, max, signature).prop_map(|(template, payload, max, signature)| HookInput {
        template,
        payload,
        max,
        signature,
    })
}

/// The secret the verification property signs with (set in this process's environment).
const SECRET_ENV: &str = "FUZZ_HOOK_SECRET";
const SECRET: &str = "fuzz secret";

/// Sets the secret the verification property uses.
pub fn setup() {
    // SAFETY: set once, before the target runs; only this target reads it.
    unsafe { std::env::set_var(SECRET_ENV, SECRET) };
}

/// The property (see the module docs).
pub fn check(input: &HookInput) -> Result<(), TestCaseError> {
    if let Ok(t) = Template::parse(&input.template) {
        match t.render(&input.payload, input.max) {
            Ok(out) => {
                prop_assert!(
                    out.len() <= input.max,
                    "{} bytes past the limit {}",
                    out.len(),
                    input.max
                );
                if !input.template.contains("{{") {
                    prop_assert_eq!(&out, &input.template);
                }
            }
            Err(RenderError::Missing(path)) => {
                prop_assert!(
                    input.template.contains(&path),
                    "missing path {path:?} is not in the template"
                );
            }
            Err(RenderError::TooLong(max)) => prop_assert_eq!(max, input.max),
        }
    }
    let trigger = Trigger {
        signature_secret: format!("${SECRET_ENV}"),
        source: Source::Config,
        ..Trigger::default()
    };
    // A configured trigger may name any variable but the server's own.
    let policy = SecretPolicy::default();
    let body = input.template.as_bytes();
    let presented = input.signature.clone();
    let header = move |_: &str| Some(presented.clone());
    let accepted = verify(&policy, &trigger, &header, body).is_ok();
    let real = sign(SECRET.as_bytes(), body);
    let matches =
        input.signature.trim() == real || input.signature.trim() == real.trim_start_matches("sha256=");
    prop_assert_eq!(accepted, matches, "signature {:?}", input.signature);
    // The real one is always accepted.
    let real_header = move |_: &str| Some(real.clone());
    prop_assert!(verify(&policy, &trigger, &real_header, body).is_ok());
    Ok(())
}
