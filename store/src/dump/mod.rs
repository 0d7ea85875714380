//! Moving a store: a dump of every table of one backend, written as a stream
//! ([`export`]) and read back into another ([`import`]), whatever the two backends.
//!
//! The dump holds the rows as the backends keep them: keys as their parts (text or
//! integer), values as the stored bytes (the versioned records of [`crate::records`],
//! a checkpoint's bytes, a run id), never decoded, so a definition keeps the bytes
//! its content hash was taken of. The tables are the ones of [`TABLES`], named as
//! the PostgreSQL backend names them (redb keeps `runs`, `events` and `checkpoints`
//! in one table; its backend splits and joins them).
//!
//! # Format (version [`FORMAT_VERSION`])
//!
//! UTF-8 text, one JSON object per line, each line at most [`MAX_LINE_BYTES`]:
//!
//! 1. a header: `{"format":"railyard-dump","version":1,"backend":"redb","layout":3,"created_ms":...}`
//!    (`layout`: the source's storage layout, redb's layout or PostgreSQL's schema
//!    version, for the reader's information);
//! 2. one line per row: `{"t":TABLE,"k":[KEY PARTS],"b":BASE64}` for bytes,
//!    `"s":TEXT` for a text value, neither for a key-only table. A table's rows
//!    come in key order; tables may interleave (redb keeps a run's state row,
//!    events and checkpoint together);
//! 3. a trailer: `{"end":{"rows":N,"tables":{TABLE:N,...},"value_bytes":N,"sha256":HEX}}`,
//!    the SHA-256 of every byte before it, and nothing after it.
//!
//! # Import
//!
//! The header's format and version are checked first, then the target is checked
//! empty (nothing but the `default` namespace every store is opened with) unless
//! the caller asked to replace what it holds ([`ImportOptions::replace`]). Rows are
//! written in batches, one transaction each, so memory stays bounded whatever the
//! dump's size; the checksum is only known at the end, so a dump found bad (a wrong
//! checksum, a truncated stream, a malformed line) empties the target again and the
//! error names the line and its byte offset. `run_terms` (the list queries' index) is
//! derived: import rebuilds it from the `runs` rows and ignores the dump's, so a dump
//! written before the table imports with it complete.

mod read;
mod tables;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod write;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::StorageError;

pub use read::{ImportOptions, import};
pub use tables::{Column, TABLES, Table, ValueKind, table};
pub use write::export;

/// The header's `format`.
pub const FORMAT: &str = "railyard-dump";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u64 = 1;
/// The largest value a row may hold: more than any record the server writes (a
/// checkpoint is at most 8 MiB, a task at most 6 MiB).
pub const MAX_VALUE_BYTES: usize = 32 << 20;
/// The longest line: a largest value in base64, and room for the key.
pub const MAX_LINE_BYTES: usize = MAX_VALUE_BYTES.div_ceil(3) * 4 + (1 << 20);

/// One part of a row's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Part {
    Text(String),
    Int(i64),
}

/// A row's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A key-only table's row.
    None,
    /// Text (a run id).
    Text(String),
    /// Stored bytes (a record, a checkpoint).
    Bytes(Vec<u8>),
}

impl Value {
    /// How many bytes the value holds.
    pub fn len(&self) -> usize {
        match self {
            Value::None => 0,
            Value::Text(s) => s.len(),
            Value::Bytes(b) => b.len(),
        }
    }

    /// Whether the value holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One row of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub table: &'static Table,
    pub key: Vec<Part>,
    pub value: Value,
}

impl Row {
    /// The text key part `i` (the caller checked the row against its table).
    pub fn text(&self, i: usize) -> Result<&str, StorageError> {
        match self.key.get(i) {
            Some(Part::Text(s)) => Ok(s),
            _ => Err(self.shape_error()),
        }
    }

    /// The integer key part `i`.
    pub fn int(&self, i: usize) -> Result<i64, StorageError> {
        match self.key.get(i) {
            Some(Part::Int(n)) => Ok(*n),
            _ => Err(self.shape_error()),
        }
    }

    /// The integer key part `i`, which the backend keeps unsigned (a sequence, an event id).
    pub fn uint(&self, i: usize) -> Result<u64, StorageError> {
        let n = self.int(i)?;
        u64::try_from(n).map_err(|_| StorageError::Corrupt {
            what: "dump row",
            source: format!("table {}: key part {} is negative ({n})", self.table.name, i + 1).into(),
        })
    }

    /// The value's bytes (a text value's UTF-8), empty for a key-only row.
    pub fn bytes(&self) -> &[u8] {
        match &self.value {
            Value::None => &[],
            Value::Text(s) => s.as_bytes(),
            Value::Bytes(b) => b,
        }
    }

    /// The value as text.
    pub fn value_text(&self) -> Result<&str, StorageError> {
        match &self.value {
            Value::Text(s) => Ok(s),
            _ => Err(self.shape_error()),
        }
    }

