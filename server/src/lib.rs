//! Railyard history server.

pub mod clock;
pub mod error;
pub mod model;
pub mod token;
pub mod workflow;

use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything `railyard server` can be told.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Directory holding the redb database and the token keys.
    pub data_dir: PathBuf,
    /// gRPC listen address (default 127.0.0.1:7400).
    pub grpc_listen: SocketAddr,
    /// HTTP listen address for /healthz and /metrics (default 127.0.0.1:7401).
    pub http_listen: SocketAddr,
    /// Directory of workflow definition files (`*.json`).
    pub workflows_dir: PathBuf,
}

/// A server that is up and answering.
pub struct RunningServer {
    /// The bound gRPC address (useful when the config asked for port 0).
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
}

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Other(String),
}

impl RunningServer {
    /// Opens storage, loads workflows, binds both listeners and starts serving.
    pub async fn start(_config: ServerConfig) -> Result<Self, StartError> {
        Err(StartError::Other("not yet".into()))
    }

    /// Stops accepting requests, lets in-flight ones finish, and closes storage.
    pub async fn shutdown(self) {}
}
