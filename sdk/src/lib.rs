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
//! - [`Step`] ([`StepWorker::step`]): a leased step with its durable journal
//!   ([`journal`], the checkpoint format `docs/step-journal.md` that every SDK shares).
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
//! ## The step journal
//!
//! A step function given a [`Step`] journals what it finished in the step's checkpoint,
//! so an attempt that resumes the step (after its worker was killed, a pause, a retry, a
//! wait on children) returns it instead of doing it again:
//!
//! - [`Step::run`]`(name, || async { .. })` returns the value the `n`-th call of `name`
//!   journaled (record `{name, seq: n}`) without calling the closure; otherwise it calls
//!   it and returns its value once the server acknowledged the heartbeat that appended
//!   it. [`Step::try_run`] journals only an `Ok`. Values are any
//!   `Serialize + DeserializeOwned`; one that is not JSON (a serde_json error, a float
//!   that is not finite) is refused with [`StepError::Record`] naming the entry, and
//!   nothing is written.
//! - [`Step::save_state`] / [`Step::state`]: the step's state, the last one saved.
//! - [`Step::spawn`] starts child runs and journals their ids;
//!   [`Step::wait_for_children`] ends the lease until they closed.
//! - [`Step::fail`], [`Step::pause`] and [`Step::wait_for_children`] send the whole
//!   journal as the checkpoint; [`Step::complete`] sends it for a rejection to resume
//!   from.
//!
//! ```no_run
//! # use railyard_sdk::{Completion, StepError, StepWorker};
//! # async fn summarize(doc: &str) -> String { doc.into() }
//! # async fn demo(worker: &StepWorker) -> Result<(), StepError> {
//! if let Some(task) = worker.poll(std::time::Duration::from_secs(30)).await? {
//!     let mut step = worker.step(task);
//!     let mut summaries = Vec::new();
//!     for doc in ["a.md", "b.md"] {
//!         // Replayed on resume: the n-th "summarize" is record {name, seq: n}.
//!         summaries.push(step.run("summarize", || summarize(doc)).await?);
//!     }
//!     if step.pause_requested() {
//!         return step.pause().await;
//!     }
//!     step.complete(Completion::notes(summaries.join("\n"))).await?;
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
pub mod journal;
pub mod retry;
mod step;
mod step_worker;
pub mod tls;

pub use checkpoint::{CheckpointStats, CheckpointSync};
pub use client::{ApiKey, Authorization, Client, ClientError, ConnectOptions};
pub use heartbeat::Heartbeat;
pub use journal::{Journal, RecordError};
pub use retry::RetryPolicy;
pub use step::{PAUSED_ERROR_TYPE, Step, StepError};
pub use step_worker::{Completion, CompletionReply, Failure, RATE_LIMITED_ERROR_TYPE, StepWorker};
pub use tls::TlsOptions;

/// The default gRPC address of `railyard server` (and of client commands).
pub const DEFAULT_SERVER_URL: &str = "http://127.0.0.1:7400";
