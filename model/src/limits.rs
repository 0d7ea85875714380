//! Size limits on what callers send, and the field checks that apply them. Past a
//! limit a request gets `INVALID_ARGUMENT` naming the field. Names and context keys
//! follow the rules in [`crate::ids`].

use std::collections::BTreeMap;

use crate::error::{Rejection, echo};
use crate::ids;

/// Most bytes of a name (see [`crate::ids`]).
pub const NAME: usize = ids::MAX_NAME;
/// Most bytes of a caller's identity.
pub const IDENTITY: usize = NAME * 2;
/// Most bytes of a request id.
pub const REQUEST_ID: usize = 256;
/// Most bytes of a listing's filter field (a workflow id, a parent run id, a page
/// token, a field to group by).
pub const QUERY_FIELD: usize = 1024;
/// Most bytes of a run's goal.
pub const GOAL: usize = 64 * 1024;
/// Most entries of a run's context.
pub const CONTEXT_ENTRIES: usize = 256;
/// Most bytes of one context value.
pub const CONTEXT_VALUE: usize = 64 * 1024;
/// Most bytes of a step's notes.
pub const NOTES: usize = 1024 * 1024;
/// Most artifacts of one completion.
pub const ARTIFACTS: usize = 256;
/// Most bytes of one artifact.
pub const ARTIFACT: usize = 4096;
/// Most bytes of a checkpoint.
pub const CHECKPOINT: usize = 8 * 1024 * 1024;
/// Most bytes of a message or reason (a failure's, a note's, a cancel's).
pub const MESSAGE: usize = 64 * 1024;
/// Most bytes of a signal's payload.
pub const SIGNAL_PAYLOAD: usize = 256 * 1024;
/// Most coordinator notes in one heartbeat.
pub const COORDINATOR_NOTES: usize = 64;
/// Most bytes of a URL.
pub const URL: usize = 2048;
/// Largest structured `result` of a completion, as JSON text. It travels with every
/// later step's task, so it also counts toward `MAX_TASK_BYTES`.
pub const RESULT: usize = 256 * 1024;
/// Longest model name a heartbeat may report.
pub const MODEL_NAME: usize = 256;
/// Most stuck reports in one heartbeat.
pub const STUCK_REPORTS: usize = 16;

/// Checks a name-like field against the one rule for names ([`ids::check_name`]).
pub fn check_name(field: &str, value: &str) -> Result<(), Rejection> {
    match ids::check_name(value) {
        Ok(()) => Ok(()),
        Err(ids::NameError::Empty) => Err(Rejection::field(field, "must not be empty")),
        Err(ids::NameError::TooLong { len }) => Err(Rejection::field(
            field,
            format!("is {len} bytes, more than the limit of {}", ids::MAX_NAME),
        )),
        Err(ids::NameError::BadCharacter) => Err(Rejection::field(
            field,
            format!("{} may hold only {}", echo(value), ids::NAME_CHARACTERS),
        )),
        Err(ids::NameError::Dots) => Err(Rejection::field(
            field,
            format!(
                "{} is only dots, which names a directory, not a run or a queue",
                echo(value)
            ),
        )),
    }
}

/// Refuses `value` of `field` when it holds a NUL character: PostgreSQL can neither
/// store nor compare one in text, so no backend takes it (the same answer on both).
pub fn check_storable(field: &str, value: &str) -> Result<(), Rejection> {
    match value.find('\0') {
        Some(at) => Err(Rejection::field(
            field,
            format!("holds a NUL character (at byte {at}), which the server neither stores nor compares"),
        )),
        None => Ok(()),
    }
}

/// Refuses `value` of `field` when it is longer than `max` bytes.
pub fn check_len(field: &str, value: &str, max: usize) -> Result<(), Rejection> {
    check_bytes(field, value.as_bytes(), max)
}

/// Refuses `value` of `field` when it is longer than `max` bytes.
pub fn check_bytes(field: &str, value: &[u8], max: usize) -> Result<(), Rejection> {
    if value.len() > max {
        return Err(Rejection::field(
            field,
            format!("is {} bytes, more than the limit of {max}", value.len()),
        ));
    }
    Ok(())
}

/// Checks a completion's `result_json`: at most [`RESULT`] bytes of a JSON object.
/// Empty means no result. A refusal quotes none of the text.
pub fn check_result(field: &str, text: &str) -> Result<Option<serde_json::Value>, Rejection> {
    if text.is_empty() {
        return Ok(None);
    }
    check_len(field, text, RESULT)?;
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(Some(v)),
        Ok(_) => Err(Rejection::field(field, "must be a JSON object")),
        Err(e) => Err(Rejection::field(field, format!("is not JSON: {e}"))),
    }
}

/// Refuses `field` when it holds more than `max` entries.
pub fn check_count(field: &str, count: usize, max: usize) -> Result<(), Rejection> {
    if count > max {
        return Err(Rejection::field(
            field,
            format!("has {count} entries, more than {max}"),
        ));
    }
    Ok(())
}

/// Checks the artifacts a step reports: how many, how long, and that each is a path
/// inside the run's workspace ([`ids::check_artifact_path`]).
pub fn check_artifacts(field: &str, artifacts: &[String]) -> Result<(), Rejection> {
    check_count(field, artifacts.len(), ARTIFACTS)?;
    for (i, a) in artifacts.iter().enumerate() {
        let at = format!("{field}[{i}]");
        check_len(&at, a, ARTIFACT)?;
        ids::check_artifact_path(a).map_err(|e| Rejection::field(&at, format!("{} {e}", echo(a))))?;
    }
    Ok(())
}

/// Checks a context map (or context updates): its size, its keys
/// ([`ids::is_context_key`]) and its values.
pub fn check_context(field: &str, ctx: &BTreeMap<String, String>) -> Result<(), Rejection> {
    check_count(field, ctx.len(), CONTEXT_ENTRIES)?;
    for (k, v) in ctx {
        if !ids::is_context_key(k) {
            return Err(Rejection::field(
                field,
                format!("key {} must be 1 to {} bytes", echo(k), ids::MAX_CONTEXT_KEY),
            ));
        }
        check_len(&format!("{field}[{}]", echo(k)), v, CONTEXT_VALUE)?;
    }
    Ok(())
}
