//! Checkpoint format version 2: JSON Lines whose bytes only grow as the transcript
//! does, so a heartbeat sends the server only the lines added since the last one
//! (`railyard_sdk::CheckpointSync`).
//!
//! ```text
//! {"version":2}                                  the header, always the first line
//! {"at":0,"message":{"role":"user",...}}          message 0 of the transcript
//! {"at":1,"message":{"role":"assistant",...}}
//! {"turns":1,"signals_through":0}                 the counters; the last line of each write
//! {"at":1,"message":{...}}                        message 1 again: it changed (the transcript
//! ...                                             is cut to 1 message, then this one added)
//! ```
//!
//! Messages are the frozen version-1 [`RecordMessage`]; a line `at` N cuts the
//! transcript to its first N messages and adds its message, so the common change, a
//! message added, is one line, and the rare one (the last user message given more
//! text) a line for it and each message after. The last counters line wins. Every line
//! ends with `\n` (JSON strings escape newlines). Unknown fields are ignored, as in
//! version 1; a line with neither a message nor counters is skipped. Older workers,
//! which read version 1 only, refuse these bytes as malformed and start the step
//! afresh.

use serde::{Deserialize, Serialize};

use super::record::{RecordBlock, RecordMessage};
use super::{CHECKPOINT_BUDGET, Checkpoint, CheckpointError};
use crate::provider::Message;

/// This format's version.
pub(super) const VERSION: u32 = 2;

#[derive(Serialize)]
struct Header {
    version: u32,
}

#[derive(Serialize, Deserialize)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<RecordMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signals_through: Option<u64>,
}

/// Decodes version-2 bytes (their first line a header of version 2).
pub(super) fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let (messages, turns, signals_through) = replay(bytes)?;
    Ok(Checkpoint {
        turns,
        messages: messages.into_iter().map(Message::from).collect(),
        signals_through,
    })
}

/// The transcript records and counters the lines after the header make.
fn replay(bytes: &[u8]) -> Result<(Vec<RecordMessage>, u32, u64), CheckpointError> {
    let invalid = |e: String| CheckpointError::Invalid {
        version: VERSION,
        reason: e,
    };
    let (mut messages, mut turns, mut signals) = (Vec::new(), 0, 0);
    for (n, line) in bytes.split(|b| *b == b'\n').enumerate().skip(1) {
        if line.trim_ascii().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_slice(line).map_err(|e| invalid(format!("line {}: {e}", n + 1)))?;
        if let Some(m) = l.message {
            let at = l.at.unwrap_or(messages.len());
            if at > messages.len() {
                return Err(invalid(format!(
                    "line {}: message at {at} with only {} before it",
                    n + 1,
                    messages.len()
                )));
            }
            messages.truncate(at);
            messages.push(m);
        }
        turns = l.turns.unwrap_or(turns);
        signals = l.signals_through.unwrap_or(signals);
    }
    Ok((messages, turns, signals))
}

/// Writes a step's transcript as a version-2 stream, one write per heartbeat, each
/// extending the bytes of the last unless the stream is rewritten: when it is more
/// than twice what a fresh one would be (many changed messages), or past the budget
/// (then cut down as version 1 was).
#[derive(Debug, Default)]
pub(crate) struct Writer {
    bytes: Vec<u8>,
    /// The transcript as the stream yields it, and each message's line length.
    written: Vec<(RecordMessage, usize)>,
    counters: Option<(u32, u64)>,
}

/// Past this many bytes beyond twice the live lines, the stream is rewritten.
const SLACK: usize = 4096;

