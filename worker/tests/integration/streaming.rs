//! Streamed model answers: the real providers against a local server speaking
//! Anthropic's and OpenAI's streaming wire formats with scripted event sequences
//! (pings, unknown events, thinking, tool input in pieces, `error` events, cut and
//! stalled connections), and the live output the agent pushes through its lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{FakeLease, Piece, Reply, mock_model, task};
use railyard_worker::OutputChunk;
use railyard_worker::agent::{Agent, Outcome};
use railyard_worker::output::OutputSink;
use railyard_worker::provider::{
    AnthropicProvider, Message, ModelRequest, ModelTurn, OpenAiProvider, Provider, ProviderError,
    RetryPolicy, Script, ScriptedProvider, StreamSettings,
};
use serde_json::{Value, json};

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
    }
}

/// Streaming on or off; a short idle timeout so a stalled stream ends the test soon.
fn streaming(enabled: bool) -> StreamSettings {
    StreamSettings {
        enabled,
        idle_timeout: Duration::from_millis(300),
    }
}

fn anthropic(base: &str, stream: bool) -> AnthropicProvider {
    AnthropicProvider::new(base, "sk-ant-test", "claude-test", 1024)
        .unwrap()
        .with_retry(fast_retry())
        .with_streaming(streaming(stream))
}

fn openai(base: &str, stream: bool) -> OpenAiProvider {
    OpenAiProvider::new(&format!("{base}/v1"), Some("sk-test"), "gpt-test")
        .unwrap()
        .with_retry(fast_retry())
        .with_streaming(streaming(stream))
}

/// Records every chunk pushed.
#[derive(Default)]
struct Recorder(Mutex<Vec<OutputChunk>>);

impl OutputSink for Recorder {
    fn push(&self, chunk: OutputChunk) {
        self.0.lock().unwrap().push(chunk);
    }
}

impl Recorder {
    fn chunks(&self) -> Vec<OutputChunk> {
        self.0.lock().unwrap().clone()
    }
}

fn request() -> ModelRequest {
    ModelRequest {
        system: "s".into(),
        messages: vec![Message::user_text("hi")],
        ..Default::default()
    }
}

async fn complete(p: &dyn Provider, out: &Recorder) -> Result<ModelTurn, ProviderError> {
    tokio::time::timeout(Duration::from_secs(60), p.complete(&request(), out))
        .await
        .expect("the call ends")
}

/// One Server-Sent Event with a JSON payload.
fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// An OpenAI-style `data:` line.
fn data(data: Value) -> String {
    format!("data: {data}\n\n")
}

fn text(s: &str) -> OutputChunk {
    OutputChunk::Text(s.into())
}

fn input(s: &str) -> OutputChunk {
    OutputChunk::ToolInput(s.into())
}

// --- Anthropic ---------------------------------------------------------------------

fn delta(index: u64, delta: Value) -> String {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn block_start(index: u64, block: Value) -> String {
    event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn block_stop(index: u64) -> String {
    event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn message_start() -> String {
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [], "model": "claude-test", "stop_reason": null,
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 300,
                      "cache_creation_input_tokens": 40}}}),
    )
}

fn ping() -> String {
    event("ping", json!({"type": "ping"}))
}

/// The whole answer as Anthropic streams it: thinking, text in three deltas, a tool
/// call whose input arrives in pieces, with pings, an unknown event and an unknown
/// delta in between.
fn anthropic_stream() -> Vec<String> {
    vec![
        message_start(),
        ping(),
        block_start(0, json!({"type": "thinking", "thinking": ""})),
        delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
        delta(0, json!({"type": "thinking_delta", "thinking": "think."})),
        delta(0, json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"})),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        delta(1, json!({"type": "text_delta", "text": "Writing "})),
        event(
            "future_event",
            json!({"type": "future_event", "something": [1, 2]}),
        ),
        delta(1, json!({"type": "text_delta", "text": "the "})),
        delta(1, json!({"type": "citations_delta", "citation": {"type": "x"}})),
        delta(1, json!({"type": "text_delta", "text": "file."})),
        block_stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "tu1", "name": "write_file", "input": {}}),
        ),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\", "}),
        ),
        ping(),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "\"content\": \"héllo\"}"}),
        ),
        block_stop(2),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": {"output_tokens": 7}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]
}

