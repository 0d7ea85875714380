//! The stored records of live output: a chunk row and a run's head row, versioned
//! JSON like every other record (`crate::records`).

use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::records::{Record, decode_record, encode_record};
use railyard_model::Millis;
use railyard_model::output::{ChunkBody, OutputChunk};

use super::OutputHead;

fn v1() -> u32 {
    1
}

#[derive(Debug, Serialize, Deserialize)]
struct ChunkRecord {
    #[serde(default = "v1")]
    v: u32,
    #[serde(rename = "o")]
    offset: u64,
    #[serde(rename = "s")]
    step: String,
    #[serde(rename = "a")]
    attempt: u32,
    #[serde(rename = "t")]
    at_ms: Millis,
    #[serde(flatten)]
    body: BodyRecord,
}

/// The body, tagged by kind; its names are frozen here, whatever the model calls them.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
enum BodyRecord {
    Text {
        x: String,
    },
    Thinking {
        x: String,
    },
    ToolCallStart {
        name: String,
        #[serde(default)]
        id: String,
    },
    ToolInput {
        x: String,
    },
    ToolResult {
        name: String,
        x: String,
        #[serde(default)]
        err: bool,
    },
    Usage {
        input: u64,
        output: u64,
    },
    TurnEnd {
        x: String,
    },
    Error {
        x: String,
    },
    SegmentStart,
    Dropped {
        chunks: u64,
        bytes: u64,
    },
}

impl Record for ChunkRecord {
    const WHAT: &'static str = "output chunk";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes an output chunk's row.
pub fn encode_chunk(c: &OutputChunk) -> Result<Vec<u8>, StorageError> {
    let body = match c.body.clone() {
        ChunkBody::Text(x) => BodyRecord::Text { x },
        ChunkBody::Thinking(x) => BodyRecord::Thinking { x },
        ChunkBody::ToolCallStart { name, id } => BodyRecord::ToolCallStart { name, id },
        ChunkBody::ToolInput(x) => BodyRecord::ToolInput { x },
        ChunkBody::ToolResult {
            name,
            excerpt,
            is_error,
        } => BodyRecord::ToolResult {
            name,
            x: excerpt,
            err: is_error,
        },
        ChunkBody::Usage {
            input_tokens,
            output_tokens,
        } => BodyRecord::Usage {
            input: input_tokens,
            output: output_tokens,
        },
        ChunkBody::TurnEnd { stop_reason } => BodyRecord::TurnEnd { x: stop_reason },
        ChunkBody::Error(x) => BodyRecord::Error { x },
        ChunkBody::SegmentStart => BodyRecord::SegmentStart,
        ChunkBody::Dropped { chunks, bytes } => BodyRecord::Dropped { chunks, bytes },
    };
    encode_record(&ChunkRecord {
        v: ChunkRecord::VERSION,
        offset: c.offset,
        step: c.step.clone(),
        attempt: c.attempt,
        at_ms: c.at_ms,
        body,
    })
}

/// Decodes an output chunk's row.
pub fn decode_chunk(bytes: &[u8]) -> Result<OutputChunk, StorageError> {
    let r: ChunkRecord = decode_record(bytes)?;
    let body = match r.body {
        BodyRecord::Text { x } => ChunkBody::Text(x),
        BodyRecord::Thinking { x } => ChunkBody::Thinking(x),
        BodyRecord::ToolCallStart { name, id } => ChunkBody::ToolCallStart { name, id },
        BodyRecord::ToolInput { x } => ChunkBody::ToolInput(x),
        BodyRecord::ToolResult { name, x, err } => ChunkBody::ToolResult {
            name,
            excerpt: x,
            is_error: err,
        },
        BodyRecord::Usage { input, output } => ChunkBody::Usage {
            input_tokens: input,
            output_tokens: output,
        },
        BodyRecord::TurnEnd { x } => ChunkBody::TurnEnd { stop_reason: x },
        BodyRecord::Error { x } => ChunkBody::Error(x),
        BodyRecord::SegmentStart => ChunkBody::SegmentStart,
        BodyRecord::Dropped { chunks, bytes } => ChunkBody::Dropped { chunks, bytes },
    };
    Ok(OutputChunk {
        offset: r.offset,
        step: r.step,
        attempt: r.attempt,
        at_ms: r.at_ms,
        body,
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct HeadRecord {
    #[serde(default = "v1")]
    v: u32,
    next: u64,
    run_bytes: u64,
    step: String,
    attempt: u32,
    attempt_bytes: u64,
    #[serde(default)]
    dropped_chunks: u64,
    #[serde(default)]
    dropped_bytes: u64,
    #[serde(default)]
    marked_chunks: u64,
    #[serde(default)]
    marked_ms: Millis,
    last_ms: Millis,
}

impl Record for HeadRecord {
    const WHAT: &'static str = "output head";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a run's output head row.
pub fn encode_head(h: &OutputHead) -> Result<Vec<u8>, StorageError> {
    encode_record(&HeadRecord {
        v: HeadRecord::VERSION,
        next: h.next_offset,
        run_bytes: h.run_bytes,
        step: h.step.clone(),
        attempt: h.attempt,
        attempt_bytes: h.attempt_bytes,
        dropped_chunks: h.dropped_chunks,
        dropped_bytes: h.dropped_bytes,
        marked_chunks: h.marked_chunks,
        marked_ms: h.marked_ms,
        last_ms: h.last_ms,
    })
}

/// Decodes a run's output head row.
pub fn decode_head(bytes: &[u8]) -> Result<OutputHead, StorageError> {
    let r: HeadRecord = decode_record(bytes)?;
    Ok(OutputHead {
        next_offset: r.next,
        run_bytes: r.run_bytes,
        step: r.step,
        attempt: r.attempt,
        attempt_bytes: r.attempt_bytes,
        dropped_chunks: r.dropped_chunks,
        dropped_bytes: r.dropped_bytes,
        marked_chunks: r.marked_chunks,
        marked_ms: r.marked_ms,
        last_ms: r.last_ms,
    })
}
