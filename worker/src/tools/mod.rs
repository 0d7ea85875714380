//! The tools the agent can call, their JSON schemas, and dispatch.
//!
//! Workspace tools (`bash`, `read_file`, `write_file`, `edit_file`, `list_files`, `grep`)
//! run here. `complete_step`, `signal_coordinator` and `report_issue` only have their specs here: the
//! agent loop handles them itself because they change the step, not the workspace.
//!
//! Every failure becomes an error result the model can read; nothing here panics on
//! model input. File tools are confined to the run's workspace and touch only regular
//! files with a single link; `bash` runs with the workspace as its working directory and
//! home, an allowlisted environment and its own process group, but is not a sandbox.

mod bash;
mod fs;
mod html;
pub mod reaper;
mod search;
mod web;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

pub(crate) use bash::{BASH_DEFAULT_ENV, WORKER_SECRETS};
use fs::Workspace;
pub(crate) use fs::truncate;

use crate::provider::ToolSpec;

pub(crate) use railyard_model::tools::{
    AWAIT_RUNS, COMPLETE_STEP, REPORT_ISSUE, SET_SEARCH_ATTRIBUTES, SIGNAL_COORDINATOR, SPAWN_AGENT,
    WEB_FETCH, WORKSPACE_TOOLS,
};
/// Tools that are always allowed, whatever a step's `allowedTools` says.
const ALWAYS_ALLOWED: [&str; 3] = [COMPLETE_STEP, SIGNAL_COORDINATOR, REPORT_ISSUE];

/// What a tool call produced, as the model will read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    /// Images for the model, which `content` describes (MCP results only).
    pub images: Vec<crate::provider::ToolImage>,
}

impl ToolOutput {
    /// A successful result.
    pub(crate) fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// An error result; the model sees it and may try again.
    pub(crate) fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            images: Vec::new(),
        }
    }
}

/// Limits of the workspace tools.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// `bash` timeout when the call gives none.
    pub bash_timeout: Duration,
    /// Longest timeout a `bash` call may ask for.
    pub bash_max_timeout: Duration,
    /// Cap on each of stdout and stderr returned from `bash`.
    pub output_cap: usize,
    /// Cap on the text `read_file` returns.
    pub read_cap: usize,
    /// Variables of the worker's environment `bash` gets besides the few it always gets
    /// (`PATH`, the locale, `TERM`, `TZ`); the worker's own credentials never.
    pub bash_env: Vec<String>,
    /// Internal networks `web_fetch` may reach (else only public addresses).
    pub web_allow_networks: Vec<railyard_model::net::Network>,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            bash_timeout: Duration::from_secs(60),
            bash_max_timeout: Duration::from_secs(600),
            output_cap: 16 * 1024,
            read_cap: 64 * 1024,
            bash_env: Vec::new(),
            web_allow_networks: Vec::new(),
        }
    }
}

/// The workspace tools of one run.
#[derive(Debug, Clone)]
pub struct ToolBox {
    workspace: Workspace,
    limits: ToolLimits,
}

impl ToolBox {
    /// Tools working in `root`, which must exist.
    pub fn new(root: &Path, limits: ToolLimits) -> std::io::Result<Self> {
        Ok(Self {
            workspace: Workspace::new(root)?,
            limits,
        })
    }

    /// The workspace root (canonical).
    pub(crate) fn root(&self) -> &PathBuf {
        self.workspace.root()
    }

