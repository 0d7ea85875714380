//! The JSON a delivery POSTs: the closed run's result. Stable field names (this is
//! an API); new facts about a run are new fields, which receivers ignore until they
//! know them. Steps are objects so that per-step facts are added beside `notes`;
//! run-wide ones beside `status`.
//!
//! Per step, `result` is its structured result object (what its output contract
//! checked), always present and `null` when the step gave none (no contract, or it
//! never completed); `usage` is what its attempts' model turns used, as
//! `StepSummary.usage` has it, always present (zeros when nothing was reported).
//! The run's `usage` is the total of its steps (`RunInfo.usage`). Costs are the
//! worker's estimate from its price table, in US dollars. `issues` per step counts the
//! issues its agents reported (`report_issue`); the run's `issueCount` counts them
//! all and its `issues` lists the first 20 whole.
//!
//! ```json
//! {
//!   "type": "run.closed", "version": 1,
//!   "delivery": {"id": "<ns>/<run>/<target>", "target": "callback", "attempt": 1},
//!   "namespace": "default", "runId": "...", "workflowId": "demo", "workflowVersion": "1",
//!   "status": "COMPLETED", "failure": "",
//!   "startTimeMs": 0, "closeTimeMs": 0,
//!   "steps": [{"stepId": "plan", "title": "...", "state": "COMPLETED", "attempt": 1,
//!              "notes": "...", "artifacts": ["plan.md"], "result": {"title": "..."},
//!              "usage": {"inputTokens": 1200, "outputTokens": 300, "cacheReadTokens": 0,
//!                        "cacheWriteTokens": 0, "costUsd": 0.0081}, "issues": 1}],
//!   "artifacts": ["plan.md"],
//!   "usage": {"inputTokens": 1200, "outputTokens": 300, "cacheReadTokens": 0,
//!             "cacheWriteTokens": 0, "costUsd": 0.0081},
//!   "issueCount": 1,
//!   "issues": [{"stepId": "plan", "attempt": 1, "severity": "warning",
//!               "summary": "...", "details": "...", "timeMs": 0}]
//! }
//! ```

use serde_json::{Value, json};

use crate::run::{Attempt, DeliveryTarget, Issue, RunState, Usage};

/// The payload of `attempt`: the closed `run`'s result, or for an issue target the
/// issue (`issue.reported`, sent while the run goes on):
///
/// ```json
/// {"type": "issue.reported", "version": 1,
///  "delivery": {"id": "<ns>/<run>/issue:1:<subscription>", "target": "issue:1:<subscription>", "attempt": 1},
///  "namespace": "default", "runId": "...", "workflowId": "demo", "workflowVersion": "1",
///  "status": "RUNNING", "issueCount": 1,
///  "issue": {"stepId": "plan", "attempt": 1, "severity": "error", "summary": "...",
///            "details": "...", "timeMs": 0}}
/// ```
pub fn body(run: &RunState, attempt: &Attempt) -> Vec<u8> {
    if let DeliveryTarget::Issue { issue: n, .. } = &attempt.target {
        return issue_body(run, attempt, *n);
    }
    let steps: Vec<Value> = run
        .definition
        .steps
        .iter()
        .zip(&run.steps)
        .map(|(def, rec)| {
            json!({
                "stepId": def.id,
                "title": def.title,
                "state": rec.state,
                "attempt": rec.attempt,
                "notes": rec.notes,
                "artifacts": rec.artifacts,
                "result": if rec.result.is_empty() {
                    Value::Null
                } else {
                    crate::run::wire::result_value(&rec.result)
                },
                "usage": usage(&rec.usage),
                "issues": rec.issues,
            })
        })
        .collect();
    let mut artifacts: Vec<&String> = Vec::new();
    for a in run.steps.iter().flat_map(|s| &s.artifacts) {
        if !artifacts.contains(&a) {
            artifacts.push(a);
        }
    }
    let target = attempt.target.name();
    json!({
        "type": "run.closed",
        "version": 1,
        "delivery": {
            "id": format!("{}/{}/{}", run.namespace, run.run_id, target),
            "target": target,
            "attempt": attempt.attempt,
        },
        "namespace": run.namespace,
        "runId": run.run_id,
        "workflowId": run.workflow_id,
        "workflowVersion": run.definition.version,
        "status": run.status.name(),
        "failure": run.failure,
        "startTimeMs": run.start_ms,
        "closeTimeMs": run.close_ms,
        "steps": steps,
        "artifacts": artifacts,
        "usage": usage(&run.usage),
        "issueCount": run.issue_count(),
        "issues": run.issues.iter().map(issue).collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes()
}

fn issue_body(run: &RunState, attempt: &Attempt, n: u32) -> Vec<u8> {
    let target = attempt.target.name();
    let index = usize::try_from(n).unwrap_or(usize::MAX).saturating_sub(1);
    json!({
        "type": "issue.reported",
        "version": 1,
        "delivery": {
            "id": format!("{}/{}/{}", run.namespace, run.run_id, target),
            "target": target,
            "attempt": attempt.attempt,
        },
        "namespace": run.namespace,
        "runId": run.run_id,
        "workflowId": run.workflow_id,
        "workflowVersion": run.definition.version,
        "status": run.status.name(),
        "issueCount": run.issue_count(),
        "issue": run.issues.get(index).map_or(Value::Null, issue),
    })
    .to_string()
    .into_bytes()
}

/// A reported issue (`report_issue`), named as the `IssueReported` event's attributes are.
fn issue(i: &Issue) -> Value {
    json!({
        "stepId": i.step_id,
        "attempt": i.attempt,
        "severity": i.severity.name(),
        "summary": i.summary,
        "details": i.details,
        "timeMs": i.time_ms,
    })
}

/// Tokens and estimated cost, named as the `StepUsage` event's attributes are.
fn usage(u: &Usage) -> Value {
    json!({
        "inputTokens": u.input,
        "outputTokens": u.output,
        "cacheReadTokens": u.cache_read,
        "cacheWriteTokens": u.cache_write,
        "costUsd": u.cost_usd,
    })
}
