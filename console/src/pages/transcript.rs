//! `GET /ui/runs/{run}/transcript`: what the agent did. First the step in flight's
//! latest checkpoint, or with `?step=` that step's (a finished step's last, kept by
//! the server after the step ended), rendered as a conversation
//! ([`super::checkpoint`]), a page of it (`?at=` pages on); then the run's live output (docs/live-output.md): each step
//! attempt under its heading, the model's text and thinking as it streamed, each tool
//! call with its input and the start of its result, turn ends and errors. The live
//! part is an empty conversation that the vendored htmx SSE extension fills from
//! `/ui/runs/{run}/transcript/stream`, which replays the kept output (the last
//! [`TAIL_CHUNKS`] chunks) and then follows the open step's as it is produced; it
//! ends once the run is closed.
//!
//! Each chunk is rendered here, escaped, as an HTML fragment (the browser only
//! appends it). A tool result longer than [`RESULT_SHOWN`] bytes is cut with its size
//! said. Budgets: [`api::TRANSCRIPT`] for the page (one `GetStepCheckpoint` page),
//! [`api::OUTPUT`] for the stream (one `WatchOutput`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use maud::{Markup, html};
use railyard_proto::v1 as pb;
use railyard_proto::v1::watch_output_response::Message;

use super::checkpoint::RESULT_SHOWN;
use crate::Shared;
use crate::api;
use crate::layout::{self, encode};
use crate::session::Viewer;

/// Chunks replayed when the page opens (a tail of what is kept).
pub const TAIL_CHUNKS: u64 = 2000;

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Params {
    /// The checkpoint byte the page starts at.
    #[serde(default)]
    at: u64,
    /// `1`: the page starts inside a line; skip to its end.
    #[serde(default)]
    skip: String,
    /// The step whose checkpoint is shown (empty: the step in flight).
    #[serde(default)]
    step: String,
}

/// `GET /ui/runs/{run}/transcript`.
pub(crate) async fn page(viewer: Viewer, Path(run_id): Path<String>, Query(p): Query<Params>) -> Response {
    let api = match viewer.api(api::TRANSCRIPT) {
        Ok(api) => api,
        Err(e) => return layout::message_page(&viewer, StatusCode::BAD_REQUEST, "Refused", &e.to_string()),
    };
    let skip = !p.skip.is_empty();
    let checkpoint = match api.step_checkpoint(&run_id, &p.step, p.at).await {
        Ok(c) => c,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let rendered = super::checkpoint::render(&checkpoint, p.at, skip);
    let mut here = format!(
        "/ui/runs/{}/transcript?ns={}",
        encode(&run_id),
        encode(&viewer.ns)
    );
    if !p.step.is_empty() {
        here = format!("{here}&step={}", encode(&p.step));
    }
    let run_url = format!("/ui/runs/{}?ns={}", encode(&run_id), encode(&viewer.ns));
    let stream = format!(
        "/ui/runs/{}/transcript/stream?ns={}",
        encode(&run_id),
        encode(&viewer.ns)
    );
    let body = html! {
        h1 { "Transcript of " a href=(run_url) { (run_id) } }
        section.checkpoint aria-labelledby="checkpoint-h" {
            h2 #checkpoint-h {
                @if p.step.is_empty() { "From the latest checkpoint" } @else { "Step " (p.step) ", from its last checkpoint" }
            }
            @if checkpoint.step_id.is_empty() && !p.step.is_empty() {
                p.muted {
                    "No checkpoint of step " (p.step) " is kept: it never heartbeated one, or the server dropped it "
                    "(a run keeps its finished steps' checkpoints up to the server's bound, oldest dropped first, "
                    "and a server may keep none)."
                }
            }
            @if !checkpoint.step_id.is_empty() {
                p.muted {
                    "Step " strong { (checkpoint.step_id) } ", attempt " (checkpoint.attempt) ": "
                    (checkpoint.total_bytes) " bytes in all"
                    @if p.at > 0 || rendered.next.is_some() {
                        ", this page from byte " (p.at)
                    }
                    "."
                }
            }
            div.conversation { (rendered.markup) }
            nav.pager aria-label="Checkpoint pages" {
                @if p.at > 0 { a href=(here) { "From the start" } " " }
                @if let Some(next) = rendered.next {
                    a href=(format!("{here}&at={}{}", next.at, if next.skip { "&skip=1" } else { "" })) { "Next part" }
                }
            }
        }
        section aria-labelledby="live-h" {
            h2 #live-h { "Live output" }
            p.muted { "From the run's live output: the last " (TAIL_CHUNKS) " chunks kept, then the open step's as it is produced." }
            div #transcript .transcript hx-ext="sse" sse-connect=(stream) sse-swap="chunk" hx-swap="beforeend" sse-close="end" aria-live="polite" {}
            noscript { p { "The live output streams with JavaScript; without it, read it with " code { "railyard run watch --stream" } "." } }
        }
    };
    let title = format!("Transcript of {run_id}");
    layout::respond(&viewer, &api, StatusCode::OK, layout::page(&viewer, &title, body))
}

