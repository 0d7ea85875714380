//! Checkpoint compatibility against committed fixtures, which are never regenerated:
//! `checkpoint-v1-pre-record.json` was written by the encoder that serialised the
//! provider types directly (commit d64482e), `checkpoint-v1.json` by the record's,
//! `checkpoint-v2.jsonl` by the first version-2 writer.

use serde_json::{Value, json};

use super::*;
use crate::provider::{Block, Role};

const PRE_RECORD: &str = include_str!("../../../../tests/fixtures/checkpoint-v1-pre-record.json");
const V1: &str = include_str!("../../../../tests/fixtures/checkpoint-v1.json");
const V2: &str = include_str!("../../../../tests/fixtures/checkpoint-v2.jsonl");

/// The decoder workers had before the record (frozen).
mod old;

/// What the old decoder got, in today's types, to compare with the transcript.
fn from_old(cp: old::Checkpoint) -> Checkpoint {
    let block = |b: old::Block| match b {
        old::Block::Text { text } => Block::Text { text },
        old::Block::ToolUse { id, name, input } => Block::ToolUse { id, name, input },
        old::Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => Block::ToolResult {
            tool_use_id,
            content,
            is_error,
            images: Vec::new(),
        },
    };
    Checkpoint {
        turns: cp.turns,
        signals_through: cp.signals_through,
        messages: (cp.messages.into_iter())
            .map(|m| Message {
                role: match m.role {
                    old::Role::User => Role::User,
                    old::Role::Assistant => Role::Assistant,
                },
                content: m.content.into_iter().map(block).collect(),
            })
            .collect(),
    }
}

