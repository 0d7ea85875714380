//! Reading a dump into a store: line by line, bounded, in batches of one
//! transaction each; a dump found bad at any point empties the target again.

use std::borrow::Cow;
use std::io::{BufRead, Read};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::write::{Header, Trailer};
use super::{
    Column, DERIVED_TABLES, DumpError, DumpTarget, FORMAT, FORMAT_VERSION, MAX_LINE_BYTES, MAX_VALUE_BYTES,
    Part, Row, Summary, Value, ValueKind, table,
};

/// Rows written in one transaction, at most.
const BATCH_ROWS: usize = 2000;
/// Value bytes written in one transaction, at most (one larger row is a batch alone).
const BATCH_BYTES: usize = 16 << 20;

/// How to import.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// Delete what the target holds first, instead of refusing a target that is not
    /// empty.
    pub replace: bool,
}

/// A row or trailer line; the value borrows from the line when it can.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineIn<'a> {
    #[serde(default)]
    t: Option<String>,
    #[serde(default)]
    k: Option<Vec<Part>>,
    #[serde(default, borrow)]
    s: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    b: Option<Cow<'a, str>>,
    #[serde(default)]
    end: Option<Trailer>,
}

/// The input, line by line: where it is, and the hash of what came before.
struct Lines<'r> {
    input: &'r mut dyn BufRead,
    buf: Vec<u8>,
    /// The number of the line in `buf` (from 1).
    line: u64,
    /// The byte offset of the line in `buf`.
    offset: u64,
    /// Bytes read, the line in `buf` included.
    read: u64,
    hash: Sha256,
}

impl Lines<'_> {
    fn error(&self, problem: impl Into<String>) -> DumpError {
        DumpError::Format {
            line: self.line,
            offset: self.offset,
            problem: problem.into(),
        }
    }

    /// Reads the next line into `buf` (without hashing it); `false` at the end.
    fn next(&mut self) -> Result<bool, DumpError> {
        self.buf.clear();
        self.line += 1;
        self.offset = self.read;
        let n = (&mut *self.input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| DumpError::Io {
                what: "cannot read the dump",
                source,
            })?;
        self.read += n as u64;
        if n == 0 {
            return Ok(false);
        }
        let content = self.buf.len() - usize::from(self.buf.ends_with(b"\n"));
        if content > MAX_LINE_BYTES {
            return Err(self.error(format!(
                "the line is longer than the dump's limit of {MAX_LINE_BYTES} bytes"
            )));
        }
        Ok(true)
    }

    fn ends_line(&self) -> bool {
        self.buf.ends_with(b"\n")
    }

    fn hash_line(&mut self) {
        self.hash.update(&self.buf);
    }
}

/// Imports the dump read from `input` into `target`, and answers what moved.
///
/// Refuses a dump of another format or version, and a target that is not empty
/// unless `options.replace` (which deletes what it holds first). After the first
/// write, a failure (a malformed or truncated dump, a wrong checksum, a storage
/// error) empties the target again; [`DumpError::Abandoned`] says whether that worked.
pub fn import(
    target: &dyn DumpTarget,
    input: &mut dyn BufRead,
    options: &ImportOptions,
) -> Result<Summary, DumpError> {
    let mut lines = Lines {
        input,
        buf: Vec::new(),
        line: 0,
        offset: 0,
        read: 0,
        hash: Sha256::new(),
    };
    let header = header(&mut lines)?;
    if !target.is_empty()? {
        if !options.replace {
            return Err(DumpError::NotEmpty {
                backend: target.backend(),
            });
        }
        tracing::info!(
            target = target.backend(),
            "deleting what the target store holds (--replace)"
        );
        target.clear()?;
    }
    let summary = Summary {
        source_backend: header.backend,
        source_layout: header.layout,
        ..Summary::default()
    }
    .with_every_table();
    match rows(&mut lines, target, summary) {
        Ok(summary) => Ok(summary),
        Err(source) => {
            let cleanup = match target.clear() {
                Ok(()) => "nothing was imported: the target store was emptied again".to_string(),
                Err(e) => format!(
                    "emptying the target store again failed too ({e}): it holds part of the dump; \
                     import again with --replace"
                ),
            };
            Err(DumpError::Abandoned {
                source: Box::new(source),
                cleanup,
            })
        }
    }
}

fn header(lines: &mut Lines<'_>) -> Result<Header, DumpError> {
    if !lines.next()? {
        return Err(lines.error("the dump is empty: no header line"));
    }
    let header: Header = match serde_json::from_slice::<serde_json::Value>(&lines.buf) {
        Ok(v) if v.get("format").and_then(|f| f.as_str()) == Some(FORMAT) => {
            let version = v.get("version").and_then(|v| v.as_u64());
            if version != Some(FORMAT_VERSION) {
                return Err(lines.error(format!(
                    "dump format version {}; this build reads version {FORMAT_VERSION}",
                    v.get("version")
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "missing".into())
                )));
            }
            serde_json::from_value(v).map_err(|e| lines.error(format!("a malformed header: {e}")))?
        }
        _ => {
            return Err(lines.error(format!(
                "not a Railyard dump: the first line is not a {FORMAT} header"
            )));
        }
    };
    if !lines.ends_line() {
        return Err(lines.error("the dump ends inside its header (truncated)"));
    }
    lines.hash_line();
    Ok(header)
}