    /// Runs a workspace tool. Unknown names and bad input come back as error results.
    pub async fn execute(&self, name: &str, input: &Value) -> ToolOutput {
        if !input.is_object() {
            let raw = match input {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return ToolOutput::error(format!(
                "the arguments of {name} must be a JSON object; got {}",
                crate::provider::excerpt(&raw, 300)
            ));
        }
        if name == "bash" {
            return bash::run(&self.workspace, input, &self.limits).await;
        }
        if name == WEB_FETCH {
            return web::run(input, &self.limits).await;
        }
        let op: fn(&Workspace, &Value, usize) -> Result<String, String> = match name {
            "read_file" => fs::read_file,
            "write_file" => |ws, input, _| fs::write_file(ws, input),
            "edit_file" => |ws, input, _| fs::edit_file(ws, input),
            "list_files" => |ws, input, _| search::list_files(ws, input),
            "grep" => |ws, input, _| search::grep(ws, input),
            other => {
                return ToolOutput::error(format!(
                    "unknown tool {other:?}; available tools: {}",
                    WORKSPACE_TOOLS.join(", ")
                ));
            }
        };
        // File walks and reads block; keep them off the async worker threads.
        let (ws, input, cap) = (self.workspace.clone(), input.clone(), self.limits.read_cap);
        match tokio::task::spawn_blocking(move || op(&ws, &input, cap)).await {
            Ok(Ok(text)) => ToolOutput::ok(text),
            Ok(Err(text)) => ToolOutput::error(text),
            Err(e) => ToolOutput::error(format!("{name} failed internally: {e}")),
        }
    }
}

/// Whether `name` may be called under `allowed` (empty = every tool but `web_fetch`,
/// which reaches outside the worker and so only a step that names it gets).
pub(crate) fn is_allowed(name: &str, allowed: &[String]) -> bool {
    if name == WEB_FETCH {
        return allowed.iter().any(|a| a == name);
    }
    // `await_runs` only waits for what `spawn_agent` started: it goes with it.
    let name = if name == AWAIT_RUNS { SPAWN_AGENT } else { name };
    ALWAYS_ALLOWED.contains(&name) || allowed.is_empty() || allowed.iter().any(|a| a == name)
}

/// The specs offered to the model: the allowed workspace tools plus the two loop tools.
pub(crate) fn specs(allowed: &[String]) -> Vec<ToolSpec> {
    all_specs()
        .into_iter()
        .filter(|s| is_allowed(&s.name, allowed))
        .collect()
}

/// A string field of a tool's input, or an error naming it.
pub(crate) fn str_arg<'a>(input: &'a Value, key: &str) -> Result<&'a str, String> {
    match input.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("`{key}` must be a string, got {other}")),
        None => Err(format!("missing required argument `{key}`")),
    }
}

/// An optional string field.
pub(crate) fn opt_str_arg<'a>(input: &'a Value, key: &str) -> Result<Option<&'a str>, String> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => str_arg(input, key).map(Some),
    }
}

/// An optional non-negative integer field.
pub(crate) fn opt_u64_arg(input: &Value, key: &str) -> Result<Option<u64>, String> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer, got {v}")),
    }
}

/// An optional boolean field.
pub(crate) fn opt_bool_arg(input: &Value, key: &str) -> Result<Option<bool>, String> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be true or false, got {v}")),
    }
}

fn spec(name: &str, description: &str, input_schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema,
    }
}

