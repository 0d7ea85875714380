//! What the gateway's tools answer, as JSON objects (the MCP `structuredContent`,
//! also sent as text for clients that read only text).

use std::borrow::Cow;

use railyard_proto::v1::{ListWorkflowsResponse, RunInfo, RunStatus, StepTask};
use railyard_view::Case;
use serde_json::{Value, json};

/// What the agent is told to do with a step it holds.
const STEP_INSTRUCTIONS: &str = "Do the work the prompt describes. When it is done, call complete_step with this \
     continue_token, your notes (what you did and found; later steps read them), and any artifacts or \
     context_updates. Keep the token: it is the only way to report this step.";

/// What the agent is told when the step needs a person's approval.
const CONFIRMATION: &str = "This step requires confirmation: the result you report with complete_step is held on \
     the server until a person approves it (railyard run approve) or rejects it with feedback (railyard run \
     reject), so you need not ask your human separately. After a rejection, resume_run hands you this step \
     again with the feedback.";

/// What the agent is told once its result is held for approval.
const HELD: &str = "Your result was accepted and is held for a person's approval; the step is no longer yours. \
     Once it is approved the run moves on: call resume_run with this run_id to take its next step. If it is \
     rejected, resume_run hands you this step again with the feedback.";

/// The answer to a completion held for approval.
pub(super) fn held_for_approval(run_id: &str, step_id: &str) -> Value {
    json!({
        "status": "held_for_approval",
        "run_id": run_id,
        "step_id": step_id,
        "message": HELD,
    })
}

/// What the agent is told when the step has an output contract.
const CONTRACT: &str = "This step has an output contract: pass complete_step a `result` object matching      output_schema, and list artifacts matching every required_artifacts pattern. A result that does not      match is refused with each violation; fix it and call complete_step again with the same token.";

/// A step the gateway holds for the agent, with its continue token.
pub(super) fn step(task: &StepTask, continue_token: &str) -> Value {
    let mut v = json!({
        "status": "step",
        "run_id": task.run_id,
        "workflow_id": task.workflow_id,
        "workflow_name": task.workflow_name,
        "step": {
            "id": task.step_id,
            "title": task.step_title,
            "index": task.step_index,
            "number": task.step_index + 1,
            "count": task.step_count,
            "attempt": task.attempt,
        },
        "prompt": task.prompt,
        "goal": task.goal,
        "context": task.context.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "prior_steps": task.prior_steps.iter().map(|p| {
            let mut prior = json!({
                "id": p.step_id,
                "title": p.title,
                "notes": p.notes,
                "artifacts": p.artifacts,
            });
            if !p.result_json.is_empty() {
                prior["result"] = payload(&p.result_json);
            }
            prior
        }).collect::<Vec<_>>(),
        "require_confirmation": task.require_confirmation,
        "continue_token": continue_token,
        "instructions": STEP_INSTRUCTIONS,
    });
    if task.require_confirmation {
        v["confirmation"] = json!(CONFIRMATION);
    }
    if !task.last_failure.is_empty() {
        v["last_failure"] = json!(task.last_failure);
    }
    // Resumed from a wait: what it waited for (a rejection's feedback, children's outcomes).
    if !task.resume_messages.is_empty() {
        v["resumed_with"] = json!(task.resume_messages);
    }
    // The step's output contract: what complete_step's `result` and artifacts must be.
    if !task.output_schema_json.is_empty() {
        v["output_schema"] = payload(&task.output_schema_json);
    }
    if !task.required_artifacts.is_empty() {
        v["required_artifacts"] = json!(task.required_artifacts);
    }
    if !task.output_schema_json.is_empty() || !task.required_artifacts.is_empty() {
        v["contract"] = json!(CONTRACT);
    }
    if !task.signals.is_empty() {
        v["signals"] = json!(
            task.signals
                .iter()
                .map(|s| json!({"name": s.name, "payload": payload(&s.payload_json), "event_id": s.event_id}))
                .collect::<Vec<_>>()
        );
    }
    v
}

/// A signal payload as JSON (the text itself if it does not parse).
fn payload(text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

/// The short status name of a run (`RUNNING`).
pub(super) fn status_name(run: &RunInfo) -> Cow<'static, str> {
    railyard_view::run_status(run.status, Case::Upper)
}

/// A run as `get_run` shows it.
pub(super) fn run(run: &RunInfo) -> Value {
    let current = run.steps.get(run.current_step as usize);
    let mut v = json!({
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "workflow_version": run.workflow_version,
        "status": status_name(run),
        "goal": run.goal,
        "context": run.context.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "search_attributes": railyard_view::attributes_json(&run.search_attributes),
        "history_length": run.history_length,
        "steps": run.steps.iter().enumerate().map(|(i, s)| {
            let mut step = json!({
                "index": i,
                "id": s.step_id,
                "title": s.title,
                "state": s.state,
                "attempt": s.attempt,
                "queue": s.task_queue,
                "notes": s.notes,
                "last_failure": s.last_failure,
            });
            if !s.result_json.is_empty() {
                step["result"] = payload(&s.result_json);
            }
            step
        }).collect::<Vec<_>>(),
    });
    if let Some(s) = current.filter(|_| RunStatus::try_from(run.status).is_ok_and(RunStatus::is_open)) {
        v["current_step"] = json!({
            "index": run.current_step,
            "number": run.current_step + 1,
            "count": run.steps.len(),
            "id": s.step_id,
            "title": s.title,
            "state": s.state,
            "attempt": s.attempt,
            "queue": s.task_queue,
        });
    }
    if !run.failure.is_empty() {
        v["failure"] = json!(run.failure);
    }
    v
}

