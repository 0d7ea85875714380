//! Live output of a step: what the model writes and which tools it calls, as it
//! happens, for watchers (`run watch --output`, the console, SSE).
//!
//! Output is for watching, not for recovery: it is not part of the run's history, and
//! a chunk may be lost with a crash. The providers push chunks into an [`OutputSink`]
//! as the model's answer streams in; the agent loop hands them (and each tool's
//! result excerpt) to [`Lease::output`](crate::Lease::output), and the lease batches
//! them to the server. Pushing never blocks and never fails the step.

/// One piece of a step's live output, normalised across providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    /// Text the model is writing to the user, as it arrives.
    Text(String),
    /// The model's thinking (extended thinking / reasoning), as it arrives.
    Thinking(String),
    /// A tool call is starting: its name, and the provider's call id when known.
    ToolCallStart { name: String, id: String },
    /// A piece of the current tool call's input JSON, as it arrives.
    ToolInput(String),
    /// The start of a tool's result (cut to a short excerpt), and whether it is an error.
    ToolResult {
        name: String,
        excerpt: String,
        is_error: bool,
    },
    /// Tokens used by the turn that just ended; `input_tokens` counts the whole
    /// prompt, cache reads and writes included.
    Usage { input_tokens: u64, output_tokens: u64 },
    /// A model turn ended, with its stop reason ("end_turn", "tool_use", ...).
    TurnEnd { stop_reason: String },
    /// A model call failed (it may be retried: the text of a retried turn then starts
    /// again from its beginning).
    Error(String),
}

/// Where a provider pushes the chunks of the answer it is receiving. Must not block:
/// it is called between two reads of the model's stream.
pub trait OutputSink: Send + Sync {
    /// Takes one chunk.
    fn push(&self, chunk: OutputChunk);
}

impl<F: Fn(OutputChunk) + Send + Sync> OutputSink for F {
    fn push(&self, chunk: OutputChunk) {
        self(chunk)
    }
}

/// A sink that drops every chunk, for model calls nobody watches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Discard;

impl OutputSink for Discard {
    fn push(&self, _chunk: OutputChunk) {}
}
