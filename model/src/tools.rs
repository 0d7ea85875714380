//! Names of the agent tools. `allowedTools` in a workflow definition (and so
//! `StepTask.allowed_tools`) speaks in these names, so the server's validation and
//! the worker's implementations share them.

/// Completes the step with the agent's result.
pub const COMPLETE_STEP: &str = "complete_step";
/// Sends a note to the coordinator without ending the step.
pub const SIGNAL_COORDINATOR: &str = "signal_coordinator";
/// Starts child runs (sub-agents) under the step's lease.
pub const SPAWN_AGENT: &str = "spawn_agent";
/// Reports a problem the agent found without ending its step; always allowed.
pub const REPORT_ISSUE: &str = "report_issue";
/// Sets search attributes of the step's run mid-step (`Tasks.UpsertSearchAttributes`);
/// offered where a step's `allowedTools` is empty (every tool) or names it.
pub const SET_SEARCH_ATTRIBUTES: &str = "set_search_attributes";
/// Waits for child runs started with `spawn_agent` and `wait: false`; allowed
/// wherever `spawn_agent` is.
pub const AWAIT_RUNS: &str = "await_runs";
/// GETs an http(s) URL for the model; offered only where a step's `allowedTools`
/// names it.
pub const WEB_FETCH: &str = "web_fetch";
/// The error type a worker reports (`FailStepTask`) for a step it suspended
/// because the run is paused.
pub const PAUSED_ERROR_TYPE: &str = "paused";
/// Tools that act on the run's workspace, in the order offered to the model.
pub const WORKSPACE_TOOLS: [&str; 6] = [
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "grep",
];
/// Every tool a definition may name.
pub const ALL: [&str; 13] = [
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "grep",
    COMPLETE_STEP,
    SPAWN_AGENT,
    SIGNAL_COORDINATOR,
    AWAIT_RUNS,
    REPORT_ISSUE,
    SET_SEARCH_ATTRIBUTES,
    WEB_FETCH,
];
