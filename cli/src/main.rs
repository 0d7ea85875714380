//! `railyard`: the one binary of Railyard, a durable task-queue service for
//! long-running AI-agent workflows.
//!
//! - `railyard server` runs the history server.
//! - `railyard worker` polls task queues and runs leased steps as agent loops.
//! - `railyard dev` runs a server and a worker in one process and shows a demo run.
//! - `railyard run|workflow|task|queue|schedule|trigger|batch|key|namespace ...` are client commands over
//!   gRPC; they take `--server`, `--namespace`, `--api-key` and `--output` (see
//!   [`client::global::GlobalOpts`]).
//! - `railyard bench` measures an in-process server.
//! - `railyard store export|import` moves a store between backends through a dump.
//! - `railyard mcp` serves MCP on stdio for an outside agent.
//! - `railyard service install|uninstall` writes a systemd unit or launchd plist.
//! - `railyard completion SHELL` and `railyard man` print completions and man pages
//!   generated from these definitions ([`shell`]).
//!
//! This file is the clap root and the dispatch. One folder per command group: the
//! client commands ([`run`], [`workflow`], [`task`], [`queue`], [`key`], [`namespace`],
//! [`schedule`], [`trigger`], and [`delivery`], shared by `run` and `namespace`) over
//! the plumbing they share in [`client`]; the long-running commands (`server`,
//! `worker`, `dev`, `mcp`) in [`serve`]; `store` in [`store`]; `service` in
//! [`service`]. `bench` and the child processes it starts are the `railyard-bench`
//! crate's ([`railyard_bench::run`]).
//! [`logging`] sets up the logs, [`telemetry`] the export of traces, and [`report`]
//! reports a failed command.
//!
//! Tests: a module's unit tests sit at the bottom of its file in `#[cfg(test)] mod
//! tests { ... }`, except in a folder's `mod.rs` (and this file): there they go in a
//! `tests.rs` beside it, declared `#[cfg(test)] mod tests;`, so that the entry file
//! stays the folder's table of contents. A file whose tests outgrow it becomes a
//! folder. No test files under `#[path]`; tests that run the binary are in the
//! repository's `tests/e2e`.
//!
//! Errors are `anyhow` only here at the edge: a failed command prints one `error: ...`
//! line on stderr and exits with code 1 (2 for usage errors, from clap; 3 when a
//! followed run closed without completing).

// The doc comments of clap's arguments are the `--help` text, shown verbatim: their
// `[server]`, `<data-dir>` and URLs are for people, not rustdoc links or HTML.
#![allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]

mod batch;
mod client;
mod delivery;
mod key;
mod limit;
mod logging;
mod namespace;
mod queue;
mod report;
mod run;
mod schedule;
mod serve;
mod service;
mod shell;
mod store;
mod task;
mod telemetry;
mod trigger;
mod workflow;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use logging::LogFormat;

/// Railyard: durable task queues for long-running agent workflows.
#[derive(Debug, Parser)]
#[command(
    name = "railyard",
    version,
    after_help = "Exit codes: 0 success, 1 error, 2 usage error, 3 a followed run closed without completing.\n\
                  Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) to change what is logged, \
                  and --log-format json for one JSON object per line."
)]
struct Cli {
    /// How logs are written to stderr.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_enum,
        env = "RAILYARD_LOG_FORMAT",
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,

