//! Exporting the store through the server (`Admin.ExportStore`): the dump of
//! `railyard store export`, for a store no other process may open while the server
//! runs (redb's file is held by the server alone).
//!
//! The dump is written on a blocking thread from one read snapshot, in chunks sent
//! down a bounded channel: a slow client slows only its own export, memory stays at
//! a few chunks, and a client that goes away ends the export at its next chunk.

use railyard_model::Rejection;
use std::io::Write;

use tokio::sync::mpsc;

use super::Core;
use super::caller::{self, Credentials, Operation};
use crate::error::ApiError;
use railyard_model::auth::ALL_NAMESPACES;
use railyard_store::dump::{self, Summary};

/// Bytes per chunk sent to the client.
const CHUNK_BYTES: usize = 256 << 10;
/// Chunks buffered ahead of a slow client.
const CHUNKS_AHEAD: usize = 4;

/// One message of the export: dump bytes, or, last, what the dump held.
#[derive(Debug)]
pub enum ExportPiece {
    Bytes(Vec<u8>),
    Done(Summary),
}

/// Starts exporting the store; the receiver yields the dump in order, then its
/// summary, or an error that ends it.
pub fn start(
    core: &Core,
    credentials: &Credentials,
) -> Result<mpsc::Receiver<Result<ExportPiece, ApiError>>, ApiError> {
    let principal = caller::authenticate(core, credentials)?;
    caller::authorize(&principal, ALL_NAMESPACES, Operation::ExportStore)?;
    if core.store.backend().dump_source().is_none() {
        return Err(ApiError::Rejected(Rejection::FailedPrecondition(
            "this server's store is exported directly, not through the server: \
             railyard store export --store <the server's store>"
                .into(),
        )));
    }
    let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
    let store = core.store.clone();
    let created_ms = core.clock.now_ms();
    tracing::info!(by = ?principal, "store export started");
    tokio::task::spawn_blocking(move || {
        let Some(source) = store.backend().dump_source() else {
            return;
        };
        let mut out = Chunks {
            buf: Vec::with_capacity(CHUNK_BYTES),
            tx: &tx,
        };
        let result = dump::export(source, &mut out, created_ms).and_then(|summary| {
            out.flush().map_err(|source| dump::DumpError::Io {
                what: "cannot send the dump",
                source,
            })?;
            Ok(summary)
        });
        let last = match result {
            Ok(summary) => {
                tracing::info!(
                    rows = summary.rows,
                    bytes = summary.dump_bytes,
                    "store export done"
                );
                Ok(ExportPiece::Done(summary))
            }
            Err(e) => {
                tracing::warn!(error = %e, "store export stopped");
                Err(match e {
                    dump::DumpError::Storage(e) => e.into(),
                    e => ApiError::Unavailable(format!("the export stopped: {e}")),
                })
            }
        };
        let _ = tx.blocking_send(last);
    });
    Ok(rx)
}

/// A writer that sends full chunks down the channel; fails once the client is gone.
struct Chunks<'a> {
    buf: Vec<u8>,
    tx: &'a mpsc::Sender<Result<ExportPiece, ApiError>>,
}

impl Write for Chunks<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(ExportPiece::Bytes(chunk)))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away"))
    }
}
