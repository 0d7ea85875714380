//! Live output on the wire: `History.WatchOutput` and `Tasks.AppendStepOutput`
//! (their handlers call these), and the conversion of chunks.

use super::status;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use railyard_proto::v1;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::*;
use railyard_engine::service::output::{self, OutputEvent};
use railyard_engine::service::tasks;
use railyard_model::output::{ChunkBody, OutputChunk};

/// `WatchOutput`'s stream.
pub type OutputStream = Pin<Box<dyn Stream<Item = Result<v1::WatchOutputResponse, Status>> + Send>>;

/// A worker's chunk as the service takes it; `chunks[i].kind` named when unknown.
pub(crate) fn body_from_proto(i: usize, c: v1::OutputChunk) -> Result<ChunkBody, ApiError> {
    use v1::OutputKind as K;
    let kind = K::try_from(c.kind).unwrap_or(K::Unspecified);
    Ok(match kind {
        K::Text => ChunkBody::Text(c.text),
        K::Thinking => ChunkBody::Thinking(c.text),
        K::ToolCallStart => ChunkBody::ToolCallStart {
            name: c.name,
            id: c.call_id,
        },
        K::ToolInput => ChunkBody::ToolInput(c.text),
        K::ToolResult => ChunkBody::ToolResult {
            name: c.name,
            excerpt: c.text,
            is_error: c.is_error,
        },
        K::Usage => ChunkBody::Usage {
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
        },
        K::TurnEnd => ChunkBody::TurnEnd { stop_reason: c.text },
        K::Error => ChunkBody::Error(c.text),
        // Refused by the service, naming the kind: only the server writes these.
        K::SegmentStart => ChunkBody::SegmentStart,
        K::Dropped => ChunkBody::Dropped { chunks: 0, bytes: 0 },
        K::Unspecified => {
            return Err(ApiError::field(
                &format!("chunks[{i}].kind"),
                format!("unknown output kind {}", c.kind),
            ));
        }
    })
}

/// A stored chunk on the wire.
pub fn chunk_to_proto(c: &OutputChunk) -> v1::OutputChunk {
    use v1::OutputKind as K;
    let mut out = v1::OutputChunk {
        offset: c.offset,
        step_id: c.step.clone(),
        attempt: c.attempt,
        time_unix_ms: c.at_ms,
        ..Default::default()
    };
    let kind = match &c.body {
        ChunkBody::Text(t) => {
            out.text = t.clone();
            K::Text
        }
        ChunkBody::Thinking(t) => {
            out.text = t.clone();
            K::Thinking
        }
        ChunkBody::ToolCallStart { name, id } => {
            out.name = name.clone();
            out.call_id = id.clone();
            K::ToolCallStart
        }
        ChunkBody::ToolInput(t) => {
            out.text = t.clone();
            K::ToolInput
        }
        ChunkBody::ToolResult {
            name,
            excerpt,
            is_error,
        } => {
            out.name = name.clone();
            out.text = excerpt.clone();
            out.is_error = *is_error;
            K::ToolResult
        }
        ChunkBody::Usage {
            input_tokens,
            output_tokens,
        } => {
            out.input_tokens = *input_tokens;
            out.output_tokens = *output_tokens;
            K::Usage
        }
        ChunkBody::TurnEnd { stop_reason } => {
            out.text = stop_reason.clone();
            K::TurnEnd
        }
        ChunkBody::Error(t) => {
            out.text = t.clone();
            K::Error
        }
        ChunkBody::SegmentStart => K::SegmentStart,
        ChunkBody::Dropped { chunks, bytes } => {
            out.dropped_chunks = *chunks;
            out.dropped_bytes = *bytes;
            K::Dropped
        }
    };
    out.kind = kind as i32;
    out
}

/// `History.WatchOutput`.
pub(crate) async fn watch_output(
    core: &Arc<Core>,
    req: Request<v1::WatchOutputRequest>,
) -> Result<Response<OutputStream>, Status> {
    let (metadata, _, r) = req.into_parts();
    let caller = caller_of(core, &metadata, r.namespace, String::new(), Operation::WatchRun)?;
    let from = match r.from_end {
        0 => output::From::Offset(r.from_offset),
        n => output::From::End(n),
    };
    let events = output::watch(core, &caller, &r.run_id, from).map_err(status)?;
    let stream = ReceiverStream::new(events).map(|ev| {
        ev.map(|ev| v1::WatchOutputResponse {
            message: Some(match ev {
                OutputEvent::Chunk(c) => v1::watch_output_response::Message::Chunk(chunk_to_proto(&c)),
                OutputEvent::Lagged { next_offset } => {
                    v1::watch_output_response::Message::Lagged(v1::OutputLagged { next_offset })
                }
            }),
        })
        .map_err(status)
    });
    Ok(Response::new(Box::pin(stream)))
}

/// `Tasks.AppendStepOutput`.
pub(crate) async fn append_step_output(
    core: &Arc<Core>,
    req: Request<v1::AppendStepOutputRequest>,
) -> Result<Response<v1::AppendStepOutputResponse>, Status> {
    let (metadata, _, r) = req.into_parts();
    let (_caller, claims) =
        tasks::lease_holder(core, &credentials(&metadata), &r.task_token, r.identity).map_err(status)?;
    if r.chunks.len() > output::MAX_APPEND_CHUNKS {
        return Err(status(ApiError::field(
            "chunks",
            format!(
                "{} chunks, more than the limit of {}",
                r.chunks.len(),
                output::MAX_APPEND_CHUNKS
            ),
        )));
    }
    let bodies = r
        .chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| body_from_proto(i, c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(status)?;
    let done = output::append(core, &claims, bodies).map_err(status)?;
    Ok(Response::new(v1::AppendStepOutputResponse {
        accepted: done.accepted,
        dropped: done.dropped,
    }))
}
