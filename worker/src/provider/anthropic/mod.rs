//! Anthropic Messages API (`POST {base}/v1/messages`), streamed (`stream.rs`) unless
//! streaming is turned off.

mod stream;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::RetryPolicy;
use super::http::Endpoint;
use super::{
    Block, BoxFuture, Message, ModelRequest, ModelTurn, Provider, ProviderError, Role, StopReason,
    StreamSettings, Usage,
};
use crate::output::OutputSink;

const API_VERSION: &str = "2023-06-01";

/// Talks to the Anthropic Messages API (or anything speaking its wire format).
pub struct AnthropicProvider {
    http: Endpoint,
    max_tokens: u32,
}

impl AnthropicProvider {
    /// `base_url` is the API root without `/v1` (e.g. `https://api.anthropic.com`).
    pub fn new(base_url: &str, api_key: &str, model: &str, max_tokens: u32) -> Result<Self, ProviderError> {
        let mut headers = HeaderMap::new();
        let key = HeaderValue::from_str(api_key.trim()).map_err(|_| {
            ProviderError::Config(
                "ANTHROPIC_API_KEY contains characters not allowed in an HTTP header".into(),
            )
        })?;
        headers.insert(HeaderName::from_static("x-api-key"), key);
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        let url = format!("{}/v1/messages", base_url.trim_end_matches('/'));
        Ok(Self {
            http: Endpoint::new(url, headers, "ANTHROPIC_API_KEY", model)?,
            max_tokens,
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

    /// The request body, with prompt-cache breakpoints (`cache_control`): on the last
    /// tool, on the system prompt (together the prefix every turn repeats), and on the
    /// conversation: the last block of the last message, and of the user message
    /// before it, which the previous turn marked as its last, so each turn reads the
    /// prefix the turn before wrote. Four, the API's limit.
    fn body(&self, req: &ModelRequest) -> Value {
        let mut messages: Vec<Value> = req.messages.iter().filter_map(message_to_wire).collect();
        mark_conversation(&mut messages);
        let mut body = json!({
            "model": self.http.model,
            "max_tokens": req.max_tokens.unwrap_or(self.max_tokens),
            "messages": messages,
        });
        if !req.system.is_empty() {
            body["system"] =
                json!([{"type": "text", "text": req.system, "cache_control": cache_breakpoint()}]);
        }
        if !req.tools.is_empty() {
            let mut tools: Vec<Value> = req
                .tools
                .iter()
                .map(
                    |t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}),
                )
                .collect();
            if let Some(last) = tools.last_mut() {
                last["cache_control"] = cache_breakpoint();
            }
            body["tools"] = Value::Array(tools);
        }
        if self.http.stream {
            body["stream"] = Value::Bool(true);
        }
        body
    }
}

/// A prompt-cache breakpoint (the default five-minute cache).
fn cache_breakpoint() -> Value {
    json!({"type": "ephemeral"})
}

/// Marks the last block of the last message and of the user message before it.
fn mark_conversation(messages: &mut [Value]) {
    let Some(last) = messages.len().checked_sub(1) else {
        return;
    };
    let earlier = messages[..last].iter().rposition(|m| m["role"] == "user");
    for i in std::iter::once(last).chain(earlier) {
        if let Some(block) = messages[i]["content"].as_array_mut().and_then(|c| c.last_mut()) {
            block["cache_control"] = cache_breakpoint();
        }
    }
}

/// The API refuses empty text blocks and empty messages, so both are dropped.
fn message_to_wire(msg: &Message) -> Option<Value> {
    let content: Vec<Value> = msg
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } if text.trim().is_empty() => None,
            Block::Text { text } => Some(json!({"type": "text", "text": text})),
            Block::ToolUse { id, name, input } => {
                // The API wants an object; unparseable arguments from another provider become {}.
                let input = if input.is_object() {
                    input.clone()
                } else {
                    Value::Object(Map::new())
                };
                Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            }
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
                images,
            } if images.is_empty() => Some(json!({
                "type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error
            })),
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
                images,
            } => {
                // Text and images: the content is a list of blocks.
                let mut parts = vec![json!({"type": "text", "text": content})];
                parts.extend(images.iter().map(|i| {
                    json!({"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}})
                }));
                Some(json!({
                    "type": "tool_result", "tool_use_id": tool_use_id, "content": parts, "is_error": is_error
                }))
            }
        })
        .collect();
    if content.is_empty() {
        return None;
    }
    let role = match msg.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    Some(json!({"role": role, "content": content}))
}

