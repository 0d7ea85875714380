//! The offline scripted provider: replays canned model turns from a JSON script, so the
//! demo and the tests run with no model and no network.
//!
//! # Script format
//!
//! ```json
//! {
//!   "description": "optional, ignored",
//!   "steps": {
//!     "research": [
//!       { "text": "Looking around.", "tool_calls": [ { "name": "list_files", "input": { "path": "." } } ] },
//!       { "tool_calls": [ { "name": "complete_step", "input": { "notes": "Researched {{goal}}" } } ] }
//!     ]
//!   },
//!   "default": [ { "tool_calls": [ { "name": "complete_step", "input": { "notes": "done" } } ] } ]
//! }
//! ```
//!
//! A step plays `steps[<step_id>]`, or `default` when the script has no entry for it. The
//! turn played is the number of assistant messages already in the request, so a step
//! resumed from a checkpoint continues with its next turn rather than from the start.
//! Strings anywhere in a turn may use `{{goal}}`, `{{step_id}}`, `{{run_id}}` and
//! `{{last_user_text}}` (the text and tool results of the transcript's last user message, at most
//! 4 KiB: e.g. what a step resumed from a wait was given). A step
//! that runs past its last turn gets a text-only turn saying so (the agent loop then
//! nudges it until its turn limit).
//!
//! A turn may give the tokens it reports, `"usage": {"input": 1200, "output": 80,
//! "cache_read": 0, "cache_write": 0}` (each optional, 0 when left out). A turn without
//! one reports an estimate, a token per four bytes of the request's transcript and of
//! the turn itself, so the demo and tests show usage without writing any.
//!
//! Its live output comes in pieces, as a streaming model's would: each turn's text and
//! each tool call's input in up to four chunks, then the usage and the turn's end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Block, BoxFuture, ModelRequest, ModelTurn, Provider, ProviderError, RequestMetadata, Role, StopReason,
    Usage, chunks,
};
use crate::output::OutputSink;

/// Pieces a scripted turn's text and each tool input are cut in for live output.
const STREAM_PIECES: usize = 4;

/// A whole script: turns per step id, and a fallback.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Free text for people reading the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub steps: BTreeMap<String, Vec<ScriptTurn>>,
    #[serde(default)]
    pub default: Vec<ScriptTurn>,
}

/// One canned model turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// The tokens this turn reports; estimated from the sizes when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ScriptUsage>,
}

/// Token counts a scripted turn reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

/// A tool call the scripted model makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    pub name: String,
    #[serde(default = "empty_object")]
    pub input: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Where a script comes from: a file path (a JSON string) or the script itself (a JSON
/// object), or a script built into the binary (never read from configuration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScriptSource {
    Path(PathBuf),
    Inline(Script),
    /// A script compiled into the binary (`include_str!`).
    #[serde(skip)]
    BuiltIn(BuiltInScript),
}

/// A script compiled into the binary (`include_str!`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltInScript {
    /// What messages call it: `<built-in>/demo.script.json`.
    pub name: &'static str,
    /// Its JSON.
    pub text: &'static str,
}

impl ScriptSource {
    /// For logs: the path, "inline script", or the built-in script's name.
    pub fn describe(&self) -> String {
        match self {
            Self::Path(p) => p.display().to_string(),
            Self::Inline(_) => "inline script".to_string(),
            Self::BuiltIn(s) => format!("{} (built into this binary)", s.name),
        }
    }
}

impl Script {
    /// Reads and checks a script file; errors name the file and the JSON path. Only a
    /// regular file of at most [`MAX_SCRIPT_BYTES`] is read, and a FIFO never blocks.
    fn from_file(path: &Path) -> Result<Self, ProviderError> {
        let text = read_script(path)
            .map_err(|e| ProviderError::Script(format!("cannot read {}: {e}", path.display())))?;
        Self::from_text(&path.display().to_string(), &text)
    }

    /// Parses and checks a script's JSON; errors start with `name` and give the JSON path.
    fn from_text(name: &str, text: &str) -> Result<Self, ProviderError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let at = e.path().to_string();
            ProviderError::Script(format!("{name}: at {at}: {}", e.inner()))
        })
    }
}