/// The same answer, whole.
fn anthropic_whole() -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBCgIYAhIM"},
            {"type": "text", "text": "Writing the file."},
            {"type": "tool_use", "id": "tu1", "name": "write_file",
             "input": {"path": "a.txt", "content": "héllo"}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 300,
                  "cache_creation_input_tokens": 40}})
}

fn bytes(events: Vec<String>) -> Vec<Piece> {
    events.into_iter().map(Piece::Bytes).collect()
}

#[tokio::test]
async fn anthropic_stream_assembles_the_turn_the_whole_answer_gives() {
    let (base, state) = mock_model(
        "/v1/messages",
        vec![
            Reply::stream(bytes(anthropic_stream())),
            Reply::ok(anthropic_whole()),
        ],
    )
    .await;
    let streamed_out = Recorder::default();
    let streamed = complete(&anthropic(&base, true), &streamed_out).await.unwrap();
    let whole_out = Recorder::default();
    let whole = complete(&anthropic(&base, false), &whole_out).await.unwrap();
    assert_eq!(streamed, whole);

    let requests = state.requests();
    assert_eq!(requests[0].1["stream"], true);
    assert!(
        requests[1].1.get("stream").is_none(),
        "stream = false asks for the whole answer"
    );

    let usage = OutputChunk::Usage {
        input_tokens: 352,
        output_tokens: 7,
    };
    let end = OutputChunk::TurnEnd {
        stop_reason: "tool_use".into(),
    };
    let start = OutputChunk::ToolCallStart {
        name: "write_file".into(),
        id: "tu1".into(),
    };
    assert_eq!(
        streamed_out.chunks(),
        vec![
            OutputChunk::Thinking("Let me ".into()),
            OutputChunk::Thinking("think.".into()),
            text("Writing "),
            text("the "),
            text("file."),
            start.clone(),
            input("{\"path\": \"a.txt\", "),
            input("\"content\": \"héllo\"}"),
            usage.clone(),
            end.clone(),
        ]
    );
    // Read whole, the turn still reaches watchers, a block at a time.
    assert_eq!(
        whole_out.chunks(),
        vec![
            text("Writing the file."),
            start,
            input(r#"{"content":"héllo","path":"a.txt"}"#),
            usage,
            end
        ]
    );
}

#[tokio::test]
async fn anthropic_error_event_and_cut_stream_are_retried_like_their_status() {
    let mut overloaded = bytes(vec![
        message_start(),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Writ"})),
    ]);
    overloaded.push(Piece::Bytes(event(
        "error",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )));
    let mut cut = bytes(anthropic_stream()[..9].to_vec());
    cut.push(Piece::Cut);
    let (base, state) = mock_model(
        "/v1/messages",
        vec![
            Reply::stream(overloaded),
            Reply::stream(cut),
            Reply::stream(bytes(anthropic_stream())),
        ],
    )
    .await;
    let out = Recorder::default();
    let turn = complete(&anthropic(&base, true), &out).await.unwrap();
    assert_eq!(state.requests().len(), 3, "two failed tries, then the answer");
    let errors: Vec<String> = out
        .chunks()
        .into_iter()
        .filter_map(|c| match c {
            OutputChunk::Error(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("HTTP 529 (retryable)") && errors[0].contains("Overloaded"),
        "{}",
        errors[0]
    );
    assert!(errors[0].ends_with("(try 1 of 3; retrying)"), "{}", errors[0]);
    // The connection dropped mid-body: a read error, not a clean end.
    assert!(
        errors[1].contains("could not reach the provider")
            && errors[1].contains("reading the answer's stream"),
        "{}",
        errors[1]
    );
    // The retried turn's text starts again after the error; the turn is the last try's.
    let chunks = out.chunks();
    let last_error = chunks
        .iter()
        .rposition(|c| matches!(c, OutputChunk::Error(_)))
        .unwrap();
    let after: String = chunks[last_error..]
        .iter()
        .filter_map(|c| match c {
            OutputChunk::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(after, "Writing the file.");
    assert_eq!(turn.blocks.len(), 2);

    // An error the same request would meet again is not retried, and says so.
    let invalid = bytes(vec![
        message_start(),
        event(
            "error",
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
        ),
    ]);
    let (base, state) = mock_model("/v1/messages", vec![Reply::stream(invalid)]).await;
    let out = Recorder::default();
    let err = complete(&anthropic(&base, true), &out).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Http {
                status: 400,
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(state.requests().len(), 1);
    assert!(matches!(out.chunks().last(), Some(OutputChunk::Error(_))));
}

#[tokio::test]
async fn a_stalled_or_cut_stream_fails_the_step_as_retryable_after_the_retries() {
    let stalled = || {
        let mut p = bytes(vec![message_start(), ping()]);
        p.push(Piece::Stall);
        Reply::stream(p)
    };
    let (base, state) = mock_model("/v1/messages", vec![stalled(), stalled(), stalled()]).await;
    let err = complete(&anthropic(&base, true), &Recorder::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Transport { ref message, .. } if message.contains("stalled")),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(state.requests().len(), 3);

    // A stream that ends early (the connection closed cleanly before message_stop)
    // fails each try the same way, and the step fails retryable with its transcript.
    let short = || Reply::stream(bytes(anthropic_stream()[..5].to_vec()));
    let (base, state) = mock_model("/v1/messages", vec![short(), short(), short()]).await;
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(Arc::new(anthropic(&base, true)))
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("expected a failure, got {:?}", report.outcome)
    };
    assert_eq!(f.error_type, "provider_unavailable");
    assert!(!f.non_retryable);
    assert!(f.message.contains("no message_stop"), "{}", f.message);
    assert!(!f.checkpoint.is_empty());
    assert_eq!(state.requests().len(), 3);
    let errors = lease
        .output
        .lock()
        .unwrap()
        .iter()
        .filter(|c| matches!(c, OutputChunk::Error(_)))
        .count();
    assert_eq!(errors, 3, "each failed try is told to watchers");
}

#[tokio::test]
async fn an_endless_stream_stops_at_the_response_cap() {
    let mut pieces = bytes(vec![
        message_start(),
        block_start(0, json!({"type": "text", "text": ""})),
    ]);
    let filler = "x".repeat(4096);
    for _ in 0..64 {
        pieces.push(Piece::Bytes(delta(
            0,
            json!({"type": "text_delta", "text": filler}),
        )));
    }
    let (base, state) = mock_model("/v1/messages", vec![Reply::stream(pieces)]).await;
    let provider = anthropic(&base, true).with_max_response_bytes(64 << 10);
    let err = complete(&provider, &Recorder::default()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::ResponseTooLarge { limit: 65536, .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(state.requests().len(), 1);
}

// --- OpenAI-compatible -----------------------------------------------------------

fn chunk(delta: Value, finish_reason: Value) -> String {
    data(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}),
    )
}

fn call_piece(index: u64, head: Option<(&str, &str)>, arguments: &str) -> String {
    let mut call = json!({"index": index, "function": {"arguments": arguments}});
    if let Some((id, name)) = head {
        call["id"] = json!(id);
        call["type"] = json!("function");
        call["function"]["name"] = json!(name);
    }
    chunk(json!({"tool_calls": [call]}), Value::Null)
}

fn openai_stream() -> Vec<String> {
    vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"reasoning_content": "Hmm, "}), Value::Null),
        chunk(json!({"reasoning_content": "a command."}), Value::Null),
        chunk(json!({"content": "Let me "}), Value::Null),
        ": keep-alive\n\n".to_string(),
        chunk(json!({"content": "check."}), Value::Null),
        call_piece(0, Some(("c1", "bash")), ""),
        call_piece(0, None, "{\"comm"),
        call_piece(0, None, "and\": \"echo hi\"}"),
        call_piece(1, Some(("c2", "write_file")), "{not "),
        call_piece(1, None, "json"),
        chunk(json!({}), json!("tool_calls")),
        data(
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
                      "prompt_tokens_details": {"cached_tokens": 800}}}),
        ),
        "data: [DONE]\n\n".to_string(),
    ]
}

