//! Model providers behind one object-safe trait, the settings that choose one, and the
//! provider-neutral transcript.
//!
//! The transcript is also the step's heartbeat checkpoint (a resumed attempt restores it
//! and carries on from the last turn), but the checkpoint is stored as a versioned record
//! of its own (`agent::checkpoint`), so these types may change: only the conversions in
//! that record follow them.

mod anthropic;
mod chunks;
mod http;
mod models;
mod openai;
pub(crate) mod rate_limit;
pub mod scripted;
mod sse;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use anthropic::AnthropicProvider;
pub(crate) use http::{DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_STREAM_IDLE_TIMEOUT};
pub use models::{Models, is_overload};
pub use openai::OpenAiProvider;
pub use railyard_sdk::RetryPolicy;
pub use scripted::{BuiltInScript, Script, ScriptSource, ScriptedProvider};

use crate::output::OutputSink;
use crate::usage::Usage;

/// A boxed, sendable future, so the trait stays usable as `Arc<dyn Provider>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    /// The model asks for a tool. `input` is normally a JSON object; a provider that
    /// received unparseable arguments keeps the raw text as a JSON string so the agent
    /// can answer with an error instead of failing.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
        /// Images the tool returned (an MCP server's), for providers that take them;
        /// `content` describes each.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ToolImage>,
    },
}

/// Most images a transcript keeps: each turn sends them all again, and the
/// checkpoint holds them.
pub const MAX_TRANSCRIPT_IMAGES: usize = 4;

/// Drops all but the last `max` tool-result images of `messages` (their text still
/// describes them, and says they were dropped).
pub fn keep_recent_images(messages: &mut [Message], max: usize) {
    let mut kept = 0;
    for block in messages.iter_mut().rev().flat_map(|m| m.content.iter_mut().rev()) {
        if let Block::ToolResult { content, images, .. } = block
            && !images.is_empty()
        {
            let room = max - kept.min(max);
            if images.len() > room {
                let dropped = images.len() - room;
                images.drain(..dropped);
                content.push_str(&format!(
                    "\n[{dropped} image(s) dropped from the transcript: only the last {max} are kept]"
                ));
            }
            kept += images.len();
        }
    }
}

/// An image in a tool result, base64 encoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolImage {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    /// The image, base64.
    pub data: String,
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }
}

/// One message of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![Block::text(text)],
        }
    }
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the tool's input object.
    pub input_schema: Value,
}

/// Facts about the step a request belongs to. Real models ignore them; the scripted
/// provider uses them to pick the script and fill placeholders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestMetadata {
    pub run_id: String,
    pub step_id: String,
    pub goal: String,
}

/// One call to the model.
#[derive(Debug, Clone, Default)]
pub struct ModelRequest {
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// Output token limit; the provider's configured default when `None`.
    pub max_tokens: Option<u32>,
    pub metadata: RequestMetadata,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Other(String),
}

/// The model's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTurn {
    pub blocks: Vec<Block>,
    pub stop_reason: StopReason,
    /// The tokens the provider reported for this request (zero when it reported none).
    pub usage: Usage,
}

/// Why a model call failed, and whether trying again later can help.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The credentials were refused (HTTP 401/403).
    #[error("authentication failed (check {key_env}): HTTP {status}: {body}")]
    Auth {
        key_env: &'static str,
        status: u16,
        body: String,
    },
    /// The provider does not know the configured model.
    #[error("unknown model {model}: {body}")]
    UnknownModel { model: String, body: String },
    /// Any other HTTP error status, after retries where it was retryable.
    #[error("provider returned HTTP {status} ({}): {body}", retry_label(*retryable))]
    Http {
        status: u16,
        body: String,
        retryable: bool,
    },
    /// A 429 whose limit resets later than a call waits ([`rate_limit::PARK_AFTER`]):
    /// the step parks until then rather than hold its slot.
    #[error("rate limited by the provider until {reset_in:?} from now (retryable): {body}")]
    RateLimited { reset_in: Duration, body: String },
    /// The provider could not be reached (after retries).
    #[error("could not reach the provider at {url} (retryable): {message}")]
    Transport { url: String, message: String },
    /// The answer's body passed the configured cap (`max_model_response_bytes`); not
    /// retried, as the same request would most likely bring the same answer.
    #[error(
        "the response from {url} is larger than the limit of {limit} bytes (max_model_response_bytes); not retryable"
    )]
    ResponseTooLarge { url: String, limit: u64 },
    /// One line or event of a streamed answer passed the parser's cap; not retried,
    /// for the same reason.
    #[error(
        "an event of the answer's stream from {url} is larger than the limit of {limit} bytes; not retryable"
    )]
    StreamEventTooLarge { url: String, limit: u64 },
    /// A 2xx answer that is not the expected shape.
    #[error("unexpected response from the provider: {0}")]
    BadResponse(String),
    /// The offline script is missing or malformed.
    #[error("script error: {0}")]
    Script(String),
    /// The provider settings cannot work (e.g. an API key that is not a valid header).
    #[error("invalid provider configuration: {0}")]
    Config(String),
}

fn retry_label(retryable: bool) -> &'static str {
    if retryable { "retryable" } else { "not retryable" }
}

impl ProviderError {
    /// Whether a later attempt of the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Http { retryable, .. } => *retryable,
            Self::Transport { .. } | Self::BadResponse(_) | Self::RateLimited { .. } => true,
            Self::Auth { .. }
            | Self::UnknownModel { .. }
            | Self::ResponseTooLarge { .. }
            | Self::StreamEventTooLarge { .. }
            | Self::Script(_)
            | Self::Config(_) => false,
        }
    }
}

/// A language model the agent loop can talk to.
pub trait Provider: Send + Sync {
    /// A short name for logs ("anthropic", "openai", "scripted").
    fn name(&self) -> &str;

