//! The checkpoint's durable record, format version 1, and its conversions to and from
//! the live transcript types.
//!
//! These types are frozen: they are what workers wrote and what they will read back,
//! possibly after an upgrade or a downgrade, so they must not follow the provider types.
//! A change to `crate::provider::{Message, Block, Role}` changes only the `From`
//! conversions at the bottom of this file. A change to the record itself is a new
//! format version, with its own types, beside these ones.
//!
//! Version 1 is byte for byte what workers wrote before the record existed (the live
//! types were serialised directly, with `"version": 1`), so older and newer workers
//! read each other's checkpoints.
//!
//! What may change without a new version: adding an optional field (`#[serde(default)]`),
//! since readers of version 1 ignore fields they do not know. Everything else (a new
//! block kind, a renamed or retyped field) needs a new version: readers of version 1
//! refuse a block kind they do not know, and older workers refuse any version but 1
//! (they then start the step afresh).
//!
//! Version 2 (`super::v2`) frames these same message records as JSON Lines that only
//! grow, so heartbeats append; this worker writes it and still reads version 1.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::{Block, Message, Role};

/// The format version this module reads and writes.
pub(super) const VERSION: u32 = 1;

/// A checkpoint in format version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Record {
    /// Always [`VERSION`]; older workers refuse anything else.
    pub version: u32,
    /// Model turns taken, over all attempts.
    pub turns: u32,
    /// The transcript, oldest first.
    pub messages: Vec<RecordMessage>,
    /// Signals up to this history event id are already in `messages`. Absent in the
    /// first checkpoints ever written, hence the default.
    #[serde(default)]
    pub signals_through: u64,
}

/// One message of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct RecordMessage {
    pub role: RecordRole,
    pub content: Vec<RecordBlock>,
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RecordRole {
    User,
    Assistant,
}

/// One piece of a message, tagged by `"type"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum RecordBlock {
    /// Text from the user, the worker or the model.
    Text { text: String },
    /// A tool call; `input` is whatever JSON the model sent (a string when a provider
    /// could not parse the arguments).
    ToolUse { id: String, name: String, input: Value },
    /// A tool's answer to the call `tool_use_id`.
    ToolResult {
        tool_use_id: String,
        content: String,
        /// Always written; the default is the one the first workers' type had, so that
        /// whatever they accepted is still accepted.
        #[serde(default)]
        is_error: bool,
        /// Images the tool returned; absent when none (and in records written before
        /// tool results carried images).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<RecordImage>,
    },
}

/// An image of a tool result, base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct RecordImage {
    media_type: String,
    data: String,
}

// The conversions below are the only place the live types meet the record. Every match
// is exhaustive, so a new kind of provider block fails to compile here until it is
// given a place in the record (which means a new format version).

impl From<&Message> for RecordMessage {
    fn from(m: &Message) -> Self {
        Self {
            role: match m.role {
                Role::User => RecordRole::User,
                Role::Assistant => RecordRole::Assistant,
            },
            content: m.content.iter().map(RecordBlock::from).collect(),
        }
    }
}

impl From<&Block> for RecordBlock {
    fn from(b: &Block) -> Self {
        match b {
            Block::Text { text } => Self::Text { text: text.clone() },
            Block::ToolUse { id, name, input } => Self::ToolUse {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
            },
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
                images,
            } => Self::ToolResult {
                tool_use_id: tool_use_id.clone(),
                content: content.clone(),
                is_error: *is_error,
                images: images
                    .iter()
                    .map(|i| RecordImage {
                        media_type: i.media_type.clone(),
                        data: i.data.clone(),
                    })
                    .collect(),
            },
        }
    }
}

impl From<RecordMessage> for Message {
    fn from(m: RecordMessage) -> Self {
        Self {
            role: match m.role {
                RecordRole::User => Role::User,
                RecordRole::Assistant => Role::Assistant,
            },
            content: m.content.into_iter().map(Block::from).collect(),
        }
    }
}

impl From<RecordBlock> for Block {
    fn from(b: RecordBlock) -> Self {
        match b {
            RecordBlock::Text { text } => Self::Text { text },
            RecordBlock::ToolUse { id, name, input } => Self::ToolUse { id, name, input },
            RecordBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                images,
            } => Self::ToolResult {
                tool_use_id,
                content,
                is_error,
                images: images
                    .into_iter()
                    .map(|i| crate::provider::ToolImage {
                        media_type: i.media_type,
                        data: i.data,
                    })
                    .collect(),
            },
        }
    }
}
