//! Shipping a step's live output: [`Lease::output`](crate::Lease::output) pushes a
//! chunk onto a bounded in-memory queue (never blocking: past the bound the chunk is
//! dropped and counted), and [`LeaseKeeper::ship_output`] sends what is queued with
//! `AppendStepOutput` every [`SHIP_EVERY`], and [`LeaseKeeper::flush_output`] once
//! more when the step ends. Adjacent text, thinking and tool-input pieces are joined,
//! so a token-by-token stream costs a few chunks a batch. A batch that fails is
//! dropped (output is for watching); a lease the server no longer takes stops it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use railyard_proto::v1::{self, AppendStepOutputRequest, OutputKind};
use railyard_sdk::ClientError;
use tracing::{debug, warn};

use super::{LeaseKeeper, LeaseStatus};
use crate::output::OutputChunk;

/// How often queued output is sent.
pub(crate) const SHIP_EVERY: Duration = Duration::from_millis(250);
/// Most bytes of text queued; past it chunks are dropped.
const QUEUE_BYTES: usize = 1 << 20;
/// Most chunks queued.
const QUEUE_CHUNKS: usize = 4096;
/// Most chunks, and text bytes, in one append (the server's limits).
const BATCH_CHUNKS: usize = 1024;
const BATCH_BYTES: usize = 1 << 20;
/// Longest joined text piece.
const JOIN_UP_TO: usize = 8 << 10;

