//! Prompt templates: the placeholders a step's `prompt` may use, their check when a
//! definition loads, and rendering (on the engine in [`super`]).
//!
//! `{{goal}}`, `{{context.KEY}}`, and an earlier step's structured result:
//! `{{steps.ID.result}}` (the whole object, as compact JSON) or
//! `{{steps.ID.result.FIELD}}`, nested (`.a.b`) and into arrays (`.items.0`). A
//! placeholder naming a step that is unknown, or that does not run before this one, is
//! a definition error. Anything not there when the prompt is rendered (an unset
//! context key, a step with no result, a field its result does not have) renders as
//! empty; a string renders as its text, any other value as compact JSON.

use std::collections::BTreeMap;

use super::{Fill, Measure, Piece, Scanner, Sink, Unclosed, render_with};
use crate::ids;

/// What a prompt's placeholder names.
enum Name<'a> {
    Goal,
    Context(&'a str),
    /// An earlier step's result, or a field inside it (`path` empty: the whole result).
    Result {
        step: usize,
        path: Vec<&'a str>,
    },
}

/// Reads a placeholder against the step ids it may name; `None` if it is none of
/// the forms. A step id may hold dots, so the longest id followed by `.result` wins.
fn parse_name<'a>(var: &'a str, steps: &[&str]) -> Option<Name<'a>> {
    if var == "goal" {
        return Some(Name::Goal);
    }
    if let Some(key) = var.strip_prefix("context.") {
        return ids::is_context_key(key).then_some(Name::Context(key));
    }
    let rest = var.strip_prefix("steps.")?;
    let (step, after) = steps
        .iter()
        .enumerate()
        .filter_map(|(i, id)| {
            let after = rest.strip_prefix(id)?.strip_prefix(".result")?;
            (after.is_empty() || after.starts_with('.')).then_some((i, after))
        })
        .max_by_key(|(i, _)| steps[*i].len())?;
    let path: Vec<&str> = match after.strip_prefix('.') {
        None => Vec::new(),
        Some(fields) => fields.split('.').collect(),
    };
    path.iter()
        .all(|f| crate::contract::is_field_name(f))
        .then_some(Name::Result { step, path })
}

/// Checks that every `{{...}}` is `goal` or `context.KEY` (no step results: see
/// [`check_template_with`]).
pub fn check_template(template: &str) -> Result<(), String> {
    check_template_with(template, &[], &[])
}

/// Checks that every `{{...}}` is `goal`, `context.KEY`, or `steps.ID.result[.FIELD...]`
/// naming one of `earlier` (the ids of the steps before this one). `later` (the ids of
/// this step and the ones after it) only words the error for a step that has not run yet.
pub fn check_template_with(template: &str, earlier: &[&str], later: &[&str]) -> Result<(), String> {
    for piece in Scanner::new(template) {
        match piece {
            Piece::Text(_) => {}
            // The prompt is the last stage: a `{{` nothing closes is a mistake.
            Piece::Unclosed { at, .. } => return Err(Unclosed { at }.to_string()),
            Piece::Placeholder(p) => {
                if parse_name(p.name(), earlier).is_none() {
                    return Err(refusal(p.name(), p.at, later));
                }
            }
        }
    }
    Ok(())
}

/// Why `var`, at byte `at`, is not a placeholder a prompt may use.
fn refusal(var: &str, at: usize, later: &[&str]) -> String {
    if let Some(named) = var.strip_prefix("steps.") {
        let step = named.split(".result").next().unwrap_or(named);
        let why = if later.contains(&step) {
            format!("step {step:?} does not run before this one, so its result is not known yet")
        } else if named.contains(".result") {
            format!("no step {step:?} runs before this one")
        } else {
            "the form is {{steps.ID.result}} or {{steps.ID.result.FIELD}}".to_string()
        };
        return format!(
            "placeholder {} at character {at} names no earlier step's result: {why}",
            crate::error::echo(&format!("{{{{{var}}}}}"))
        );
    }
    format!(
        "unknown placeholder {{{{{var}}}}} at character {at} (use {{{{goal}}}}, {{{{context.KEY}}}} or {{{{steps.ID.result.FIELD}}}})"
    )
}

/// What a prompt template is filled from.
#[derive(Debug, Clone, Copy)]
pub struct PromptValues<'a> {
    /// The run's goal.
    pub goal: &'a str,
    /// The run's context.
    pub context: &'a BTreeMap<String, String>,
    /// Earlier steps' results, in step order: (step id, result as JSON text, empty
    /// for none).
    pub results: &'a [(&'a str, &'a str)],
}

/// Fills a template into `out`. Every placeholder is filled: one this vocabulary
/// does not know (never in a checked template) renders as empty, like a value
/// that is not there.
fn fill<S: Sink>(template: &str, values: &PromptValues, out: &mut S) -> Result<(), S::Error> {
    let ids: Vec<&str> = values.results.iter().map(|(id, _)| *id).collect();
    // Each result is parsed at most once per rendering, and only if a placeholder names it.
    let mut parsed: Vec<Option<Option<serde_json::Value>>> = vec![None; ids.len()];
    render_with(template, out, |p, out| {
        match parse_name(p.name(), &ids) {
            Some(Name::Goal) => out.push_text(values.goal)?,
            Some(Name::Context(key)) => {
                out.push_text(values.context.get(key).map(String::as_str).unwrap_or(""))?
            }
            Some(Name::Result { step, path }) => {
                let value =
                    parsed[step].get_or_insert_with(|| serde_json::from_str(values.results[step].1).ok());
                if let Some(found) = value.as_ref().and_then(|v| crate::contract::lookup(v, &path)) {
                    out.push_value(found)?;
                }
            }
            None => {}
        }
        Ok(Fill::Filled)
    })
}

