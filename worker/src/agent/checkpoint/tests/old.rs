//! A frozen copy of the decoder workers had before the record: the provider types as
//! they were then, serialised directly, and a checkpoint accepted only at version 1.
//! An older worker still running reads checkpoints with exactly this. Copied from
//! commit d64482e (`agent/checkpoint.rs`, `provider/mod.rs`); never to be changed.

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    pub turns: u32,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub signals_through: u64,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

pub fn decode(bytes: &[u8]) -> Option<Checkpoint> {
    serde_json::from_slice::<Checkpoint>(bytes)
        .ok()
        .filter(|c| c.version == 1)
}