/// A transcript with every block kind, tool input that is an object, nested values
/// and a raw string, error and empty tool results, several turns and non-ASCII text.
fn every_kind_of_block() -> Vec<Message> {
    let tool_use = |id: &str, name: &str, input: Value| Block::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    };
    let tool_result = |id: &str, content: &str, is_error: bool| Block::ToolResult {
        tool_use_id: id.into(),
        content: content.into(),
        is_error,
        images: Vec::new(),
    };
    vec![
        Message::user_text("Fix the build — naïve café ☕, 日本語, 🚂; \"quoted\" \\ back\tslash\nnew line"),
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

fn expected() -> Checkpoint {
    Checkpoint {
        turns: 3,
        messages: every_kind_of_block(),
        signals_through: 17,
    }
}

/// `fixture` parsed, changed by `edit`, and serialised again.
fn edited(fixture: &str, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_str(fixture).unwrap();
    edit(&mut v);
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn reads_what_workers_wrote_before_the_record() {
    assert_eq!(Checkpoint::decode(PRE_RECORD.as_bytes()).unwrap(), expected());
}

#[test]
fn older_workers_read_what_this_one_writes() {
    let fixture = old::decode(V1.as_bytes()).expect("the old decoder reads the v1 fixture");
    assert_eq!(from_old(fixture), expected());
    let fresh = encode_checkpoint(3, 17, &every_kind_of_block());
    let fresh = old::decode(&fresh).expect("the old decoder reads a fresh checkpoint");
    assert_eq!(from_old(fresh), expected());
}

#[test]
fn writes_the_v1_fixture_which_is_the_pre_record_format_byte_for_byte() {
    let bytes = encode_checkpoint(3, 17, &every_kind_of_block());
    assert_eq!(String::from_utf8(bytes).unwrap(), V1);
    assert_eq!(V1, PRE_RECORD);
}

#[test]
fn round_trips() {
    let bytes = encode_checkpoint(3, 17, &every_kind_of_block());
    assert_eq!(Checkpoint::decode(&bytes).unwrap(), expected());
    let cp = Checkpoint::decode(V1.as_bytes()).unwrap();
    let again = encode_checkpoint(cp.turns, cp.signals_through, &cp.messages);
    assert_eq!(String::from_utf8(again).unwrap(), V1);
}

#[test]
fn fields_it_does_not_know_are_ignored_by_old_and_new() {
    // What an additive change in a later worker looks like (a new optional field).
    let bytes = edited(V1, |v| {
        v["appended_from"] = json!(4);
        v["messages"][0]["at"] = json!("2030-01-01T00:00:00Z");
        v["messages"][1]["content"][1]["cache"] = json!({"ephemeral": true});
    });
    assert_eq!(Checkpoint::decode(&bytes).unwrap(), expected());
    assert_eq!(from_old(old::decode(&bytes).unwrap()), expected());
}

#[test]
fn a_checkpoint_from_before_signals_through_reads_as_zero() {
    let bytes = edited(V1, |v| _ = v.as_object_mut().unwrap().remove("signals_through"));
    let cp = Checkpoint::decode(&bytes).unwrap();
    assert_eq!((cp.turns, cp.signals_through), (3, 0));
    assert_eq!(cp.messages, every_kind_of_block());
}

#[test]
fn unknown_versions_are_refused_clearly() {
    for version in [0, 3, 99] {
        let bytes = edited(V1, |v| v["version"] = json!(version));
        let err = Checkpoint::decode(&bytes).unwrap_err();
        assert!(
            matches!(err, CheckpointError::UnknownVersion { found } if found == version),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(&format!("format version {version}")), "{text}");
        assert!(text.contains("reads versions 1 and 2"), "{text}");
        assert_eq!(text.contains("newer worker"), version > 2, "{text}");
        // Older workers refuse it too, and start the step afresh.
        assert!(old::decode(&bytes).is_none());
    }
}

#[test]
fn garbage_is_refused_clearly() {
    let malformed: [&[u8]; 6] = [
        b"",
        b"turn 3 transcript",
        &[0xff, 0x00],
        b"[1]",
        b"\"v\"",
        b"{\"version\":\"1\"}",
    ];
    for bytes in malformed {
        let err = Checkpoint::decode(bytes).unwrap_err();
        assert!(matches!(err, CheckpointError::Malformed(_)), "{bytes:?}: {err:?}");
        assert!(
            err.to_string()
                .starts_with("the checkpoint is not a worker transcript"),
            "{err}"
        );
    }
    let err = Checkpoint::decode(b"{\"turns\":1,\"messages\":[]}").unwrap_err();
    assert!(matches!(err, CheckpointError::NoVersion), "{err:?}");
    let invalid = [
        edited(V1, |v| v["turns"] = json!("three")),
        edited(V1, |v| v["messages"][0]["role"] = json!("system")),
        edited(V1, |v| v["messages"][1]["content"][0]["type"] = json!("thinking")),
        edited(V1, |v| _ = v.as_object_mut().unwrap().remove("messages")),
    ];
    for bytes in invalid {
        let err = Checkpoint::decode(&bytes).unwrap_err();
        assert!(matches!(err, CheckpointError::Invalid { .. }), "{err:?}");
        assert!(err.to_string().contains("claims format version 1"), "{err}");
    }
}

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

/// The v2 stream of `every_kind_of_block` written in three heartbeats: three
/// messages, then all six, then its last user message (the fifth) given more text.
fn v2_in_three_writes() -> (Vec<Vec<u8>>, Vec<Message>) {
    let all = every_kind_of_block();
    let mut w = CheckpointWriter::default();
    let first = w.encode(1, 0, &all[..3]);
    let second = w.encode(3, 17, &all);
    let mut changed = all.clone();
    changed[4].content.push(Block::text("one more thing"));
    let third = w.encode(3, 17, &changed);
    (vec![first, second, third], changed)
}

#[test]
fn v2_bytes_only_grow_as_the_transcript_does() {
    let (writes, last) = v2_in_three_writes();
    for pair in writes.windows(2) {
        assert!(pair[1].starts_with(&pair[0]), "each write extends the last");
        assert!(pair[1].len() > pair[0].len());
    }
    let cp = Checkpoint::decode(&writes[1]).unwrap();
    assert_eq!(cp, expected());
    let cp = Checkpoint::decode(&writes[2]).unwrap();
    assert_eq!((cp.turns, cp.signals_through), (3, 17));
    assert_eq!(cp.messages, last);
    // Nothing new: the same bytes.
    let mut w = CheckpointWriter::default();
    let a = w.encode(1, 0, &last);
    assert_eq!(w.encode(1, 0, &last), a);
}

#[test]
fn writes_and_reads_the_v2_fixture_byte_for_byte() {
    let (writes, last) = v2_in_three_writes();
    assert_eq!(String::from_utf8(writes[2].clone()).unwrap(), V2);
    assert_eq!(Checkpoint::decode(V2.as_bytes()).unwrap().messages, last);
    // Older workers, which read version 1 only, refuse it (and start afresh).
    assert!(old::decode(V2.as_bytes()).is_none());
}

#[test]
fn a_resumed_attempt_extends_the_stream_it_was_handed() {
    let (writes, last) = v2_in_three_writes();
    let mut w = CheckpointWriter::resuming(&writes[2]);
    let mut more = last.clone();
    more.push(Message::user_text("resumed"));
    let next = w.encode(4, 17, &more);
    assert!(next.starts_with(&writes[2]));
    assert_eq!(Checkpoint::decode(&next).unwrap().messages, more);
    // Version-1 bytes start a fresh stream.
    let mut w = CheckpointWriter::resuming(V1.as_bytes());
    let fresh = w.encode(3, 17, &every_kind_of_block());
    assert!(fresh.starts_with(b"{\"version\":2}\n"));
    assert_eq!(Checkpoint::decode(&fresh).unwrap(), expected());
}

#[test]
fn a_v2_stream_is_rewritten_when_it_is_mostly_replaced_lines_or_too_big() {
    let mut w = CheckpointWriter::default();
    let mut messages = vec![Message::user_text("start")];
    let mut last = w.encode(0, 0, &messages);
    let mut rewrites = 0;
    for i in 0..200 {
        // The last user message keeps changing: each write repeats its line.
        messages[0].content.push(Block::text(format!("more {i}")));
        let next = w.encode(0, 0, &messages);
        if !next.starts_with(&last) {
            rewrites += 1;
        }
        last = next;
        let live = serde_json::to_vec(&messages).unwrap().len();
        assert!(last.len() <= 2 * live + 8192, "{} vs {live}", last.len());
    }
    assert!(rewrites > 0);
    assert_eq!(Checkpoint::decode(&last).unwrap().messages, messages);

    let big = "x".repeat(600 * 1024);
    let messages: Vec<Message> = (0..4)
        .map(|i| Message {
            role: if i % 2 == 0 { Role::User } else { Role::Assistant },
            content: vec![Block::text(big.clone())],
        })
        .collect();
    let bytes = CheckpointWriter::default().encode(3, 0, &messages);
    assert!(bytes.len() <= CHECKPOINT_BUDGET, "{}", bytes.len());
    assert_eq!(Checkpoint::decode(&bytes).unwrap().messages.len(), 4);
}

#[test]
fn bad_v2_lines_are_refused_naming_the_line() {
    let bad = format!("{V2}{{\"at\":99,\"message\":{{\"role\":\"user\",\"content\":[]}}}}\n");
    let err = Checkpoint::decode(bad.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("claims format version 2"), "{err}");
    assert!(err.to_string().contains("message at 99"), "{err}");
    let bad = format!("{V2}not json\n");
    assert!(matches!(
        Checkpoint::decode(bad.as_bytes()),
        Err(CheckpointError::Invalid { version: 2, .. })
    ));
}

#[test]
fn tool_result_images_round_trip_and_old_workers_read_the_text() {
    let mut messages = every_kind_of_block();
    messages.push(Message {
        role: crate::provider::Role::User,
        content: vec![Block::ToolResult {
            tool_use_id: "img".into(),
            content: "[image 1 (image/png, 4 bytes base64)]".into(),
            is_error: false,
            images: vec![crate::provider::ToolImage {
                media_type: "image/png".into(),
                data: "AAAA".into(),
            }],
        }],
    });
    let bytes = encode_checkpoint(3, 17, &messages);
    assert_eq!(Checkpoint::decode(&bytes).unwrap().messages, messages);
    // An older worker drops the images and keeps their description.
    let old = from_old(old::decode(&bytes).unwrap());
    let Some(Block::ToolResult { content, images, .. }) = old.messages.last().and_then(|m| m.content.first())
    else {
        panic!("the result is read: {old:?}");
    };
    assert!(images.is_empty() && content.starts_with("[image 1"));
}