    #[command(flatten)]
    global: client::global::GlobalOpts,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the history server (gRPC and HTTP) until SIGTERM or Ctrl-C.
    Server(serve::server::ServerCommand),
    /// Poll task queues and run leased steps as LLM agent loops until SIGTERM or Ctrl-C.
    ///
    /// Give the API key with --api-key-file or RAILYARD_API_KEY (--api-key shows it to
    /// every local user in the process list).
    ///
    /// Settings: flags win over the environment (RAILYARD_SERVER, RAILYARD_API_KEY, RAILYARD_API_KEY_FILE, RAILYARD_QUEUES,
    /// RAILYARD_SLOTS, RAILYARD_WORKSPACE, RAILYARD_PROVIDER, RAILYARD_MODEL,
    /// RAILYARD_SCRIPT, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY,
    /// OPENAI_BASE_URL ...), which wins over the --config file.
    Worker(serve::worker::WorkerArgs),
    /// Quickstart: a server and a worker in one process, and a live demo run.
    ///
    /// Uses a real model when ANTHROPIC_API_KEY or OPENAI_API_KEY is set, otherwise the
    /// offline scripted provider (<workflows>/demo.script.json), which is not a model.
    /// Without --workflows, in a directory with no workflow definitions in ./workflows,
    /// it runs the demo and script built into this binary, so it works from any directory.
    Dev(serve::dev::DevArgs),
    /// Start, inspect, list and steer workflow runs.
    #[command(subcommand)]
    Run(run::RunCommand),
    /// Workflow definitions loaded by the server.
    #[command(subcommand)]
    Workflow(workflow::WorkflowCommand),
    /// Lease and report step tasks by hand (play worker).
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Task queue state.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// API keys of a server that runs with --auth (needs an admin key).
    #[command(subcommand)]
    Key(key::KeyCommand),
    /// Namespaces: create, describe, list, update, delete (needs an admin key).
    #[command(subcommand)]
    Namespace(namespace::NamespaceCommand),
    /// Flow-control rules on keys: concurrency limits and fairness weights (needs an
    /// admin key).
    #[command(subcommand)]
    Limit(limit::LimitCommand),
    /// Start runs on cron or interval specs: create, describe, list, update, pause,
    /// unpause, trigger, backfill, delete.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Webhook triggers: create, describe, list, update, delete (needs an admin key).
    #[command(subcommand)]
    Trigger(trigger::TriggerCommand),
    /// Batch operations: cancel, terminate, reset, rerun or signal every run a query
    /// matches, at a bounded rate; describe, list, stop (needs an admin key).
    #[command(subcommand)]
    Batch(batch::BatchCommand),
    /// Move a store between backends: export a dump of every table to stdout, import
    /// one from stdin (redb to PostgreSQL and back).
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Measure throughput and latency of an in-process server over real gRPC
    /// (--processes: the same with server, workers and clients as separate processes;
    /// --schedules: fire lag of N schedules on a server process; --webhooks, --fanout,
    /// --agents: see `railyard bench --help`).
    Bench(railyard_bench::BenchArgs),
    /// One client process of `railyard bench --agents` (started by the bench).
    #[command(name = railyard_bench::AGENT_COMMAND, hide = true)]
    BenchAgent(railyard_bench::AgentClientArgs),
    /// A worker or client process of `railyard bench --processes` (started by the bench).
    #[command(name = railyard_bench::PROCESS_COMMAND, hide = true, subcommand)]
    BenchProcess(railyard_bench::ProcessRole),
    /// Serve MCP on stdin/stdout for an agent (Claude Code, Cursor, any MCP client),
    /// talking to the Railyard server at --server. Logs go to stderr.
    Mcp(serve::mcp::McpArgs),
    /// Install the server or a worker as a systemd or launchd service (never starts it).
    ///
    /// `railyard service install server --config /etc/railyard/railyard.toml`;
    /// `railyard service install worker --user --config worker.toml --dry-run`.
    #[command(subcommand)]
    Service(service::ServiceCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// bash: `railyard completion bash > /etc/bash_completion.d/railyard`;
    /// zsh: `railyard completion zsh > "${fpath[1]}/_railyard"`;
    /// fish: `railyard completion fish > ~/.config/fish/completions/railyard.fish`.
    Completion(shell::CompletionArgs),
    /// Print the man page railyard(1), or write one page per command with --dir.
    ///
    /// `railyard man | man -l -`; `railyard man --dir /usr/local/share/man/man1`.
    Man(shell::ManArgs),
}

fn main() -> ExitCode {
    let cli = parse_cli();
    // The bench's in-process server would log every run it starts; `dev` shows its
    // own progress on stdout, so its logs are for problems only.
    let default_filter = match cli.command {
        Command::Bench(_) => "info,railyard_server=warn",
        Command::BenchAgent(_) | Command::BenchProcess(_) => "warn",
        Command::Dev(_) => "warn",
        // rmcp logs every session event at info; stderr is what an MCP client shows.
        Command::Mcp(_) => "info,rmcp=warn",
        _ => "info",
    };
    let telemetry =
        match exporting(&cli.command).and_then(|e| e.as_ref().map(telemetry::Telemetry::start).transpose()) {
            Ok(t) => t,
            Err(e) => return report::failed(&e),
        };
    logging::init(
        default_filter,
        cli.log_format,
        telemetry.as_ref().map(|t| t.tracer()),
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(report::EXIT_ERROR);
        }
    };
    let outcome = runtime.block_on(dispatch(cli));
    // Do not hang on background tasks (connection drivers, a server that would not stop).
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    if let Some(t) = telemetry {
        t.shutdown();
    }
    match outcome {
        Ok(code) => code,
        Err(e) => report::failed(&e),
    }
}