/// The largest script file read.
const MAX_SCRIPT_BYTES: u64 = 16 << 20;

fn read_script(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = |meta: &std::fs::Metadata| {
        (!meta.is_file()).then(|| std::io::Error::other("not a regular file (a FIFO, device or directory?)"))
    };
    if let Some(e) = not_regular(&std::fs::metadata(path)?) {
        return Err(e);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    if let Some(e) = not_regular(&file.metadata()?) {
        return Err(e);
    }
    let mut text = String::new();
    file.take(MAX_SCRIPT_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SCRIPT_BYTES {
        return Err(std::io::Error::other(format!(
            "more than the {MAX_SCRIPT_BYTES} bytes a script may have"
        )));
    }
    Ok(text)
}

/// Most bytes `{{last_user_text}}` fills in.
const MAX_LAST_USER_TEXT: usize = 4096;

/// The text blocks of the last user message, bounded.
fn last_user_text(req: &ModelRequest) -> String {
    let mut text = req
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text } => Some(text.as_str()),
                    Block::ToolResult { content, .. } => Some(content.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    text.truncate(railyard_model::text::prefix(&text, MAX_LAST_USER_TEXT).len());
    text
}

/// Replays a [`Script`].
pub struct ScriptedProvider {
    script: Script,
}

impl ScriptedProvider {
    /// Wraps a parsed script.
    pub fn new(script: Script) -> Self {
        Self { script }
    }

    /// Loads the script a [`ScriptSource`] names.
    pub fn load(source: &ScriptSource) -> Result<Self, ProviderError> {
        Ok(Self::new(match source {
            ScriptSource::Path(p) => Script::from_file(p)?,
            ScriptSource::Inline(s) => s.clone(),
            ScriptSource::BuiltIn(s) => Script::from_text(s.name, s.text)?,
        }))
    }

    fn turn_for(&self, req: &ModelRequest) -> ModelTurn {
        let meta = &req.metadata;
        let turns = self
            .script
            .steps
            .get(&meta.step_id)
            .unwrap_or(&self.script.default);
        let index = req.messages.iter().filter(|m| m.role == Role::Assistant).count();
        let Some(turn) = turns.get(index) else {
            return ModelTurn {
                blocks: vec![Block::text(format!(
                    "(scripted provider: the script has no turn {} for step {:?})",
                    index + 1,
                    meta.step_id
                ))],
                stop_reason: StopReason::EndTurn,
                usage: estimate(req, 20),
            };
        };
        let last = last_user_text(req);
        let mut blocks = Vec::new();
        if let Some(text) = &turn.text {
            blocks.push(Block::text(fill(text, meta, &last)));
        }
        for (i, call) in turn.tool_calls.iter().enumerate() {
            blocks.push(Block::ToolUse {
                // Deterministic ids keep replays and resumed transcripts comparable.
                id: format!("toolu_script_{}_{}", index + 1, i + 1),
                name: call.name.clone(),
                input: fill_value(&call.input, meta, &last),
            });
        }
        let stop_reason = if turn.tool_calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        };
        let usage = match turn.usage {
            Some(u) => Usage {
                input: u.input,
                output: u.output,
                cache_read: u.cache_read,
                cache_write: u.cache_write,
            },
            None => estimate(req, serde_json::to_string(&blocks).map_or(0, |s| s.len())),
        };
        ModelTurn {
            blocks,
            stop_reason,
            usage,
        }
    }
}

/// A plausible count for a turn that gives none: a token per four bytes of the
/// transcript sent and of the answer (`answer_bytes`).
fn estimate(req: &ModelRequest, answer_bytes: usize) -> Usage {
    let sent = req.system.len() + serde_json::to_string(&req.messages).map_or(0, |s| s.len());
    Usage {
        input: (sent / 4) as u64 + 1,
        output: (answer_bytes / 4) as u64 + 1,
        cache_read: 0,
        cache_write: 0,
    }
}

fn fill(s: &str, meta: &RequestMetadata, last: &str) -> String {
    s.replace("{{goal}}", &meta.goal)
        .replace("{{step_id}}", &meta.step_id)
        .replace("{{run_id}}", &meta.run_id)
        .replace("{{last_user_text}}", last)
}

fn fill_value(v: &Value, meta: &RequestMetadata, last: &str) -> Value {
    match v {
        Value::String(s) => Value::String(fill(s, meta, last)),
        Value::Array(items) => Value::Array(items.iter().map(|i| fill_value(i, meta, last)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_value(v, meta, last)))
                .collect(),
        ),
        other => other.clone(),
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "scripted"
    }

    /// Plays the turn in pieces, as a streaming model would: its text and each tool
    /// call's input in up to [`STREAM_PIECES`] chunks, then its usage and end.
    fn complete<'a>(
        &'a self,
        req: &'a ModelRequest,
        out: &'a dyn OutputSink,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let turn = self.turn_for(req);
            chunks::emit_turn(&turn, out, STREAM_PIECES);
            Ok(turn)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fifo_or_oversized_script_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("script.json");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let err = super::Script::from_file(&fifo).err().unwrap().to_string();
        assert!(
            err.contains("script.json") && err.contains("not a regular file"),
            "{err}"
        );
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; (super::MAX_SCRIPT_BYTES + 1) as usize]).unwrap();
        let err = super::Script::from_file(&big).err().unwrap().to_string();
        assert!(err.contains("more than the"), "{err}");
    }

    use super::*;
    use crate::provider::Message;
    use serde_json::json;

    fn script() -> Script {
        serde_json::from_value(json!({
            "steps": {"a": [
                {"text": "first {{goal}}", "tool_calls": [{"name": "write_file", "input": {"path": "x", "content": "{{step_id}}"}}]},
                {"tool_calls": [{"name": "complete_step", "input": {"notes": "n"}}], "usage": {"input": 100, "output": 7}}
            ]},
            "default": [{"text": "default"}]
        }))
        .unwrap()
    }

    #[test]
    fn picks_turn_from_transcript() {
        let p = ScriptedProvider::new(script());
        let meta = RequestMetadata {
            step_id: "a".into(),
            goal: "G".into(),
            ..Default::default()
        };
        let mut req = ModelRequest {
            metadata: meta,
            ..Default::default()
        };
        let t1 = p.turn_for(&req);
        assert_eq!(t1.blocks[0], Block::text("first G"));
        assert!(matches!(&t1.blocks[1], Block::ToolUse { input, .. } if input["content"] == "a"));
        req.messages.push(Message {
            role: Role::Assistant,
            content: t1.blocks,
        });
        let t2 = p.turn_for(&req);
        assert!(matches!(&t2.blocks[0], Block::ToolUse { name, .. } if name == "complete_step"));
        assert!(
            t1.usage.input > 0 && t1.usage.output > 0,
            "estimated: {:?}",
            t1.usage
        );
        assert_eq!(
            t2.usage,
            Usage {
                input: 100,
                output: 7,
                ..Default::default()
            }
        );
        req.metadata.step_id = "other".into();
        req.messages.clear();
        assert_eq!(p.turn_for(&req).blocks[0], Block::text("default"));
    }

    #[test]
    fn script_errors_name_file_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, r#"{"steps": {"a": [{"txt": "x"}]}}"#).unwrap();
        let err = Script::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("s.json"), "{err}");
        assert!(err.contains("steps.a[0]"), "{err}");
        assert!(err.contains("txt"), "{err}");
    }

    #[test]
    fn built_in_scripts_load_and_their_errors_name_them() {
        let ok = ScriptSource::BuiltIn(BuiltInScript {
            name: "<built-in>/s.json",
            text: r#"{"default": [{"text": "hi"}]}"#,
        });
        assert_eq!(ok.describe(), "<built-in>/s.json (built into this binary)");
        let p = ScriptedProvider::load(&ok).unwrap();
        assert_eq!(p.script.default[0].text.as_deref(), Some("hi"));
        let bad = ScriptSource::BuiltIn(BuiltInScript {
            name: "<built-in>/s.json",
            text: r#"{"default": 3}"#,
        });
        let err = ScriptedProvider::load(&bad).err().unwrap().to_string();
        assert!(err.contains("<built-in>/s.json: at default"), "{err}");
    }
}