/// The rows and the trailer, written in batches.
fn rows(lines: &mut Lines<'_>, target: &dyn DumpTarget, mut summary: Summary) -> Result<Summary, DumpError> {
    let mut batch: Vec<Row> = Vec::new();
    let mut batch_bytes = 0usize;
    loop {
        if !lines.next()? {
            return Err(lines.error(format!(
                "the dump ends after {} rows without its trailer (truncated)",
                summary.rows
            )));
        }
        let parsed: LineIn<'_> = match serde_json::from_slice(&lines.buf) {
            Ok(parsed) => parsed,
            Err(_) if !lines.ends_line() => {
                return Err(lines.error("the dump ends inside a line (truncated)"));
            }
            Err(e) => return Err(lines.error(format!("not a dump line: {e}"))),
        };
        if let Some(trailer) = parsed.end {
            check_trailer(lines, &summary, &trailer)?;
            if lines.next()? {
                return Err(lines.error("more after the trailer"));
            }
            target.load(&batch)?;
            summary.dump_bytes = lines.read;
            summary.sha256 = trailer.sha256;
            return Ok(summary);
        }
        if !lines.ends_line() {
            return Err(lines.error("the dump ends inside a line (truncated)"));
        }
        let row = row(lines, parsed)?;
        lines.hash_line();
        summary.count(&row);
        batch_bytes += row.value.len();
        // Derived tables (`run_terms`) are rebuilt from the rows they derive from, so
        // that a dump from before one (which has none of its rows) imports complete.
        if DERIVED_TABLES.contains(&row.table.name) {
            continue;
        }
        let derived = target
            .derived(&row)
            .map_err(|e| lines.error(format!("a row of table {} cannot be read: {e}", row.table.name)))?;
        batch.extend(derived);
        batch.push(row);
        if batch.len() >= BATCH_ROWS || batch_bytes >= BATCH_BYTES {
            target.load(&batch)?;
            batch.clear();
            batch_bytes = 0;
        }
    }
}

/// A row line checked against its table.
fn row(lines: &Lines<'_>, parsed: LineIn<'_>) -> Result<Row, DumpError> {
    let name = parsed
        .t
        .ok_or_else(|| lines.error("a row without its table (\"t\")"))?;
    let table = table(&name).ok_or_else(|| {
        lines.error(format!(
            "table {} is not one this build knows (a dump of a newer Railyard?)",
            railyard_model::echo(&name)
        ))
    })?;
    let key = parsed
        .k
        .ok_or_else(|| lines.error("a row without its key (\"k\")"))?;
    let shape = key.len() == table.key.len()
        && key.iter().zip(table.key).all(|(part, (_, col))| {
            matches!(
                (part, col),
                (Part::Text(_), Column::Text) | (Part::Int(_), Column::Int)
            )
        });
    if !shape {
        let columns: Vec<&str> = table.key.iter().map(|(name, _)| *name).collect();
        return Err(lines.error(format!(
            "a key of table {} must be [{}]",
            table.name,
            columns.join(", ")
        )));
    }
    let value = match (table.value.1, parsed.s, parsed.b) {
        (ValueKind::None, None, None) => Value::None,
        (ValueKind::Text, Some(s), None) => Value::Text(s.into_owned()),
        (ValueKind::Bytes, None, Some(b)) => {
            if b.len() > MAX_VALUE_BYTES.div_ceil(3) * 4 {
                return Err(lines.error(format!(
                    "a value over the dump's limit of {MAX_VALUE_BYTES} bytes"
                )));
            }
            Value::Bytes(
                STANDARD
                    .decode(b.as_bytes())
                    .map_err(|e| lines.error(format!("the value (\"b\") is not base64: {e}")))?,
            )
        }
        (kind, ..) => {
            let wanted = match kind {
                ValueKind::None => "no value",
                ValueKind::Text => "a text value (\"s\")",
                ValueKind::Bytes => "a bytes value (\"b\")",
            };
            return Err(lines.error(format!("a row of table {} must have {wanted}", table.name)));
        }
    };
    Ok(Row { table, key, value })
}

fn check_trailer(lines: &Lines<'_>, summary: &Summary, trailer: &Trailer) -> Result<(), DumpError> {
    let sha256 = hex::encode(lines.hash.clone().finalize());
    if trailer.sha256 != sha256 {
        return Err(lines.error(format!(
            "checksum mismatch: the trailer says sha256 {}, the dump before it has {sha256} \
             (the dump was changed or damaged)",
            railyard_model::echo(&trailer.sha256)
        )));
    }
    if trailer.rows != summary.rows {
        return Err(lines.error(format!(
            "the trailer counts {} rows, the dump holds {}",
            trailer.rows, summary.rows
        )));
    }
    for (name, n) in &trailer.tables {
        let have = summary.tables.get(name).map_or(0, |c| c.rows);
        if *n != have {
            return Err(lines.error(format!(
                "the trailer counts {n} rows of table {}, the dump holds {have}",
                railyard_model::echo(name)
            )));
        }
    }
    Ok(())
}
