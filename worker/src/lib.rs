//! Railyard worker: polls task queues, leases steps, runs each as an LLM agent loop with
//! tools in a per-run workspace, keeps the lease alive, and reports the result.
//!
//! The CLI's entry points:
//! - [`WorkerConfig::load`] (flags as a [`ConfigLayer`]) to build a configuration from a
//!   file, the environment and flags, through Railyard's one configuration loader;
//! - [`Worker`], with [`Worker::with_events`] for progress output.

pub mod agent;
mod config;
pub mod events;
mod lease;
pub mod mcp;
mod net;
pub mod output;
mod prompt;
pub mod provider;
mod report;
mod runner;
pub mod secrets;
pub mod tools;
mod trace;
pub mod usage;

pub use agent::{HeartbeatOutcome, Lease, LeaseError};
pub use config::{ConfigLayer, ProviderKind, WorkerConfig};
pub use events::{EventKind, EventSink};
pub use output::OutputChunk;
pub use provider::ProviderConfig;
pub use runner::{Worker, create_private_dir};

use config::ConfigError;
use provider::ProviderError;

/// Why the worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("model provider: {0}")]
    Provider(#[from] ProviderError),
    #[error("server connection: {0}")]
    Client(#[from] railyard_sdk::ClientError),
    #[error("cannot create the workspace directory {path}: {source}")]
    Workspace {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}
