//! The public JSON of event attributes (`HistoryEvent.attributes_json`):
//! [`EventKind`]'s derived `Serialize` (its serde attributes say where the view
//! differs from a field), and the few field serializers it names. The names are the
//! API: `wire_tests.rs` pins the JSON of every event type.

use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{EventKind, ParentClosePolicy, RunStatus, TimeoutKind};
use crate::workflow::WorkflowDef;

/// The attributes of an event as the API shows them: a JSON object whose field
/// names are camelCase. Through a `Value`, whose keys are sorted, so the text is
/// in key order (as it has always been), not in field order.
pub fn event_attributes(kind: &EventKind) -> Value {
    // The view's serializers cannot fail (string keys, no failing field), but a
    // definition that did not serialize was always shown as null, not an error.
    serde_json::to_value(kind).unwrap_or(Value::Null)
}

/// [`event_attributes`] as JSON text.
pub fn event_attributes_json(kind: &EventKind) -> String {
    event_attributes(kind).to_string()
}

/// The API's name of a timeout kind.
pub fn timeout_name(kind: TimeoutKind) -> &'static str {
    match kind {
        TimeoutKind::StartToClose => "START_TO_CLOSE",
        TimeoutKind::Heartbeat => "HEARTBEAT",
        TimeoutKind::Undelivered => "UNDELIVERED",
        TimeoutKind::Wait => "WAIT",
    }
}

/// A stored result (JSON text) as a JSON value; text that does not parse (never
/// written by this server) is shown as a string rather than lost.
pub fn result_value(result: &str) -> Value {
    serde_json::from_str(result).unwrap_or_else(|_| Value::String(result.to_string()))
}

// The field serializers [`EventKind`]'s serde attributes name.

/// A run's definition, as its file format writes it; `null` if it does not serialize.
pub(super) fn definition<S: Serializer>(def: &Arc<WorkflowDef>, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(&**def).unwrap_or(Value::Null).serialize(s)
}

/// A run is a root (depth 0): its `RunStarted` shows no depth.
pub(super) fn is_root(depth: &u32) -> bool {
    *depth == 0
}

/// A step's structured result, parsed ([`result_value`]).
pub(super) fn result<S: Serializer>(result: &str, s: S) -> Result<S::Ok, S::Error> {
    result_value(result).serialize(s)
}

/// A child's result as its parent reads it ([`super::quoted_result`]).
pub(super) fn child_result<S: Serializer>(result: &str, s: S) -> Result<S::Ok, S::Error> {
    super::quoted_result(result, super::MAX_CHILD_RESULT_QUOTED).serialize(s)
}

/// A timeout by its API name ([`timeout_name`]).
pub(super) fn timeout<S: Serializer>(kind: &TimeoutKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(timeout_name(*kind))
}

/// A parent-close policy by its API name.
pub(super) fn policy<S: Serializer>(policy: &ParentClosePolicy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(policy.name())
}

/// A run status by its API name.
pub(super) fn status<S: Serializer>(status: &RunStatus, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(status.name())
}

/// An issue's severity by its API name (`info`, `warning`, `error`, `critical`).
pub(super) fn severity<S: Serializer>(severity: &super::Severity, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(severity.name())
}
