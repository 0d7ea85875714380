//! `railyard task ...`: play worker by hand: lease a step, heartbeat it, complete or fail it.

use std::time::Duration;

use clap::{Args, Subcommand};
use railyard_proto::v1::{HeartbeatStepTaskResponse, Signal, StepTask};
use railyard_sdk::{Completion, Failure, StepWorker};
use serde_json::json;

use crate::client::args;
use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output::{self, print_fields};
use crate::client::view::{signal_json, task_json};

/// `railyard task` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// Lease the next step task from a queue (long poll).
    ///
    /// Prints the token, run, step, attempt, prompt and the messages the step resumes
    /// with (a rejection's feedback, the outcomes of awaited child runs; JSON: the whole
    /// step task, `resume_messages` among it). When no task came within --wait it says
    /// so on stderr (JSON: null) and exits 0.
    Poll(PollArgs),
    /// Report a leased step as done.
    Complete(CompleteArgs),
    /// Report a leased step as failed.
    Fail(FailArgs),
    /// Keep a lease alive, optionally storing a checkpoint.
    Heartbeat(HeartbeatArgs),
}

/// Flags of `task poll`.
#[derive(Debug, Args)]
pub(crate) struct PollArgs {
    /// Task queue to poll.
    #[arg(long, value_name = "Q", default_value = "default")]
    pub queue: String,
    /// Seconds to wait for a task before giving up.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub wait: u32,
    /// Worker identity recorded with the lease (default railyard-cli@HOST).
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,
}

/// Flags of `task complete`.
#[derive(Debug, Args)]
pub(crate) struct CompleteArgs {
    /// The task token `task poll` printed.
    pub token: String,
    /// What the step did, for later steps and for people.
    #[arg(long, default_value = "")]
    pub notes: String,
    /// A file the step produced; repeatable.
    #[arg(long = "artifact", value_name = "PATH")]
    pub artifacts: Vec<String>,
    /// A context entry to set for later steps; repeatable.
    #[arg(long = "context", value_name = "KEY=VALUE", value_parser = args::key_value)]
    pub context: Vec<(String, String)>,
    /// A search attribute of the run to set with the result (the namespace must
    /// declare it; an empty value unsets it); repeatable.
    #[arg(long = "attr", value_name = "NAME=VALUE", value_parser = args::key_value)]
    pub attrs: Vec<(String, String)>,
    /// The step's structured result, a JSON object; checked against the step's
    /// output schema, if it has one.
    #[arg(long, value_name = "JSON", default_value = "")]
    pub result: String,
    /// Worker identity (default railyard-cli@HOST).
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,
}

/// Flags of `task fail`.
#[derive(Debug, Args)]
pub(crate) struct FailArgs {
    /// The task token `task poll` printed.
    pub token: String,
    /// Machine-readable reason, matched against the step's non-retryable error types.
    #[arg(long, value_name = "T")]
    pub error_type: String,
    /// What went wrong.
    #[arg(long, value_name = "M")]
    pub message: String,
    /// Fail the run now instead of retrying.
    #[arg(long)]
    pub non_retryable: bool,
    /// Worker identity (default railyard-cli@HOST).
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,
}

/// Flags of `task heartbeat`.
#[derive(Debug, Args)]
pub(crate) struct HeartbeatArgs {
    /// The task token `task poll` printed.
    pub token: String,
    /// Checkpoint text handed to the next attempt if this one dies.
    #[arg(long, value_name = "TEXT")]
    pub checkpoint: Option<String>,
    /// Worker identity (default railyard-cli@HOST).
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,
}

