//! OpenAI-compatible chat completions (`POST {base}/chat/completions`): OpenAI itself and
//! local servers such as Ollama, vLLM and llama.cpp. Streamed (`stream.rs`) unless
//! streaming is turned off.

mod stream;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::RetryPolicy;
use super::http::Endpoint;
use super::{
    Block, BoxFuture, ModelRequest, ModelTurn, Provider, ProviderError, Role, StopReason, StreamSettings,
    Usage,
};
use crate::output::OutputSink;

/// Talks to an OpenAI-compatible chat completions endpoint.
pub struct OpenAiProvider {
    http: Endpoint,
}

impl OpenAiProvider {
    /// `base_url` includes the version path (e.g. `https://api.openai.com/v1`,
    /// `http://localhost:11434/v1`). The key is optional because local servers need none.
    pub fn new(base_url: &str, api_key: Option<&str>, model: &str) -> Result<Self, ProviderError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) {
            let value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ProviderError::Config(
                    "OPENAI_API_KEY contains characters not allowed in an HTTP header".into(),
                )
            })?;
            headers.insert(AUTHORIZATION, value);
        }
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        Ok(Self {
            http: Endpoint::new(url, headers, "OPENAI_API_KEY", model)?,
        })
    }

    /// Replaces the retry policy (tests use short pauses).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.http.retry = retry;
        self
    }

    /// Caps the body of an answer at `bytes` (default 32 MiB); a longer one fails the
    /// call with [`ProviderError::ResponseTooLarge`].
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.http.max_response_bytes = bytes;
        self
    }

    /// Streams answers (the default) or reads them whole, and how long a stream may
    /// stall.
    pub fn with_streaming(mut self, settings: StreamSettings) -> Self {
        self.http.stream = settings.enabled;
        self.http.idle_timeout = settings.idle_timeout;
        self
    }

    fn body(&self, req: &ModelRequest) -> Value {
        let mut messages = Vec::new();
        if !req.system.is_empty() {
            messages.push(json!({"role": "system", "content": req.system}));
        }
        for msg in &req.messages {
            match msg.role {
                Role::Assistant => messages.push(assistant_to_wire(&msg.content)),
                Role::User => user_to_wire(&msg.content, &mut messages),
            }
        }
        let mut body = json!({"model": self.http.model, "messages": messages});
        if let Some(max) = req.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if !req.tools.is_empty() {
            body["tools"] = req
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.input_schema
                    }})
                })
                .collect();
        }
        if self.http.stream {
            // The usage comes in a last chunk of its own only when asked for.
            body["stream"] = Value::Bool(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }
}

fn assistant_to_wire(blocks: &[Block]) -> Value {
    let text = join_text(blocks);
    let calls: Vec<Value> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, name, input } => {
                // Raw (unparseable) arguments were kept as a string: send them back as they came.
                let arguments = match input {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                Some(
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}),
                )
            }
            _ => None,
        })
        .collect();
    let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    msg
}

/// Tool results become `role: tool` messages, which must directly follow the assistant
/// message; any text of the same user turn follows them as one user message.
fn user_to_wire(blocks: &[Block], out: &mut Vec<Value>) {
    for b in blocks {
        if let Block::ToolResult {
            tool_use_id,
            content,
            is_error,
            images,
        } = b
        {
            // Chat completions has no error flag, so the model is told in words.
            let mut content = if *is_error {
                format!("Error: {content}")
            } else {
                content.clone()
            };
            // Nor images in a tool message: they stay described.
            if !images.is_empty() {
                content.push_str(&format!(
                    "\n[{} image(s) not shown: this provider takes no images in tool results]",
                    images.len()
                ));
            }
            out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
        }
    }
    let text = join_text(blocks);
    if !text.is_empty() {
        out.push(json!({"role": "user", "content": text}));
    }
}

