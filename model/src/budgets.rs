//! The guardrails a workflow definition may set: token budgets (`maxTokens` of a
//! step or a run, `maxCostUsd` of a run) and stuck-detection thresholds (`stuck`),
//! with their checks. Errors are `JSON path: problem`, like every definition error.

use serde::{Deserialize, Serialize};

/// Stuck-detection thresholds of a step; each absent one takes the worker's default
/// (3 repeated calls, 3 repeated errors, 10 turns without progress).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StuckDef {
    /// The same tool call with the same arguments this many times in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated_calls: Option<u32>,
    /// The same error from a tool this many times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated_errors: Option<u32>,
    /// No progress call in this many turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_progress_turns: Option<u32>,
}

/// The largest `maxTokens` accepted (a trillion).
pub const MAX_BUDGET_TOKENS: u64 = 1_000_000_000_000;
/// The largest `maxCostUsd` accepted.
pub const MAX_BUDGET_USD: f64 = 1_000_000.0;

pub(crate) fn check_max_tokens(path: &str, value: Option<u64>) -> Result<(), String> {
    match value {
        Some(t) if !(1..=MAX_BUDGET_TOKENS).contains(&t) => Err(format!(
            "{path}: must be between 1 and {MAX_BUDGET_TOKENS}, got {t}"
        )),
        _ => Ok(()),
    }
}

pub(crate) fn check_max_cost(path: &str, value: Option<f64>) -> Result<(), String> {
    match value {
        Some(c) if !(c > 0.0 && c <= MAX_BUDGET_USD) => Err(format!(
            "{path}: must be a number of US dollars above 0 and at most {MAX_BUDGET_USD}, got {c}"
        )),
        _ => Ok(()),
    }
}

pub(crate) fn check_stuck(path: &str, stuck: &StuckDef) -> Result<(), String> {
    let fields = [
        ("repeatedCalls", stuck.repeated_calls, 2),
        ("repeatedErrors", stuck.repeated_errors, 1),
        ("noProgressTurns", stuck.no_progress_turns, 1),
    ];
    for (name, value, min) in fields {
        if let Some(v) = value
            && !(min..=1000).contains(&v)
        {
            return Err(format!("{path}.{name}: must be between {min} and 1000, got {v}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::workflow::parse_definition;

    fn def(workflow_extra: &str, step_extra: &str) -> Result<crate::workflow::WorkflowDef, String> {
        parse_definition(&format!(
            r#"{{"id":"wf","version":"1","name":"W"{workflow_extra},"steps":[
              {{"id":"a","title":"A","prompt":"a"}},
              {{"id":"b","title":"B","prompt":"b"{step_extra}}}]}}"#
        ))
    }

    #[test]
    fn budgets_and_thresholds_parse() {
        let d = def(
            r#","maxTokens":50000,"maxCostUsd":2.5"#,
            r#","maxTokens":1000,"stuck":{"repeatedCalls":4,"noProgressTurns":6}"#,
        )
        .unwrap();
        assert_eq!((d.max_tokens, d.max_cost_usd), (Some(50000), Some(2.5)));
        assert_eq!(d.steps[1].max_tokens, Some(1000));
        let stuck = d.steps[1].stuck.unwrap();
        assert_eq!(
            (
                stuck.repeated_calls,
                stuck.repeated_errors,
                stuck.no_progress_turns
            ),
            (Some(4), None, Some(6))
        );
        assert_eq!((d.steps[0].max_tokens, d.steps[0].stuck), (None, None));
    }

    #[test]
    fn bad_values_are_refused_with_their_json_path() {
        let cases = [
            (r#","maxTokens":0"#, "", "maxTokens: must be between 1 and"),
            (
                r#","maxCostUsd":-1"#,
                "",
                "maxCostUsd: must be a number of US dollars above 0",
            ),
            (r#","maxCostUsd":"lots""#, "", "maxCostUsd: invalid type"),
            (
                "",
                r#","maxTokens":0"#,
                "steps[1].maxTokens: must be between 1 and",
            ),
            (
                "",
                r#","stuck":{"repeatedCalls":1}"#,
                "steps[1].stuck.repeatedCalls: must be between 2 and 1000, got 1",
            ),
            (
                "",
                r#","stuck":{"noProgressTurns":0}"#,
                "steps[1].stuck.noProgressTurns: must be between 1 and 1000",
            ),
            (
                "",
                r#","stuck":{"loops":3}"#,
                "steps[1].stuck.loops: unknown field",
            ),
        ];
        for (wf, step, want) in cases {
            let err = def(wf, step).unwrap_err();
            assert!(err.starts_with(want), "{wf} {step}: {err}");
        }
    }
}
