//! Workflow definitions (`model/src/workflow.rs`): arbitrary text, arbitrary
//! JSON and mutated real definitions are parsed and validated without a panic;
//! every refusal starts with the JSON path it is about; an accepted definition
//! writes back to JSON that parses to the same definition, and renders every
//! step's prompt over any goal and context within a bound.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use railyard_engine::registry::is_definition_file;
use railyard_model::workflow::parse_definition;
use serde_json::Value;

use crate::corpus;
use crate::targets::template::{self, Values};

/// The seeds: the corpus files and the bundled `workflows/*.json` definitions.
pub fn seeds() -> Arc<Vec<Vec<u8>>> {
    let mut seeds = corpus::seeds("workflow");
    let bundled = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows");
    for (path, bytes) in corpus::files(&bundled) {
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_definition_file)
        {
            seeds.push(bytes);
        }
    }
    Arc::new(seeds)
}

/// One change to a JSON document: at the node a walk of `path` reaches.
#[derive(Debug, Clone)]
pub enum Edit {
    Replace(Vec<Index>, Value),
    Remove(Vec<Index>),
    Insert(Vec<Index>, String, Value),
}

/// One input to [`check`], with the goal and context its prompts render over.
#[derive(Debug, Clone)]
pub struct WorkflowInput {
    pub source: Source,
    pub values: Values,
}

#[derive(Debug, Clone)]
pub enum Source {
    Text(String),
    Edited(Index, Vec<Edit>),
}

/// Arbitrary JSON, small.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            Just(0u32),
            Just(1),
            Just(1000),
            Just(1001),
            Just(604_800),
            Just(u32::MAX)
        ]
        .prop_map(Value::from),
        prop_oneof![Just(1e300), Just(-1.0), Just(0.5), Just(100.0), Just(1e-300)].prop_map(Value::from),
        "[a-z]{0,6}".prop_map(Value::String),
        ".{0,20}".prop_map(Value::String),
        prop_oneof![
            Just("{{goal}}"),
            Just("{{context.k}}"),
            Just("{{nope}}"),
            Just("{{"),
            Just("bash"),
            Just("a b"),
            Just(".."),
        ]
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    "[a-zA-Z]{1,16}",
                    Just("id".to_string()),
                    Just("steps".to_string()),
                    Just("prompt".to_string())
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn edit() -> impl Strategy<Value = Edit> {
    let path = prop::collection::vec(any::<Index>(), 0..5);
    let key = prop_oneof![
        Just("id".to_string()),
        Just("retry".to_string()),
        Just("maxTurns".to_string()),
        Just("taskQueue".to_string()),
        Just("allowedTools".to_string()),
        Just("backoffCoefficient".to_string()),
        "[a-zA-Z]{1,12}",
    ];
    prop_oneof![
        3 => (path.clone(), json_value()).prop_map(|(p, v)| Edit::Replace(p, v)),
        1 => path.clone().prop_map(Edit::Remove),
        2 => (path, key, json_value()).prop_map(|(p, k, v)| Edit::Insert(p, k, v)),
    ]
}

/// Generated and mutated definitions.
pub fn strategy(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = WorkflowInput> {
    let source = prop_oneof![
        1 => ".{0,64}".prop_map(Source::Text),
        2 => json_value().prop_map(|v| Source::Text(v.to_string())),
        3 => corpus::mutated_text(seeds.clone()).prop_map(Source::Text),
        1 => corpus::seed_text(seeds).prop_map(Source::Text),
        4 => (any::<Index>(), prop::collection::vec(edit(), 1..4)).prop_map(|(i, e)| Source::Edited(i, e)),
    ];
    (source, template::values()).prop_map(|(source, values)| WorkflowInput { source, values })
}

/// The node a walk of `path` reaches: each index picks a child; a leaf or an
/// empty container stops the walk.
fn walk<'a>(v: &'a mut Value, path: &[Index]) -> &'a mut Value {
    let Some((first, rest)) = path.split_first() else {
        return v;
    };
    let len = match &*v {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 0,
    };
    if len == 0 {
        return v;
    }
    match v {
        Value::Array(a) => walk(&mut a[first.index(len)], rest),
        Value::Object(o) => {
            let key = o.keys().nth(first.index(len)).cloned().unwrap_or_default();
            walk(o.entry(key).or_insert(Value::Null), rest)
        }
        other => other,
    }
}

fn apply(v: &mut Value, edit: &Edit) {
    match edit {
        Edit::Replace(path, new) => *walk(v, path) = new.clone(),
        Edit::Remove(path) if !path.is_empty() => {
            let (parent_path, last) = path.split_at(path.len() - 1);
            let parent = walk(v, parent_path);
            match parent {
                Value::Array(a) if !a.is_empty() => {
                    a.remove(last[0].index(a.len()));
                }
                Value::Object(o) if !o.is_empty() => {
                    let k = o.keys().nth(last[0].index(o.len())).cloned();
                    if let Some(k) = k {
                        o.remove(&k);
                    }
                }
                _ => {}
            }
        }
        Edit::Insert(path, key, new) => match walk(v, path) {
            Value::Object(o) => {
                o.insert(key.clone(), new.clone());
            }
            Value::Array(a) => a.push(new.clone()),
            _ => {}
        },
        Edit::Remove(_) => {}
    }
}

/// The definition text of an input.
pub fn text(seeds: &[Vec<u8>], source: &Source) -> String {
    match source {
        Source::Text(t) => t.clone(),
        Source::Edited(i, edits) => {
            let seed = &seeds[i.index(seeds.len())];
            let mut v: Value = serde_json::from_slice(seed).unwrap_or(Value::Null);
            for e in edits {
                apply(&mut v, e);
            }
            v.to_string()
        }
    }
}

/// Whether `path` is a JSON path as the errors write it: `$`, or keys and `[N]`
/// indices (`steps[1].retry.maximumAttempts`, `[0]` in a document that is an
/// array). Not serde_path_to_error's placeholders: `.` (the root) or `?` (a place
/// it could not name). A refused unknown key is named as written, whatever it
/// holds, so `problem` saying so lets any path through.
pub fn is_json_path(path: &str, problem: &str) -> bool {
    if path == "$" || (!path.is_empty() && problem.contains("unknown field")) {
        return true;
    }
    !path.is_empty()
        && path != "."
        && !path
            .split('.')
            .any(|segment| segment == "?" || segment.is_empty())
}

/// The property (see the module docs).
pub fn check(seeds: &[Vec<u8>], input: &WorkflowInput) -> Result<(), TestCaseError> {
    let text = text(seeds, &input.source);
    match parse_definition(&text) {
        Err(e) => {
            let (path, problem) = e.split_once(": ").unwrap_or(("", &e));
            prop_assert!(is_json_path(path, problem), "the refusal names no JSON path: {e}");
            prop_assert!(!problem.trim().is_empty(), "the refusal says nothing: {e}");
        }
        Ok(def) => {
            let again = serde_json::to_string(&def).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let reparsed = parse_definition(&again);
            prop_assert_eq!(reparsed.as_ref(), Ok(&def), "does not round-trip through JSON");
            for step in &def.steps {
                template::check_render(&step.prompt, &input.values)?;
            }
        }
    }
    Ok(())
}
