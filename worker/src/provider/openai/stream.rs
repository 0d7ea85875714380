//! Assembling a streamed chat completion (`stream: true`, `stream_options:
//! {include_usage: true}`) into the turn the same answer gives whole.
//!
//! Each `data:` line is a `chat.completion.chunk`: the first choice's `delta` carries
//! pieces of `content`, of `reasoning_content` / `reasoning` (servers that show
//! reasoning), and of `tool_calls[i]` (the id and name in the first piece of a call,
//! its `arguments` text in pieces); `finish_reason` comes with the last delta, the
//! usage in a last chunk with no choices, and `data: [DONE]` ends the stream. A chunk
//! with an `error` object ends it in failure.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{arguments_input, parse_usage, stop_reason};
use crate::output::{OutputChunk, OutputSink};
use crate::provider::http::{TurnDecoder, stream_error};
use crate::provider::sse::SseEvent;
use crate::provider::{Block, ModelTurn, ProviderError, Usage, excerpt};

/// A tool call being received.
#[derive(Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
    /// Its start was pushed to watchers (once its name came).
    announced: bool,
}

/// One try's answer so far.
#[derive(Default)]
pub(super) struct Decoder {
    /// A chunk with the first choice came.
    any_choice: bool,
    text: String,
    /// By the call's `index` in `tool_calls`.
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<String>,
    usage: Usage,
}

fn bad(what: &str, data: &str) -> ProviderError {
    ProviderError::BadResponse(format!("{what} in the answer's stream: {}", excerpt(data, 300)))
}

/// The HTTP status an error chunk stands for: its numeric `code` when it has one (as
/// vLLM sends), else what its `type` or `code` names, else a server-side failure.
fn status_of(error: &Value) -> u16 {
    if let Some(code) = error.get("code").and_then(Value::as_u64)
        && (400..600).contains(&code)
    {
        return code as u16;
    }
    let word = |k: &str| error.get(k).and_then(Value::as_str).unwrap_or_default();
    match (word("type"), word("code")) {
        (_, "rate_limit_exceeded") | ("rate_limit_exceeded" | "tokens" | "requests", _) => 429,
        ("invalid_request_error", _) => 400,
        _ => 500,
    }
}

/// The text of a `content` (or reasoning) delta: a string, or typed parts.
fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

impl Decoder {
    fn tool_call_delta(&mut self, position: usize, delta: &Value, out: &dyn OutputSink) {
        let index = delta
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let call = self.calls.entry(index).or_default();
        let function = delta.get("function");
        let field = |v: Option<&Value>, k: &str| {
            v.and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let id = field(Some(delta), "id");
        if call.id.is_empty() && !id.is_empty() {
            call.id = id;
        }
        // The name comes whole in a call's first piece; servers that repeat it later
        // are not taken to add to it.
        let name = field(function, "name");
        if call.name.is_empty() && !name.is_empty() {
            call.name = name;
        }
        if !call.announced && !call.name.is_empty() {
            call.announced = true;
            out.push(OutputChunk::ToolCallStart {
                name: call.name.clone(),
                id: call.id.clone(),
            });
        }
        let piece = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            Some(obj @ Value::Object(_)) => obj.to_string(),
            _ => String::new(),
        };
        if !piece.is_empty() {
            call.arguments.push_str(&piece);
            out.push(OutputChunk::ToolInput(piece));
        }
    }
}