/// One line of `list_runs`.
pub(super) fn run_line(run: &RunInfo) -> Value {
    json!({
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "status": status_name(run),
        "goal": run.goal,
        "current_step": run.steps.get(run.current_step as usize).map(|s| s.step_id.clone()),
        "step_number": (run.current_step as usize + 1).min(run.steps.len()),
        "step_count": run.steps.len(),
        "start_time_unix_ms": run.start_time_unix_ms,
    })
}

/// A run that ended while (or before) the agent drove it: its status and every
/// step's notes, the last step's being the run's result.
pub(super) fn finished(run: &RunInfo) -> Value {
    json!({
        "status": "finished",
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "run_status": status_name(run),
        "result": run.steps.last().map(|s| s.notes.clone()).unwrap_or_default(),
        "failure": run.failure,
        "context": run.context.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "steps": run.steps.iter().map(|s| json!({"id": s.step_id, "title": s.title, "state": s.state, "notes": s.notes}))
            .collect::<Vec<_>>(),
    })
}

/// The `list_workflows` result.
pub(super) fn workflows(resp: &ListWorkflowsResponse) -> Value {
    json!({
        "workflows": resp.workflows.iter().map(|wf| json!({
            "id": wf.id,
            "name": wf.name,
            "description": wf.description,
            "version": wf.version,
            "steps": wf.step_ids.len(),
            "source": wf.source_file,
        })).collect::<Vec<_>>(),
        "invalid": resp.invalid.iter().map(|bad| json!({
            "source": bad.source_file,
            "error": bad.error,
        })).collect::<Vec<_>>(),
    })
}

/// Where a run stands, in one sentence, for refusals and hand-offs.
pub(super) fn where_run_is(run: &RunInfo) -> String {
    let status = status_name(run);
    match run.steps.get(run.current_step as usize) {
        Some(s) if status == "RUNNING" => format!(
            "run {} is at step {} of {}, {:?} ({}), state {}, attempt {}",
            run.run_id,
            run.current_step + 1,
            run.steps.len(),
            s.step_id,
            s.title,
            s.state,
            s.attempt
        ),
        _ => format!("run {} is closed with status {status}", run.run_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_proto::v1::{InvalidWorkflow, PriorStep, StepSummary, WorkflowInfo};

    #[test]
    fn workflows_are_listed_with_step_counts_and_rejected_files() {
        let resp = ListWorkflowsResponse {
            workflows: vec![WorkflowInfo {
                id: "demo".into(),
                version: "1".into(),
                name: "Demo".into(),
                description: "d".into(),
                step_ids: vec!["a".into(), "b".into()],
                source_file: "<built-in>/demo.json".into(),
                ..Default::default()
            }],
            invalid: vec![InvalidWorkflow {
                source_file: "w/bad.json".into(),
                error: "w/bad.json: $: missing field `id`".into(),
            }],
        };
        assert_eq!(
            workflows(&resp),
            json!({
                "workflows": [{"id": "demo", "name": "Demo", "description": "d", "version": "1",
                               "steps": 2, "source": "<built-in>/demo.json"}],
                "invalid": [{"source": "w/bad.json", "error": "w/bad.json: $: missing field `id`"}],
            })
        );
    }

    #[test]
    fn a_step_needing_confirmation_says_so() {
        let task = StepTask {
            run_id: "r".into(),
            step_id: "ship".into(),
            step_title: "Ship".into(),
            step_index: 1,
            step_count: 2,
            attempt: 1,
            prompt: "Ship it".into(),
            require_confirmation: true,
            prior_steps: vec![PriorStep {
                step_id: "plan".into(),
                title: "Plan".into(),
                notes: "planned".into(),
                artifacts: vec![],
                result_json: String::new(),
            }],
            task_token: "raw lease token".into(),
            ..Default::default()
        };
        let v = step(&task, "rct1_x");
        assert_eq!(v["require_confirmation"], true);
        assert!(v["confirmation"].as_str().unwrap().contains("confirm"));
        assert_eq!(v["step"]["number"], 2);
        assert_eq!(v["prior_steps"][0]["notes"], "planned");
        assert!(
            !v.to_string().contains("raw lease token"),
            "the lease never shows"
        );
        let plain = step(&StepTask::default(), "t");
        assert_eq!(plain["require_confirmation"], false);
        assert!(plain.get("confirmation").is_none());
    }

    #[test]
    fn where_a_run_is_names_its_current_step() {
        let run = RunInfo {
            run_id: "r1".into(),
            status: RunStatus::Running as i32,
            current_step: 1,
            steps: vec![
                StepSummary {
                    step_id: "plan".into(),
                    ..Default::default()
                },
                StepSummary {
                    step_id: "write".into(),
                    title: "Write".into(),
                    state: "STARTED".into(),
                    attempt: 1,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            where_run_is(&run),
            "run r1 is at step 2 of 2, \"write\" (Write), state STARTED, attempt 1"
        );
    }
}
