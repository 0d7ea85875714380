//! Railyard's wire contract, `railyard.v1`: what a client and the server must agree on.
//!
//! - [`v1`]: the generated message types and the `History` / `Tasks` / `Schedules` /
//!   `Admin` / `Triggers` service stubs.
//! - [`codec`]: the protobuf codec those stubs use.
//! - [`checkpoint`], [`PEER_SUBJECT`], [`MAX_MESSAGE_BYTES`], [`DEFAULT_NAMESPACE`]:
//!   what both ends compute or compare, from `railyard-wire` (re-exported).
//!
//! The typed client (connect, retries, `StepWorker`) is the `railyard-sdk` crate.

pub mod codec;

pub use railyard_wire::{DEFAULT_NAMESPACE, MAX_MESSAGE_BYTES, PEER_SUBJECT, checkpoint};

/// Generated `railyard.v1` types and service stubs.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("railyard.v1");

    /// Encoded file descriptor set, for the gRPC reflection service.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("railyard_descriptor");
}

impl v1::RunStatus {
    /// The short name people type and read (`RUNNING`, `COMPLETED` ...).
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Unspecified => "UNSPECIFIED",
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Canceled => "CANCELED",
            Self::Terminated => "TERMINATED",
            Self::TimedOut => "TIMED_OUT",
        }
    }

    /// Parses a short name, case-insensitively.
    pub fn from_short_name(name: &str) -> Option<Self> {
        let upper = name.to_ascii_uppercase();
        [
            Self::Running,
            Self::Completed,
            Self::Failed,
            Self::Canceled,
            Self::Terminated,
            Self::TimedOut,
        ]
        .into_iter()
        .find(|s| s.short_name() == upper)
    }

    /// Whether a run in this status can still change.
    pub fn is_open(self) -> bool {
        matches!(self, Self::Running)
    }
}
