//! Workflow definitions: the JSON format, its validation, loading a directory of
//! them, and rendering a step's prompt.
//!
//! Validation errors name the file, the JSON path and the problem, e.g.
//! `workflows/bad.json: steps[1].maxTurns: must be between 1 and 1000`.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::contract::{ArtifactPatterns, OutputSchema};
use crate::ids;
pub use crate::template::prompt::{
    PromptValues, check_template, check_template_with, render, render_values, rendered_len,
    rendered_len_values,
};

/// Tools a step may list in `allowedTools`.
pub use crate::tools::ALL as KNOWN_TOOLS;

/// The queue a step goes to when neither it nor its workflow names one.
pub const DEFAULT_TASK_QUEUE: &str = "default";

/// Most steps in a workflow.
pub const MAX_STEPS: usize = 64;
/// Longest `version`, `name` and step `title`, in bytes.
pub const MAX_LABEL: usize = 256;
/// Longest `description`, in bytes.
pub const MAX_DESCRIPTION: usize = 16 * 1024;
/// Longest step `prompt` template, in bytes.
pub const MAX_PROMPT: usize = 64 * 1024;
/// Largest definition as compact JSON (its serialized form, as `DescribeRun` and the
/// `RunStarted` event carry it), in bytes. A definition file is at most 1 MiB (the
/// server's bound on reading it), and its compact form is about as long, but numbers
/// may grow when written back (`1e15` is `1000000000000000.0`); past this bound a
/// definition is refused at load, so a run's answers always fit one gRPC message.
pub const MAX_DEFINITION_JSON: usize = 2 << 20;
/// Longest retry interval (initial and maximum), in seconds: one week.
pub const MAX_RETRY_INTERVAL_SECONDS: f64 = 7.0 * 86400.0;

/// A workflow definition as written in `workflows/*.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowDef {
    /// Its id, which runs name.
    pub id: String,
    /// Its version, recorded with each run.
    pub version: String,
    /// A name for people.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Default task queue for steps that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_queue: Option<String>,
    /// Tokens the whole run may use (all kinds counted); a StartRun may set its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Estimated cost the whole run may reach, in US dollars (the worker's prices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Principles for every step's agent: `{"text": "...", "mode": "extend"|"replace"}`,
    /// extending (the default) or replacing the server's (`crate::principles`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principles: Option<crate::principles::Layer>,
    /// The model its agent runs on (none: the worker's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The provider of `model`, `anthropic` or `openai` (none: the worker's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Models tried in order when the model is overloaded or rate-limited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<crate::agent::ModelRef>,
    /// MCP servers whose tools its agent gets (`crate::mcp`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, crate::mcp::McpServer>,
    /// Its steps, in order.
    pub steps: Vec<StepDef>,
}

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepDef {
    /// Its id, unique in the workflow.
    pub id: String,
    /// A title for people.
    pub title: String,
    /// A template over `{{goal}}`, `{{context.KEY}}` and earlier steps' results,
    /// `{{steps.ID.result}}` or `{{steps.ID.result.FIELD...}}`.
    pub prompt: String,
    /// Its task queue (none: the run's, then the workflow's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_queue: Option<String>,
    /// Empty means every tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Most model turns of one attempt (none: the worker's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Start-to-close timeout of one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// Most time between heartbeats (none: no heartbeats required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_seconds: Option<u32>,
    /// How failed attempts are retried (none: the default policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Hold its result for a person to approve or reject.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_confirmation: bool,
    /// How long the step may wait (for its child runs) and what happens then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitOptions>,
    /// A JSON Schema (draft 2020-12) the completion's `result` object must match
    /// (see [`crate::contract`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSchema>,
    /// File names or globs the completion's artifacts must match, each at least once.
    #[serde(default, skip_serializing_if = "ArtifactPatterns::is_empty")]
    pub required_artifacts: ArtifactPatterns,
    /// Tokens the step may use over all its attempts (all kinds counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// When the worker calls the step's agent stuck (absent: its defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<StuckDef>,
    /// How long a result held for approval (`requireConfirmation`) waits, and what
    /// happens then (absent: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalOptions>,
    /// The model its agent runs on (none: the workflow's, then the worker's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The provider of `model`, `anthropic` or `openai` (none: the workflow's, then the worker's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Models tried in order when the model is overloaded or rate-limited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<crate::agent::ModelRef>,
    /// MCP servers whose tools its agent gets (`crate::mcp`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, crate::mcp::McpServer>,
}

