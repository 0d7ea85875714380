//! Railyard's wire contract, `railyard.v1`: what a client and the server must agree on.
//!
//! - [`v1`]: the generated message types and the `History` / `Tasks` / `Schedules` /
//!   `Admin` / `Triggers` service stubs.
//! - [`codec`]: the protobuf codec those stubs use.
//! - The constants both ends share: [`PEER_SUBJECT`], [`MAX_MESSAGE_BYTES`],
//!   [`DEFAULT_NAMESPACE`], and the agent tool names in [`tools`].
//!
//! The typed client (connect, retries, `StepWorker`) is the `railyard-sdk` crate.

pub mod codec;

/// The reserved metadata entry naming the caller's client certificate subject. The
/// server sets it from the TLS connection (removing any a network client sent); on the
/// server's in-process channel, the MCP gateway sets it from its HTTP caller's
/// verified certificate.
pub const PEER_SUBJECT: &str = "x-railyard-peer-subject";

/// Largest gRPC message, in bytes, that the server accepts and sends, and that the
/// client SDK accepts. The server's limits on what a request may carry and on what one
/// answer holds are set so every answer fits.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Generated `railyard.v1` types and service stubs.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("railyard.v1");

    /// Encoded file descriptor set, for the gRPC reflection service.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("railyard_descriptor");
}

/// Names of the agent tools. `allowedTools` in a workflow definition (and so
/// `StepTask.allowed_tools`) speaks in these names, so server and worker share them.
pub mod tools {
    pub const COMPLETE_STEP: &str = "complete_step";
    pub const SIGNAL_COORDINATOR: &str = "signal_coordinator";
    pub const SPAWN_AGENT: &str = "spawn_agent";
    /// Waits for child runs started with `spawn_agent` and `wait: false`; allowed
    /// wherever `spawn_agent` is.
    pub const AWAIT_RUNS: &str = "await_runs";
    /// The error type a worker reports (`FailStepTask`) for a step it suspended
    /// because the run is paused.
    pub const PAUSED_ERROR_TYPE: &str = "paused";
    /// Tools that act on the run's workspace, in the order offered to the model.
    pub const WORKSPACE_TOOLS: [&str; 6] = [
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
    ];
    /// Every tool a definition may name.
    pub const ALL: [&str; 10] = [
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
        COMPLETE_STEP,
        SPAWN_AGENT,
        SIGNAL_COORDINATOR,
        AWAIT_RUNS,
    ];
}

/// The namespace that exists from the start.
pub const DEFAULT_NAMESPACE: &str = "default";

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
