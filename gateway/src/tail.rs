//! The output tail `get_run` shows (`output_tail`): the last chunks of the run's live
//! output, as text with tool calls marked, bounded. Read with `WatchOutput`'s
//! `from_end`, stopping once the stored chunks are read (the stream goes quiet) or
//! the run's stream ends.

use std::time::Duration;

use railyard_proto::v1::{OutputKind, WatchOutputRequest, watch_output_response::Message};
use railyard_sdk::Client;

/// Chunks read from the end.
const TAIL_CHUNKS: u64 = 64;
/// Most characters shown; older text is cut off at the front.
pub(super) const TAIL_CHARS: usize = 4096;
/// A pause this long after the stored chunks means the tail is read.
const QUIET: Duration = Duration::from_millis(300);

/// The run's output tail (empty when it has none or it cannot be read: the tail is
/// a courtesy, never an error of `get_run`).
pub(super) async fn output_tail(client: &Client, namespace: &str, run_id: &str) -> String {
    let req = WatchOutputRequest {
        namespace: namespace.into(),
        run_id: run_id.into(),
        from_offset: 0,
        from_end: TAIL_CHUNKS,
    };
    let Ok(mut stream) = client.watch_output_with(req).await else {
        return String::new();
    };
    let mut text = String::new();
    for _ in 0..TAIL_CHUNKS {
        let Ok(Ok(Some(m))) = tokio::time::timeout(QUIET, stream.message()).await else {
            break;
        };
        let Some(Message::Chunk(c)) = m.message else {
            continue;
        };
        match OutputKind::try_from(c.kind).unwrap_or(OutputKind::Unspecified) {
            OutputKind::Text => text.push_str(&c.text),
            OutputKind::Thinking => {}
            OutputKind::ToolCallStart => text.push_str(&format!("\n→ {}(", c.name)),
            OutputKind::ToolInput => text.push_str(&c.text),
            OutputKind::ToolResult => {
                let mark = if c.is_error { " (error)" } else { "" };
                let first = c.text.lines().next().unwrap_or("");
                text.push_str(&format!(
                    ")\n← {}{mark}: {}\n",
                    c.name,
                    railyard_text::prefix_chars(first, 200)
                ));
            }
            OutputKind::SegmentStart => {
                text.push_str(&format!("\n── step {} · attempt {} ──\n", c.step_id, c.attempt))
            }
            OutputKind::Dropped => text.push_str(&format!(
                "\n[{} chunks dropped past the output cap]\n",
                c.dropped_chunks
            )),
            OutputKind::Error => text.push_str(&format!(
                "\n! model call failed: {}\n",
                railyard_text::prefix_chars(&c.text, 200)
            )),
            OutputKind::TurnEnd => text.push('\n'),
            OutputKind::Usage | OutputKind::Unspecified => {}
        }
    }
    railyard_text::suffix_chars(&text, TAIL_CHARS).to_string()
}