    /// The model answering, for usage reports and the price table ("" when unknown).
    fn model(&self) -> &str {
        ""
    }

    /// Sends the transcript and returns the model's next turn, pushing its live output
    /// to `out` as it arrives: text, thinking, each tool call's start and input, and
    /// at the end its usage and stop reason ([`crate::output`]); a failed try is
    /// pushed as an error. The turn returned is the whole answer, the same whether
    /// the provider streamed it or not.
    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        out: &'a dyn OutputSink,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>>;
}

/// Whether a real provider streams its answers, and how long a stream may stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// Use the provider's streaming API (`stream: true`), so watchers see the answer
    /// as it is written; `false` reads each answer whole (live output then comes a
    /// turn at a time).
    pub enabled: bool,
    /// Longest pause between two reads of a streamed answer before the call fails as
    /// a retryable transport error.
    pub idle_timeout: Duration,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
        }
    }
}

/// Which model backs the agent loop, as the worker's configuration resolved it.
#[derive(Clone, PartialEq)]
pub enum ProviderConfig {
    /// Anthropic Messages API.
    Anthropic {
        base_url: String,
        api_key: String,
        model: String,
        max_tokens: u32,
        /// Longest answer body read; a longer one fails the call.
        max_response_bytes: u64,
        /// How the answer is read: streamed (the default) or whole.
        stream: StreamSettings,
    },
    /// OpenAI-compatible chat completions; no key for local servers.
    OpenAi {
        base_url: String,
        api_key: Option<String>,
        model: String,
        /// Longest answer body read; a longer one fails the call.
        max_response_bytes: u64,
        /// How the answer is read: streamed (the default) or whole.
        stream: StreamSettings,
    },
    /// The offline scripted provider (no model at all).
    Scripted { script: ScriptSource },
}

// Hand-written so that API keys never reach a log line.
impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anthropic {
                base_url,
                model,
                max_tokens,
                max_response_bytes,
                stream,
                ..
            } => f
                .debug_struct("Anthropic")
                .field("base_url", base_url)
                .field("api_key", &"<redacted>")
                .field("model", model)
                .field("max_tokens", max_tokens)
                .field("max_response_bytes", max_response_bytes)
                .field("stream", stream)
                .finish(),
            Self::OpenAi {
                base_url,
                api_key,
                model,
                max_response_bytes,
                stream,
            } => f
                .debug_struct("OpenAi")
                .field("base_url", base_url)
                .field("api_key", &api_key.as_ref().map(|_| "<redacted>"))
                .field("model", model)
                .field("max_response_bytes", max_response_bytes)
                .field("stream", stream)
                .finish(),
            Self::Scripted { script } => f
                .debug_struct("Scripted")
                .field("script", &script.describe())
                .finish(),
        }
    }
}

impl ProviderConfig {
    /// A one-line description for the startup log ("anthropic claude-sonnet-4-5").
    pub fn describe(&self) -> String {
        match self {
            Self::Anthropic { model, .. } => format!("anthropic {model}"),
            Self::OpenAi { base_url, model, .. } => format!("openai-compatible {model} at {base_url}"),
            Self::Scripted { script } => format!("scripted (offline, no model) from {}", script.describe()),
        }
    }
}

/// Builds the provider a [`ProviderConfig`] describes. A scripted provider loads and
/// checks its script here, so a bad script fails at startup, not mid-step.
pub fn from_config(config: &ProviderConfig) -> Result<Arc<dyn Provider>, ProviderError> {
    Ok(match config {
        ProviderConfig::Anthropic {
            base_url,
            api_key,
            model,
            max_tokens,
            max_response_bytes,
            stream,
        } => Arc::new(
            AnthropicProvider::new(base_url, api_key, model, *max_tokens)?
                .with_max_response_bytes(*max_response_bytes)
                .with_streaming(*stream),
        ),
        ProviderConfig::OpenAi {
            base_url,
            api_key,
            model,
            max_response_bytes,
            stream,
        } => Arc::new(
            OpenAiProvider::new(base_url, api_key.as_deref(), model)?
                .with_max_response_bytes(*max_response_bytes)
                .with_streaming(*stream),
        ),
        ProviderConfig::Scripted { script } => {
            let provider = ScriptedProvider::load(script)?;
            tracing::warn!(
                script = %script.describe(),
                "using the OFFLINE SCRIPTED provider: steps replay a canned script, no real model is called"
            );
            Arc::new(provider)
        }
    })
}

/// Cuts `s` to at most `max` bytes on a char boundary, for error excerpts.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.trim().to_string();
    }
    format!("{}…", railyard_model::text::prefix(s, max).trim())
}

#[cfg(test)]
mod image_tests {
    use super::*;

    #[test]
    fn only_the_last_images_are_kept() {
        let result = |n: usize| Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: format!("t{n}"),
                content: format!("r{n}"),
                is_error: false,
                images: (0..n)
                    .map(|i| ToolImage {
                        media_type: "image/png".into(),
                        data: format!("{n}{i}"),
                    })
                    .collect(),
            }],
        };
        let mut messages = vec![result(2), result(1), result(3)];
        keep_recent_images(&mut messages, 4);
        let kept: Vec<(String, Vec<String>)> = messages
            .iter()
            .map(|m| match &m.content[0] {
                Block::ToolResult { content, images, .. } => {
                    (content.clone(), images.iter().map(|i| i.data.clone()).collect())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(kept[2].1, vec!["30", "31", "32"]);
        assert_eq!(kept[1].1, vec!["10"]);
        assert!(kept[0].1.is_empty());
        assert_eq!(
            kept[0].0,
            "r2\n[2 image(s) dropped from the transcript: only the last 4 are kept]"
        );
    }
}