/// A step's wait options: `"wait": {"timeoutSeconds": 600, "onTimeout": "resume"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitOptions {
    /// Longest a wait may last; none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// What a wait that times out does.
    #[serde(default)]
    pub on_timeout: WaitTimeoutPolicy,
}

/// What ends a wait that timed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WaitTimeoutPolicy {
    /// The step fails (not retried) and with it the run.
    #[default]
    Fail,
    /// The step resumes with what has arrived and a note of what has not.
    Resume,
}

/// Longest wait timeout a step may set: 30 days.
pub const MAX_WAIT_TIMEOUT_SECONDS: u32 = 30 * 86400;

pub use crate::approval::{ApprovalOptions, ApprovalTimeoutPolicy};
pub use crate::budgets::{MAX_BUDGET_TOKENS, MAX_BUDGET_USD, StuckDef};
use crate::budgets::{check_max_cost, check_max_tokens, check_stuck};

/// Temporal-style retry policy for a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    /// The first retry's pause.
    #[serde(default = "RetryPolicy::default_initial")]
    pub initial_interval_seconds: f64,
    /// Each pause is the last times this.
    #[serde(default = "RetryPolicy::default_coefficient")]
    pub backoff_coefficient: f64,
    /// No pause is longer.
    #[serde(default = "RetryPolicy::default_maximum")]
    pub maximum_interval_seconds: f64,
    /// Attempts in all, the first included; 0 means unlimited.
    #[serde(default = "RetryPolicy::default_attempts")]
    pub maximum_attempts: u32,
    /// Error types that fail the step at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_retryable_error_types: Vec<String>,
}

impl RetryPolicy {
    fn default_initial() -> f64 {
        1.0
    }
    fn default_coefficient() -> f64 {
        2.0
    }
    fn default_maximum() -> f64 {
        60.0
    }
    fn default_attempts() -> u32 {
        3
    }

    /// Pause before attempt `next_attempt` (2 for the first retry), in milliseconds:
    /// never negative and never more than [`MAX_RETRY_INTERVAL_SECONDS`], whatever the
    /// policy says (a validated one stays within them anyway).
    pub fn backoff_ms(&self, next_attempt: u32) -> i64 {
        let exp = next_attempt.saturating_sub(2).min(64) as i32;
        let secs = (self.initial_interval_seconds * self.backoff_coefficient.powi(exp))
            .min(self.maximum_interval_seconds);
        let secs = if secs.is_nan() {
            0.0
        } else {
            secs.clamp(0.0, MAX_RETRY_INTERVAL_SECONDS)
        };
        (secs * 1000.0).round() as i64
    }

    /// Whether a failure of `error_type` after `attempt` attempts gets another one.
    pub fn allows_retry(&self, attempt: u32, error_type: &str) -> bool {
        let exhausted = self.maximum_attempts != 0 && attempt >= self.maximum_attempts;
        !exhausted && !self.non_retryable_error_types.iter().any(|t| t == error_type)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_interval_seconds: Self::default_initial(),
            backoff_coefficient: Self::default_coefficient(),
            maximum_interval_seconds: Self::default_maximum(),
            maximum_attempts: Self::default_attempts(),
            non_retryable_error_types: Vec::new(),
        }
    }
}

/// Default start-to-close timeout of a step attempt.
pub const DEFAULT_STEP_TIMEOUT_SECONDS: u32 = 3600;
/// Default turn limit of a step's agent loop.
pub const DEFAULT_MAX_TURNS: u32 = 30;