    fn shape_error(&self) -> StorageError {
        StorageError::Corrupt {
            what: "dump row",
            source: format!(
                "a row of table {} does not have the table's shape",
                self.table.name
            )
            .into(),
        }
    }
}

/// An unsigned number a backend keeps as a dump's integer key part.
pub fn int_part(n: u64, table: &str) -> Result<Part, StorageError> {
    i64::try_from(n)
        .map(Part::Int)
        .map_err(|_| StorageError::Corrupt {
            what: "row key",
            source: format!("table {table}: {n} does not fit a signed 64-bit integer").into(),
        })
}

/// A store read for a dump: every row of one consistent snapshot.
pub trait DumpSource {
    /// The backend's name for the header (`redb`, `postgres`).
    fn backend(&self) -> &'static str;
    /// The source's storage layout (redb) or schema version (PostgreSQL).
    fn layout(&self) -> u64;
    /// Visits every row of every table of [`TABLES`], each table in key order, all
    /// from one snapshot, stopping at the first error `visit` answers.
    fn rows(&self, visit: &mut dyn FnMut(Row) -> Result<(), DumpError>) -> Result<(), DumpError>;
}

/// A store a dump is imported into.
pub trait DumpTarget {
    /// The backend's name, for messages.
    fn backend(&self) -> &'static str;
    /// Whether the store holds no row but the `default` namespace's.
    fn is_empty(&self) -> Result<bool, StorageError>;
    /// Deletes every row of every table, leaving the store as a fresh one opens (the
    /// `default` namespace only), in one transaction.
    fn clear(&self) -> Result<(), StorageError>;
    /// Writes `rows` in one transaction, each over a row of the same key.
    fn load(&self, rows: &[Row]) -> Result<(), StorageError>;
    /// The rows of derived tables the store keeps for `row` (a `runs` row's
    /// `run_terms`: [`run_terms_rows`]), which an import writes with it instead of the
    /// dump's own.
    fn derived(&self, row: &Row) -> Result<Vec<Row>, StorageError>;
}

/// The tables an import rebuilds from other rows ([`DumpTarget::derived`]) rather
/// than reading them from the dump: a dump from before one has none of its rows.
pub const DERIVED_TABLES: &[&str] = &["run_terms"];

/// The `run_terms` rows of run `run_id` of `ns`, started at `start_ms`, under `terms`.
pub fn run_terms_rows(
    ns: &str,
    run_id: &str,
    start_ms: i64,
    terms: Vec<String>,
) -> Result<Vec<Row>, StorageError> {
    let table = table("run_terms").ok_or_else(|| StorageError::Corrupt {
        what: "dump",
        source: "no run_terms table in the table list".into(),
    })?;
    Ok(terms
        .into_iter()
        .map(|term| Row {
            table,
            key: vec![
                Part::Text(ns.to_string()),
                Part::Text(term),
                Part::Int(start_ms),
                Part::Text(run_id.to_string()),
            ],
            value: Value::None,
        })
        .collect())
}

/// Rows and value bytes of one table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableCount {
    pub rows: u64,
    pub bytes: u64,
}

/// What moved: rows and bytes per table, the dump's size and checksum.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The backend the dump came from, and its layout.
    pub source_backend: String,
    pub source_layout: u64,
    /// Per table (every table of [`TABLES`], zero included).
    pub tables: BTreeMap<String, TableCount>,
    /// Rows in all.
    pub rows: u64,
    /// Value bytes in all.
    pub value_bytes: u64,
    /// The dump's length, trailer included.
    pub dump_bytes: u64,
    /// Hex SHA-256 of the dump before its trailer.
    pub sha256: String,
}

impl Summary {
    fn count(&mut self, row: &Row) {
        let n = self.tables.entry(row.table.name.to_string()).or_default();
        n.rows += 1;
        n.bytes += row.value.len() as u64;
        self.rows += 1;
        self.value_bytes += row.value.len() as u64;
    }

    fn with_every_table(mut self) -> Self {
        for t in TABLES {
            self.tables.entry(t.name.to_string()).or_default();
        }
        self
    }
}

/// Why an export or an import failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The store failed.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// Writing the dump, or reading it, failed.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    /// The dump is not one this build reads: its line (from 1), byte offset, and why.
    #[error("dump line {line} (byte offset {offset}): {problem}")]
    Format { line: u64, offset: u64, problem: String },
    /// A row the export cannot write.
    #[error("cannot export table {table}: {problem}")]
    Row { table: &'static str, problem: String },
    /// The target holds data and replacing it was not asked for.
    #[error(
        "the target {backend} store is not empty; import only into a new store, or give --replace to delete \
         what it holds first"
    )]
    NotEmpty { backend: &'static str },
    /// An import that failed after writing; the target was emptied again (or not, said).
    #[error("{source}; {cleanup}")]
    Abandoned { source: Box<DumpError>, cleanup: String },
}
