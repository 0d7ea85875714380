//! Assembling a streamed Messages answer (`stream: true`) into the turn the same
//! answer gives whole.
//!
//! The stream is `message_start` (the message, its input usage), then per content
//! block `content_block_start`, `content_block_delta`s (`text_delta`,
//! `input_json_delta`, `thinking_delta`, `signature_delta`, ...) and
//! `content_block_stop`, then `message_delta` (the stop reason and the final output
//! usage) and `message_stop`; `ping`s may come anywhere, and an `error` event ends it
//! in failure. Unknown events and deltas are skipped, as the API asks of clients.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{parse_usage, stop_reason};
use crate::output::{OutputChunk, OutputSink};
use crate::provider::http::{TurnDecoder, stream_error};
use crate::provider::sse::SseEvent;
use crate::provider::{Block, ModelTurn, ProviderError, excerpt};

/// A content block being received.
enum Pending {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// The input the block started with (`{}`), used when no delta came.
        start: Value,
        json: String,
    },
    /// Thinking and other kinds: shown live, not part of the turn (as without streaming).
    Other,
}

/// One try's answer so far.
#[derive(Default)]
pub(super) struct Decoder {
    /// By the block's `index`, which is its place in the answer's content.
    blocks: BTreeMap<u64, Pending>,
    /// `message_start`'s usage, overlaid with each `message_delta`'s (cumulative).
    usage: Map<String, Value>,
    stop_reason: Option<String>,
    /// A `message_delta` came: every block is whole, whatever follows.
    delta_seen: bool,
}

fn bad(what: &str, data: &str) -> ProviderError {
    ProviderError::BadResponse(format!("{what} in the answer's stream: {}", excerpt(data, 300)))
}

/// The HTTP status an `error` event's type has when the API answers without streaming.
fn status_of(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        // api_error, and types this worker does not know: a server-side failure.
        _ => 500,
    }
}

