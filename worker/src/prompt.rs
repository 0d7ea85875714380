//! The system prompt and the fixed messages the agent loop adds to a transcript.

use std::fmt::Write;

use railyard_proto::v1::StepTask;

use crate::provider::ToolSpec;

/// Told to a model that answered without calling any tool.
pub(crate) const NUDGE: &str = "You did not call any tool. Continue the work with the tools, and call complete_step \
                         when done (with notes for the next steps).";

/// Builds the system prompt of a step.
pub(crate) fn system_prompt(task: &StepTask, max_turns: u32, tools: &[ToolSpec]) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(
        s,
        "You are an autonomous agent carrying out one step of a durable workflow run by Railyard.\n"
    );
    let _ = writeln!(
        s,
        "Workflow: {} ({})",
        or(&task.workflow_name, &task.workflow_id),
        task.workflow_id
    );
    if !task.workflow_description.trim().is_empty() {
        let _ = writeln!(s, "{}", task.workflow_description.trim());
    }
    let _ = writeln!(s, "\nGoal of this run: {}", or(&task.goal, "(none given)"));
    let _ = writeln!(
        s,
        "\nThis is step {} of {}: {} (id `{}`), attempt {}.",
        task.step_index + 1,
        task.step_count.max(task.step_index + 1),
        or(&task.step_title, &task.step_id),
        task.step_id,
        task.attempt.max(1)
    );
    if !task.context.is_empty() {
        let _ = writeln!(s, "\nRun context:");
        let mut keys: Vec<_> = task.context.keys().collect();
        keys.sort();
        for k in keys {
            let _ = writeln!(s, "- {k}: {}", task.context[k]);
        }
    }
    if !task.prior_steps.is_empty() {
        let _ = writeln!(s, "\nEarlier steps of this run and their notes:");
        for p in &task.prior_steps {
            let _ = writeln!(
                s,
                "\n### {} (`{}`)\n{}",
                or(&p.title, &p.step_id),
                p.step_id,
                or(p.notes.trim(), "(no notes)")
            );
            if !p.artifacts.is_empty() {
                let _ = writeln!(s, "Artifacts: {}", p.artifacts.join(", "));
            }
            if !p.result_json.is_empty() {
                let _ = writeln!(s, "Result: {}", p.result_json);
            }
        }
    }
    if !task.output_schema_json.is_empty() || !task.required_artifacts.is_empty() {
        let _ = writeln!(
            s,
            "\nThis step has an output contract, checked when you call `complete_step`; a call that breaks it \
             is refused with each violation, and you fix them and call it again."
        );
        if !task.output_schema_json.is_empty() {
            let _ = writeln!(
                s,
                "Its `result` must be a JSON object matching this JSON Schema:\n{}",
                task.output_schema_json
            );
        }
        if !task.required_artifacts.is_empty() {
            let _ = writeln!(
                s,
                "Its `artifacts` must include a match for each of: {}",
                task.required_artifacts.join(", ")
            );
        }
    }
    if !task.last_failure.trim().is_empty() {
        let _ = writeln!(
            s,
            "\nThe previous attempt of this step failed: {}",
            task.last_failure.trim()
        );
    }
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let _ = write!(
        s,
        "\nYour workspace is the working directory of `bash` and the root of every file tool: use relative \
         paths. Earlier steps of this run may have left files there.\n\n\
         Rules:\n\
         - Do the work with the tools. Each of your replies is one turn; you have at most {max_turns} turns.\n\
         - When the step's work is done, call `complete_step` with `notes` for the steps after you (what you \
         did, what you found, where it is), the workspace files you produced as `artifacts`, and any \
         `context_updates` later steps need. The step ends only when you call it.\n\
         - Use `signal_coordinator` to report progress, a finding or a blocker without ending the step.\n\
         - Use `report_issue` for a problem the people running this workflow should know about (a bug, a \
         risk, broken or unclear inputs); the step goes on.\n\
         - A message starting with [steer] comes from the person supervising the run: take it into account.\n\
         - Tools you may use in this step: {}.\n",
        names.join(", ")
    );
    s
}

/// The first user message: the step's prompt.
pub(crate) fn first_message(task: &StepTask) -> String {
    if task.prompt.trim().is_empty() {
        format!(
            "Carry out the step \"{}\" toward the goal: {}",
            or(&task.step_title, &task.step_id),
            task.goal
        )
    } else {
        task.prompt.clone()
    }
}

/// Added when a step resumes from an earlier attempt's checkpoint.
pub(crate) fn resume_note(task: &StepTask) -> String {
    let mut note = format!(
        "[railyard] This step was interrupted and is resuming (attempt {}) from its last checkpoint. \
         Continue where you left off; check the workspace before relying on files from before.",
        task.attempt.max(1)
    );
    if !task.last_failure.trim().is_empty() {
        let _ = write!(
            note,
            " The previous attempt ended with: {}",
            task.last_failure.trim()
        );
    }
    note
}

fn or<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.trim().is_empty() { fallback } else { value }
}
