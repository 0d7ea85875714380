//! `railyard server`: run the history server until SIGTERM or Ctrl-C.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use railyard_server::{RunningServer, ServerConfig};

/// Flags of `railyard server`.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Directory of the database and the token keys (created if missing).
    #[arg(
        long,
        value_name = "DIR",
        env = "RAILYARD_DATA_DIR",
        default_value = "./.railyard"
    )]
    pub data_dir: PathBuf,

    /// gRPC listen address (port 0 picks a free port; the bound one is printed).
    #[arg(
        long,
        value_name = "ADDR",
        env = "RAILYARD_LISTEN",
        default_value = "127.0.0.1:7400"
    )]
    pub listen: SocketAddr,

    /// HTTP listen address for webhooks, /healthz and /metrics.
    #[arg(
        long,
        value_name = "ADDR",
        env = "RAILYARD_HTTP_LISTEN",
        default_value = "127.0.0.1:7401"
    )]
    pub http_listen: SocketAddr,

    /// Directory of workflow definition files (*.json).
    #[arg(
        long,
        value_name = "DIR",
        env = "RAILYARD_WORKFLOWS",
        default_value = "./workflows"
    )]
    pub workflows: PathBuf,

    /// Seconds a graceful shutdown may take before the server stops at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub shutdown_grace: u64,
}

impl ServerArgs {
    /// The server configuration these flags describe.
    pub fn config(&self) -> ServerConfig {
        let mut config = ServerConfig::new(&self.data_dir, &self.workflows);
        config.grpc_listen = self.listen;
        config.http_listen = self.http_listen;
        config
    }
}

/// The line `railyard server` prints once it is listening (tests read the ports from it).
pub fn listening_line(server: &RunningServer, args: &ServerArgs) -> String {
    format!(
        "railyard server listening grpc={} http={} data={} workflows={}",
        server.grpc_addr,
        server.http_addr,
        args.data_dir.display(),
        args.workflows.display()
    )
}

/// Starts the server, announces it on stdout, and serves until a shutdown signal.
/// Shutdown is graceful up to `--shutdown-grace`; a second signal stops at once.
pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let server = RunningServer::start(args.config())
        .await
        .with_context(|| format!("cannot start the server (data dir {})", args.data_dir.display()))?;
    // Listen before announcing, so a signal sent right after the line is not missed.
    let mut signals = Signals::new()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", listening_line(&server, &args))?;
        out.flush()?;
    }
    let signal = signals.next().await?;
    tracing::info!(signal, "shutting down; send the signal again to stop at once");
    let grace = Duration::from_secs(args.shutdown_grace);
    tokio::select! {
        () = server.shutdown() => {
            tracing::info!("server stopped");
            Ok(())
        }
        again = signals.next() => {
            let signal = again?;
            Err(anyhow!("stopped at once on a second {signal}, before in-flight requests finished"))
        }
        () = tokio::time::sleep(grace) => {
            Err(anyhow!("graceful shutdown took longer than {}s; stopped at once", grace.as_secs()))
        }
    }
}

/// The signals that stop the server: SIGTERM and Ctrl-C (SIGINT).
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
            Ok(Self { term })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the next stop signal and names it.
    pub(crate) async fn next(&mut self) -> anyhow::Result<&'static str> {
        #[cfg(unix)]
        {
            tokio::select! {
                r = tokio::signal::ctrl_c() => r.map(|()| "SIGINT").context("cannot listen for Ctrl-C"),
                _ = self.term.recv() => Ok("SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c()
                .await
                .context("cannot listen for Ctrl-C")?;
            Ok("Ctrl-C")
        }
    }
}
