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

    /// A transcript with every block kind, tool input that is an object, nested values
    /// and a raw string, error and empty tool results, several turns and non-ASCII text.
    fn every_kind_of_block() -> Vec<Message> {
        use serde_json::json;
        let tool_use = |id: &str, name: &str, input: serde_json::Value| Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        };
        let tool_result = |id: &str, content: &str, is_error: bool| Block::ToolResult {
            tool_use_id: id.into(),
            content: content.into(),
            is_error,
        };
        vec![
            Message::user_text(
                "Fix the build — naïve café ☕, 日本語, 🚂; \"quoted\" \\ back\tslash\nnew line",
            ),
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::text("Let me look first."),
                    tool_use(
                        "toolu_01",
                        "bash",
                        json!({"command": "cargo test", "timeout_secs": 60}),
                    ),
                    tool_use("toolu_02", "read_file", json!({"path": "src/lib.rs"})),
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    tool_result(
                        "toolu_01",
                        "error[E0308]: mismatched types\n  --> src/lib.rs:3:5",
                        false,
                    ),
                    tool_result("toolu_02", "no such file: src/lib.rs", true),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    tool_use(
                        "toolu_03",
                        "write_file",
                        json!({"a": [1, 2.5, null, true], "b": {"c": "ü"}}),
                    ),
                    // A provider that got unparseable arguments keeps them as a JSON string.
                    tool_use("toolu_04", "bash", json!("{\"command\": \"ls")),
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    tool_result("toolu_03", "", false),
                    tool_result("toolu_04", "invalid tool input: EOF while parsing", true),
                    Block::text("[signal] Grüße from the coordinator"),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::text("Fixed: the type annotation was wrong."),
                    tool_use(
                        "toolu_05",
                        "complete_step",
                        json!({"summary": "fixed the build ✓"}),
                    ),
                ],
            },
        ]
    }

    /// The checkpoint this code writes for [`every_kind_of_block`], kept as a fixture
    /// so that later formats are tested against what workers of today wrote.
    #[test]
    fn todays_encoder_writes_the_fixture() {
        let bytes = encode_checkpoint(3, 17, &every_kind_of_block());
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/checkpoint-v1-pre-record.json"
        );
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            std::fs::read_to_string(path).unwrap()
        );
    }
}
