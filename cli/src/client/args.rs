//! Parsers for flag values shared by several commands (`--context`, `--since`,
//! `--payload`, `--status`, `--context-file`). Each error names what was wrong so that
//! clap can print it after the flag's name.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use railyard_proto::v1::RunStatus;

use crate::client::timefmt;

/// Parses `KEY=VALUE` (split at the first `=`; the value may be empty or hold `=`).
pub(crate) fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_string(), value.to_string())),
        Some(_) => Err(format!("empty key in {text:?} (expected KEY=VALUE)")),
        None => Err(format!("no '=' in {text:?} (expected KEY=VALUE)")),
    }
}

/// A `--since` value: how far back, or an absolute time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Since {
    /// A duration before now (`1h`, `30m`, `2d`).
    Ago(Duration),
    /// An absolute time, unix milliseconds (from RFC 3339).
    At(i64),
}

impl Since {
    /// The time this names, in unix milliseconds, relative to `now_ms`.
    pub(crate) fn to_unix_ms(self, now_ms: i64) -> i64 {
        match self {
            Self::Ago(d) => now_ms
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .max(1),
            Self::At(ms) => ms,
        }
    }
}

/// Parses a `--since` value: a duration (`1h`, `90m`, `2d`) or an RFC 3339 time.
pub(crate) fn since(text: &str) -> Result<Since, String> {
    let t = text.trim();
    if t.starts_with(|c: char| c.is_ascii_digit()) && t.len() >= 10 && t.as_bytes()[4] == b'-' {
        return timefmt::parse_rfc3339(t).map(Since::At);
    }
    timefmt::parse_duration(t).map(Since::Ago).map_err(|_| {
        format!("{text:?} is neither a duration (30m, 1h, 2d) nor an RFC 3339 time (2024-05-01T12:00:00Z)")
    })
}

/// Parses a run status by its short name (`running`, `COMPLETED`, `timed_out` ...).
pub(crate) fn run_status(text: &str) -> Result<RunStatus, String> {
    RunStatus::from_short_name(text.trim()).ok_or_else(|| {
        format!(
            "unknown status {text:?} (one of RUNNING, COMPLETED, FAILED, CANCELED, TERMINATED, TIMED_OUT)"
        )
    })
}

/// Checks that `text` is one JSON value and returns it unchanged, as the wire wants it.
pub(crate) fn json_text(text: &str) -> Result<String, String> {
    serde_json::from_str::<serde_json::Value>(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("not valid JSON: {e}"))
}

/// Reads a `--context-file`: a JSON object whose values become context entries
/// (strings as they are; numbers, booleans, arrays and objects as their JSON text;
/// `null` as an empty string).
pub(crate) fn context_file(path: &Path) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--context-file {}: cannot read: {e}", path.display()))?;
    context_from_json(&text).map_err(|e| format!("--context-file {}: {e}", path.display()))
}

/// The context map held by a JSON object's text (see [`context_file`]).
pub(crate) fn context_from_json(text: &str) -> Result<HashMap<String, String>, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let serde_json::Value::Object(map) = value else {
        return Err("expected a JSON object of KEY: value entries".to_string());
    };
    Ok(map
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            (k, v)
        })
        .collect())
}

/// Builds a context map: the file's entries first, then each `--context` over them.
pub(crate) fn build_context(
    file: Option<&Path>,
    pairs: &[(String, String)],
) -> Result<HashMap<String, String>, String> {
    let mut context = match file {
        Some(path) => context_file(path)?,
        None => HashMap::new(),
    };
    context.extend(pairs.iter().cloned());
    Ok(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_values() {
        assert_eq!(key_value("lang=rust"), Ok(("lang".into(), "rust".into())));
        assert_eq!(key_value("expr=a=b"), Ok(("expr".into(), "a=b".into())));
        assert_eq!(key_value("empty="), Ok(("empty".into(), String::new())));
        assert_eq!(key_value(" k =v"), Ok(("k".into(), "v".into())));
        let err = key_value("novalue").unwrap_err();
        assert!(err.contains("no '='") && err.contains("KEY=VALUE"), "{err}");
        assert!(key_value("=v").unwrap_err().contains("empty key"));
    }

    #[test]
    fn since_values() {
        assert_eq!(since("1h"), Ok(Since::Ago(Duration::from_secs(3600))));
        assert_eq!(since("90m"), Ok(Since::Ago(Duration::from_secs(5400))));
        assert_eq!(since("2024-05-01T12:00:00Z"), Ok(Since::At(1_714_564_800_000)));
        assert_eq!(since("2024-05-01"), Ok(Since::At(1_714_521_600_000)));
        assert!(since("2024-05-01T12:00:00").unwrap_err().contains("time zone"));
        assert!(since("soon").unwrap_err().contains("neither a duration"));
        assert_eq!(Since::Ago(Duration::from_secs(60)).to_unix_ms(1_000_000), 940_000);
        assert_eq!(Since::Ago(Duration::from_secs(1_000_000)).to_unix_ms(1_000), 1);
        assert_eq!(Since::At(5).to_unix_ms(1_000), 5);
    }

    #[test]
    fn statuses() {
        assert_eq!(run_status("running"), Ok(RunStatus::Running));
        assert_eq!(run_status("TIMED_OUT"), Ok(RunStatus::TimedOut));
        assert!(run_status("done").unwrap_err().contains("one of RUNNING"));
    }

    #[test]
    fn json_payloads() {
        assert_eq!(json_text(r#"{"text":"hi"}"#), Ok(r#"{"text":"hi"}"#.to_string()));
        assert_eq!(json_text("42"), Ok("42".to_string()));
        let err = json_text("{oops").unwrap_err();
        assert!(err.starts_with("not valid JSON: "), "{err}");
    }

    #[test]
    fn context_json() {
        let ctx = context_from_json(r#"{"a":"x","n":3,"b":true,"z":null,"o":{"k":[1]}}"#).unwrap();
        assert_eq!(ctx["a"], "x");
        assert_eq!(ctx["n"], "3");
        assert_eq!(ctx["b"], "true");
        assert_eq!(ctx["z"], "");
        assert_eq!(ctx["o"], r#"{"k":[1]}"#);
        assert!(context_from_json("[1,2]").unwrap_err().contains("JSON object"));
        assert!(context_from_json("{").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn context_file_and_flags_merge() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctx.json");
        std::fs::write(&path, r#"{"lang":"go","repo":"x"}"#).unwrap();
        let ctx = build_context(Some(&path), &[("lang".into(), "rust".into())]).unwrap();
        assert_eq!(ctx["lang"], "rust");
        assert_eq!(ctx["repo"], "x");

        std::fs::write(&path, "not json").unwrap();
        let err = build_context(Some(&path), &[]).unwrap_err();
        assert!(err.contains("--context-file") && err.contains("ctx.json") && err.contains("not valid JSON"));
        let missing = dir.path().join("missing.json");
        assert!(
            build_context(Some(&missing), &[])
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