impl Writer {
    /// Continues the version-2 stream a resumed attempt was handed, so its heartbeats
    /// append to it; any other bytes start a fresh stream.
    pub(crate) fn resuming(bytes: &[u8]) -> Self {
        if !super::is_v2(bytes) || !bytes.ends_with(b"\n") {
            return Self::default();
        }
        let Ok((messages, turns, signals)) = replay(bytes) else {
            return Self::default();
        };
        let written = messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                let len = line(i, &m).len();
                (m, len)
            })
            .collect();
        Self {
            bytes: bytes.to_vec(),
            written,
            counters: Some((turns, signals)),
        }
    }

    /// The stream with the transcript as it is now.
    pub(crate) fn encode(&mut self, turns: u32, signals_through: u64, messages: &[Message]) -> Vec<u8> {
        let records: Vec<RecordMessage> = messages.iter().map(RecordMessage::from).collect();
        let same = self
            .written
            .iter()
            .zip(&records)
            .take_while(|((w, _), r)| w == *r)
            .count();
        // A line can replace and add messages, not only drop them: a shorter
        // transcript is written afresh.
        if self.bytes.is_empty() || (same == records.len() && records.len() < self.written.len()) {
            return self.fresh(turns, signals_through, records);
        }
        if same == records.len() && self.counters == Some((turns, signals_through)) {
            return self.bytes.clone();
        }
        self.written.truncate(same);
        for (i, r) in records.into_iter().enumerate().skip(same) {
            let l = line(i, &r);
            self.bytes.extend_from_slice(&l);
            self.written.push((r, l.len()));
        }
        self.push_counters(turns, signals_through);
        let live: usize = self.written.iter().map(|(_, len)| len).sum();
        if self.bytes.len() > CHECKPOINT_BUDGET || self.bytes.len() > 2 * live + SLACK {
            let records = self.written.drain(..).map(|(r, _)| r).collect();
            return self.fresh(turns, signals_through, records);
        }
        self.bytes.clone()
    }

    /// A new stream of the whole transcript, cut down when past the budget.
    fn fresh(&mut self, turns: u32, signals_through: u64, records: Vec<RecordMessage>) -> Vec<u8> {
        self.write_all(turns, signals_through, &records);
        if self.bytes.len() > CHECKPOINT_BUDGET {
            // First spare the latest exchange, then cut everything.
            for (keep, spared) in [(4096usize, 2usize), (512, 2), (4096, 0), (512, 0), (64, 0)] {
                let mut compact = records.clone();
                let cut = compact.len().saturating_sub(spared);
                for m in &mut compact[..cut] {
                    for b in &mut m.content {
                        if let RecordBlock::ToolResult { content, .. } | RecordBlock::Text { text: content } =
                            b
                            && content.len() > keep
                        {
                            *content = crate::tools::truncate(content, keep, "cut from the checkpoint");
                        }
                    }
                }
                self.write_all(turns, signals_through, &compact);
                if self.bytes.len() <= CHECKPOINT_BUDGET {
                    break;
                }
            }
        }
        self.bytes.clone()
    }

    fn write_all(&mut self, turns: u32, signals_through: u64, records: &[RecordMessage]) {
        // Serialising these types cannot fail (no maps with non-string keys).
        self.bytes = serde_json::to_vec(&Header { version: VERSION }).unwrap_or_default();
        self.bytes.push(b'\n');
        self.written.clear();
        for (i, r) in records.iter().enumerate() {
            let l = line(i, r);
            self.bytes.extend_from_slice(&l);
            self.written.push((r.clone(), l.len()));
        }
        self.counters = None;
        self.push_counters(turns, signals_through);
    }

    fn push_counters(&mut self, turns: u32, signals_through: u64) {
        let l = Line {
            at: None,
            message: None,
            turns: Some(turns),
            signals_through: Some(signals_through),
        };
        self.bytes
            .extend_from_slice(&serde_json::to_vec(&l).unwrap_or_default());
        self.bytes.push(b'\n');
        self.counters = Some((turns, signals_through));
    }
}

/// Message `at`'s line, with its newline.
fn line(at: usize, m: &RecordMessage) -> Vec<u8> {
    #[derive(Serialize)]
    struct MessageLine<'a> {
        at: usize,
        message: &'a RecordMessage,
    }
    let mut out = serde_json::to_vec(&MessageLine { at, message: m }).unwrap_or_default();
    out.push(b'\n');
    out
}