impl TurnDecoder for Decoder {
    fn event(&mut self, event: &SseEvent, out: &dyn OutputSink) -> Result<bool, ProviderError> {
        if event.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|_| bad("invalid JSON", &event.data))?;
        let error = match data.get("error") {
            Some(e) if !e.is_null() => Some(e),
            _ if data.get("object").and_then(Value::as_str) == Some("error") || event.event == "error" => {
                Some(&data)
            }
            _ => None,
        };
        if let Some(error) = error {
            return Err(stream_error(status_of(error), &event.data));
        }
        if let Some(usage @ Value::Object(_)) = data.get("usage") {
            self.usage = parse_usage(Some(usage));
        }
        // Only the first choice makes the turn, as without streaming.
        let choice = data.get("choices").and_then(Value::as_array).and_then(|choices| {
            choices
                .iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        });
        let Some(choice) = choice else {
            return Ok(false);
        };
        self.any_choice = true;
        if let Some(delta) = choice.get("delta") {
            for key in ["reasoning_content", "reasoning"] {
                let thinking = text_of(delta.get(key));
                if !thinking.is_empty() {
                    out.push(OutputChunk::Thinking(thinking));
                }
            }
            let text = text_of(delta.get("content"));
            if !text.is_empty() {
                self.text.push_str(&text);
                out.push(OutputChunk::Text(text));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.tool_call_delta(position, call, out);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(false)
    }

    fn finish(self, ended: bool, url: &str) -> Result<ModelTurn, ProviderError> {
        // Without `[DONE]` the usage chunk may still have been to come: a cut stream.
        if !ended {
            return Err(ProviderError::Transport {
                url: url.to_string(),
                message: "the answer's stream ended before the answer did (no [DONE])".into(),
            });
        }
        if !self.any_choice {
            return Err(ProviderError::BadResponse(
                "the answer's stream carried no choices".into(),
            ));
        }
        let mut blocks = Vec::new();
        if !self.text.is_empty() {
            blocks.push(Block::text(self.text));
        }
        for (i, call) in self.calls.into_values().enumerate() {
            if call.name.is_empty() {
                return Err(ProviderError::BadResponse(format!(
                    "tool call without a function name (arguments {})",
                    excerpt(&call.arguments, 200)
                )));
            }
            // Some local servers omit ids; the transcript needs one to pair results.
            let id = if call.id.is_empty() {
                format!("call_{i}")
            } else {
                call.id
            };
            blocks.push(Block::ToolUse {
                id,
                name: call.name,
                input: arguments_input(&call.arguments),
            });
        }
        Ok(ModelTurn {
            blocks,
            stop_reason: stop_reason(self.finish_reason.as_deref()),
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Discard;
    use serde_json::json;

    fn feed(decoder: &mut Decoder, chunks: &[Value]) {
        for c in chunks {
            let event = SseEvent {
                event: String::new(),
                data: c.to_string(),
            };
            assert!(!decoder.event(&event, &Discard).unwrap());
        }
    }

    fn done(decoder: &mut Decoder) -> bool {
        let event = SseEvent {
            event: String::new(),
            data: "[DONE]".into(),
        };
        decoder.event(&event, &Discard).unwrap()
    }

    #[test]
    fn calls_without_ids_or_indexes_and_repeated_names_assemble_as_whole_answers_do() {
        let mut d = Decoder::default();
        feed(
            &mut d,
            &[
                // No index and no id (some local servers); the name repeated in a later piece.
                json!({"choices": [{"delta": {"tool_calls": [{"function": {"name": "bash", "arguments": "{\"command\""}}]}}]}),
                json!({"choices": [{"delta": {"tool_calls": [{"function": {"name": "bash", "arguments": ": \"ls\"}"}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": 1, "id": "c9", "function": {"name": "read_file", "arguments": {"path": "a"}}}]},
                    "finish_reason": "tool_calls"}]}),
            ],
        );
        assert!(done(&mut d));
        let turn = d.finish(true, "u").unwrap();
        assert_eq!(
            turn.blocks,
            vec![
                Block::ToolUse {
                    id: "call_0".into(),
                    name: "bash".into(),
                    input: json!({"command": "ls"})
                },
                Block::ToolUse {
                    id: "c9".into(),
                    name: "read_file".into(),
                    input: json!({"path": "a"})
                },
            ]
        );
        assert_eq!(turn.usage, Usage::default());
    }

    #[test]
    fn a_stream_without_choices_or_names_is_a_bad_response() {
        let mut d = Decoder::default();
        feed(&mut d, &[json!({"choices": [], "usage": {"prompt_tokens": 1}})]);
        assert!(matches!(d.finish(true, "u"), Err(ProviderError::BadResponse(_))));
        let mut d = Decoder::default();
        feed(
            &mut d,
            &[
                json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}),
            ],
        );
        assert!(matches!(d.finish(true, "u"), Err(ProviderError::BadResponse(_))));
        // Invalid JSON in a chunk is a bad response too (not retried within the call).
        let mut d = Decoder::default();
        let event = SseEvent {
            event: String::new(),
            data: "{oops".into(),
        };
        assert!(matches!(
            d.event(&event, &Discard),
            Err(ProviderError::BadResponse(_))
        ));
    }
}