/// Runs one `railyard task` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: TaskCommand) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let worker = |queue: &str, identity: Option<String>| {
        StepWorker::new(
            client.clone(),
            &global.namespace,
            queue,
            &identity.unwrap_or_else(cli_identity),
        )
    };
    let json = global.output.is_json();
    match command {
        TaskCommand::Poll(a) => {
            let w = worker(&a.queue, a.identity);
            let task = w.poll(Duration::from_secs(a.wait.into())).await?;
            match (task, json) {
                (Some(task), true) => output::json(&task_json(&task))?,
                (Some(task), false) => print_task(&task)?,
                (None, true) => output::json(&serde_json::Value::Null)?,
                (None, false) => eprintln!("no task on queue {} within {}s", a.queue, a.wait),
            }
        }
        TaskCommand::Complete(a) => {
            let completion = Completion {
                notes: a.notes,
                artifacts: a.artifacts,
                context_updates: a.context.into_iter().collect(),
                result_json: a.result,
                search_attributes: a.attrs.into_iter().collect(),
            };
            worker("", a.identity).complete(&a.token, completion).await?;
            if json {
                output::json(&json!({ "completed": true }))?;
            } else {
                output::line("step completed")?;
            }
        }
        TaskCommand::Fail(a) => {
            let failure = Failure {
                error_type: a.error_type,
                message: a.message,
                non_retryable: a.non_retryable,
                checkpoint: Vec::new(),
            };
            let will_retry = worker("", a.identity).fail(&a.token, failure).await?;
            if json {
                output::json(&json!({ "failed": true, "will_retry": will_retry }))?;
            } else if will_retry {
                output::line("step failed; another attempt is scheduled")?;
            } else {
                output::line("step failed; no further attempt")?;
            }
        }
        TaskCommand::Heartbeat(a) => {
            let checkpoint = a.checkpoint.map(String::into_bytes).unwrap_or_default();
            let resp = worker("", a.identity)
                .heartbeat(&a.token)
                .checkpoint(checkpoint)
                .send()
                .await?;
            if json {
                output::json(&heartbeat_json(&resp))?;
            } else {
                for text in heartbeat_lines(&resp) {
                    output::line(text)?;
                }
            }
        }
    }
    Ok(())
}

fn print_task(task: &StepTask) -> std::io::Result<()> {
    let mut fields = vec![
        ("token", task.task_token.clone()),
        ("run", task.run_id.clone()),
        ("workflow", task.workflow_id.clone()),
        (
            "step",
            format!(
                "{} ({} of {})",
                task.step_id,
                task.step_index + 1,
                task.step_count
            ),
        ),
        ("attempt", task.attempt.to_string()),
    ];
    if !task.step_title.is_empty() {
        fields.insert(4, ("title", task.step_title.clone()));
    }
    if !task.last_failure.is_empty() {
        fields.push(("last failure", task.last_failure.clone()));
    }
    print_fields(&fields)?;
    for s in &task.signals {
        output::line(signal_line(s))?;
    }
    output::line("prompt")?;
    for text in task.prompt.lines() {
        output::line(format!("  {text}"))?;
    }
    for line in resume_lines(task) {
        output::line(line)?;
    }
    Ok(())
}

/// The messages the step resumes with (a rejection's feedback, the outcomes of the
/// children it waited for), each under a heading, after the prompt as the transcript
/// has them.
pub(crate) fn resume_lines(task: &StepTask) -> Vec<String> {
    let count = task.resume_messages.len();
    let mut lines = Vec::new();
    for (i, message) in task.resume_messages.iter().enumerate() {
        lines.push(format!("resume message {} of {count}", i + 1));
        lines.extend(message.lines().map(|text| format!("  {text}")));
    }
    lines
}

fn heartbeat_json(resp: &HeartbeatStepTaskResponse) -> serde_json::Value {
    json!({
        "cancel_requested": resp.cancel_requested,
        "pause_requested": resp.pause_requested,
        "signals": resp.signals.iter().map(signal_json).collect::<Vec<_>>(),
    })
}

/// The human rendering of a heartbeat's answer.
pub(crate) fn heartbeat_lines(resp: &HeartbeatStepTaskResponse) -> Vec<String> {
    let mut lines = vec!["lease extended".to_string()];
    if resp.cancel_requested {
        lines.push("cancellation requested".to_string());
    }
    if resp.pause_requested {
        lines.push("pause requested: suspend with `task fail TOKEN --error-type paused`".to_string());
    }
    lines.extend(resp.signals.iter().map(signal_line));
    lines
}

/// One human line for a delivered signal: `signal steer (event 9) {"text":"hi"}`.
pub(crate) fn signal_line(s: &Signal) -> String {
    let payload = if s.payload_json.is_empty() {
        String::new()
    } else {
        format!(" {}", s.payload_json)
    };
    format!("signal {} (event {}){payload}", s.name, s.event_id)
}

#[cfg(test)]
mod tests;
