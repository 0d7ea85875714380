//! `railyard worker`: poll task queues and run leased steps as LLM agent loops until
//! SIGTERM or Ctrl-C.
//!
//! Settings come from a config file (`--config`), the environment (`RAILYARD_*`,
//! `ANTHROPIC_*`, `OPENAI_*`) and these flags, in rising precedence; the worker
//! library merges and checks them ([`railyard_worker::WorkerConfig::load`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use railyard_worker::provider::ScriptSource;
use railyard_worker::{ConfigLayer, ProviderKind, Worker, WorkerConfig};

use crate::serve::signals::{Drained, Signals};

/// The demo script, used as the scripted provider's script when no provider is
/// configured and the worker starts in a directory that has it (the repository root).
pub(crate) const DEMO_SCRIPT: &str = "workflows/demo.script.json";

/// Flags of `railyard worker`. Unset flags fall back to the environment, then the
/// config file, then the defaults.
#[derive(Debug, Clone, Args)]
pub(crate) struct WorkerArgs {
    /// Task queue to poll; repeat the flag or separate with commas [default: default].
    #[arg(long = "queue", value_name = "NAME", value_delimiter = ',')]
    pub queues: Vec<String>,

    /// Steps run at once, across all queues [default: 4].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub slots: Option<u64>,

    /// Parent directory of the per-run workspaces [default: .railyard/workspaces].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// Who this worker is in history and on the server's poller list [default: HOST:PID].
    /// A server with --auth records the worker's key instead (`key:<id> (<description>)`).
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,

    /// Config file: TOML, or JSON when the name ends in .json (keys as in the README's
    /// "Workers" section).
    #[arg(long, value_name = "FILE", env = "RAILYARD_WORKER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Model provider [default: the first configured of anthropic, openai, scripted].
    #[arg(long, value_name = "NAME", value_parser = parse_provider)]
    pub provider: Option<ProviderKind>,

    /// Model name for the anthropic or openai provider.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,

    /// Script of the offline scripted provider.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,

    /// Seconds running steps may go on after SIGTERM before they are failed back.
    #[arg(long, value_name = "SECONDS")]
    pub shutdown_grace: Option<f64>,

    /// Environment variable of the worker passed on to `bash` commands, besides PATH,
    /// LANG, LC_ALL, TERM and TZ (HOME is the run's workspace); repeat the flag or
    /// separate with commas. Nothing else of the worker's environment reaches `bash`.
    #[arg(long = "bash-env", value_name = "NAME", value_delimiter = ',')]
    pub bash_env: Vec<String>,

    /// Largest model response body read, in bytes; a larger one fails the model call
    /// [default: 33554432 (32 MiB)].
    #[arg(long, value_name = "BYTES")]
    pub max_model_response_bytes: Option<u64>,

    /// Read each model answer whole instead of streaming it (live output then comes a
    /// turn at a time); for a model server whose streaming misbehaves. Config key
    /// `model_stream = false`, env RAILYARD_MODEL_STREAM=false.
    #[arg(long)]
    pub no_stream: bool,

    /// Send OpenTelemetry traces (a span per step attempt, model call and tool call,
    /// joined to the run's trace) to this OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318
    /// (/v1/traces is appended); off when unset [env: RAILYARD_OTLP_ENDPOINT, else
    /// OTEL_EXPORTER_OTLP_ENDPOINT; service.name from OTEL_SERVICE_NAME].
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// `--server` as given on the command line (not from the environment or the default);
    /// filled in by `main`, which can tell where a global flag's value came from.
    #[arg(skip)]
    pub server_flag: Option<String>,

    /// `--namespace` as given on the command line; see `server_flag`.
    #[arg(skip)]
    pub namespace_flag: Option<String>,

    /// `--api-key` as given on the command line; see `server_flag`.
    #[arg(skip)]
    pub api_key_flag: Option<String>,
    /// `--tls-ca`, `--tls-cert`, `--tls-key` as given on the command line; see `server_flag`.
    #[arg(skip)]
    pub tls_flags: railyard_sdk::TlsOptions,
}

fn parse_provider(s: &str) -> Result<ProviderKind, String> {
    s.parse()
}

