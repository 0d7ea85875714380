//! Railyard's wire surface (`railyard.v1`) and a typed Rust client SDK.
//!
//! - [`v1`]: the generated message types and the `History` / `Tasks` / `Schedules`
//!   service stubs.
//! - [`Client`]: connects with timeouts, retries idempotent calls on `UNAVAILABLE`,
//!   and maps gRPC statuses to [`ClientError`]; runs, step tasks and schedules.
//! - [`retry`]: the one retry policy (backoff with jitter) and the one definition of
//!   transient errors, shared by the SDK, the worker and the model providers.
//! - [`StepWorker`]: the small poll / heartbeat / complete / fail helper that the CLI,
//!   the worker and the tests use to play worker.
//!
//! ```no_run
//! use railyard_proto::{Client, StepWorker, Completion};
//!
//! # async fn demo() -> Result<(), railyard_proto::ClientError> {
//! let client = Client::connect("http://127.0.0.1:7400").await?;
//! let run = client.start_run("default", "demo", "write a haiku", Default::default()).await?;
//! println!("started {run}");
//!
//! let worker = StepWorker::new(client, "default", "default", "my-worker");
//! if let Some(task) = worker.poll(std::time::Duration::from_secs(5)).await? {
//!     println!("step {} of run {}: {}", task.step_id, task.run_id, task.prompt);
//!     worker.complete(&task.task_token, Completion::notes("done")).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! A complete program that plays worker for a whole run is in
//! `proto/examples/play_worker.rs`; with a server running:
//! `cargo run -p railyard-proto --example play_worker -- demo "write a haiku"`.

mod client;
pub mod codec;
pub mod retry;
mod step_worker;
pub mod tls;

pub use client::{ApiKey, Authorization, Client, ClientError, ConnectOptions};
pub use retry::RetryPolicy;
pub use step_worker::{Completion, CompletionReply, Failure, HeartbeatExtras, StepWorker};
pub use tls::TlsOptions;

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
/// The default gRPC address of `railyard server` (and of client commands).
pub const DEFAULT_SERVER_URL: &str = "http://127.0.0.1:7400";

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