fn openai_whole() -> Value {
    let call = |id: &str, name: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Let me check.",
            "tool_calls": [call("c1", "bash", r#"{"command": "echo hi"}"#), call("c2", "write_file", "{not json")]
        }}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
                  "prompt_tokens_details": {"cached_tokens": 800}}})
}

#[tokio::test]
async fn openai_stream_assembles_the_turn_the_whole_answer_gives() {
    let (base, state) = mock_model(
        "/v1/chat/completions",
        vec![Reply::stream(bytes(openai_stream())), Reply::ok(openai_whole())],
    )
    .await;
    let out = Recorder::default();
    let streamed = complete(&openai(&base, true), &out).await.unwrap();
    let whole = complete(&openai(&base, false), &Recorder::default())
        .await
        .unwrap();
    assert_eq!(streamed, whole);
    let requests = state.requests();
    assert_eq!(requests[0].1["stream"], true);
    assert_eq!(requests[0].1["stream_options"], json!({"include_usage": true}));
    assert!(requests[1].1.get("stream").is_none());
    assert_eq!(
        out.chunks(),
        vec![
            OutputChunk::Thinking("Hmm, ".into()),
            OutputChunk::Thinking("a command.".into()),
            text("Let me "),
            text("check."),
            OutputChunk::ToolCallStart {
                name: "bash".into(),
                id: "c1".into()
            },
            input("{\"comm"),
            input("and\": \"echo hi\"}"),
            OutputChunk::ToolCallStart {
                name: "write_file".into(),
                id: "c2".into()
            },
            input("{not "),
            input("json"),
            OutputChunk::Usage {
                input_tokens: 1000,
                output_tokens: 50
            },
            OutputChunk::TurnEnd {
                stop_reason: "tool_use".into()
            },
        ]
    );
}

