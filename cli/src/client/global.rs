//! Options every client command takes (`--server`, `--namespace`, `--api-key`,
//! `--tls-*`, `--output`) and the connection they lead to.

use clap::Args;
use std::path::PathBuf;

use railyard_proto::DEFAULT_NAMESPACE;
use railyard_sdk::{ApiKey, Client, ClientError, ConnectOptions, DEFAULT_SERVER_URL, TlsOptions};

use crate::client::output::Output;

/// Where to send requests and how to print their results.
#[derive(Debug, Clone, Args)]
pub(crate) struct GlobalOpts {
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

    /// API key sent to a server that runs with auth (`authorization: Bearer ...`). On the
    /// command line it is visible to every local user (`ps`, /proc/PID/cmdline): prefer
    /// --api-key-file or RAILYARD_API_KEY, above all for long-running `worker` and `mcp`.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "KEY",
        env = "RAILYARD_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,

    /// File holding the API key (its first line; at most 4 KiB), so the key stays out of
    /// the process list; wins over --api-key and RAILYARD_API_KEY.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "FILE",
        env = "RAILYARD_API_KEY_FILE"
    )]
    pub api_key_file: Option<PathBuf>,

    /// CA certificates (PEM) that an https:// server's certificate must chain to
    /// (default: the system's roots).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "FILE",
        env = "RAILYARD_TLS_CA"
    )]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for a server that requires mutual TLS.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "FILE",
        env = "RAILYARD_TLS_CLIENT_CERT"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "FILE",
        env = "RAILYARD_TLS_CLIENT_KEY"
    )]
    pub tls_key: Option<PathBuf>,

    /// Output format of client commands.
    #[arg(long, short = 'o', global = true, help_heading = "Global options", value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

impl GlobalOpts {
    /// A client for `--server` (connects lazily; an unreachable server shows on the first call).
    pub(crate) async fn connect(&self) -> Result<Client, ClientError> {
        Client::connect_with(&self.server, self.connect_options()).await
    }

    /// Reads `--api-key-file` (if given) into `api_key`; answers the key read.
    pub(crate) fn load_api_key_file(&mut self) -> anyhow::Result<Option<String>> {
        let Some(path) = &self.api_key_file else {
            return Ok(None);
        };
        let text = railyard_files::read_regular_text(path, 4096)
            .map_err(|e| anyhow::anyhow!("--api-key-file {}: {e}", path.display()))?;
        let key = text.lines().next().unwrap_or_default().trim().to_string();
        if key.is_empty() {
            anyhow::bail!("--api-key-file {}: the file is empty", path.display());
        }
        self.api_key = Some(key.clone());
        Ok(Some(key))
    }

    /// The default connect options with `--api-key` and the `--tls-*` settings.
    pub(crate) fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            api_key: self.api_key(),
            tls: self.tls(),
            ..ConnectOptions::default()
        }
    }

    /// The `--api-key` (or `RAILYARD_API_KEY`), if any.
    pub(crate) fn api_key(&self) -> Option<ApiKey> {
        self.api_key.clone().map(ApiKey::new)
    }

    /// The `--tls-ca`, `--tls-cert` and `--tls-key` settings.
    pub(crate) fn tls(&self) -> TlsOptions {
        TlsOptions {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
        }
    }
}

/// The identity this CLI reports to the server: `railyard-cli@HOST`.
pub(crate) fn cli_identity() -> String {
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
pub(crate) fn stream_error(url: &str, status: tonic::Status) -> ClientError {
    ClientError::from_status(url, status)
}
