//! The few facts of Railyard's wire that both ends compute or compare, kept apart
//! from the generated types so that the engine, which knows no transport, shares
//! them with the clients.
//!
//! - [`checkpoint`]: the checkpoint digest an appending heartbeat names its base by.
//! - The constants both ends share: [`PEER_SUBJECT`], [`MAX_MESSAGE_BYTES`],
//!   [`DEFAULT_NAMESPACE`].
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
