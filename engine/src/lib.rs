//! Railyard's engine: everything that changes stored state or waits on time, and the
//! service layer every transport calls. It knows no transport: no tonic, axum, hyper
//! or prost (`.ci/layers.py`); `railyard-server` puts gRPC and HTTP in front of it.
//!
//! - [`service`]: what every request does, whatever transport it came by, over typed
//!   inputs and outputs; errors are [`error::ApiError`].
//! - [`writer`]: the one writer; every mutation is a command applied in a batch
//!   under one commit, callers answered only after it.
//! - [`matching`]: ready tasks and parked long-polls, in memory, rebuilt at start.
//! - [`timers`]: the timer loop (durable timer rows and lease deadlines).
//! - [`leases`]: the deadline of every lease in flight, in memory.
//! - [`watch`]: wakes watchers of a run when it changes.
//! - [`retention`]: the purge of closed runs past their namespace's retention.
//! - [`output`]: live output, numbered, bounded and batched apart from the writer.
//! - [`delivery`]: result-delivery settings, the attempt queue and signatures.
//! - [`sender`]: the result-delivery sender (HTTP POSTs, signed, bounded).
//! - [`batches`]: works through running batch operations at their rates.
//! - [`poller`]: the polled triggers' fetch.
//! - [`secrets`]: which environment variables a trigger may name as a secret.
//! - [`clock`], [`registry`] (workflow files), [`token`] (task tokens),
//!   [`signature`] (webhook signatures), [`metrics`], [`trace`] (step spans).

pub mod batches;
pub mod clock;
pub mod delivery;
pub mod error;
pub mod leases;
pub mod matching;
pub mod metrics;
pub mod output;
pub mod poller;
pub mod registry;
pub mod retention;
pub mod secrets;
pub mod sender;
pub mod service;
pub mod signature;
pub mod timers;
pub mod token;
pub mod trace;
pub mod watch;
pub mod writer;

pub use writer::{ChildLimits, WriteError};