impl StepDef {
    /// The queue this step's tasks go to: its own, else the run's (`run_queue`,
    /// empty for none), else the workflow's, else the default.
    pub fn queue<'a>(&'a self, wf: &'a WorkflowDef, run_queue: &'a str) -> &'a str {
        self.task_queue
            .as_deref()
            .or((!run_queue.is_empty()).then_some(run_queue))
            .or(wf.task_queue.as_deref())
            .unwrap_or(DEFAULT_TASK_QUEUE)
    }

    /// Its retry policy, or the default one.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry.clone().unwrap_or_default()
    }

    /// Its start-to-close timeout, in milliseconds.
    pub fn timeout_ms(&self) -> i64 {
        i64::from(self.timeout_seconds.unwrap_or(DEFAULT_STEP_TIMEOUT_SECONDS)) * 1000
    }

    /// Its heartbeat timeout, in milliseconds, if it has one.
    pub fn heartbeat_timeout_ms(&self) -> Option<i64> {
        self.heartbeat_timeout_seconds.map(|s| i64::from(s) * 1000)
    }

    /// How long a wait of this step may last, if it is bounded.
    pub fn wait_timeout_ms(&self) -> Option<i64> {
        self.wait
            .as_ref()
            .and_then(|w| w.timeout_seconds)
            .map(|s| i64::from(s) * 1000)
    }

    /// What a wait of this step that times out does.
    pub fn wait_timeout_policy(&self) -> WaitTimeoutPolicy {
        self.wait.as_ref().map(|w| w.on_timeout).unwrap_or_default()
    }

    /// How long a result of this step held for approval waits, if it is bounded.
    pub fn approval_timeout_ms(&self) -> Option<i64> {
        self.approval
            .as_ref()
            .and_then(|a| a.timeout_seconds)
            .map(|s| i64::from(s) * 1000)
    }
}

/// Parses and validates one definition. The error is `JSON path: problem`.
pub fn parse_definition(text: &str) -> Result<WorkflowDef, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let def: WorkflowDef = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = json_path(e.path());
        let message = crate::error::parser_message(&e.into_inner().to_string());
        format!("{path}: {message}")
    })?;
    validate(&def)?;
    check_json_size(&def)?;
    Ok(def)
}

/// Refuses a definition longer than [`MAX_DEFINITION_JSON`] as compact JSON.
fn check_json_size(def: &WorkflowDef) -> Result<(), String> {
    let bytes = serde_json::to_string(def)
        .map_err(|e| format!("$: does not serialize: {e}"))?
        .len();
    if bytes > MAX_DEFINITION_JSON {
        return Err(format!(
            "$: the definition is {bytes} bytes as compact JSON (as runs carry it), more than the \
             limit of {MAX_DEFINITION_JSON}"
        ));
    }
    Ok(())
}

/// A JSON path as errors write it: `steps[1].maxTurns`, `$` for the document
/// itself. A syntax error can leave the parser between keys, where
/// `serde_path_to_error` writes `?`: the path stops at the object it was in (the
/// message gives the line and column).
pub fn json_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            // A key that is not a plain name (an unknown field may be anything) is
            // quoted, and cut short, so the path stays readable and bounded.
            Segment::Map { key } | Segment::Enum { variant: key } if !is_plain_key(key) => {
                out.push_str(&format!("[{}]", crate::error::echo(key)));
            }
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => break,
        }
    }
    if out.is_empty() { "$".to_string() } else { out }
}

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks a definition's id, step id or task queue against the one rule for names
/// ([`ids::check_name`]), worded for a definition.
fn check_name(path: &str, value: &str, what: &str) -> Result<(), String> {
    ids::check_name(value).map_err(|e| match e {
        ids::NameError::Empty => format!("{path}: {what} must not be empty"),
        ids::NameError::TooLong { .. } => {
            format!("{path}: {what} is longer than {} characters", ids::MAX_NAME)
        }
        ids::NameError::BadCharacter => {
            format!("{path}: {what} {value:?} may hold only {}", ids::NAME_CHARACTERS)
        }
        ids::NameError::Dots => format!("{path}: {what} must not be only dots"),
    })
}

/// Checks that a text field is at most `max` bytes.
fn check_size(path: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        return Err(format!(
            "{path}: is {} bytes, more than the limit of {max}",
            value.len()
        ));
    }
    Ok(())
}

