//! `GET /runs/{run}/output`: a run's live output as Server-Sent Events.
//!
//! Query: `namespace` (default `default`), `from` (the first offset wanted; default
//! from the start). A `Last-Event-ID` header (a reconnecting `EventSource` sends the
//! last id it saw) wins over `from`: the stream goes on after it. Each chunk is an
//! event whose `id` is its offset, `event` its kind and `data` its JSON view
//! ([`chunk_json`]); `event: lagged` (no id, `{"next_offset": N}`) tells a watcher
//! it fell behind and is being caught up from storage; `event: end` closes the
//! stream once the run is closed and every chunk was sent. Auth is the API's: the
//! route sits behind [`super::extension_guard`] (a valid key, a client certificate
//! under mutual TLS) and the caller must be allowed to watch runs in the namespace.

use railyard_model::Rejection;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use tokio_stream::wrappers::ReceiverStream;

use super::json_error;
use crate::grpc::peer::PEER_SUBJECT;
use railyard_engine::error::ApiError;
use railyard_engine::service::Core;
use railyard_engine::service::caller::{self, CallerInput, Credentials, Operation};
use railyard_engine::service::output::{self, OutputEvent};
use railyard_model::output::{ChunkBody, OutputChunk};

/// The route's query.
#[derive(Debug, Deserialize)]
pub(crate) struct OutputQuery {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    from: Option<u64>,
}

/// The routes of live output, for the caller to put behind the extension guard.
pub(crate) fn routes(core: Arc<Core>) -> axum::Router {
    axum::Router::new()
        .route("/runs/{run}/output", axum::routing::get(sse))
        .with_state(core)
}

/// A chunk's JSON view: the same fields as `railyard run watch --stream --output json`.
pub fn chunk_json(c: &OutputChunk) -> serde_json::Value {
    let mut v = serde_json::json!({
        "offset": c.offset,
        "kind": c.body.kind(),
        "step_id": c.step,
        "attempt": c.attempt,
        "time_unix_ms": c.at_ms,
    });
    let fields = match &c.body {
        ChunkBody::Text(t) | ChunkBody::Thinking(t) | ChunkBody::ToolInput(t) | ChunkBody::Error(t) => {
            serde_json::json!({ "text": t })
        }
        ChunkBody::ToolCallStart { name, id } => serde_json::json!({ "name": name, "call_id": id }),
        ChunkBody::ToolResult {
            name,
            excerpt,
            is_error,
        } => serde_json::json!({ "name": name, "text": excerpt, "is_error": is_error }),
        ChunkBody::Usage {
            input_tokens,
            output_tokens,
        } => serde_json::json!({ "input_tokens": input_tokens, "output_tokens": output_tokens }),
        ChunkBody::TurnEnd { stop_reason } => serde_json::json!({ "text": stop_reason }),
        ChunkBody::SegmentStart => serde_json::json!({}),
        ChunkBody::Dropped { chunks, bytes } => {
            serde_json::json!({ "dropped_chunks": chunks, "dropped_bytes": bytes })
        }
    };
    if let (Some(v), serde_json::Value::Object(f)) = (v.as_object_mut(), fields) {
        v.extend(f);
    }
    v
}

fn status_of(e: &ApiError) -> StatusCode {
    match e {
        ApiError::Rejected(Rejection::InvalidArgument(_)) => StatusCode::BAD_REQUEST,
        ApiError::Rejected(Rejection::NotFound(_)) => StatusCode::NOT_FOUND,
        ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        ApiError::Rejected(Rejection::PermissionDenied(_)) => StatusCode::FORBIDDEN,
        ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        ApiError::Rejected(Rejection::AlreadyExists(_))
        | ApiError::Rejected(Rejection::FailedPrecondition(_)) => StatusCode::CONFLICT,
        ApiError::Rejected(Rejection::ResourceExhausted(_)) => StatusCode::TOO_MANY_REQUESTS,
        ApiError::Internal(_) | ApiError::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn sse(
    State(core): State<Arc<Core>>,
    Path(run): Path<String>,
    Query(q): Query<OutputQuery>,
    headers: HeaderMap,
) -> Response {
    let text = |name: &header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    // After the last event seen: its id is the offset.
    let from = match text(&header::HeaderName::from_static("last-event-id")) {
        Some(id) => match id.trim().parse::<u64>() {
            Ok(last) => last.saturating_add(1),
            Err(_) => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID: not an offset (a whole number)".into(),
                );
            }
        },
        None => q.from.unwrap_or(0),
    };
    let input = CallerInput {
        namespace: q.namespace,
        identity: String::new(),
        credentials: Credentials::from_header(
            headers
                .get(header::AUTHORIZATION)
                .map(|v| v.to_str().map_err(|_| ())),
        ),
        // Set by the extension guard from the verified client certificate only.
        peer_subject: text(&header::HeaderName::from_static(PEER_SUBJECT)),
    };
    let events = caller::resolve(&core, input, Operation::WatchRun)
        .and_then(|caller| output::watch(&core, &caller, &run, output::From::Offset(from)));
    let events = match events {
        Ok(events) => events,
        Err(e) => return json_error(status_of(&e), e.to_string()),
    };
    let stream = ReceiverStream::new(events)
        .map(|ev| {
            Ok::<_, Infallible>(match ev {
                Ok(OutputEvent::Chunk(c)) => Event::default()
                    .id(c.offset.to_string())
                    .event(c.body.kind())
                    .data(chunk_json(&c).to_string()),
                Ok(OutputEvent::Lagged { next_offset }) => Event::default()
                    .event("lagged")
                    .data(serde_json::json!({ "next_offset": next_offset }).to_string()),
                Err(e) => Event::default()
                    .event("error")
                    .data(serde_json::json!({ "error": e.to_string() }).to_string()),
            })
        })
        .chain(futures::stream::once(async {
            Ok(Event::default().event("end").data("{}"))
        }));
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
