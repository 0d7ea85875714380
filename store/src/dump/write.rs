//! Writing a dump: the header, a line per row as the source visits them, the trailer.

use std::io::Write;

use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{
    DumpError, DumpSource, FORMAT, FORMAT_VERSION, MAX_VALUE_BYTES, Row, Summary, TableCount, Value,
};

/// The header line.
#[derive(Serialize, serde::Deserialize)]
pub(super) struct Header {
    pub(super) format: String,
    pub(super) version: u64,
    pub(super) backend: String,
    pub(super) layout: u64,
    pub(super) created_ms: i64,
}

/// The trailer's fields.
#[derive(Serialize, serde::Deserialize)]
pub(super) struct Trailer {
    pub(super) rows: u64,
    pub(super) tables: std::collections::BTreeMap<String, u64>,
    pub(super) value_bytes: u64,
    pub(super) sha256: String,
}

/// Counts and hashes what passes to the writer.
struct Hashing<W> {
    out: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn io(source: std::io::Error) -> DumpError {
    DumpError::Io {
        what: "cannot write the dump",
        source,
    }
}

fn json<T: Serialize + ?Sized>(out: &mut impl Write, v: &T) -> Result<(), DumpError> {
    serde_json::to_writer(&mut *out, v).map_err(|e| io(e.into()))
}

/// Writes one row's line.
fn row_line(out: &mut impl Write, row: &Row) -> Result<(), DumpError> {
    if row.value.len() > MAX_VALUE_BYTES {
        return Err(DumpError::Row {
            table: row.table.name,
            problem: format!(
                "a value of {} bytes (key {:?}) is over the dump's limit of {MAX_VALUE_BYTES}",
                row.value.len(),
                row.key
            ),
        });
    }
    out.write_all(b"{\"t\":").map_err(io)?;
    json(out, row.table.name)?;
    out.write_all(b",\"k\":").map_err(io)?;
    json(out, &row.key)?;
    match &row.value {
        Value::None => {}
        Value::Text(s) => {
            out.write_all(b",\"s\":").map_err(io)?;
            json(out, s)?;
        }
        Value::Bytes(b) => {
            out.write_all(b",\"b\":\"").map_err(io)?;
            // Straight into the writer: no second copy of a large value.
            {
                let mut enc = base64::write::EncoderWriter::new(&mut *out, &STANDARD);
                enc.write_all(b).map_err(io)?;
                enc.finish().map_err(io)?;
            }
            out.write_all(b"\"").map_err(io)?;
        }
    }
    out.write_all(b"}\n").map_err(io)
}

/// Writes the dump of `source` to `out` (buffer it: rows are written in small
/// pieces) and answers what it holds. `created_ms` is the header's creation time.
/// Memory holds one row at a time, whatever the store's size.
pub fn export(source: &dyn DumpSource, out: &mut dyn Write, created_ms: i64) -> Result<Summary, DumpError> {
    let mut out = Hashing {
        out,
        hash: Sha256::new(),
        bytes: 0,
    };
    let mut summary = Summary {
        source_backend: source.backend().to_string(),
        source_layout: source.layout(),
        ..Summary::default()
    }
    .with_every_table();
    json(
        &mut out,
        &Header {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            backend: source.backend().into(),
            layout: source.layout(),
            created_ms,
        },
    )?;
    out.write_all(b"\n").map_err(io)?;
    source.rows(&mut |row| {
        row_line(&mut out, &row)?;
        summary.count(&row);
        Ok(())
    })?;
    let sha256 = hex::encode(out.hash.clone().finalize());
    let trailer = Trailer {
        rows: summary.rows,
        tables: summary
            .tables
            .iter()
            .map(|(name, TableCount { rows, .. })| (name.clone(), *rows))
            .collect(),
        value_bytes: summary.value_bytes,
        sha256: sha256.clone(),
    };
    out.write_all(b"{\"end\":").map_err(io)?;
    json(&mut out, &trailer)?;
    out.write_all(b"}\n").map_err(io)?;
    out.flush().map_err(io)?;
    summary.sha256 = sha256;
    summary.dump_bytes = out.bytes;
    Ok(summary)
}