impl TurnDecoder for Decoder {
    fn event(&mut self, event: &SseEvent, out: &dyn OutputSink) -> Result<bool, ProviderError> {
        let data: Value = serde_json::from_str(&event.data).map_err(|_| bad("invalid JSON", &event.data))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = data.get("index").and_then(Value::as_u64);
        match kind {
            "message_start" => {
                if let Some(Value::Object(usage)) = data.get("message").and_then(|m| m.get("usage")) {
                    self.usage = usage.clone();
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (index, data.get("content_block")) else {
                    return Err(bad("content_block_start without index or block", &event.data));
                };
                let field = |k: &str| block.get(k).and_then(Value::as_str);
                let pending = match field("type") {
                    Some("text") => {
                        let text = field("text").unwrap_or_default();
                        if !text.is_empty() {
                            out.push(OutputChunk::Text(text.to_string()));
                        }
                        Pending::Text(text.to_string())
                    }
                    Some("tool_use") => {
                        let (Some(id), Some(name)) = (field("id"), field("name")) else {
                            return Err(bad("tool_use block without id or name", &event.data));
                        };
                        out.push(OutputChunk::ToolCallStart {
                            name: name.to_string(),
                            id: id.to_string(),
                        });
                        Pending::ToolUse {
                            id: id.to_string(),
                            name: name.to_string(),
                            start: block
                                .get("input")
                                .cloned()
                                .unwrap_or_else(|| Value::Object(Map::new())),
                            json: String::new(),
                        }
                    }
                    Some("thinking") => {
                        if let Some(t) = field("thinking").filter(|t| !t.is_empty()) {
                            out.push(OutputChunk::Thinking(t.to_string()));
                        }
                        Pending::Other
                    }
                    _ => Pending::Other,
                };
                self.blocks.insert(index, pending);
            }
            "content_block_delta" => {
                let delta = data.get("delta");
                let piece = |k: &str| {
                    delta
                        .and_then(|d| d.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                };
                let block = index.and_then(|i| self.blocks.get_mut(&i));
                match (delta.and_then(|d| d.get("type")).and_then(Value::as_str), block) {
                    (Some("text_delta"), Some(Pending::Text(text))) => {
                        let piece = piece("text");
                        text.push_str(piece);
                        if !piece.is_empty() {
                            out.push(OutputChunk::Text(piece.to_string()));
                        }
                    }
                    (Some("input_json_delta"), Some(Pending::ToolUse { json, .. })) => {
                        let piece = piece("partial_json");
                        json.push_str(piece);
                        if !piece.is_empty() {
                            out.push(OutputChunk::ToolInput(piece.to_string()));
                        }
                    }
                    (Some("thinking_delta"), _) if !piece("thinking").is_empty() => {
                        out.push(OutputChunk::Thinking(piece("thinking").to_string()))
                    }
                    // signature_delta, citations_delta, deltas of unknown kinds or blocks.
                    _ => {}
                }
            }
            "message_delta" => {
                self.delta_seen = true;
                if let Some(reason) = data
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(Value::Object(usage)) = data.get("usage") {
                    for (k, v) in usage {
                        if !v.is_null() {
                            self.usage.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let error_type = data
                    .get("error")
                    .and_then(|e| e.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                return Err(stream_error(status_of(error_type), &event.data));
            }
            // ping, content_block_stop, and event types this worker does not know.
            _ => {}
        }
        Ok(false)
    }

    fn finish(self, ended: bool, url: &str) -> Result<ModelTurn, ProviderError> {
        if !ended && !self.delta_seen {
            return Err(ProviderError::Transport {
                url: url.to_string(),
                message: "the answer's stream ended before the answer did (no message_stop)".into(),
            });
        }
        let blocks = self
            .blocks
            .into_values()
            .filter_map(|pending| match pending {
                Pending::Text(text) => Some(Block::text(text)),
                Pending::ToolUse {
                    id,
                    name,
                    start,
                    json,
                } => {
                    // Unparseable input stays raw text; the agent answers it with an error.
                    let input = if json.trim().is_empty() {
                        start
                    } else {
                        serde_json::from_str(&json).unwrap_or(Value::String(json))
                    };
                    Some(Block::ToolUse { id, name, input })
                }
                Pending::Other => None,
            })
            .collect();
        Ok(ModelTurn {
            blocks,
            stop_reason: stop_reason(self.stop_reason.as_deref()),
            usage: parse_usage(Some(&Value::Object(self.usage))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Discard;
    use crate::provider::StopReason;
    use serde_json::json;

    fn feed(decoder: &mut Decoder, events: &[Value]) -> Result<bool, ProviderError> {
        let mut ended = false;
        for e in events {
            let event = SseEvent {
                event: String::new(),
                data: e.to_string(),
            };
            ended = decoder.event(&event, &Discard)?;
        }
        Ok(ended)
    }

    #[test]
    fn a_stream_cut_after_message_delta_is_whole_and_malformed_input_stays_raw() {
        let mut d = Decoder::default();
        let ended = feed(
            &mut d,
            &[
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "tool_use", "id": "t", "name": "bash", "input": {}}}),
                json!({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "input_json_delta", "partial_json": "{\"command\": "}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
            ],
        )
        .unwrap();
        assert!(!ended);
        let turn = d.finish(false, "u").unwrap();
        assert_eq!(turn.stop_reason, StopReason::MaxTokens);
        assert_eq!((turn.usage.input, turn.usage.output), (5, 9));
        assert_eq!(
            turn.blocks,
            vec![Block::ToolUse {
                id: "t".into(),
                name: "bash".into(),
                input: json!("{\"command\": ")
            }]
        );
    }

    #[test]
    fn a_cut_before_message_delta_is_retryable_and_a_nameless_tool_is_bad() {
        let mut d = Decoder::default();
        feed(&mut d, &[json!({"type": "message_start", "message": {}})]).unwrap();
        let err = d.finish(false, "u").unwrap_err();
        assert!(matches!(err, ProviderError::Transport { .. }) && err.is_retryable());
        let mut d = Decoder::default();
        let err = feed(
            &mut d,
            &[json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "input": {}}})],
        )
        .unwrap_err();
        assert!(matches!(err, ProviderError::BadResponse(_)), "{err}");
        // An unknown error type counts as a server-side failure, retried.
        let mut d = Decoder::default();
        let err = feed(&mut d, &[json!({"type": "error", "error": {"type": "new_kind"}})]).unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Http {
                    status: 500,
                    retryable: true,
                    ..
                }
            ),
            "{err}"
        );
    }
}
