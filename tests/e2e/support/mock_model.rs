//! A mock model server for end-to-end tests: an axum server on a free loopback port
//! speaking the Anthropic Messages and OpenAI chat-completions wire formats, answering
//! each request from a test's script and recording every request it receives.
//!
//! The mock answers by step and turn: it reads the step id and attempt from the system
//! prompt ("(id `STEP`), attempt N") and the turn from the number of assistant
//! messages already in the transcript.
//!
//! Every answer reports token usage in its API's format, the same counts for both
//! ([`turn_usage`]): Anthropic's `usage` with cache reads and writes, OpenAI's with
//! `prompt_tokens_details.cached_tokens`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `anthropic` or `openai`, from the path.
    pub api: &'static str,
    pub body: Value,
    pub headers: HashMap<String, String>,
    pub step: String,
    pub attempt: u32,
    /// Assistant messages already in the transcript.
    pub turn: usize,
    /// How many requests for the same step, attempt and turn came before this one.
    pub repeat: usize,
}

impl Recorded {
    pub fn system(&self) -> String {
        system_prompt(self.api, &self.body)
    }

    /// Every tool result in the transcript: (content, is_error).
    pub fn tool_results(&self) -> Vec<(String, bool)> {
        let messages = self.body["messages"].as_array().cloned().unwrap_or_default();
        let mut out = Vec::new();
        for m in messages {
            if self.api == "openai" {
                if m["role"] == "tool" {
                    let c = m["content"].as_str().unwrap_or_default().to_string();
                    let err = c.starts_with("Error: ");
                    out.push((c, err));
                }
                continue;
            }
            for b in m["content"].as_array().cloned().unwrap_or_default() {
                if b["type"] == "tool_result" {
                    out.push((
                        b["content"].as_str().unwrap_or_default().to_string(),
                        b["is_error"].as_bool().unwrap_or(false),
                    ));
                }
            }
        }
        out
    }
}

/// What the model says in one turn.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub text: Option<String>,
    pub calls: Vec<(String, Value)>,
}

pub fn say(text: &str) -> Turn {
    Turn {
        text: Some(text.into()),
        calls: Vec::new(),
    }
}

pub fn call(name: &str, input: Value) -> Turn {
    Turn {
        text: None,
        calls: vec![(name.into(), input)],
    }
}

/// Some text and one tool call in the same turn.
pub fn say_and_call(text: &str, name: &str, input: Value) -> Turn {
    Turn {
        text: Some(text.into()),
        ..call(name, input)
    }
}

pub fn complete(notes: &str) -> Turn {
    call("complete_step", json!({ "notes": notes }))
}

/// The tokens the mock reports for a turn: (input not cached, output, cache read,
/// cache write). OpenAI has no cache writes, so its answers report none.
pub fn turn_usage(turn: usize) -> (u64, u64, u64, u64) {
    (100 + 10 * turn as u64, 20, 1000, 50)
}

/// How the mock answers one request.
pub enum Reply {
    Turn(Turn),
    /// An error status with headers and a body.
    Error(u16, Vec<(&'static str, &'static str)>, Value),
    /// Never answer (the worker is killed meanwhile).
    Hang,
    /// Answer with the turn once the flag is set.
    After(Arc<AtomicBool>, Turn),
}

pub type Script = dyn Fn(&Recorded) -> Reply + Send + Sync;

struct MockState {
    requests: Mutex<Vec<Recorded>>,
    script: Box<Script>,
}

/// A mock model server on a free loopback port, on its own runtime.
pub struct MockModel {
    rt: Option<tokio::runtime::Runtime>,
    state: Arc<MockState>,
    /// `http://127.0.0.1:PORT` (Anthropic base URL; OpenAI's is this + `/v1`).
    pub url: String,
}

