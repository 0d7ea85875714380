//! The few facts of Railyard's wire that both ends compute or compare, kept apart
//! from the generated types so that the engine, which knows no transport, shares
//! them with the clients.
//!
//! - [`checkpoint`]: the checkpoint digest an appending heartbeat names its base by.
//! - The constants both ends share: [`PEER_SUBJECT`], [`MAX_MESSAGE_BYTES`],
//!   [`DEFAULT_NAMESPACE`].
//! - [`spawn_request_id`]: the request id a journaled spawn sends, which every SDK
//!   derives alike.
//!
//! `railyard-proto` re-exports all of it beside the generated `railyard.v1` types.

#![warn(missing_docs)]

pub mod checkpoint;

/// The reserved metadata entry naming the caller's client certificate subject. The
/// server sets it from the TLS connection (removing any a network client sent); on the
/// server's in-process channel, the MCP gateway sets it from its HTTP caller's
/// verified certificate.
pub const PEER_SUBJECT: &str = "x-railyard-peer-subject";

/// Largest gRPC message, in bytes, that the server accepts and sends, and that the
/// client SDK accepts. The server's limits on what a request may carry and on what one
/// answer holds are set so every answer fits.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The namespace that exists from the start.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The request id of the `seq`-th journaled spawn named `name` in step `step_id`
/// (`SpawnChildRunsRequest.request_id`; the server scopes it to the run): the hex
/// SHA-256 of `spawn`, the step id, the name and the count, NUL-separated. The Python
/// and TypeScript SDKs derive the same, so a step resumed by any of them gets the
/// children an earlier attempt started.
pub fn spawn_request_id(step_id: &str, name: &str, seq: u64) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("spawn\0{step_id}\0{name}\0{seq}"));
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn spawn_request_ids_are_the_sdks_digest() {
        // The same value sdk-python and sdk-typescript compute for ("draft", "kids", 2).
        assert_eq!(
            super::spawn_request_id("draft", "kids", 2),
            "f47d2fe48d6d104d79fadd22c9de0efa872e96064bd7137214f64bbac80e56a7"
        );
    }
}