/// Fills a validated template; a context key that is not set renders as empty.
pub fn render(template: &str, goal: &str, context: &BTreeMap<String, String>) -> String {
    render_values(
        template,
        &PromptValues {
            goal,
            context,
            results: &[],
        },
    )
}

/// Fills a validated template, earlier steps' results included. A context key that
/// is not set, a step with no result and a field its result does not have all
/// render as empty; a result value renders as its text if it is a string, else as
/// compact JSON.
pub fn render_values(template: &str, values: &PromptValues) -> String {
    let mut out = String::new();
    let Ok(()) = fill(template, values, &mut out);
    out
}

/// The length [`render`] would give, without rendering: a template that names a long
/// goal many times is measured before anything that large is built.
pub fn rendered_len(template: &str, goal: &str, context: &BTreeMap<String, String>) -> usize {
    rendered_len_values(
        template,
        &PromptValues {
            goal,
            context,
            results: &[],
        },
    )
}

/// The length [`render_values`] would give, without rendering.
pub fn rendered_len_values(template: &str, values: &PromptValues) -> usize {
    let mut len = Measure::default();
    let Ok(()) = fill(template, values, &mut len);
    len.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::parse_definition;

    fn def(steps: &str) -> Result<crate::workflow::WorkflowDef, String> {
        parse_definition(&format!(
            r#"{{"id":"wf","version":"1","name":"W","steps":{steps}}}"#
        ))
    }

    #[test]
    fn step_results_may_be_named_only_for_earlier_steps() {
        let d = def(r#"[{"id":"a.b","title":"A","prompt":"p"},
            {"id":"c","title":"C","prompt":"{{steps.a.b.result}} {{ steps.a.b.result.x.0.y }}"}]"#)
        .unwrap();
        assert_eq!(d.steps.len(), 2);
        let e = def(r#"[{"id":"a","title":"A","prompt":"p"},
            {"id":"c","title":"C","prompt":"{{steps.nope.result.x}}"}]"#)
        .unwrap_err();
        assert_eq!(
            e,
            "steps[1].prompt: placeholder \"{{steps.nope.result.x}}\" at character 0 names no earlier step's \
             result: no step \"nope\" runs before this one"
        );
        let e = def(r#"[{"id":"a","title":"A","prompt":"see {{steps.b.result.x}}"},
            {"id":"b","title":"B","prompt":"p"}]"#)
        .unwrap_err();
        assert!(
            e.starts_with("steps[0].prompt: placeholder \"{{steps.b.result.x}}\" at character 4")
                && e.ends_with("step \"b\" does not run before this one, so its result is not known yet"),
            "{e}"
        );
        let e = def(r#"[{"id":"a","title":"A","prompt":"{{steps.a.result}}"}]"#).unwrap_err();
        assert!(e.contains("step \"a\" does not run before this one"), "{e}");
        let e = def(
            r#"[{"id":"a","title":"A","prompt":"p"},{"id":"b","title":"B","prompt":"{{steps.a.notes}}"}]"#,
        )
        .unwrap_err();
        assert!(
            e.ends_with("the form is {{steps.ID.result}} or {{steps.ID.result.FIELD}}"),
            "{e}"
        );
        let e = def(r#"[{"id":"a","title":"A","prompt":"p"},{"id":"b","title":"B","prompt":"{{steps.a.result..x}}"}]"#)
            .unwrap_err();
        assert!(e.starts_with("steps[1].prompt: placeholder"), "{e}");
    }

    #[test]
    fn results_render_by_field_and_missing_ones_render_empty() {
        let ctx = BTreeMap::from([("k".to_string(), "v".to_string())]);
        let results = [
            (
                "a.b",
                r#"{"title":"T","n":2,"items":[{"y":"deep"}],"obj":{"z":null}}"#,
            ),
            ("a", ""),
        ];
        let values = PromptValues {
            goal: "g",
            context: &ctx,
            results: &results,
        };
        let t = "{{goal}} {{context.k}} {{steps.a.b.result.title}} {{steps.a.b.result.n}} \
                 {{steps.a.b.result.items.0.y}} {{steps.a.b.result.obj}} [{{steps.a.b.result.none}}] \
                 [{{steps.a.result.x}}] [{{steps.a.result}}]";
        let out = render_values(t, &values);
        assert_eq!(out, r#"g v T 2 deep {"z":null} [] [] []"#);
        assert_eq!(rendered_len_values(t, &values), out.len());
        // A result that is not JSON (never written by this server) renders as empty.
        let bad = [("a", "{not json")];
        let values = PromptValues {
            results: &bad,
            ..values
        };
        assert_eq!(render_values("[{{steps.a.result.x}}]", &values), "[]");
        // Without results, a step placeholder renders as empty too.
        assert_eq!(render("[{{steps.a.result}}]", "g", &ctx), "[]");
    }
}
