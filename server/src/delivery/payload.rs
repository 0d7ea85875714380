//! The JSON a delivery POSTs: the closed run's result. Stable field names (this is
//! an API); new facts about a run are new fields, which receivers ignore until they
//! know them. Steps are objects so that per-step facts (a structured result, token
//! usage) are added beside `notes`; run-wide ones (total usage) beside `status`.
//!
//! ```json
//! {
//!   "type": "run.closed", "version": 1,
//!   "delivery": {"id": "<ns>/<run>/<target>", "target": "callback", "attempt": 1},
//!   "namespace": "default", "runId": "...", "workflowId": "demo", "workflowVersion": "1",
//!   "status": "COMPLETED", "failure": "",
//!   "startTimeMs": 0, "closeTimeMs": 0,
//!   "steps": [{"stepId": "plan", "title": "...", "state": "COMPLETED", "attempt": 1,
//!              "notes": "...", "artifacts": ["plan.md"]}],
//!   "artifacts": ["plan.md"]
//! }
//! ```

use serde_json::{Value, json};

use crate::model::{Attempt, RunState};

/// The payload of `attempt` of the closed `run`.
pub fn body(run: &RunState, attempt: &Attempt) -> Vec<u8> {
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
    })
    .to_string()
    .into_bytes()
}
