//! Turning a whole answer into live-output chunks, for answers that did not stream
//! (`stream = false`, a server that ignored `stream: true`, the scripted provider),
//! and the chunks that end every turn.

use crate::output::{OutputChunk, OutputSink};

use super::{Block, ModelTurn, StopReason};

impl StopReason {
    /// The normalised name watchers see ("end_turn", "tool_use", "max_tokens", or the
    /// provider's own word).
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::Other(s) => s,
        }
    }
}

/// Pushes a whole turn as chunks, its text and each tool call's input JSON cut in up
/// to `pieces` pieces (at character boundaries), then its usage and its end.
pub(crate) fn emit_turn(turn: &ModelTurn, out: &dyn OutputSink, pieces: usize) {
    for block in &turn.blocks {
        match block {
            Block::Text { text } => {
                for piece in split(text, pieces) {
                    out.push(OutputChunk::Text(piece.to_string()));
                }
            }
            Block::ToolUse { id, name, input } => {
                out.push(OutputChunk::ToolCallStart {
                    name: name.clone(),
                    id: id.clone(),
                });
                // Raw (unparseable) arguments are shown as they came.
                let json = match input {
                    serde_json::Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                for piece in split(&json, pieces) {
                    out.push(OutputChunk::ToolInput(piece.to_string()));
                }
            }
            Block::ToolResult { .. } => {}
        }
    }
    emit_end(turn, out);
}

/// Pushes the chunks that end a turn: its usage, then its stop reason.
pub(crate) fn emit_end(turn: &ModelTurn, out: &dyn OutputSink) {
    let u = &turn.usage;
    out.push(OutputChunk::Usage {
        input_tokens: u.input.saturating_add(u.cache_read).saturating_add(u.cache_write),
        output_tokens: u.output,
    });
    out.push(OutputChunk::TurnEnd {
        stop_reason: turn.stop_reason.as_str().to_string(),
    });
}

/// `text` in at most `pieces` non-empty pieces of about equal size, cut at character
/// boundaries; none for empty text.
fn split(text: &str, pieces: usize) -> Vec<&str> {
    let size = text.len().div_ceil(pieces.max(1)).max(1);
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        // At least one whole character, so a piece smaller than it still moves on.
        let mut end = railyard_model::text::prefix(rest, size).len();
        if end == 0 {
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (piece, tail) = rest.split_at(end);
        out.push(piece);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_into_pieces_at_char_boundaries() {
        assert_eq!(split("abcdefgh", 3), vec!["abc", "def", "gh"]);
        assert_eq!(split("ab", 4), vec!["a", "b"]);
        assert_eq!(split("", 3), Vec::<&str>::new());
        assert_eq!(split("héé", 4), vec!["h", "é", "é"]);
        assert_eq!(split("ééé", 2).concat(), "ééé");
        assert_eq!(split("whole", 1), vec!["whole"]);
    }
}
