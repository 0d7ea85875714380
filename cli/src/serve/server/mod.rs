//! `railyard server`: run the history server until SIGTERM or Ctrl-C. Its flags, config
//! file and environment variables are in [`settings`].

mod file;
mod node;
mod output;
mod rotate;
mod settings;

use std::io::Write;

use anyhow::{Context, anyhow};
use railyard_server::{RunningServer, ServerConfig};
use railyard_store_postgres::{PostgresBackend, PostgresOptions};

use crate::serve::signals::{Drained, Signals};

pub(crate) use settings::{ServerArgs, ServerSettings, StoreSetting};

/// `railyard server`: its flags, or a maintenance subcommand.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ServerCommand {
    #[command(subcommand)]
    pub(crate) command: Option<ServerSubcommand>,
    #[command(flatten)]
    pub(crate) args: ServerArgs,
}

/// Maintenance subcommands of `railyard server`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ServerSubcommand {
    /// Add a new task-token signing key and make it the one that signs.
    ///
    /// With a postgres store the key goes to the database (every server on it reads
    /// it); with redb, to keys.json in the data directory. Older keys keep verifying,
    /// so tokens already handed out stay good. A running server signs with the new
    /// key within 60 s, and accepts tokens signed with it at once.
    RotateTokenKey(rotate::RotateArgs),
}

/// Runs the server, or the subcommand given.
pub(crate) async fn dispatch(cmd: ServerCommand) -> anyhow::Result<()> {
    match cmd.command {
        Some(ServerSubcommand::RotateTokenKey(a)) => rotate::run(a).await,
        None => run(cmd.args).await,
    }
}

/// The line `railyard server` prints once it is listening (tests read the ports from it).
pub(crate) fn listening_line(server: &RunningServer, settings: &ServerSettings) -> String {
    format!(
        "railyard server listening grpc={} http={} data={} store={} workflows={} auth={}",
        server.grpc_addr,
        server.http_addr,
        settings.data_dir.display(),
        settings.store.shown(),
        settings.workflows_label(),
        if settings.auth { "on" } else { "off" }
    )
}

/// Starts the server, announces it on stdout, and serves until a shutdown signal.
/// Shutdown is graceful up to `--shutdown-grace`; a second signal stops at once.
pub(crate) async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let settings = args.settings()?;
    if let StoreSetting::Postgres(url) = &settings.store {
        return node::run(&settings, url).await;
    }
    let config = with_store(settings.config(), &settings).await?;
    let server = RunningServer::start(config).await.with_context(|| {
        format!(
            "cannot start the server (data dir {}, store {})",
            settings.data_dir.display(),
            settings.store.shown()
        )
    })?;
    settings.log_built_in_demo();
    // Listen before announcing, so a signal sent right after the line is not missed.
    let mut signals = Signals::new()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", listening_line(&server, &settings))?;
        out.flush()?;
        // Best effort: a reader that took the listening line and closed stdout must
        // not stop the server.
        let _ = writeln!(
            out,
            "web console: {}",
            crate::serve::console::url(server.http_addr, settings.tls.is_some())
        );
        let _ = out.flush();
    }
    let signal = signals.next().await?;
    tracing::info!(signal, "shutting down; send the signal again to stop at once");
    let grace = settings.shutdown_grace;
    match signals
        .drain(tokio::time::timeout(grace, server.shutdown()))
        .await?
    {
        Drained::Finished(Ok(())) => {
            tracing::info!("server stopped");
            Ok(())
        }
        Drained::Finished(Err(_elapsed)) => Err(anyhow!(
            "graceful shutdown took longer than {}s; stopped at once",
            grace.as_secs()
        )),
        Drained::Again(signal) => Err(anyhow!(
            "stopped at once on a second {signal}, before in-flight requests finished"
        )),
    }
}

/// `config` with its store opened, when it is not the redb database the server opens
/// itself. The password of a Postgres URL without one comes from `PGPASSWORD`.
pub(crate) async fn with_store(
    mut config: ServerConfig,
    settings: &ServerSettings,
) -> anyhow::Result<ServerConfig> {
    let StoreSetting::Postgres(url) = &settings.store else {
        return Ok(config);
    };
    let options = postgres_options(settings)?;
    let url = url.clone();
    // Opening connects and migrates, waiting on the backend's own runtime: off this
    // runtime's workers.
    let backend = tokio::task::spawn_blocking(move || PostgresBackend::open(&url, &options))
        .await
        .context("opening the postgres store")??;
    config.store = Some(backend.into_store());
    Ok(config)
}

/// Largest root certificate file read (`server.store_ca`).
const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// How a Postgres store connects: the password from `PGPASSWORD` when the URL has
/// none, the root certificates from `server.store_ca`.
pub(crate) fn postgres_options(settings: &ServerSettings) -> anyhow::Result<PostgresOptions> {
    let root_certs_pem = settings
        .store_ca
        .as_ref()
        .map(|file| {
            railyard_files::read_regular_file(file, MAX_CA_FILE_BYTES)
                .with_context(|| format!("server.store_ca: cannot read {}", file.display()))
        })
        .transpose()?;
    Ok(PostgresOptions {
        password: std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()),
        root_certs_pem,
        ..PostgresOptions::default()
    })
}

#[cfg(test)]
mod tests;