impl MockModel {
    pub fn start(script: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let state = Arc::new(MockState {
            requests: Mutex::new(Vec::new()),
            script: Box::new(script),
        });
        let app = axum::Router::new()
            .route("/v1/messages", post(anthropic_handler))
            .route("/v1/chat/completions", post(openai_handler))
            .with_state(state.clone());
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind mock");
        let addr = listener.local_addr().expect("mock addr");
        rt.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            rt: Some(rt),
            state,
            url: format!("http://{addr}"),
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn requests_for(&self, step: &str) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.step == step).collect()
    }

    pub fn requests_for_attempt(&self, step: &str, attempt: u32) -> Vec<Recorded> {
        self.requests_for(step)
            .into_iter()
            .filter(|r| r.attempt == attempt)
            .collect()
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The system prompt: Anthropic's `system` (text, or text blocks), or OpenAI's first
/// message.
fn system_prompt(api: &str, body: &Value) -> String {
    let system = match api {
        "anthropic" => &body["system"],
        _ => &body["messages"][0]["content"],
    };
    match system.as_array() {
        Some(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        None => system.as_str().unwrap_or_default().to_string(),
    }
}

/// Step id and attempt from the system prompt's "(id `STEP`), attempt N.".
fn step_and_attempt(system: &str) -> (String, u32) {
    let Some(start) = system.find("(id `") else {
        return (String::new(), 0);
    };
    let rest = &system[start + 5..];
    let step = rest.split('`').next().unwrap_or_default().to_string();
    let attempt = rest
        .split("attempt ")
        .nth(1)
        .and_then(|a| a.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (step, attempt)
}

async fn record(state: &MockState, api: &'static str, headers: &HeaderMap, body: Value) -> (Recorded, Reply) {
    let (step, attempt) = step_and_attempt(&system_prompt(api, &body));
    let turn = body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0);
    let headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let rec = {
        let mut requests = state.requests.lock().unwrap();
        let repeat = requests
            .iter()
            .filter(|r| r.step == step && r.attempt == attempt && r.turn == turn)
            .count();
        let rec = Recorded {
            api,
            body,
            headers,
            step,
            attempt,
            turn,
            repeat,
        };
        requests.push(rec.clone());
        rec
    };
    let reply = (state.script)(&rec);
    (rec, reply)
}

async fn error_or_hang(reply: Reply) -> Result<Turn, Response> {
    match reply {
        Reply::Turn(t) => Ok(t),
        Reply::Error(status, headers, body) => {
            let mut resp = (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
            for (k, v) in headers {
                resp.headers_mut().insert(k, v.parse().unwrap());
            }
            Err(resp)
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            Err(StatusCode::GATEWAY_TIMEOUT.into_response())
        }
        Reply::After(flag, turn) => {
            while !flag.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(turn)
        }
    }
}

async fn anthropic_handler(
    State(state): State<Arc<MockState>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    answer(&state, "anthropic", &headers, body, anthropic_message).await
}

async fn openai_handler(
    State(state): State<Arc<MockState>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    answer(&state, "openai", &headers, body, openai_completion).await
}

/// Records the request and answers it as its script says, rendering a turn with `render`.
async fn answer(
    state: &MockState,
    api: &'static str,
    headers: &HeaderMap,
    body: Value,
    render: fn(&Recorded, Turn) -> Value,
) -> Response {
    let (rec, reply) = record(state, api, headers, body).await;
    match error_or_hang(reply).await {
        Ok(turn) => axum::Json(render(&rec, turn)).into_response(),
        Err(resp) => resp,
    }
}

/// An Anthropic Messages response.
fn anthropic_message(rec: &Recorded, turn: Turn) -> Value {
    let (input, output, cache_read, cache_write) = turn_usage(rec.turn);
    let mut content = Vec::new();
    if let Some(text) = &turn.text {
        content.push(json!({"type": "text", "text": text}));
    }
    for (i, (name, input)) in turn.calls.iter().enumerate() {
        content.push(json!({
            "type": "tool_use", "id": format!("toolu_{}_{}_{i}", rec.attempt, rec.turn), "name": name, "input": input
        }));
    }
    let stop = if turn.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    json!({
        "id": "msg_mock", "type": "message", "role": "assistant", "model": rec.body["model"],
        "content": content, "stop_reason": stop,
        "usage": {"input_tokens": input, "output_tokens": output,
                  "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write}
    })
}

/// An OpenAI chat-completions response.
fn openai_completion(rec: &Recorded, turn: Turn) -> Value {
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .enumerate()
        .map(|(i, (name, input))| {
            json!({"id": format!("call_{}_{}_{i}", rec.attempt, rec.turn), "type": "function",
                   "function": {"name": name, "arguments": input.to_string()}})
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": turn.text});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let finish = if turn.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let (input, output, cache_read, _) = turn_usage(rec.turn);
    json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "model": rec.body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": input + cache_read, "completion_tokens": output,
                  "total_tokens": input + cache_read + output,
                  "prompt_tokens_details": {"cached_tokens": cache_read}}
    })
}
