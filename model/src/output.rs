//! Live output of a step attempt: what the model writes and which tools it calls,
//! for watchers. Not part of the run's history (see `docs/live-output.md`): a chunk
//! has a per-run offset, counted from 1 with no gaps among the chunks kept, and
//! belongs to one step attempt.

use crate::Millis;

/// What a chunk says, normalised across providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkBody {
    /// Text the model writes, as it arrives.
    Text(String),
    /// The model's thinking, as it arrives.
    Thinking(String),
    /// A tool call starts: the tool's name and the provider's call id.
    ToolCallStart {
        /// The tool's name.
        name: String,
        /// The provider's call id.
        id: String,
    },
    /// A piece of the current tool call's input JSON.
    ToolInput(String),
    /// The start of a tool's result, and whether it is an error.
    ToolResult {
        /// The tool's name.
        name: String,
        /// The start of its result.
        excerpt: String,
        /// Whether the result is an error.
        is_error: bool,
    },
    /// Tokens a turn used.
    Usage {
        /// Input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
    },
    /// A model turn ended, with its stop reason.
    TurnEnd {
        /// The provider's stop reason.
        stop_reason: String,
    },
    /// A model call failed.
    Error(String),
    /// A new step attempt starts: the chunks after it, up to the next segment
    /// start, are that attempt's (the chunk's own step and attempt).
    SegmentStart,
    /// Chunks of this attempt were dropped past a cap: how many, and their bytes, in
    /// all so far for the attempt (a later marker of the same attempt supersedes).
    Dropped {
        /// Chunks dropped.
        chunks: u64,
        /// Their bytes.
        bytes: u64,
    },
}

impl ChunkBody {
    /// The kind's name, as the JSON views and SSE event names show it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::Thinking(_) => "thinking",
            Self::ToolCallStart { .. } => "tool_call_start",
            Self::ToolInput(_) => "tool_input",
            Self::ToolResult { .. } => "tool_result",
            Self::Usage { .. } => "usage",
            Self::TurnEnd { .. } => "turn_end",
            Self::Error(_) => "error",
            Self::SegmentStart => "segment_start",
            Self::Dropped { .. } => "dropped",
        }
    }

    /// What the chunk counts toward the caps: its text bytes plus a fixed 16 for
    /// the framing, so a flood of empty chunks is bounded too.
    pub fn weight(&self) -> u64 {
        let text = match self {
            Self::Text(s) | Self::Thinking(s) | Self::ToolInput(s) | Self::Error(s) => s.len(),
            Self::ToolCallStart { name, id } => name.len() + id.len(),
            Self::ToolResult { name, excerpt, .. } => name.len() + excerpt.len(),
            Self::TurnEnd { stop_reason } => stop_reason.len(),
            Self::Usage { .. } | Self::SegmentStart | Self::Dropped { .. } => 0,
        };
        text as u64 + 16
    }
}

/// One chunk of a run's output, as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Its place in the run's output, from 1.
    pub offset: u64,
    /// The step it belongs to.
    pub step: String,
    /// The step's attempt it belongs to (from 1).
    pub attempt: u32,
    /// When the server accepted it.
    pub at_ms: Millis,
    /// What it says.
    pub body: ChunkBody,
}
