//! Principles: how an agent should work, beyond the workflow's steps, composed into
//! every step's system prompt under a heading of its own.
//!
//! Layers, each replacing or extending the one before: the server's (the built-in
//! [`DEFAULT`], or the file `server.principles_file` names), then the namespace's
//! (`Namespace::principles`), then the workflow definition's `principles` field. A run pins what they composed to when it starts
//! (stored with the run, like its definition), so editing the file or the definition
//! never changes a run in flight. Pure: the server reads the file.

use serde::{Deserialize, Serialize};

/// The built-in server principles, used when the configuration names no file.
pub const DEFAULT: &str = "\
- Work in small, checked steps: look before you change, and check what you changed.
- Stay within the step: do what its prompt asks, not more, and say what you left out.
- Say what you do not know. Never invent files, results, or facts; if something is \
missing or broken, report it (report_issue) rather than working around it silently.
- Leave the workspace tidy and your notes specific: what you did, what you found, where it is.";

/// Most bytes of one layer's text (the server file, a definition's field).
pub const MAX_LAYER_BYTES: usize = 16 * 1024;
/// Most bytes of what the layers compose to (what a run pins and a task carries).
pub const MAX_COMPOSED_BYTES: usize = 32 * 1024;

/// How a layer combines with the principles before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Added after the principles before it.
    #[default]
    Extend,
    /// Used instead of the principles before it.
    Replace,
}

impl Mode {
    /// Its name in definitions and records.
    pub fn name(self) -> &'static str {
        match self {
            Self::Extend => "extend",
            Self::Replace => "replace",
        }
    }
}

/// One layer of principles: its text and how it combines.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// The principles' text.
    pub text: String,
    /// Whether it extends or replaces the layer below.
    #[serde(default)]
    pub mode: Mode,
}

/// Checks a layer's text: at most [`MAX_LAYER_BYTES`], no control characters but
/// newlines and tabs. The error names no field (callers do).
pub fn check_text(text: &str) -> Result<(), String> {
    if text.len() > MAX_LAYER_BYTES {
        return Err(format!(
            "{} bytes, more than the limit of {MAX_LAYER_BYTES}",
            text.len()
        ));
    }
    if let Some(c) = text
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    {
        return Err(format!("holds the control character {c:?}"));
    }
    Ok(())
}

/// Composes `base` with `layers` in order: a replacing layer starts afresh, an
/// extending one is added after a blank line. Cut to [`MAX_COMPOSED_BYTES`] at a
/// character boundary (each layer is bounded, so only many layers could pass it).
pub fn compose<'a>(base: &str, layers: impl IntoIterator<Item = &'a Layer>) -> String {
    let mut text = base.trim().to_string();
    for layer in layers {
        let add = layer.text.trim();
        match layer.mode {
            Mode::Replace => text = add.to_string(),
            Mode::Extend if add.is_empty() => {}
            Mode::Extend if text.is_empty() => text = add.to_string(),
            Mode::Extend => {
                text.push_str("\n\n");
                text.push_str(add);
            }
        }
    }
    crate::text::prefix(&text, MAX_COMPOSED_BYTES).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(text: &str, mode: Mode) -> Layer {
        Layer {
            text: text.into(),
            mode,
        }
    }

    #[test]
    fn layers_extend_or_replace_in_order() {
        let ns_extend = layer("ns", Mode::Extend);
        let wf_extend = layer("wf", Mode::Extend);
        assert_eq!(compose("server", [&ns_extend, &wf_extend]), "server\n\nns\n\nwf");
        let ns_replace = layer("ns only", Mode::Replace);
        assert_eq!(compose("server", [&ns_replace, &wf_extend]), "ns only\n\nwf");
        let wf_replace = layer("wf only", Mode::Replace);
        assert_eq!(compose("server", [&ns_extend, &wf_replace]), "wf only");
        assert_eq!(compose("server", []), "server");
        assert_eq!(compose("", [&wf_extend]), "wf");
        // An empty replacing layer leaves none.
        assert_eq!(compose("server", [&layer("", Mode::Replace)]), "");
        assert!(compose(DEFAULT, []).contains("report_issue"));
    }

    #[test]
    fn a_definition_s_principles_are_checked_naming_the_field() {
        let def = |p: &str| {
            format!(
                r#"{{"id":"w","version":"1","name":"W","steps":[{{"id":"a","title":"A","prompt":"p"}}],"principles":{p}}}"#
            )
        };
        let ok = crate::workflow::parse_definition(&def(r#"{"text":"be brief","mode":"replace"}"#)).unwrap();
        assert_eq!(ok.principles.unwrap().mode, Mode::Replace);
        let plain = crate::workflow::parse_definition(&def(r#"{"text":"be brief"}"#)).unwrap();
        assert_eq!(plain.principles.unwrap().mode, Mode::Extend, "extend by default");
        let big = def(&format!(r#"{{"text":"{}"}}"#, "x".repeat(MAX_LAYER_BYTES + 1)));
        let e = crate::workflow::parse_definition(&big).unwrap_err().to_string();
        assert!(e.contains("principles.text: 16385 bytes"), "{e}");
        let e = crate::workflow::parse_definition(&def(r#"{"text":"x","mode":"merge"}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("merge"), "{e}");
    }

    #[test]
    fn a_layer_is_bounded_and_plain_text() {
        assert!(check_text(&"x".repeat(MAX_LAYER_BYTES)).is_ok());
        let e = check_text(&"x".repeat(MAX_LAYER_BYTES + 1)).unwrap_err();
        assert!(e.contains("more than the limit of 16384"), "{e}");
        assert!(check_text("a\u{1b}[2Jb").is_err());
        assert!(check_text("line\n\tindented").is_ok());
        let huge = layer(&"y".repeat(MAX_LAYER_BYTES), Mode::Extend);
        let all = compose(&"x".repeat(MAX_LAYER_BYTES), [&huge, &huge, &huge]);
        assert_eq!(all.len(), MAX_COMPOSED_BYTES);
    }
}