/// Checks what serde cannot: names, uniqueness, ranges and templates.
pub fn validate(def: &WorkflowDef) -> Result<(), String> {
    check_name("id", &def.id, "id")?;
    if def.version.trim().is_empty() {
        return Err("version: must not be empty".into());
    }
    if def.name.trim().is_empty() {
        return Err("name: must not be empty".into());
    }
    check_size("version", &def.version, MAX_LABEL)?;
    check_size("name", &def.name, MAX_LABEL)?;
    check_size("description", &def.description, MAX_DESCRIPTION)?;
    if def.steps.len() > MAX_STEPS {
        return Err(format!(
            "steps: {} steps, more than the limit of {MAX_STEPS}",
            def.steps.len()
        ));
    }
    if let Some(q) = &def.task_queue {
        check_name("taskQueue", q, "task queue")?;
    }
    check_max_tokens("maxTokens", def.max_tokens)?;
    check_max_cost("maxCostUsd", def.max_cost_usd)?;
    if let Some(p) = &def.principles {
        crate::principles::check_text(&p.text).map_err(|e| format!("principles.text: {e}"))?;
    }
    if def.steps.is_empty() {
        return Err("steps: a workflow needs at least one step".into());
    }
    crate::mcp::check_servers("mcpServers", &def.mcp_servers)?;
    crate::agent::check_models(
        "",
        def.model.as_deref(),
        def.provider.as_deref(),
        &def.fallback_models,
    )?;
    let mut seen = HashSet::new();
    let ids: Vec<&str> = def.steps.iter().map(|s| s.id.as_str()).collect();
    for (i, step) in def.steps.iter().enumerate() {
        let at = |field: &str| format!("steps[{i}].{field}");
        check_name(&at("id"), &step.id, "step id")?;
        if !seen.insert(step.id.as_str()) {
            return Err(format!("{}: duplicate step id {:?}", at("id"), step.id));
        }
        if step.title.trim().is_empty() {
            return Err(format!("{}: must not be empty", at("title")));
        }
        if step.prompt.trim().is_empty() {
            return Err(format!("{}: must not be empty", at("prompt")));
        }
        check_size(&at("title"), &step.title, MAX_LABEL)?;
        check_size(&at("prompt"), &step.prompt, MAX_PROMPT)?;
        let (earlier, later) = ids.split_at(i);
        check_template_with(&step.prompt, earlier, later).map_err(|e| format!("{}: {e}", at("prompt")))?;
        if let Some(q) = &step.task_queue {
            check_name(&at("taskQueue"), q, "task queue")?;
        }
        crate::mcp::check_servers(&at("mcpServers"), &step.mcp_servers)?;
        crate::agent::check_models(
            &format!("steps[{i}]."),
            step.model.as_deref(),
            step.provider.as_deref(),
            &step.fallback_models,
        )?;
        for (j, tool) in step.allowed_tools.iter().enumerate() {
            let path = at(&format!("allowedTools[{j}]"));
            if let Some(server) = crate::mcp::server_of(tool) {
                if !def.mcp_servers.contains_key(server) && !step.mcp_servers.contains_key(server) {
                    return Err(format!(
                        "{path}: names the MCP server {:?}, which neither this step nor its workflow declares in mcpServers",
                        crate::text::prefix(server, 40)
                    ));
                }
                continue;
            }
            if !KNOWN_TOOLS.contains(&tool.as_str()) {
                return Err(format!(
                    "{path}: unknown tool {:?} (known: {}, and mcp__SERVER__TOOL)",
                    crate::text::prefix(tool, 64),
                    KNOWN_TOOLS.join(", ")
                ));
            }
        }
        if let Some(t) = step.max_turns
            && !(1..=1000).contains(&t)
        {
            return Err(format!("{}: must be between 1 and 1000, got {t}", at("maxTurns")));
        }
        if let Some(t) = step.timeout_seconds
            && !(1..=7 * 86400).contains(&t)
        {
            return Err(format!(
                "{}: must be between 1 and 604800, got {t}",
                at("timeoutSeconds")
            ));
        }
        check_max_tokens(&at("maxTokens"), step.max_tokens)?;
        if let Some(s) = &step.stuck {
            check_stuck(&at("stuck"), s)?;
        }
        if let Some(t) = step.heartbeat_timeout_seconds
            && !(1..=86400).contains(&t)
        {
            return Err(format!(
                "{}: must be between 1 and 86400, got {t}",
                at("heartbeatTimeoutSeconds")
            ));
        }
        if let Some(t) = step.wait.as_ref().and_then(|w| w.timeout_seconds)
            && !(1..=MAX_WAIT_TIMEOUT_SECONDS).contains(&t)
        {
            return Err(format!(
                "{}: must be between 1 and {MAX_WAIT_TIMEOUT_SECONDS}, got {t}",
                at("wait.timeoutSeconds")
            ));
        }
        if let Some(a) = &step.approval {
            crate::approval::check_approval(&at("approval"), a, step.require_confirmation)?;
        }
        if let Some(r) = &step.retry {
            let rp = |f: &str| at(&format!("retry.{f}"));
            if !(r.initial_interval_seconds > 0.0 && r.initial_interval_seconds <= MAX_RETRY_INTERVAL_SECONDS)
            {
                return Err(format!(
                    "{}: must be a positive number of seconds, at most {MAX_RETRY_INTERVAL_SECONDS} (one week)",
                    rp("initialIntervalSeconds")
                ));
            }
            if !(r.backoff_coefficient >= 1.0 && r.backoff_coefficient <= 100.0) {
                return Err(format!("{}: must be between 1 and 100", rp("backoffCoefficient")));
            }
            if !(r.maximum_interval_seconds >= r.initial_interval_seconds
                && r.maximum_interval_seconds <= MAX_RETRY_INTERVAL_SECONDS)
            {
                return Err(format!(
                    "{}: must be at least initialIntervalSeconds and at most {MAX_RETRY_INTERVAL_SECONDS} (one week)",
                    rp("maximumIntervalSeconds")
                ));
            }
        }
        if let Some(schema) = &step.output {
            schema.check(&at("output"))?;
        }
        step.required_artifacts.check(&at("requiredArtifacts"))?;
    }
    Ok(())
}

