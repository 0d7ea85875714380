//! The heartbeat checkpoint: the step's transcript, so a later attempt resumes from it.

use serde::{Deserialize, Serialize};

use crate::provider::{Block, Message};

/// Checkpoints above this size are compacted (the server's gRPC limit is 4 MiB a message).
const CHECKPOINT_BUDGET: usize = 1 << 20;

/// The heartbeat checkpoint: the transcript and the turns it took.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    pub turns: u32,
    pub messages: Vec<Message>,
    /// Signals up to this history event id are already in `messages`; a resumed
    /// attempt must not inject them again (the server redelivers until acknowledged).
    #[serde(default)]
    pub signals_through: u64,
}

impl Checkpoint {
    /// Decodes a checkpoint; `None` for anything that is not one of ours.
    pub fn decode(bytes: &[u8]) -> Option<Checkpoint> {
        serde_json::from_slice::<Checkpoint>(bytes)
            .ok()
            .filter(|c| c.version == 1)
    }
}

/// Serialises a checkpoint; when it is too big, old tool results are cut down (the
/// model keeps the shape of the conversation, the bulk can be re-read from the workspace).
pub fn encode_checkpoint(turns: u32, signals_through: u64, messages: &[Message]) -> Vec<u8> {
    let encode = |messages: Vec<Message>| {
        serde_json::to_vec(&Checkpoint {
            version: 1,
            turns,
            messages,
            signals_through,
        })
        .unwrap_or_default()
    };
    let full = encode(messages.to_vec());
    if full.len() <= CHECKPOINT_BUDGET {
        return full;
    }
    let mut smaller = full;
    // First spare the latest exchange, then cut everything.
    for (keep, spared) in [(4096usize, 2usize), (512, 2), (4096, 0), (512, 0), (64, 0)] {
        let mut compact = messages.to_vec();
        let cut = compact.len().saturating_sub(spared);
        for m in &mut compact[..cut] {
            for b in &mut m.content {
                if let Block::ToolResult { content, .. } | Block::Text { text: content } = b
                    && content.len() > keep
                {
                    *content = crate::tools::truncate(content, keep, "cut from the checkpoint");
                }
            }
        }
        smaller = encode(compact);
        if smaller.len() <= CHECKPOINT_BUDGET {
            break;
        }
    }
    smaller
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Role;

    #[test]
    fn big_checkpoints_are_compacted() {
        let big = "x".repeat(600 * 1024);
        let messages: Vec<Message> = (0..4)
            .map(|i| Message {
                role: if i % 2 == 0 { Role::User } else { Role::Assistant },
                content: vec![Block::text(big.clone())],
            })
            .collect();
        let bytes = encode_checkpoint(3, 0, &messages);
        assert!(bytes.len() <= CHECKPOINT_BUDGET, "{}", bytes.len());
        let cp = Checkpoint::decode(&bytes).unwrap();
        assert_eq!(cp.turns, 3);
        assert_eq!(cp.messages.len(), 4);
    }
}