/// Where the long-running commands send traces (`None`: nowhere, and for every other
/// command), read before logging starts: the exporter is part of the subscriber.
fn exporting(command: &Command) -> anyhow::Result<Option<telemetry::Exporting>> {
    let env = |k: &str| std::env::var(k).ok();
    let server = |a: &serve::server::ServerArgs, name| {
        telemetry::server_exporting(a.config.as_deref(), a.otlp_endpoint.clone(), name, env)
    };
    Ok(match command {
        Command::Server(c) if c.command.is_none() => server(&c.args, "railyard-server")?,
        Command::Dev(a) => server(&a.server, "railyard")?,
        Command::Worker(a) => telemetry::worker_exporting(a.config.as_deref(), a.otlp_endpoint.clone(), env)?,
        _ => None,
    })
}

/// Parses the command line. The worker's settings are layered (flags over environment
/// over file), so it must know which global flags were really typed: clap's env and
/// default values for `--server` / `--namespace` would otherwise hide the lower layers.
fn parse_cli() -> Cli {
    parse_cli_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
}

fn parse_cli_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Command::Worker(a), Some(sub)) = (&mut cli.command, matches.subcommand_matches("worker")) {
        let typed = |id: &str| {
            (sub.value_source(id) == Some(ValueSource::CommandLine))
                .then(|| sub.get_one::<String>(id).cloned())
                .flatten()
        };
        a.server_flag = typed("server");
        a.namespace_flag = typed("namespace");
        a.api_key_flag = typed("api_key");
        let typed_path = |id: &str| {
            (sub.value_source(id) == Some(ValueSource::CommandLine))
                .then(|| sub.get_one::<std::path::PathBuf>(id).cloned())
                .flatten()
        };
        a.tls_flags = railyard_sdk::TlsOptions {
            ca: typed_path("tls_ca"),
            cert: typed_path("tls_cert"),
            key: typed_path("tls_key"),
        };
    }
    Ok(cli)
}

async fn dispatch(mut cli: Cli) -> anyhow::Result<ExitCode> {
    if let Some(key) = cli.global.load_api_key_file()?
        && let Command::Worker(a) = &mut cli.command
    {
        // The worker's layered settings take it as a flag.
        a.api_key_flag = Some(key);
    }
    let g = &cli.global;
    match cli.command {
        Command::Server(a) => serve::server::dispatch(a).await.map(|()| ExitCode::SUCCESS),
        Command::Worker(a) => {
            // This process starts no processes but bash's, so what a command orphans,
            // named or not, is the command's to end.
            railyard_worker::tools::reaper::set_strict(true);
            serve::worker::run(a).await.map(|()| ExitCode::SUCCESS)
        }
        Command::Dev(a) => {
            railyard_worker::tools::reaper::set_strict(true);
            serve::dev::run(a).await
        }
        Command::Run(c) => run::run(g, c).await,
        Command::Workflow(c) => workflow::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Task(c) => task::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Queue(c) => queue::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Key(c) => key::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Namespace(c) => namespace::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Limit(c) => limit::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Schedule(c) => schedule::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Trigger(c) => trigger::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Batch(c) => batch::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Bench(a) => {
            let output = if g.output.is_json() {
                railyard_bench::Output::Json
            } else {
                railyard_bench::Output::Human
            };
            railyard_bench::run(output, a).await.map(|()| ExitCode::SUCCESS)
        }
        Command::Store(c) => store::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::BenchAgent(a) => railyard_bench::run_agent_client(a)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::BenchProcess(r) => railyard_bench::run_process_role(r)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Mcp(a) => serve::mcp::run(g, &a).await.map(|()| ExitCode::SUCCESS),
        Command::Service(c) => service::run(c).map(|()| ExitCode::SUCCESS),
        Command::Completion(a) => shell::completion(Cli::command(), &a).map(|()| ExitCode::SUCCESS),
        Command::Man(a) => shell::man(Cli::command(), &a).map(|()| ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests;
