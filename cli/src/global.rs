//! Options every client command takes (`--server`, `--namespace`, `--api-key`,
//! `--output`) and the connection they lead to.

use clap::Args;
use railyard_proto::{ApiKey, Client, ClientError, ConnectOptions, DEFAULT_NAMESPACE, DEFAULT_SERVER_URL};

use crate::output::Output;

/// Where to send requests and how to print their results.
#[derive(Debug, Clone, Args)]
pub struct GlobalOpts {
    /// gRPC address of the Railyard server.
    #[arg(long, global = true, help_heading = "Global options", value_name = "URL", env = "RAILYARD_SERVER", default_value = DEFAULT_SERVER_URL)]
    pub server: String,

    /// Namespace of the runs, queues and workflows.
    #[arg(
        long,
        short = 'n',
        global = true,
        help_heading = "Global options",
        value_name = "NS",
        env = "RAILYARD_NAMESPACE",
        default_value = DEFAULT_NAMESPACE
    )]
    pub namespace: String,

    /// API key sent to a server that runs with auth (`authorization: Bearer ...`).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "KEY",
        env = "RAILYARD_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,

    /// Output format of client commands.
    #[arg(long, short = 'o', global = true, help_heading = "Global options", value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

impl GlobalOpts {
    /// A client for `--server` (connects lazily; an unreachable server shows on the first call).
    pub async fn connect(&self) -> Result<Client, ClientError> {
        let opts = ConnectOptions {
            api_key: self.api_key(),
            ..ConnectOptions::default()
        };
        Client::connect_with(&self.server, opts).await
    }

    /// The `--api-key` (or `RAILYARD_API_KEY`), if any.
    pub fn api_key(&self) -> Option<ApiKey> {
        self.api_key.clone().map(ApiKey::new)
    }
}

/// The identity this CLI reports to the server: `railyard-cli@HOST`.
pub fn cli_identity() -> String {
    format!("railyard-cli@{}", hostname())
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Maps a status met mid-stream (which the SDK does not map for us) to a [`ClientError`],
/// so it prints like every other server error.
pub fn stream_error(url: &str, status: tonic::Status) -> ClientError {
    ClientError::from_status(url, status)
}