#[tokio::test]
async fn openai_error_chunk_and_missing_done_are_retried() {
    let mut failing = bytes(openai_stream()[..4].to_vec());
    failing.push(Piece::Bytes(data(
        json!({"error": {"message": "The server had an error", "type": "server_error", "code": null}}),
    )));
    // Everything but `[DONE]`: the usage might still have been to come.
    let no_done = bytes(openai_stream()[..12].to_vec());
    let (base, state) = mock_model(
        "/v1/chat/completions",
        vec![
            Reply::stream(failing),
            Reply::stream(no_done),
            Reply::stream(bytes(openai_stream())),
        ],
    )
    .await;
    let out = Recorder::default();
    let turn = complete(&openai(&base, true), &out).await.unwrap();
    assert_eq!(state.requests().len(), 3);
    assert_eq!(turn.usage.cache_read, 800);
    let errors: Vec<String> = out
        .chunks()
        .into_iter()
        .filter_map(|c| match c {
            OutputChunk::Error(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("HTTP 500 (retryable)"), "{}", errors[0]);
    assert!(errors[1].contains("no [DONE]"), "{}", errors[1]);

    // A refusal in the stream (vLLM's numeric code) is not retried.
    let refused = bytes(vec![data(
        json!({"object": "error", "message": "context too long", "type": "BadRequestError", "code": 400}),
    )]);
    let (base, state) = mock_model("/v1/chat/completions", vec![Reply::stream(refused)]).await;
    let err = complete(&openai(&base, true), &Recorder::default())
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    assert_eq!(state.requests().len(), 1);
}

// --- the agent loop ----------------------------------------------------------------

#[tokio::test]
async fn the_agent_pushes_the_answer_tool_results_and_turn_ends_through_its_lease() {
    let script: Script = serde_json::from_value(json!({"default": [
        {"text": "Counting the letters of a long line.",
         "tool_calls": [{"name": "bash", "input": {"command": "yes a | head -c 6000"}}]},
        {"tool_calls": [{"name": "complete_step", "input": {"notes": "counted"}}],
         "usage": {"input": 100, "output": 7}}
    ]}))
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(Arc::new(ScriptedProvider::new(script)))
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "counted"),
        "{:?}",
        report.outcome
    );
    let chunks = lease.output.lock().unwrap().clone();

    // The scripted model streams too: its text and tool input come in pieces.
    let texts: Vec<&str> = chunks
        .iter()
        .filter_map(|c| match c {
            OutputChunk::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(texts.len() > 1, "{texts:?}");
    assert_eq!(texts.concat(), "Counting the letters of a long line.");

    // Per turn: the model's answer, its end, then each tool's result excerpt.
    let kinds: Vec<&str> = chunks
        .iter()
        .map(|c| match c {
            OutputChunk::Text(_) => "text",
            OutputChunk::Thinking(_) => "thinking",
            OutputChunk::ToolCallStart { .. } => "start",
            OutputChunk::ToolInput(_) => "input",
            OutputChunk::ToolResult { .. } => "result",
            OutputChunk::Usage { .. } => "usage",
            OutputChunk::TurnEnd { .. } => "end",
            OutputChunk::Error(_) => "error",
        })
        .collect();
    let mut compact = kinds.clone();
    compact.dedup();
    assert_eq!(
        compact,
        vec![
            "text", "start", "input", "usage", "end", "result", "start", "input", "usage", "end", "result"
        ]
    );
    let results: Vec<(&str, &str, bool)> = chunks
        .iter()
        .filter_map(|c| match c {
            OutputChunk::ToolResult {
                name,
                excerpt,
                is_error,
            } => Some((name.as_str(), excerpt.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].0, "bash");
    assert!(!results[0].2);
    assert!(
        results[0].1.len() <= 2048 && results[0].1.contains("a\na\n"),
        "an excerpt of the 6000-byte output: {} bytes",
        results[0].1.len()
    );
    assert_eq!(results[1], ("complete_step", "step completed", false));
    assert!(chunks.contains(&OutputChunk::TurnEnd {
        stop_reason: "tool_use".into()
    }));
    assert!(chunks.contains(&OutputChunk::Usage {
        input_tokens: 100,
        output_tokens: 7
    }));
}

#[tokio::test]
async fn the_agent_streams_a_real_provider_to_its_lease() {
    let done = vec![
        message_start(),
        block_start(
            0,
            json!({"type": "tool_use", "id": "tu2", "name": "complete_step", "input": {}}),
        ),
        delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "{\"notes\": "}),
        ),
        delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "\"wrote it\"}"}),
        ),
        block_stop(0),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ];
    let (base, _) = mock_model(
        "/v1/messages",
        vec![
            Reply::stream(bytes(anthropic_stream())),
            Reply::stream(bytes(done)),
        ],
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(Arc::new(anthropic(&base, true)))
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "wrote it"),
        "{:?}",
        report.outcome
    );
    assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "héllo");
    let chunks = lease.output.lock().unwrap().clone();
    let ends = chunks
        .iter()
        .filter(|c| matches!(c, OutputChunk::TurnEnd { .. }))
        .count();
    assert_eq!(ends, 2);
    let write = chunks
        .iter()
        .position(|c| matches!(c, OutputChunk::ToolResult { name, .. } if name == "write_file"))
        .expect("the write_file result");
    let first_end = chunks
        .iter()
        .position(|c| matches!(c, OutputChunk::TurnEnd { .. }))
        .unwrap();
    assert!(first_end < write, "the turn ends before its tools run");
    assert!(chunks.contains(&OutputChunk::Thinking("think.".into())));
}
