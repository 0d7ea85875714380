//! Shared helpers: a recording fake lease, step tasks, a recording provider wrapper and a
//! tiny local HTTP server that answers model calls from a queue of canned replies.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use railyard_proto::v1::{CoordinatorNote, Signal, StepTask, StuckReport, TokenUsage};
use railyard_worker::agent::Checkpoint;
use railyard_worker::output::{OutputChunk, OutputSink};
use railyard_worker::provider::{BoxFuture, ModelRequest, ModelTurn, Provider, ProviderError};
use railyard_worker::{HeartbeatOutcome, Lease, LeaseError};
use serde_json::Value;

/// One heartbeat the fake lease received.
#[derive(Debug, Clone)]
pub struct Beat {
    pub checkpoint: Vec<u8>,
    pub notes: Vec<CoordinatorNote>,
}

impl Beat {
    pub fn transcript(&self) -> Checkpoint {
        Checkpoint::decode(&self.checkpoint).expect("heartbeat checkpoint decodes")
    }
}

/// An in-memory lease: records heartbeats, answers from a queue (default: all fine).
#[derive(Default)]
pub struct FakeLease {
    pub beats: Mutex<Vec<Beat>>,
    pub replies: Mutex<VecDeque<Result<HeartbeatOutcome, LeaseError>>>,
    /// Every usage report, in order, with its model.
    pub usage: Mutex<Vec<(TokenUsage, String)>>,
    pub stuck: Mutex<Vec<StuckReport>>,
    /// Every live-output chunk, in order.
    pub output: Mutex<Vec<OutputChunk>>,
}

impl FakeLease {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn reply(self, r: Result<HeartbeatOutcome, LeaseError>) -> Self {
        self.replies.lock().unwrap().push_back(r);
        self
    }

    pub fn beats(&self) -> Vec<Beat> {
        self.beats.lock().unwrap().clone()
    }
}

impl Lease for FakeLease {
    fn heartbeat(
        &self,
        checkpoint: Vec<u8>,
        notes: Vec<CoordinatorNote>,
    ) -> BoxFuture<'_, Result<HeartbeatOutcome, LeaseError>> {
        self.beats.lock().unwrap().push(Beat { checkpoint, notes });
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Ok(HeartbeatOutcome::default()));
        Box::pin(async move { reply })
    }

    fn report_usage(&self, usage: TokenUsage, model: &str) {
        self.usage.lock().unwrap().push((usage, model.to_string()));
    }

    fn report_stuck(&self, report: StuckReport) {
        self.stuck.lock().unwrap().push(report);
    }

    fn output(&self, chunk: OutputChunk) {
        self.output.lock().unwrap().push(chunk);
    }
}

/// A steer signal as the server would deliver it.
pub fn steer(event_id: u64, text: &str) -> Signal {
    Signal {
        name: "steer".into(),
        payload_json: serde_json::to_string(text).unwrap(),
        event_id,
    }
}

/// A step task as the server would hand it out.
pub fn task(step_id: &str, prompt: &str) -> StepTask {
    StepTask {
        task_token: "token".into(),
        namespace: "default".into(),
        run_id: "run-1".into(),
        workflow_id: "demo".into(),
        workflow_name: "Demo".into(),
        workflow_description: "A demo workflow".into(),
        step_id: step_id.into(),
        step_title: format!("Step {step_id}"),
        step_index: 0,
        step_count: 3,
        attempt: 1,
        prompt: prompt.into(),
        goal: "a haiku about rust".into(),
        ..Default::default()
    }
}

/// Wraps a provider and keeps every request it was sent.
pub struct Recording<P> {
    pub inner: P,
    pub requests: Mutex<Vec<ModelRequest>>,
}

impl<P> Recording<P> {
    pub fn new(inner: P) -> Self {
        Self {
            inner,
            requests: Mutex::new(Vec::new()),
        }
    }

    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl<P: Provider> Provider for Recording<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        out: &'a dyn OutputSink,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        self.requests.lock().unwrap().push(req.clone());
        self.inner.complete(req, out)
    }
}

/// A piece of a streamed (`text/event-stream`) reply.
#[derive(Clone, Debug)]
pub enum Piece {
    /// Bytes sent as they are.
    Bytes(String),
    /// The connection is cut here, mid-answer.
    Cut,
    /// Nothing more is sent, and the connection stays open.
    Stall,
}

/// A canned HTTP reply.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
    /// Set: the reply is this event stream instead of `body`.
    pub stream: Option<Vec<Piece>>,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            body,
            stream: None,
        }
    }

    pub fn status(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body,
            stream: None,
        }
    }

    /// A 200 `text/event-stream` reply sent in these pieces.
    pub fn stream(pieces: Vec<Piece>) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            body: Value::Null,
            stream: Some(pieces),
        }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// What the mock server saw.
#[derive(Default)]
pub struct MockState {
    pub replies: Mutex<VecDeque<Reply>>,
    pub requests: Mutex<Vec<(HeaderMap, Value)>>,
}

impl MockState {
    pub fn requests(&self) -> Vec<(HeaderMap, Value)> {
        self.requests.lock().unwrap().clone()
    }
}

async fn answer(State(state): State<Arc<MockState>>, headers: HeaderMap, body: String) -> Response {
    let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    state.requests.lock().unwrap().push((headers, json));
    let reply = state.replies.lock().unwrap().pop_front();
    let Some(reply) = reply else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no scripted reply left").into_response();
    };
    let mut out = HeaderMap::new();
    for (k, v) in reply.headers {
        out.insert(k, v.parse().unwrap());
    }
    let status = StatusCode::from_u16(reply.status).unwrap();
    let Some(pieces) = reply.stream else {
        out.insert("content-type", "application/json".parse().unwrap());
        return (status, out, reply.body.to_string()).into_response();
    };
    out.insert("content-type", "text/event-stream".parse().unwrap());
    // A cut ends the body with an error, which makes the server drop the connection
    // before the chunked body's end. The body first returns pending once: hyper then
    // flushes what it holds, so the pieces before the cut reach the client.
    let body = futures::stream::iter(pieces).then(|piece| async move {
        match piece {
            Piece::Bytes(text) => Ok(axum::body::Bytes::from(text)),
            Piece::Cut => {
                tokio::task::yield_now().await;
                Err(std::io::Error::other("cut mid-answer"))
            }
            Piece::Stall => std::future::pending().await,
        }
    });
    (status, out, Body::from_stream(body)).into_response()
}

/// Starts a model API double on 127.0.0.1 answering POSTs to `path` with `replies` in
/// order; returns its base URL (`http://127.0.0.1:PORT`) and its state.
pub async fn mock_model(path: &str, replies: Vec<Reply>) -> (String, Arc<MockState>) {
    let state = Arc::new(MockState {
        replies: Mutex::new(replies.into()),
        requests: Mutex::new(Vec::new()),
    });
    let app = Router::new().route(path, post(answer)).with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), state)
}

/// The workspace tool results of a transcript message, by tool-use id.
pub fn tool_results(req: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in req["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                out.push((
                    b["tool_use_id"].as_str().unwrap_or_default().to_string(),
                    b["content"].to_string(),
                ));
            }
        }
    }
    out
}
