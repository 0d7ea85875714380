//! What a step's agent runs on, over the worker's defaults: the model (`model`,
//! `provider`), the models tried when that one is overloaded (`fallbackModels`), and
//! the MCP servers whose tools it gets (`mcpServers`). A step's settings win over its
//! workflow's; a server a step declares replaces the workflow's of the same name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::mcp::McpServer;

/// Most fallback models of one workflow or step.
pub const MAX_FALLBACKS: usize = 4;
/// Longest model or provider name, in bytes.
pub const MAX_MODEL_NAME: usize = 128;
/// The provider names a definition may use.
pub const PROVIDERS: [&str; 2] = ["anthropic", "openai"];

/// A model, and optionally the provider it is on (absent: the step's, else the worker's).
/// Written as `"claude-haiku-4-5"` or `{"model": "gpt-4o", "provider": "openai"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ModelRef {
    /// Just a model name.
    Name(String),
    /// A model on a named provider.
    On {
        /// The model.
        model: String,
        /// `anthropic` or `openai`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
    },
}

impl ModelRef {
    /// The model's name.
    pub fn model(&self) -> &str {
        match self {
            Self::Name(m) | Self::On { model: m, .. } => m,
        }
    }

    /// The provider it names, if any.
    pub fn provider(&self) -> Option<&str> {
        match self {
            Self::Name(_) => None,
            Self::On { provider, .. } => provider.as_deref(),
        }
    }
}

/// Checks a model name at `path`.
pub fn check_model(path: &str, model: &str) -> Result<(), String> {
    if model.trim().is_empty() {
        return Err(format!("{path}: must not be empty"));
    }
    if model.len() > MAX_MODEL_NAME || model.chars().any(char::is_control) {
        return Err(format!(
            "{path}: must be at most {MAX_MODEL_NAME} bytes of printable text"
        ));
    }
    Ok(())
}

/// Checks a provider name at `path`.
pub fn check_provider(path: &str, provider: &str) -> Result<(), String> {
    if PROVIDERS.contains(&provider) {
        return Ok(());
    }
    Err(format!(
        "{path}: unknown provider {:?} (expected {})",
        crate::text::prefix(provider, 40),
        PROVIDERS.join(" or ")
    ))
}

/// Checks `model`, `provider` and `fallbackModels` under `at` (`""` or `steps[i].`).
pub fn check_models(
    at: &str,
    model: Option<&str>,
    provider: Option<&str>,
    fallbacks: &[ModelRef],
) -> Result<(), String> {
    if let Some(m) = model {
        check_model(&format!("{at}model"), m)?;
    }
    if let Some(p) = provider {
        check_provider(&format!("{at}provider"), p)?;
    }
    if fallbacks.len() > MAX_FALLBACKS {
        return Err(format!(
            "{at}fallbackModels: {} models, more than the limit of {MAX_FALLBACKS}",
            fallbacks.len()
        ));
    }
    for (i, f) in fallbacks.iter().enumerate() {
        check_model(&format!("{at}fallbackModels[{i}].model"), f.model())?;
        if let Some(p) = f.provider() {
            check_provider(&format!("{at}fallbackModels[{i}].provider"), p)?;
        }
    }
    Ok(())
}

/// The MCP servers of a step: its workflow's, with the step's over them.
pub fn step_servers(
    workflow: &BTreeMap<String, McpServer>,
    step: &BTreeMap<String, McpServer>,
) -> BTreeMap<String, McpServer> {
    let mut all = workflow.clone();
    all.extend(step.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}