/// The queue of output not yet sent.
#[derive(Default)]
pub(crate) struct OutputQueue {
    queue: Mutex<Queued>,
    /// Chunks dropped because the queue was full, or their batch failed.
    dropped: AtomicU64,
    /// The server refused the lease: nothing more is sent.
    stopped: AtomicBool,
    /// One batch in flight at a time, so batches arrive in order.
    sending: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Queued {
    chunks: VecDeque<v1::OutputChunk>,
    bytes: usize,
}

fn text_of(kind: OutputKind, text: String) -> v1::OutputChunk {
    v1::OutputChunk {
        kind: kind as i32,
        text,
        ..Default::default()
    }
}

/// A chunk on the wire (the server numbers it).
pub(crate) fn to_proto(chunk: OutputChunk) -> v1::OutputChunk {
    match chunk {
        OutputChunk::Text(t) => text_of(OutputKind::Text, t),
        OutputChunk::Thinking(t) => text_of(OutputKind::Thinking, t),
        OutputChunk::ToolCallStart { name, id } => v1::OutputChunk {
            kind: OutputKind::ToolCallStart as i32,
            name,
            call_id: id,
            ..Default::default()
        },
        OutputChunk::ToolInput(t) => text_of(OutputKind::ToolInput, t),
        OutputChunk::ToolResult {
            name,
            excerpt,
            is_error,
        } => v1::OutputChunk {
            kind: OutputKind::ToolResult as i32,
            name,
            text: excerpt,
            is_error,
            ..Default::default()
        },
        OutputChunk::Usage {
            input_tokens,
            output_tokens,
        } => v1::OutputChunk {
            kind: OutputKind::Usage as i32,
            input_tokens,
            output_tokens,
            ..Default::default()
        },
        OutputChunk::TurnEnd { stop_reason } => text_of(OutputKind::TurnEnd, stop_reason),
        OutputChunk::Error(t) => text_of(OutputKind::Error, t),
    }
}

fn weight(c: &v1::OutputChunk) -> usize {
    c.text.len() + c.name.len() + c.call_id.len()
}

impl OutputQueue {
    /// Queues a chunk, joining it to the last one when both are pieces of the same
    /// text; drops it (counted) when the queue is full. Never blocks on I/O.
    pub(crate) fn push(&self, chunk: OutputChunk) {
        if self.stopped.load(Ordering::Relaxed) {
            return;
        }
        let chunk = to_proto(chunk);
        let w = weight(&chunk);
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.bytes + w > QUEUE_BYTES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let joinable = matches!(
            OutputKind::try_from(chunk.kind),
            Ok(OutputKind::Text | OutputKind::Thinking | OutputKind::ToolInput)
        );
        if joinable
            && let Some(last) = q.chunks.back_mut()
            && last.kind == chunk.kind
            && last.text.len() + chunk.text.len() <= JOIN_UP_TO
        {
            last.text.push_str(&chunk.text);
            q.bytes += w;
            return;
        }
        if q.chunks.len() >= QUEUE_CHUNKS {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.bytes += w;
        q.chunks.push_back(chunk);
    }

    /// The next batch, taken off the queue.
    fn take_batch(&self) -> Vec<v1::OutputChunk> {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut bytes = 0;
        while let Some(front) = q.chunks.front() {
            let w = weight(front);
            if out.len() >= BATCH_CHUNKS || (!out.is_empty() && bytes + w > BATCH_BYTES) {
                break;
            }
            bytes += w;
            q.bytes -= w;
            if let Some(c) = q.chunks.pop_front() {
                out.push(c);
            }
        }
        out
    }

    /// Chunks dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl LeaseKeeper {
    /// Sends queued output every [`SHIP_EVERY`] until the lease is no longer held.
    pub(crate) async fn ship_output(&self) {
        loop {
            tokio::time::sleep(SHIP_EVERY).await;
            if *self.status.borrow() != LeaseStatus::Held {
                return;
            }
            self.flush_output().await;
        }
    }

    /// Live output chunks dropped so far (queue full, or their batch lost).
    pub(crate) fn output_dropped(&self) -> u64 {
        self.output.dropped()
    }

    /// Sends everything queued now, in batches, one at a time.
    pub(crate) async fn flush_output(&self) {
        let out = &self.output;
        let _turn = out.sending.lock().await;
        loop {
            if out.stopped.load(Ordering::Relaxed) {
                return;
            }
            let batch = out.take_batch();
            if batch.is_empty() {
                return;
            }
            let n = batch.len() as u64;
            let req = AppendStepOutputRequest {
                task_token: self.token.clone(),
                identity: self.worker.identity().to_string(),
                chunks: batch,
            };
            match self.worker.client().append_step_output(req).await {
                Ok(r) if r.dropped > 0 => debug!(dropped = r.dropped, "live output past the server's cap"),
                Ok(_) => {}
                Err(
                    e @ (ClientError::FailedPrecondition(_)
                    | ClientError::NotFound(_)
                    | ClientError::PermissionDenied(_)
                    | ClientError::Unauthenticated(_)),
                ) => {
                    debug!(error = %e, "the server takes no more output for this lease");
                    out.stopped.store(true, Ordering::Relaxed);
                    return;
                }
                Err(e) => {
                    out.dropped.fetch_add(n, Ordering::Relaxed);
                    warn!(error = %e, chunks = n, "live output batch not delivered; dropped");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_text_are_joined_and_a_full_queue_drops_and_counts() {
        let q = OutputQueue::default();
        q.push(OutputChunk::Text("he".into()));
        q.push(OutputChunk::Text("llo".into()));
        q.push(OutputChunk::ToolCallStart {
            name: "bash".into(),
            id: "c".into(),
        });
        q.push(OutputChunk::ToolInput("{".into()));
        q.push(OutputChunk::ToolInput("}".into()));
        let batch = q.take_batch();
        let texts: Vec<(i32, &str)> = batch.iter().map(|c| (c.kind, c.text.as_str())).collect();
        assert_eq!(
            texts,
            vec![
                (OutputKind::Text as i32, "hello"),
                (OutputKind::ToolCallStart as i32, ""),
                (OutputKind::ToolInput as i32, "{}"),
            ]
        );
        assert!(q.take_batch().is_empty());

        // Bounded: a megabyte of queued text, then every push is dropped and counted.
        let piece = "x".repeat(JOIN_UP_TO);
        for _ in 0..(QUEUE_BYTES / JOIN_UP_TO) {
            q.push(OutputChunk::Thinking(piece.clone()));
        }
        assert_eq!(q.dropped(), 0);
        q.push(OutputChunk::Text("one more".into()));
        q.push(OutputChunk::Error("and another".into()));
        assert_eq!(q.dropped(), 2);
        // A batch stays within the server's limits.
        let batch = q.take_batch();
        assert!(batch.iter().map(weight).sum::<usize>() <= BATCH_BYTES);
        assert!(!batch.is_empty());
    }
}