fn parse_turn(body: &Value) -> Result<ModelTurn, ProviderError> {
    let content = body.get("content").and_then(Value::as_array).ok_or_else(|| {
        ProviderError::BadResponse(format!(
            "no content array in {}",
            super::excerpt(&body.to_string(), 300)
        ))
    })?;
    let mut blocks = Vec::new();
    for item in content {
        match item.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = item.get("text").and_then(Value::as_str).unwrap_or_default();
                blocks.push(Block::text(text));
            }
            Some("tool_use") => {
                let field = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_string);
                let (Some(id), Some(name)) = (field("id"), field("name")) else {
                    return Err(ProviderError::BadResponse(format!(
                        "tool_use block without id or name: {item}"
                    )));
                };
                let input = item
                    .get("input")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                blocks.push(Block::ToolUse { id, name, input });
            }
            // Thinking and other block kinds carry nothing the loop acts on.
            _ => {}
        }
    }
    Ok(ModelTurn {
        blocks,
        stop_reason: stop_reason(body.get("stop_reason").and_then(Value::as_str)),
        usage: parse_usage(body.get("usage")),
    })
}

fn stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("end_turn") | None => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_string()),
    }
}

/// `usage` of a Messages answer: `input_tokens` already excludes the cache's.
fn parse_usage(usage: Option<&Value>) -> Usage {
    let n = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
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
    fn wire_round_trip() {
        let msg = Message {
            role: Role::User,
            content: vec![
                Block::ToolResult {
                    tool_use_id: "t1".into(),
                    content: "ok".into(),
                    is_error: true,
                    images: Vec::new(),
                },
                Block::text(""),
            ],
        };
        let wire = message_to_wire(&msg).unwrap();
        assert_eq!(wire["content"].as_array().unwrap().len(), 1);
        assert_eq!(wire["content"][0]["is_error"], true);
        // A result with images: its content is text and image blocks.
        let with_image = Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: "t3".into(),
                content: "[image 1 (image/png, 4 bytes base64)]".into(),
                is_error: false,
                images: vec![crate::provider::ToolImage {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                }],
            }],
        };
        let wire = message_to_wire(&with_image).unwrap();
        assert_eq!(
            wire["content"][0]["content"],
            json!([{"type": "text", "text": "[image 1 (image/png, 4 bytes base64)]"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}])
        );

        let turn = parse_turn(&json!({
            "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "hi"},
                        {"type": "tool_use", "id": "t2", "name": "bash", "input": {"command": "ls"}}],
            "stop_reason": "tool_use"
        }))
        .unwrap();
        assert_eq!(turn.stop_reason, StopReason::ToolUse);
        assert_eq!(turn.blocks.len(), 2);
        assert_eq!(turn.usage, Usage::default());
        let turn = parse_turn(&json!({
            "content": [{"type": "text", "text": "hi"}],
            "usage": {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 300,
                      "cache_creation_input_tokens": 40}
        }))
        .unwrap();
        assert_eq!(
            turn.usage,
            Usage {
                input: 12,
                output: 7,
                cache_read: 300,
                cache_write: 40
            }
        );
        assert!(parse_turn(&json!({"type": "error"})).is_err());
    }

    /// Where the request carries `cache_control`: (tools, system, message indexes).
    fn breakpoints(body: &Value) -> (Vec<usize>, bool, Vec<usize>) {
        let marked = |v: &Value| v.get("cache_control").is_some();
        let tools = body["tools"].as_array().into_iter().flatten().enumerate();
        let messages = body["messages"].as_array().into_iter().flatten().enumerate();
        (
            tools.filter(|(_, t)| marked(t)).map(|(i, _)| i).collect(),
            body["system"][0].get("cache_control").is_some(),
            messages
                .filter(|(_, m)| m["content"].as_array().into_iter().flatten().any(marked))
                .map(|(i, _)| i)
                .collect(),
        )
    }

    #[test]
    fn cache_breakpoints_sit_where_the_next_turn_reads_them() {
        let p = AnthropicProvider::new("http://127.0.0.1:9", "k", "m", 100).unwrap();
        let mut req = ModelRequest {
            system: "be brief".into(),
            messages: vec![Message::user_text("go")],
            tools: crate::tools::specs(&[]),
            max_tokens: None,
            metadata: Default::default(),
        };
        let n = req.tools.len();
        let body = p.body(&req);
        assert_eq!(breakpoints(&body), (vec![n - 1], true, vec![0]));
        let mut previous_last = 0;
        for turn in 0..3 {
            req.messages.push(Message {
                role: Role::Assistant,
                content: vec![Block::ToolUse {
                    id: format!("t{turn}"),
                    name: "bash".into(),
                    input: json!({"command": "ls"}),
                }],
            });
            req.messages.push(Message {
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_use_id: format!("t{turn}"),
                    content: "ok".into(),
                    is_error: false,
                    images: Vec::new(),
                }],
            });
            let body = p.body(&req);
            let (tools, system, messages) = breakpoints(&body);
            // The tools and system keep theirs; the conversation's are at the end and
            // where the turn before had its end: at most four in all.
            assert_eq!((tools, system), (vec![n - 1], true));
            let last = req.messages.len() - 1;
            assert_eq!(messages, vec![previous_last, last]);
            previous_last = last;
        }
    }
}
