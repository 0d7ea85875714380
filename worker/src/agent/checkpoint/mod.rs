//! The heartbeat checkpoint: the step's transcript, so a later attempt resumes from it.
//!
//! The bytes are durable: the server keeps them and hands them to whichever worker
//! (older or newer) takes the step next. So they are written from a versioned record
//! of their own (`record`), never from the live provider types, which are free to
//! change; only the conversions in `record` follow them.
//!
//! This worker writes format version 2 (`v2`: JSON Lines that only grow as the
//! transcript does, so heartbeats append) and reads versions 1 (one JSON document,
//! `record`, what earlier workers wrote) and 2.

mod record;
mod v2;

pub(crate) use v2::Writer as CheckpointWriter;

use serde::Deserialize;

use crate::provider::Message;
use record::{Record, VERSION};

/// Checkpoints above this size are compacted (the server keeps at most 8 MiB).
const CHECKPOINT_BUDGET: usize = 1 << 20;

/// A decoded heartbeat checkpoint: the transcript and the turns it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Model turns taken, counting those of earlier attempts.
    pub turns: u32,
    /// The transcript, oldest first.
    pub messages: Vec<Message>,
    /// Signals up to this history event id are already in `messages`; a resumed
    /// attempt must not inject them again (the server redelivers until acknowledged).
    pub signals_through: u64,
}

/// Why checkpoint bytes are not a transcript this worker can resume from. The agent
/// then starts the step afresh, so these only need to say why, for the log.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Not JSON, or JSON that is not an object with a numeric format version.
    #[error("the checkpoint is not a worker transcript: {0}")]
    Malformed(String),
    /// A JSON object without a format version: no worker wrote it.
    #[error("the checkpoint has no format version; no worker wrote it")]
    NoVersion,
    /// A format version this worker does not know, most likely from a newer worker.
    #[error(
        "the checkpoint is in format version {found}, which this worker does not read \
         (it reads versions {VERSION} and {}){}",
        v2::VERSION,
        newer_hint(*found)
    )]
    UnknownVersion {
        /// The version the checkpoint claims.
        found: u64,
    },
    /// The version is known but the content does not match it.
    #[error("the checkpoint claims format version {version} but does not match it: {reason}")]
    Invalid { version: u32, reason: String },
}

/// Points an operator at the likely cause: a newer worker that shares the queue.
fn newer_hint(found: u64) -> &'static str {
    if found > u64::from(v2::VERSION) {
        "; a newer worker probably wrote it"
    } else {
        ""
    }
}

impl Checkpoint {
    /// Decodes checkpoint bytes written by any worker, old or new, as long as their
    /// format version is one this worker reads.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        // The version is read on its own first, so a newer format is refused for what
        // it is rather than for whatever its new shape trips over in the old types.
        #[derive(Deserialize)]
        struct Versioned {
            version: Option<u64>,
        }
        // serde would also read a struct from a JSON array; no worker writes one.
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(CheckpointError::Malformed("not a JSON object".into()));
        }
        if is_v2(bytes) {
            return v2::decode(bytes);
        }
        let versioned: Versioned =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        match versioned.version {
            Some(v) if v == u64::from(VERSION) => {}
            Some(found) => return Err(CheckpointError::UnknownVersion { found }),
            None => return Err(CheckpointError::NoVersion),
        }
        let record: Record = serde_json::from_slice(bytes).map_err(|e| CheckpointError::Invalid {
            version: VERSION,
            reason: e.to_string(),
        })?;
        Ok(Checkpoint {
            turns: record.turns,
            messages: record.messages.into_iter().map(Message::from).collect(),
            signals_through: record.signals_through,
        })
    }
}

/// Whether the bytes are a version-2 stream: a first line that is a JSON object of
/// version 2 (a version-1 checkpoint is one line, or a document whose first line is
/// not a whole object).
fn is_v2(bytes: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Versioned {
        version: Option<u64>,
    }
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    serde_json::from_slice::<Versioned>(first).is_ok_and(|v| v.version == Some(u64::from(v2::VERSION)))
}

/// Serialises a checkpoint in format version 1 (what earlier workers wrote and read);
/// when it is too big, old tool results and texts are cut down (the model keeps the
/// shape of the conversation, the bulk can be re-read from the workspace). This worker
/// writes version 2 ([`CheckpointWriter`]); version 1 stays for the tests that pin
/// what older workers read.
#[cfg(test)]
pub(super) fn encode_checkpoint(turns: u32, signals_through: u64, messages: &[Message]) -> Vec<u8> {
    use record::{RecordBlock, RecordMessage};
    // Serialising the record cannot fail (it has no maps with non-string keys); an
    // empty checkpoint, should it ever, means "none" to the lease, as before.
    let encode = |record: &Record| serde_json::to_vec(record).unwrap_or_default();
    let record = Record {
        version: VERSION,
        turns,
        messages: messages.iter().map(RecordMessage::from).collect(),
        signals_through,
    };
    let full = encode(&record);
    if full.len() <= CHECKPOINT_BUDGET {
        return full;
    }
    let mut smaller = full;
    // First spare the latest exchange, then cut everything.
    for (keep, spared) in [(4096usize, 2usize), (512, 2), (4096, 0), (512, 0), (64, 0)] {
        let mut compact = record.clone();
        let cut = compact.messages.len().saturating_sub(spared);
        for m in &mut compact.messages[..cut] {
            for b in &mut m.content {
                if let RecordBlock::ToolResult { content, .. } | RecordBlock::Text { text: content } = b
                    && content.len() > keep
                {
                    *content = crate::tools::truncate(content, keep, "cut from the checkpoint");
                }
            }
        }
        smaller = encode(&compact);
        if smaller.len() <= CHECKPOINT_BUDGET {
            break;
        }
    }
    smaller
}

#[cfg(test)]
mod tests;
