//! `railyard store export --from-server`: the dump read by the running server
//! (`Admin.ExportStore`), for a redb store the server holds alone. The bytes go to
//! stdout as they come; the dump's own checksum is checked on the way, so a dump cut
//! or changed in transit fails here rather than at import.

use anyhow::{Context, bail};
use railyard_store::dump::{Summary, TableCount};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::client::global::GlobalOpts;

/// Hashes the dump as it passes, keeping the hash as it stood before the last line
/// (the trailer's checksum covers every byte before the trailer).
#[derive(Default)]
struct TrailerCheck {
    hash: Sha256,
    /// The hash up to the end of the line before the last complete one.
    before_last_line: Sha256,
    /// The hash up to the end of the last complete line.
    at_last_newline: Sha256,
    bytes: u64,
}

impl TrailerCheck {
    fn update(&mut self, mut data: &[u8]) {
        self.bytes += data.len() as u64;
        while let Some(i) = data.iter().position(|&b| b == b'\n') {
            self.hash.update(&data[..=i]);
            self.before_last_line = std::mem::replace(&mut self.at_last_newline, self.hash.clone());
            data = &data[i + 1..];
        }
        self.hash.update(data);
    }

    /// Whether the dump ended at a line's end and its bytes before the trailer hash
    /// to `sha256`.
    fn matches(&self, sha256: &str, dump_bytes: u64) -> bool {
        self.bytes == dump_bytes && hex::encode(self.before_last_line.clone().finalize()) == sha256
    }
}

/// Streams the server's dump to stdout and answers its summary.
pub(super) async fn export(g: &GlobalOpts) -> anyhow::Result<Summary> {
    let client = g.connect().await?;
    let mut chunks = client.export_store().await?;
    let mut out = tokio::io::BufWriter::with_capacity(1 << 20, tokio::io::stdout());
    let mut check = TrailerCheck::default();
    let summary = loop {
        let Some(chunk) = chunks
            .message()
            .await
            .map_err(|s| crate::client::global::stream_error(&g.server, s))?
        else {
            bail!("the server ended the export before its summary: the dump is incomplete");
        };
        if !chunk.data.is_empty() {
            check.update(&chunk.data);
            out.write_all(&chunk.data)
                .await
                .context("cannot write the dump to stdout")?;
        }
        if let Some(s) = chunk.summary {
            break s;
        }
    };
    out.flush().await.context("cannot write the dump to stdout")?;
    if !check.matches(&summary.sha256, summary.dump_bytes) {
        bail!(
            "the dump received ({} bytes) does not match what the server wrote ({} bytes, sha256 {}): do not import it",
            check.bytes,
            summary.dump_bytes,
            summary.sha256
        );
    }
    Ok(Summary {
        source_backend: summary.source_backend,
        source_layout: summary.source_layout,
        tables: summary
            .tables
            .into_iter()
            .map(|(name, n)| {
                (
                    name,
                    TableCount {
                        rows: n.rows,
                        bytes: n.bytes,
                    },
                )
            })
            .collect(),
        rows: summary.rows,
        value_bytes: summary.value_bytes,
        dump_bytes: summary.dump_bytes,
        sha256: summary.sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_hashes_every_byte_before_the_trailer_line_however_the_chunks_fall() {
        let body = b"{\"format\":\"railyard-dump\"}\n{\"t\":\"runs\"}\n";
        let dump = [&body[..], b"{\"end\":{}}\n"].concat();
        let want = hex::encode(Sha256::digest(body));
        for size in [1, 2, 7, 64, dump.len()] {
            let mut check = TrailerCheck::default();
            for piece in dump.chunks(size) {
                check.update(piece);
            }
            assert!(check.matches(&want, dump.len() as u64), "chunks of {size}");
            assert!(!check.matches(&want, dump.len() as u64 + 1));
            assert!(!check.matches(&hex::encode(Sha256::digest(b"x")), dump.len() as u64));
        }
    }
}
