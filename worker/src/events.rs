//! Progress events for whoever embeds the worker (the CLI's `dev` command prints them).

use std::sync::Arc;

use serde_json::Value;

/// Which step an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepRef {
    pub run_id: String,
    pub step_id: String,
    pub attempt: u32,
    pub queue: String,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// A step was leased; `resumed` when it restarts from an earlier attempt's checkpoint.
    StepLeased {
        title: String,
        step_index: u32,
        step_count: u32,
        resumed: bool,
    },
    /// Text the model wrote.
    ModelText { text: String },
    /// The model called a tool; `summary` is a one-line gist of its input.
    ToolCall { name: String, summary: String },
    /// A tool call came back as an error (including refused calls).
    ToolError { name: String, message: String },
    /// The agent sent its coordinator a note (`signal_coordinator`).
    Note { kind: String, message: String },
    /// A `steer` signal was handed to the model.
    Steered { message: String },
    /// The step was completed and reported.
    StepCompleted { notes: String, artifacts: Vec<String> },
    /// The step failed (`will_retry` as the server answered, when it did).
    StepFailed {
        error_type: String,
        message: String,
        will_retry: Option<bool>,
    },
    /// Cancellation was requested and the step stopped.
    StepCanceled,
    /// The server no longer holds this worker's lease; the step was dropped unreported.
    LeaseLost { message: String },
    /// The agent looks stuck (`signal`: `repeated_call`, `repeated_error`,
    /// `no_progress`): warned, or (`fatal`) the step fails `agent_stuck`.
    Stuck {
        signal: String,
        message: String,
        fatal: bool,
    },
    /// The tokens a model turn brought the attempt to, and their estimated cost.
    Usage {
        usage: crate::usage::Usage,
        cost_usd: f64,
    },
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerEvent {
    pub step: StepRef,
    pub kind: EventKind,
}

/// The hook events go to. It is called inline, so it should be quick (print, or send
/// on a channel).
pub type EventSink = Arc<dyn Fn(WorkerEvent) + Send + Sync>;

/// A one-line gist of a tool call's input, for progress output.
pub(crate) fn summarize_tool_input(name: &str, input: &Value) -> String {
    let field = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or_default();
    let gist = match name {
        "bash" => field("command").to_string(),
        "read_file" | "write_file" | "edit_file" => field("path").to_string(),
        "list_files" => input
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or(".")
            .to_string(),
        "grep" => format!(
            "{} in {}",
            field("pattern"),
            input.get("path").and_then(Value::as_str).unwrap_or(".")
        ),
        "web_fetch" => field("url").to_string(),
        "complete_step" => field("notes").to_string(),
        "signal_coordinator" => format!("{}: {}", field("kind"), field("message")),
        "report_issue" => format!("{}: {}", field("severity"), field("summary")),
        _ => input.to_string(),
    };
    one_line(&gist, 120)
}

/// First line-ish of `s`, newlines flattened, at most `max` chars.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    railyard_model::text::one_line(s, max, "…")
}