impl WorkerArgs {
    /// The flags as the highest-precedence configuration layer.
    pub(crate) fn flags_layer(&self) -> anyhow::Result<ConfigLayer> {
        let shutdown_grace = match self.shutdown_grace {
            None => None,
            Some(secs) => Some(
                std::time::Duration::try_from_secs_f64(secs)
                    .map_err(|_| anyhow!("--shutdown-grace: expected a non-negative number of seconds"))?,
            ),
        };
        Ok(ConfigLayer {
            server_url: self.server_flag.clone(),
            api_key: self.api_key_flag.clone(),
            tls_ca: self.tls_flags.ca.clone(),
            tls_cert: self.tls_flags.cert.clone(),
            tls_key: self.tls_flags.key.clone(),
            namespace: self.namespace_flag.clone(),
            queues: (!self.queues.is_empty()).then(|| self.queues.clone()),
            slots: self.slots.map(|n| n as usize),
            workspace: self.workspace.clone(),
            identity: self.identity.clone(),
            provider: self.provider,
            model: self.model.clone(),
            script: self.script.clone().map(ScriptSource::Path),
            shutdown_grace,
            bash_env: (!self.bash_env.is_empty()).then(|| self.bash_env.clone()),
            max_model_response_bytes: self.max_model_response_bytes,
            model_stream: self.no_stream.then_some(false),
            otlp_endpoint: self.otlp_endpoint.clone(),
            ..ConfigLayer::default()
        })
    }

    /// File < environment < flags, resolved.
    pub(crate) fn load(&self) -> anyhow::Result<WorkerConfig> {
        let default_script = Path::new(DEMO_SCRIPT)
            .is_file()
            .then(|| ScriptSource::Path(PathBuf::from(DEMO_SCRIPT)));
        Ok(WorkerConfig::load(
            self.config.as_deref(),
            self.flags_layer()?,
            default_script,
        )?)
    }
}

/// The line `railyard worker` prints once it polls (tests wait for it).
pub(crate) fn polling_line(config: &WorkerConfig) -> String {
    format!(
        "railyard worker {} polling queues={} slots={} server={} namespace={} provider={} workspace={}",
        config.identity,
        config.queues.join(","),
        config.slots,
        config.server_url,
        config.namespace,
        config.provider.describe(),
        config.workspace.display()
    )
}

/// Runs the worker until SIGTERM or Ctrl-C, then shuts down gracefully (running steps
/// get the grace period, then are failed back as retryable). A second signal stops at once.
pub(crate) async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let config = args.load()?;
    // Build the provider here so a bad script or key fails before "polling" is announced.
    let provider = railyard_worker::provider::from_config(&config.provider)
        .context("cannot set up the model provider")?;
    railyard_worker::create_private_dir(&config.workspace).with_context(|| {
        format!(
            "cannot create the workspace directory {}",
            config.workspace.display()
        )
    })?;
    let mut signals = Signals::new()?;
    let line = polling_line(&config);
    let worker = Worker::new(config).with_provider(provider);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = worker.run(async move {
        let _ = stop_rx.await;
    });
    tokio::pin!(running);
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    tokio::select! {
        r = &mut running => return r.map_err(Into::into),
        s = signals.next() => {
            let signal = s?;
            tracing::info!(signal, "shutting down: polling stops, running steps may finish; send the signal again to stop at once");
        }
    }
    let _ = stop_tx.send(());
    match signals.drain(&mut running).await? {
        Drained::Finished(r) => r.map_err(Into::into),
        Drained::Again(signal) => Err(anyhow!(
            "stopped at once on a second {signal}; unfinished steps will be retried after their lease expires"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::WorkerArgs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        worker: WorkerArgs,
    }

    #[test]
    fn no_stream_turns_streaming_off_and_its_absence_leaves_it_to_the_config() {
        let off = Cli::parse_from(["worker", "--no-stream"])
            .worker
            .flags_layer()
            .unwrap();
        assert_eq!(off.model_stream, Some(false));
        let unset = Cli::parse_from(["worker"]).worker.flags_layer().unwrap();
        assert_eq!(unset.model_stream, None);
    }
}
