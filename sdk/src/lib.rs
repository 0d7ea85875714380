//! The typed Rust client SDK of Railyard: talking to a server over `railyard.v1`
//! (whose types are in `railyard_proto`).
//!
//! - [`Client`]: connects with timeouts, retries idempotent calls on `UNAVAILABLE`,
//!   and maps gRPC statuses to [`ClientError`]; runs, step tasks and schedules.
//! - [`retry`]: the one retry policy (backoff with jitter) and the one definition of
//!   transient errors, shared by the SDK, the worker and the model providers.
//! - [`StepWorker`]: the small poll / heartbeat / complete / fail helper that the CLI,
//!   the worker and the tests use to play worker; [`Heartbeat`]: one heartbeat, built
//!   up and sent; [`checkpoint`]: heartbeats that send only what the checkpoint gained
//!   ([`CheckpointSync`]).
//! - [`tls`]: a client's TLS settings ([`TlsOptions`]) and the bounded read of PEM files.
//!
//! ```no_run
//! use railyard_sdk::{Client, StepWorker, Completion};
//!
//! # async fn demo() -> Result<(), railyard_sdk::ClientError> {
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
//! `sdk/examples/play_worker.rs`; with a server running:
//! `cargo run -p railyard-sdk --example play_worker -- demo "write a haiku"`.

#![warn(missing_docs)]

pub mod checkpoint;
mod client;
mod heartbeat;
pub mod retry;
mod step_worker;
pub mod tls;

pub use checkpoint::{CheckpointStats, CheckpointSync};
pub use client::{ApiKey, Authorization, Client, ClientError, ConnectOptions};
pub use heartbeat::Heartbeat;
pub use retry::RetryPolicy;
pub use step_worker::{Completion, CompletionReply, Failure, StepWorker};
pub use tls::TlsOptions;

/// The default gRPC address of `railyard server` (and of client commands).
pub const DEFAULT_SERVER_URL: &str = "http://127.0.0.1:7400";
