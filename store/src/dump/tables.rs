//! The dump's tables, in one list: every backend exports each of them and imports
//! each of them, and a table this list lacks is refused by name on import. A new
//! table is one entry here, its rows in each backend's dump code
//! (`redb_backend/dump/mod.rs`; the PostgreSQL backend derives its statements from this
//! list, naming columns as the entries do), and nothing else.

/// A key column's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// Text, compared byte by byte.
    Text,
    /// A signed 64-bit integer (times in ms, sequence numbers, event ids).
    Int,
}

/// What a table's rows hold besides their key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Nothing: the key is the row.
    None,
    /// Text (a run id).
    Text,
    /// Bytes (a versioned record, a checkpoint).
    Bytes,
}

/// One table of the dump.
#[derive(Debug, PartialEq, Eq)]
pub struct Table {
    /// The name in the dump (and PostgreSQL's table).
    pub name: &'static str,
    /// The key's columns, in key order: name (PostgreSQL's column) and kind.
    pub key: &'static [(&'static str, Column)],
    /// The value's column and kind; the column is empty for [`ValueKind::None`].
    pub value: (&'static str, ValueKind),
}

use Column::{Int, Text};

const fn t(
    name: &'static str,
    key: &'static [(&'static str, Column)],
    value: (&'static str, ValueKind),
) -> Table {
    Table { name, key, value }
}

const RECORD: (&str, ValueKind) = ("record", ValueKind::Bytes);
const NOTHING: (&str, ValueKind) = ("", ValueKind::None);
const RUN_ID: (&str, ValueKind) = ("run_id", ValueKind::Text);

/// Every table a dump holds, in the order an import would want them (definitions
/// before the runs naming them, though import does not depend on it).
pub static TABLES: &[Table] = &[
    t("namespaces", &[("name", Text)], RECORD),
    t(
        "definitions",
        &[("workflow_id", Text), ("version", Text), ("hash", Text)],
        RECORD,
    ),
    t("runs", &[("ns", Text), ("run_id", Text)], RECORD),
    t(
        "events",
        &[("ns", Text), ("run_id", Text), ("event_id", Int)],
        RECORD,
    ),
    t(
        "checkpoints",
        &[("ns", Text), ("run_id", Text)],
        ("bytes", ValueKind::Bytes),
    ),
    t(
        "step_checkpoints",
        &[("ns", Text), ("run_id", Text), ("step", Int)],
        ("bytes", ValueKind::Bytes),
    ),
    t("open_runs", &[("ns", Text), ("run_id", Text)], NOTHING),
    t("tasks", &[("ns", Text), ("queue", Text), ("seq", Int)], RUN_ID),
    t("timers", &[("due_ms", Int), ("seq", Int)], RECORD),
    t("idempotency", &[("ns", Text), ("key", Text)], RUN_ID),
    t(
        "runs_by_start",
        &[("ns", Text), ("start_ms", Int), ("run_id", Text)],
        NOTHING,
    ),
    t(
        "runs_by_close",
        &[("ns", Text), ("close_ms", Int), ("run_id", Text)],
        NOTHING,
    ),
    t(
        "run_terms",
        &[("ns", Text), ("term", Text), ("start_ms", Int), ("run_id", Text)],
        NOTHING,
    ),
    t(
        "children",
        &[("ns", Text), ("parent_id", Text), ("child_id", Text)],
        NOTHING,
    ),
    t("schedules", &[("ns", Text), ("schedule_id", Text)], RECORD),
    t("api_keys", &[("key_id", Text)], RECORD),
    t("triggers", &[("ns", Text), ("trigger_id", Text)], RECORD),
    t(
        "hook_deliveries",
        &[("ns", Text), ("trigger_id", Text), ("delivery_id", Text)],
        RECORD,
    ),
    t(
        "hook_delivery_times",
        &[
            ("received_ms", Int),
            ("ns", Text),
            ("trigger_id", Text),
            ("delivery_id", Text),
        ],
        NOTHING,
    ),
    t(
        "trigger_keys",
        &[("ns", Text), ("trigger_id", Text), ("key", Text)],
        RUN_ID,
    ),
    t(
        "trigger_queue",
        &[("ns", Text), ("trigger_id", Text), ("key", Text), ("seq", Int)],
        RECORD,
    ),
    t("trigger_runs", &[("ns", Text), ("run_id", Text)], RECORD),
    t("batches", &[("ns", Text), ("batch_id", Text)], RECORD),
    t(
        "batch_items",
        &[("ns", Text), ("batch_id", Text), ("idx", Int)],
        RECORD,
    ),
    t("running_batches", &[("ns", Text), ("batch_id", Text)], NOTHING),
    t("workflows", &[("ns", Text), ("workflow_id", Text)], RECORD),
];

/// The table of this name.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().find(|t| t.name == name)
}