fn join_text(blocks: &[Block]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn parse_turn(body: &Value) -> Result<ModelTurn, ProviderError> {
    let choice = body.get("choices").and_then(|c| c.get(0)).ok_or_else(|| {
        ProviderError::BadResponse(format!(
            "no choices in {}",
            super::excerpt(&body.to_string(), 300)
        ))
    })?;
    let message = choice
        .get("message")
        .ok_or_else(|| ProviderError::BadResponse("choice without a message".into()))?;
    let mut blocks = Vec::new();
    match message.get("content") {
        Some(Value::String(text)) if !text.is_empty() => blocks.push(Block::text(text.clone())),
        // Some servers send content as an array of typed parts.
        Some(Value::Array(parts)) => {
            let text: String = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            if !text.is_empty() {
                blocks.push(Block::text(text));
            }
        }
        _ => {}
    }
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            let function = call.get("function");
            let name = function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if name.is_empty() {
                return Err(ProviderError::BadResponse(format!(
                    "tool call without a function name: {call}"
                )));
            }
            // Some local servers omit ids; the transcript needs one to pair results.
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("call_{i}"), str::to_string);
            let input = match function.and_then(|f| f.get("arguments")) {
                Some(Value::String(raw)) => arguments_input(raw),
                Some(obj @ Value::Object(_)) => obj.clone(),
                _ => json!({}),
            };
            blocks.push(Block::ToolUse {
                id,
                name: name.to_string(),
                input,
            });
        }
    }
    Ok(ModelTurn {
        blocks,
        stop_reason: stop_reason(choice.get("finish_reason").and_then(Value::as_str)),
        usage: parse_usage(body.get("usage")),
    })
}

/// A tool call's input from its `arguments` text: `{}` when blank; malformed JSON stays
/// a raw string, which the agent answers with an error result.
fn arguments_input(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

fn stop_reason(finish_reason: Option<&str>) -> StopReason {
    match finish_reason {
        Some("stop") | None => StopReason::EndTurn,
        Some("tool_calls") | Some("function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_string()),
    }
}

/// `usage` of a chat completion: `prompt_tokens` includes the cached ones
/// (`prompt_tokens_details.cached_tokens`), which are counted apart here.
fn parse_usage(usage: Option<&Value>) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let prompt = n(usage.and_then(|u| u.get("prompt_tokens")));
    let cached = n(usage
        .and_then(|u| u.get("prompt_tokens_details"))
        .and_then(|d| d.get("cached_tokens")))
    .min(prompt);
    Usage {
        input: prompt - cached,
        output: n(usage.and_then(|u| u.get("completion_tokens"))),
        cache_read: cached,
        cache_write: 0,
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.http.model
    }

    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        out: &'a dyn OutputSink,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let body = self.body(req);
            self.http
                .turn(&body, out, stream::Decoder::default, parse_turn)
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_arguments_are_kept_raw() {
        let turn = parse_turn(&json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": "}}
        ]}, "finish_reason": "tool_calls"}]}))
        .unwrap();
        assert_eq!(turn.stop_reason, StopReason::ToolUse);
        assert_eq!(
            turn.blocks,
            vec![Block::ToolUse {
                id: "c1".into(),
                name: "bash".into(),
                input: json!("{\"command\": ")
            }]
        );
    }

    #[test]
    fn usage_counts_cached_prompt_tokens_apart() {
        let turn = parse_turn(
            &json!({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
                      "prompt_tokens_details": {"cached_tokens": 800}}}),
        )
        .unwrap();
        assert_eq!(
            turn.usage,
            Usage {
                input: 200,
                output: 50,
                cache_read: 800,
                cache_write: 0
            }
        );
        // A server that reports more cached tokens than prompt tokens cannot underflow.
        let odd = parse_usage(Some(
            &json!({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}),
        ));
        assert_eq!((odd.input, odd.cache_read), (0, 5));
        assert_eq!(parse_usage(None), Usage::default());
    }

    #[test]
    fn tool_results_precede_user_text() {
        let mut out = Vec::new();
        user_to_wire(
            &[
                Block::ToolResult {
                    tool_use_id: "c1".into(),
                    content: "boom".into(),
                    is_error: true,
                    images: Vec::new(),
                },
                Block::ToolResult {
                    tool_use_id: "c2".into(),
                    content: "[image 1 (image/png, 4 bytes base64)]".into(),
                    is_error: false,
                    images: vec![crate::provider::ToolImage {
                        media_type: "image/png".into(),
                        data: "AAAA".into(),
                    }],
                },
                Block::text("[steer] hurry"),
            ],
            &mut out,
        );
        assert_eq!(
            out[0],
            json!({"role": "tool", "tool_call_id": "c1", "content": "Error: boom"})
        );
        assert_eq!(
            out[1]["content"],
            "[image 1 (image/png, 4 bytes base64)]\n[1 image(s) not shown: this provider takes no images in tool results]"
        );
        assert_eq!(out[2], json!({"role": "user", "content": "[steer] hurry"}));
    }
}