/// Every tool the worker knows, with its JSON schema.
fn all_specs() -> Vec<ToolSpec> {
    vec![
        spec(
            "bash",
            "Run a shell command with `bash -c` in the workspace directory (also its HOME). Returns the \
             exit code, stdout and stderr (each capped at 16 KiB). Killed after `timeout_secs` (default 60); \
             background jobs are killed when the command ends, so start and use a server in one command.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The command line to run."},
                "timeout_secs": {"type": "integer", "minimum": 1, "description": "Timeout in seconds (max 600)."}
            }, "required": ["command"]}),
        ),
        spec(
            "read_file",
            "Read a text file in the workspace. Paths are relative to the workspace root. \
             Optionally a 1-based line `offset` and a line `limit`.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1}
            }, "required": ["path"]}),
        ),
        spec(
            "write_file",
            "Create or overwrite a file in the workspace (parent directories are created).",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}
            }, "required": ["path", "content"]}),
        ),
        spec(
            "edit_file",
            "Replace the one exact occurrence of `old_string` in a workspace file with `new_string`. \
             Fails if `old_string` is missing or occurs more than once (add surrounding text to make it unique).",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"}
            }, "required": ["path", "old_string", "new_string"]}),
        ),
        spec(
            "list_files",
            "List files under a workspace directory (default: the root), recursively unless `recursive` is false.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Directory relative to the workspace root."},
                "recursive": {"type": "boolean"}
            }}),
        ),
        spec(
            "grep",
            "Search workspace files for a regular expression (Rust regex syntax). Returns `file:line: text` \
             lines. Optionally limit to a directory `path` and a file name `glob` such as `*.md`.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "glob": {"type": "string"},
                "case_insensitive": {"type": "boolean"}
            }, "required": ["pattern"]}),
        ),
        spec(
            WEB_FETCH,
            "GET an http or https URL and return its status and text (an HTML page as plain text; \
             at most 1 MiB of the body is read, and the text is cut to a tool result's size). \
             Redirects are followed (at most 5); internal addresses are refused.",
            json!({"type": "object", "properties": {
                "url": {"type": "string", "description": "The http(s) URL to fetch."}
            }, "required": ["url"]}),
        ),
        spec(
            COMPLETE_STEP,
            "Finish this step. Call it exactly once, when the step's work is done. `notes` summarise what \
             you did and found for the next steps; `artifacts` lists workspace files you produced; \
             `context_updates` sets run context values (strings) later steps can use; `result` is the \
             step's structured result, a JSON object (required when the step has an output schema). A \
             result the step's contract refuses comes back as this tool's error, listing each violation: \
             fix them and call it again. `search_attributes` (optional) sets the run's search \
             attributes, as set_search_attributes does.",
            json!({"type": "object", "properties": {
                "notes": {"type": "string"},
                "artifacts": {"type": "array", "items": {"type": "string"}},
                "context_updates": {"type": "object", "additionalProperties": {"type": "string"}},
                "result": {"type": "object"},
                "search_attributes": {"type": "object"}
            }, "required": ["notes"]}),
        ),
        spec(
            SPAWN_AGENT,
            "Hand a sub-task to another agent: start a child run of workflow `workflowId` with `goal` \
             (and optional string `context`). With `wait` (the default) this step pauses after this turn \
             until every child run started in the turn has finished, then you get each one's \
             {childRunId, outcome, notes, artifacts, result} (result: the child's structured result \
             object, or null); a failed or canceled child is an outcome, not an \
             error. Call it several times in one turn to run children in parallel. With `wait: false` \
             you get the child's run id at once; use await_runs later. `parentClosePolicy` (cancel, \
             terminate, abandon) says what happens to a child still running when this run ends.",
            json!({"type": "object", "properties": {
                "workflowId": {"type": "string"},
                "goal": {"type": "string"},
                "context": {"type": "object", "additionalProperties": {"type": "string"}},
                "wait": {"type": "boolean"},
                "parentClosePolicy": {"type": "string", "enum": ["cancel", "terminate", "abandon"]}
            }, "required": ["workflowId", "goal"]}),
        ),
        spec(
            AWAIT_RUNS,
            "Wait for child runs you started with spawn_agent and `wait: false`: this step pauses after \
             this turn until all of `runIds` have finished, then you get each one's \
             {childRunId, outcome, notes, artifacts, result}.",
            json!({"type": "object", "properties": {
                "runIds": {"type": "array", "items": {"type": "string"}}
            }, "required": ["runIds"]}),
        ),
        spec(
            SIGNAL_COORDINATOR,
            "Send a short note to the workflow's coordinator without ending the step: `kind` is \
             progress, finding, blocked or question; `message` says what.",
            json!({"type": "object", "properties": {
                "kind": {"type": "string", "enum": ["progress", "finding", "blocked", "question"]},
                "message": {"type": "string"}
            }, "required": ["kind", "message"]}),
        ),
        spec(
            REPORT_ISSUE,
            "Report a problem you found (a bug, a risk, something broken or unclear in the task \
             or its inputs) without ending the step: it is recorded in the run's history and \
             shown to the people running it. `severity`: info, warning, error or critical; \
             `summary`: one line (at most 256 bytes); `details`: what you saw, where, and what \
             would fix it (at most 4096 bytes). Then carry on with the step.",
            json!({"type": "object", "properties": {
                "severity": {"type": "string", "enum": ["info", "warning", "error", "critical"]},
                "summary": {"type": "string", "maxLength": 256},
                "details": {"type": "string", "maxLength": 4096}
            }, "required": ["severity", "summary"]}),
        ),
        spec(
            SET_SEARCH_ATTRIBUTES,
            "Set search attributes of this run (fields people find runs by, such as customer or \
             priority, as the namespace declares them) without ending the step: `attributes` maps \
             each name to its value (a string, number, boolean or list of strings; null or an \
             empty string unsets it). An undeclared name or a value of the wrong type comes back \
             as this tool's error.",
            json!({"type": "object", "properties": {
                "attributes": {"type": "object"}
            }, "required": ["attributes"]}),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list() {
        let allowed = vec!["read_file".to_string()];
        let names: Vec<String> = specs(&allowed).into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            vec!["read_file", COMPLETE_STEP, SIGNAL_COORDINATOR, REPORT_ISSUE]
        );
        assert_eq!(specs(&[]).len(), 12);
        let spawning = vec!["spawn_agent".to_string()];
        assert!(is_allowed(AWAIT_RUNS, &spawning) && !is_allowed(AWAIT_RUNS, &allowed));
        assert!(!is_allowed("bash", &allowed));
        assert!(is_allowed(COMPLETE_STEP, &allowed));
        // web_fetch only where a step names it.
        assert!(!is_allowed(WEB_FETCH, &[]) && !specs(&[]).iter().any(|s| s.name == WEB_FETCH));
        let fetching = vec![WEB_FETCH.to_string()];
        let names: Vec<String> = specs(&fetching).into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            vec![WEB_FETCH, COMPLETE_STEP, SIGNAL_COORDINATOR, REPORT_ISSUE]
        );
    }
}