/// `GET /ui/runs/{run}/transcript/stream`: Server-Sent Events, each `chunk` event an
/// HTML fragment; `end` when the run's output is over (or the refusal, as a chunk).
pub(crate) async fn stream(
    viewer: Viewer,
    State(shared): State<Arc<Shared>>,
    Path(run_id): Path<String>,
) -> Response {
    let api = match viewer.api(api::OUTPUT) {
        Ok(api) => api,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let watched = api.watch_output(&run_id, TAIL_CHUNKS).await;
    let mut shutdown = shared.shutdown.clone();
    let stopped = async move {
        match shutdown.as_mut() {
            Some(rx) => {
                let _ = rx.wait_for(|s| *s).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let events = match watched {
        Ok(stream) => stream
            .map(|item| {
                let html = match item {
                    Ok(pb::WatchOutputResponse {
                        message: Some(Message::Chunk(c)),
                    }) => chunk(&c),
                    Ok(_) => html! {},
                    Err(status) => html! { p.refusal { (status.message()) } },
                };
                Ok::<_, Infallible>(Event::default().event("chunk").data(html.into_string()))
            })
            .boxed(),
        Err(e) => {
            let html = html! { p.refusal role="alert" { (e.to_string()) } }.into_string();
            futures::stream::iter([Ok(Event::default().event("chunk").data(html))]).boxed()
        }
    };
    let end = futures::stream::iter([Ok(Event::default().event("end").data("end"))]);
    let events = events.chain(end).take_until(Box::pin(stopped));
    let mut response = Sse::new(events).keep_alive(KeepAlive::default()).into_response();
    response
        .headers_mut()
        .insert(api::CALLS_HEADER, axum::http::HeaderValue::from(api.calls()));
    viewer.finish(response)
}

/// One chunk as an HTML fragment.
pub(crate) fn chunk(c: &pb::OutputChunk) -> Markup {
    let kind = pb::OutputKind::try_from(c.kind).unwrap_or(pb::OutputKind::Unspecified);
    html! {
        @match kind {
            pb::OutputKind::SegmentStart => h2.segment { "Step " (c.step_id) ", attempt " (c.attempt) " " span.muted { (layout::time(c.time_unix_ms)) } },
            pb::OutputKind::Text => span.text { (c.text) },
            pb::OutputKind::Thinking => span.thinking { (c.text) },
            pb::OutputKind::ToolCallStart => div.turn.tool { "Tool call " (layout::tool_name(&c.name)) " " span.muted { (c.call_id) } },
            pb::OutputKind::ToolInput => code.tool-input { (c.text) },
            pb::OutputKind::ToolResult => div.turn.tool {
                @if c.is_error { "Tool error from " } @else { "Result of " }
                (layout::tool_name(&c.name))
                @let (shown, left) = layout::cut(&c.text, RESULT_SHOWN);
                pre { (shown) }
                @if left > 0 { p.muted { "… cut: " (left) " more bytes (" (c.text.len()) " in all)" } }
            },
            pb::OutputKind::Usage => span.muted.usage { " [" (c.input_tokens) " in, " (c.output_tokens) " out] " },
            pb::OutputKind::TurnEnd => div.turn-end.muted { "— turn ended: " (c.text) },
            pb::OutputKind::Error => p.refusal { (c.text) },
            pb::OutputKind::Dropped => p.muted { (c.dropped_chunks) " chunks (" (c.dropped_bytes) " bytes) were dropped past the output caps." },
            pb::OutputKind::Unspecified => {},
        }
    }
}
