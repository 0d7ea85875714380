//! `spawn_agent` and `await_runs`: child runs started under the step's lease, and
//! the step ending its lease to wait for them (the server resumes it, on any
//! worker, with their outcomes as a user message).

use std::collections::HashMap;

use railyard_proto::v1::ChildRunSpec;
use serde_json::Value;

use crate::tools;

/// Most child runs one `await_runs` call may name.
const MAX_AWAITED: usize = 100;

/// A parsed `spawn_agent` call.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SpawnCall {
    pub spec: ChildRunSpec,
    /// Wait for the child before the next turn (the default).
    pub wait: bool,
}

/// Reads `spawn_agent`'s input: `workflowId`, `goal`, optional `context` (an object;
/// non-string values kept as JSON text), `wait` (default true) and
/// `parentClosePolicy` (`cancel`, `terminate`, `abandon`).
pub(super) fn parse_spawn(input: &Value) -> Result<SpawnCall, String> {
    let err = |e: String| format!("spawn_agent: {e}");
    let workflow_id = tools::str_arg(input, "workflowId").map_err(err)?;
    let goal = tools::str_arg(input, "goal").map_err(err)?;
    let context = match input.get("context") {
        None | Some(Value::Null) => HashMap::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect(),
        Some(other) => return Err(format!("spawn_agent: `context` must be an object, got {other}")),
    };
    let wait = tools::opt_bool_arg(input, "wait").map_err(err)?.unwrap_or(true);
    let policy = tools::opt_str_arg(input, "parentClosePolicy")
        .map_err(err)?
        .unwrap_or("cancel");
    if !["cancel", "terminate", "abandon"].contains(&policy) {
        return Err(format!(
            "spawn_agent: `parentClosePolicy` must be cancel, terminate or abandon, got {policy:?}"
        ));
    }
    Ok(SpawnCall {
        spec: ChildRunSpec {
            workflow_id: workflow_id.to_string(),
            goal: goal.to_string(),
            context,
            parent_close_policy: policy.to_string(),
        },
        wait,
    })
}

/// Reads `await_runs`' input: `runIds`, the ids of child runs this run started.
pub(super) fn parse_await(input: &Value) -> Result<Vec<String>, String> {
    let ids = match input.get("runIds") {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_AWAITED => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("await_runs: run id {i} is not a string"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(items)) => {
            return Err(format!(
                "await_runs: `runIds` must name between 1 and {MAX_AWAITED} runs, got {}",
                items.len()
            ));
        }
        Some(other) => {
            return Err(format!(
                "await_runs: `runIds` must be an array of run ids, got {other}"
            ));
        }
        None => return Err("await_runs: missing required argument `runIds`".into()),
    };
    Ok(ids)
}

/// What the model reads for a `spawn_agent` call that waits, until the outcomes come.
pub(super) fn spawn_placeholder(k: usize, workflow_id: &str) -> String {
    format!(
        "child run #{k} of this turn started (workflow {workflow_id:?}). This step now waits until \
         every child run of this turn has finished; their outcomes come in the next message, in the \
         order you started them, as {{childRunId, outcome, notes, artifacts, result}}."
    )
}

/// What the model reads for an `await_runs` call until the outcomes come.
pub(super) fn await_placeholder(ids: &[String]) -> String {
    format!(
        "waiting for {}; their outcomes come in the next message.",
        ids.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spawn_input() {
        let c = parse_spawn(&json!({"workflowId": "wf", "goal": "g", "context": {"n": 3}})).unwrap();
        assert!(c.wait);
        assert_eq!(c.spec.parent_close_policy, "cancel");
        assert_eq!(c.spec.context["n"], "3");
        let c = parse_spawn(
            &json!({"workflowId": "wf", "goal": "g", "wait": false, "parentClosePolicy": "abandon"}),
        )
        .unwrap();
        assert!(!c.wait);
        assert_eq!(c.spec.parent_close_policy, "abandon");
        assert!(
            parse_spawn(&json!({"goal": "g"}))
                .unwrap_err()
                .contains("workflowId")
        );
        assert!(
            parse_spawn(&json!({"workflowId": "wf", "goal": "g", "parentClosePolicy": "nuke"}))
                .unwrap_err()
                .contains("parentClosePolicy")
        );
    }

    #[test]
    fn await_input() {
        assert_eq!(parse_await(&json!({"runIds": ["a", "b"]})).unwrap(), ["a", "b"]);
        assert!(parse_await(&json!({"runIds": []})).is_err());
        assert!(
            parse_await(&json!({"runIds": [1]}))
                .unwrap_err()
                .contains("not a string")
        );
        assert!(parse_await(&json!({})).unwrap_err().contains("runIds"));
    }
}