/// Most workflows one namespace may have registered (`History.RegisterWorkflow`): as
/// many as a server loads from its workflows directory.
pub const MAX_REGISTERED_WORKFLOWS: usize = 256;

/// A definition registered from code into one namespace (`History.RegisterWorkflow`),
/// kept in the store beside the runs, rather than a file of the server's. Its
/// version is its content: registering a changed definition under the same id makes
/// it the one new runs start with, while runs already started keep the one they
/// pinned.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredWorkflow {
    /// The namespace it belongs to; only runs of this namespace find it.
    pub namespace: String,
    /// The definition, validated as a file's is ([`parse_definition`]).
    pub definition: std::sync::Arc<WorkflowDef>,
    /// Hex of the content hash the store names the definition by (the hash a run of
    /// it pins).
    pub hash: String,
    /// When this content was registered (a registration that changed nothing keeps
    /// the earlier time).
    pub registered_ms: crate::Millis,
    /// Who registered it (the caller's identity).
    pub registered_by: String,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn def(steps: &str) -> String {
        format!(r#"{{"id":"wf","version":"1","name":"W","steps":{steps}}}"#)
    }

    #[test]
    fn valid_definition_parses() {
        let d = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"do {{goal}} with {{context.x}}"}]"#,
        ));
        assert_eq!(d.map(|d| d.steps.len()), Ok(1));
    }

    #[test]
    fn errors_name_the_json_path() {
        let e =
            parse_definition(&def(r#"[{"id":"a","title":"A","prompt":"p","maxTurns":"x"}]"#)).unwrap_err();
        assert!(e.starts_with("steps[0].maxTurns:"), "{e}");
        let e = parse_definition(&def(r#"[{"id":"a","title":"A","prompt":"p","bogus":1}]"#)).unwrap_err();
        assert!(e.contains("bogus"), "{e}");
        let e = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p"},{"id":"a","title":"B","prompt":"q"}]"#,
        ))
        .unwrap_err();
        assert!(e.starts_with("steps[1].id: duplicate"), "{e}");
        let e = parse_definition(&def(r#"[{"id":"a","title":"A","prompt":"{{nope}}"}]"#)).unwrap_err();
        assert!(
            e.starts_with("steps[0].prompt: unknown placeholder {{nope}}"),
            "{e}"
        );
        let e = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p","allowedTools":["rm"]}]"#,
        ))
        .unwrap_err();
        assert!(e.starts_with("steps[0].allowedTools[0]: unknown tool"), "{e}");
        let e = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p","allowedTools":["mcp__gh__*"]}]"#,
        ))
        .unwrap_err();
        assert!(
            e.starts_with("steps[0].allowedTools[0]: names the MCP server \"gh\""),
            "{e}"
        );
        let ok = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p","allowedTools":["mcp__gh__*"],
                 "mcpServers":{"gh":{"command":"gh-mcp","env":{"T":"$GITHUB_TOKEN"}}},
                 "model":"claude-haiku-4-5","fallbackModels":["m2",{"model":"gpt-4o","provider":"openai"}]}]"#,
        ))
        .unwrap();
        assert_eq!(ok.steps[0].fallback_models[1].provider(), Some("openai"));
        let e = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p","mcpServers":{"gh":{"url":"ftp://x"}}}]"#,
        ))
        .unwrap_err();
        assert!(e.starts_with("steps[0].mcpServers.gh.url:"), "{e}");
        let e = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p","fallbackModels":[{"model":"m","provider":"x"}]}]"#,
        ))
        .unwrap_err();
        assert!(e.starts_with("steps[0].fallbackModels[0].provider:"), "{e}");
        let e = parse_definition(&def("[]")).unwrap_err();
        assert!(e.starts_with("steps:"), "{e}");
        let e = parse_definition("{").unwrap_err();
        assert!(e.contains("EOF"), "{e}");
        // Found by fuzzing: a syntax error between keys was `?: ...`, no JSON path.
        let e = parse_definition(r#"{"id":"wf","version":"1" "name":"W"}"#).unwrap_err();
        assert!(e.starts_with("$: expected `,` or `}`"), "{e}");
        let e = parse_definition(&def(r#"[{"id":"a" "title":"A"}]"#)).unwrap_err();
        assert!(e.starts_with("steps[0]: expected `,` or `}`"), "{e}");
    }

    #[test]
    fn ids_and_placeholders_follow_the_api_rules() {
        // `:` and `@` are allowed in API names, so definitions may use them too.
        let d = parse_definition(
            r#"{"id":"team:wf@2","version":"1","name":"W","taskQueue":"q:gpu@eu",
                "steps":[{"id":"s:1","title":"A","prompt":"{{context.any key}}"}]}"#,
        )
        .unwrap();
        assert_eq!(d.steps[0].queue(&d, ""), "q:gpu@eu");
        assert_eq!(
            d.steps[0].queue(&d, "run-q"),
            "run-q",
            "the run's queue beats the workflow's"
        );
        let e = parse_definition(&def(r#"[{"id":"a b","title":"A","prompt":"p"}]"#)).unwrap_err();
        assert!(
            e.starts_with("steps[0].id: step id \"a b\" may hold only letters, digits and - _ . : @"),
            "{e}"
        );
        let e = parse_definition(&def(&format!(
            r#"[{{"id":"{}","title":"A","prompt":"p"}}]"#,
            "x".repeat(129)
        )))
        .unwrap_err();
        assert_eq!(e, "steps[0].id: step id is longer than 128 characters");
        // A placeholder may name only a key the API can set: at most 128 bytes.
        let long = format!("{{{{context.{}}}}}", "k".repeat(129));
        assert!(check_template(&long).is_err());
        assert!(check_template(&format!("{{{{context.{}}}}}", "k".repeat(128))).is_ok());
        assert!(check_template("{{context.}}").is_err());
    }

    #[test]
    fn renders_goal_and_context() {
        let mut ctx = BTreeMap::new();
        ctx.insert("lang".to_string(), "Rust".to_string());
        assert_eq!(
            render("{{goal}} in {{ context.lang }}{{context.none}}!", "port it", &ctx),
            "port it in Rust!"
        );
        let t = "{{goal}}{{goal}} {{context.lang}} {{ unclosed";
        assert_eq!(rendered_len(t, "ab", &ctx), render(t, "ab", &ctx).len());
    }

    #[test]
    fn retry_backoff_grows_and_caps() {
        let p = RetryPolicy {
            maximum_interval_seconds: 5.0,
            ..Default::default()
        };
        assert_eq!(p.backoff_ms(2), 1000);
        assert_eq!(p.backoff_ms(3), 2000);
        assert_eq!(p.backoff_ms(5), 5000);
        assert!(p.allows_retry(2, "x"));
        assert!(!p.allows_retry(3, "x"));
        let p = RetryPolicy {
            non_retryable_error_types: vec!["fatal".into()],
            ..Default::default()
        };
        assert!(!p.allows_retry(1, "fatal"));
    }

    #[test]
    fn huge_retry_intervals_are_refused_and_backoff_never_goes_negative() {
        let e = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p","retry":{"initialIntervalSeconds":1e300,"maximumIntervalSeconds":1e300}}]"#,
        ))
        .unwrap_err();
        assert!(
            e.starts_with("steps[0].retry.initialIntervalSeconds: must be a positive number"),
            "{e}"
        );
        let e = parse_definition(&def(
            r#"[{"id":"a","title":"A","prompt":"p","retry":{"maximumIntervalSeconds":1e300}}]"#,
        ))
        .unwrap_err();
        assert!(e.starts_with("steps[0].retry.maximumIntervalSeconds:"), "{e}");
        // Even a policy that never went through validation gives a sane pause.
        let p = RetryPolicy {
            initial_interval_seconds: 1e300,
            backoff_coefficient: 100.0,
            maximum_interval_seconds: f64::INFINITY,
            ..Default::default()
        };
        for attempt in [2, 3, 60] {
            let ms = p.backoff_ms(attempt);
            assert!(
                (0..=(MAX_RETRY_INTERVAL_SECONDS as i64) * 1000).contains(&ms),
                "{ms}"
            );
        }
    }

    #[test]
    fn sizes_and_step_counts_are_bounded() {
        let steps: Vec<String> = (0..=MAX_STEPS)
            .map(|i| format!(r#"{{"id":"s{i}","title":"T","prompt":"p"}}"#))
            .collect();
        let e = parse_definition(&def(&format!("[{}]", steps.join(",")))).unwrap_err();
        assert_eq!(
            e,
            format!(
                "steps: {} steps, more than the limit of {MAX_STEPS}",
                MAX_STEPS + 1
            )
        );
        let e = parse_definition(&def(&format!(
            r#"[{{"id":"a","title":"A","prompt":"{}"}}]"#,
            "p".repeat(MAX_PROMPT + 1)
        )))
        .unwrap_err();
        assert!(e.starts_with("steps[0].prompt: is 65537 bytes"), "{e}");
        let e = parse_definition(&def(r#"[{"id":"..","title":"A","prompt":"p"}]"#)).unwrap_err();
        assert_eq!(e, "steps[0].id: step id must not be only dots");
    }

    #[test]
    fn a_definition_whose_compact_json_grows_past_the_bound_is_refused() {
        // Each `1e15` (4 bytes) is written back as `1000000000000000.0` (18): a
        // definition of about 1 MiB of text is more than 2 MiB as compact JSON.
        let numbers = vec!["1e15"; 3400].join(",");
        let steps: Vec<String> = (0..60)
            .map(|i| format!(r#"{{"id":"s{i}","title":"T","prompt":"p","output":{{"enum":[{numbers}]}}}}"#))
            .collect();
        let text = def(&format!("[{}]", steps.join(",")));
        assert!(text.len() < 1 << 20, "{}", text.len());
        let e = parse_definition(&text).unwrap_err();
        assert!(
            e.starts_with("$: the definition is ")
                && e.ends_with(&format!(
                    "bytes as compact JSON (as runs carry it), more than the limit of {MAX_DEFINITION_JSON}"
                )),
            "{e}"
        );
        // Half of it loads.
        let half = def(&format!("[{}]", steps[..30].join(",")));
        assert!(parse_definition(&half).is_ok());
    }

    #[test]
    fn the_bundled_mcp_example_is_valid() {
        let text = include_str!("../../examples/workflows/docs-digest.json");
        let def = parse_definition(text).unwrap_or_else(|e| panic!("docs-digest.json: {e}"));
        assert!(def.mcp_servers.contains_key("docs"));
        assert!(def.steps[1].allowed_tools == ["web_fetch"]);
    }
}
