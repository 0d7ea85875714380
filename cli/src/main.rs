//! `railyard`: the one binary of Railyard, a durable task-queue service for
//! long-running AI-agent workflows.
//!
//! - `railyard server` runs the history server.
//! - `railyard worker` polls task queues and runs leased steps as agent loops.
//! - `railyard dev` runs a server and a worker in one process and shows a demo run.
//! - `railyard run|workflow|task|queue|schedule|trigger|key|namespace ...` are client commands over
//!   gRPC; they take `--server`, `--namespace`, `--api-key` and `--output` (see
//!   [`client::global::GlobalOpts`]).
//! - `railyard bench` measures an in-process server.
//! - `railyard mcp` serves MCP on stdio for an outside agent.
//!
//! This file is the clap root and the dispatch. One folder per command group: the
//! client commands ([`run`], [`workflow`], [`task`], [`queue`], [`key`], [`namespace`],
//! [`schedule`], [`trigger`], and [`delivery`], shared by `run` and `namespace`) over
//! the plumbing they share in [`client`]; the long-running commands (`server`,
//! `worker`, `dev`, `mcp`) in [`serve`]; `bench` in [`bench`]. [`logging`] sets up the
//! logs and [`report`] reports a failed command.
//!
//! Errors are `anyhow` only here at the edge: a failed command prints one `error: ...`
//! line on stderr and exits with code 1 (2 for usage errors, from clap; 3 when a
//! followed run closed without completing).

mod bench;
mod client;
mod delivery;
mod key;
mod logging;
mod namespace;
mod queue;
mod report;
mod run;
mod schedule;
mod serve;
mod task;
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
    Server(serve::server::ServerArgs),
    /// Poll task queues and run leased steps as LLM agent loops until SIGTERM or Ctrl-C.
    ///
    /// Settings: flags win over the environment (RAILYARD_SERVER, RAILYARD_API_KEY, RAILYARD_QUEUES,
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
    /// Start runs on cron or interval specs: create, describe, list, update, pause,
    /// unpause, trigger, backfill, delete.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Webhook triggers: create, describe, list, update, delete (needs an admin key).
    #[command(subcommand)]
    Trigger(trigger::TriggerCommand),
    /// Measure throughput and latency of an in-process server over real gRPC
    /// (--schedules: fire lag of N schedules on a server process; --webhooks, --fanout:
    /// see `railyard bench --help`).
    Bench(bench::BenchArgs),
    /// Serve MCP on stdin/stdout for an agent (Claude Code, Cursor, any MCP client),
    /// talking to the Railyard server at --server. Logs go to stderr.
    Mcp(serve::mcp::McpArgs),
}

fn main() -> ExitCode {
    let cli = parse_cli();
    // The bench's in-process server would log every run it starts; `dev` shows its
    // own progress on stdout, so its logs are for problems only.
    let default_filter = match cli.command {
        Command::Bench(_) => "info,railyard_server=warn",
        Command::Dev(_) => "warn",
        // rmcp logs every session event at info; stderr is what an MCP client shows.
        Command::Mcp(_) => "info,rmcp=warn",
        _ => "info",
    };
    logging::init(default_filter, cli.log_format);
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
    match outcome {
        Ok(code) => code,
        Err(e) => report::failed(&e),
    }
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
        a.tls_flags = railyard_proto::TlsOptions {
            ca: typed_path("tls_ca"),
            cert: typed_path("tls_cert"),
            key: typed_path("tls_key"),
        };
    }
    Ok(cli)
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let g = &cli.global;
    match cli.command {
        Command::Server(a) => serve::server::run(a).await.map(|()| ExitCode::SUCCESS),
        Command::Worker(a) => serve::worker::run(a).await.map(|()| ExitCode::SUCCESS),
        Command::Dev(a) => serve::dev::run(a).await,
        Command::Run(c) => run::run(g, c).await,
        Command::Workflow(c) => workflow::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Task(c) => task::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Queue(c) => queue::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Key(c) => key::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Namespace(c) => namespace::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Schedule(c) => schedule::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Trigger(c) => trigger::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Bench(a) => bench::run(g, a).await.map(|()| ExitCode::SUCCESS),
        Command::Mcp(a) => serve::mcp::run(g, &a).await.map(|()| ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use railyard_proto::v1::RunStatus;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("railyard").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = parse(&[
            "run",
            "describe",
            "r1",
            "--server",
            "http://h:1",
            "-n",
            "ns",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.global.server, "http://h:1");
        assert_eq!(cli.global.namespace, "ns");
        assert!(cli.global.output.is_json());
    }

    #[test]
    fn run_start_collects_context() {
        let cli = parse(&[
            "run",
            "start",
            "demo",
            "--goal",
            "g",
            "--context",
            "a=1",
            "--context",
            "b=x=y",
            "--wait",
        ])
        .unwrap();
        let Command::Run(run::RunCommand::Start(a)) = cli.command else {
            panic!("not run start")
        };
        assert_eq!(a.workflow, "demo");
        assert_eq!(
            a.context,
            vec![("a".into(), "1".into()), ("b".into(), "x=y".into())]
        );
        assert!(a.wait);
    }

    #[test]
    fn bad_flag_values_name_the_flag() {
        let err = parse(&["run", "start", "demo", "--goal", "g", "--context", "oops"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--context") && text.contains("no '='"), "{text}");
        assert_eq!(err.exit_code(), 2);

        let err = parse(&["run", "signal", "r1", "steer", "--payload", "{bad"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--payload") && err.contains("not valid JSON"),
            "{err}"
        );

        let err = parse(&["run", "list", "--since", "soon"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--since") && err.contains("neither a duration"),
            "{err}"
        );

        let err = parse(&["run", "list", "--status", "done"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--status") && err.contains("TIMED_OUT"), "{err}");

        assert!(parse(&["run", "start", "demo"]).is_err(), "--goal is required");
        assert!(parse(&["server", "--listen", "nowhere"]).is_err());
    }

    #[test]
    fn run_list_filters() {
        let cli = parse(&[
            "run", "list", "--status", "failed", "--since", "1h", "--limit", "5",
        ])
        .unwrap();
        let Command::Run(run::RunCommand::List(a)) = cli.command else {
            panic!("not run list")
        };
        assert_eq!(a.status, Some(RunStatus::Failed));
        assert_eq!(
            a.since,
            Some(client::args::Since::Ago(std::time::Duration::from_secs(3600)))
        );
        assert_eq!(a.limit, 5);
    }

    #[test]
    fn server_defaults() {
        let cli = parse(&["server", "--listen", "127.0.0.1:0"]).unwrap();
        let Command::Server(a) = cli.command else {
            panic!("not server")
        };
        let config = a.settings_with(|_| None).unwrap().config();
        assert_eq!(config.grpc_listen.port(), 0);
        assert_eq!(config.http_listen.to_string(), "127.0.0.1:7401");
        assert_eq!(config.data_dir, std::path::PathBuf::from("./.railyard"));
        assert_eq!(config.workflows_dir, std::path::PathBuf::from("./workflows"));
    }

    #[test]
    fn worker_flags_know_where_they_came_from() {
        fn args(v: &[&'static str]) -> Vec<&'static str> {
            std::iter::once("railyard").chain(v.iter().copied()).collect()
        }
        let cli = parse_cli_from(args(&[
            "worker",
            "--server",
            "http://h:1",
            "--queue",
            "a",
            "--queue",
            "b,c",
            "--slots",
            "2",
            "--provider",
            "scripted",
            "--script",
            "s.json",
        ]))
        .unwrap();
        let Command::Worker(w) = cli.command else {
            panic!("not worker")
        };
        assert_eq!(w.server_flag.as_deref(), Some("http://h:1"));
        assert_eq!(w.namespace_flag, None, "the default namespace is not a flag");
        let layer = w.flags_layer().unwrap();
        assert_eq!(layer.queues, Some(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(layer.slots, Some(2));
        assert_eq!(layer.provider, Some(railyard_worker::ProviderKind::Scripted));

        // Given before the subcommand, a global flag still counts as typed.
        let cli = parse_cli_from(args(&["--namespace", "ns", "worker"])).unwrap();
        let Command::Worker(w) = cli.command else {
            panic!("not worker")
        };
        assert_eq!(w.namespace_flag.as_deref(), Some("ns"));
        assert_eq!(w.server_flag, None);
        assert!(parse_cli_from(args(&["worker", "--provider", "gpt"])).is_err());
        assert!(parse_cli_from(args(&["worker", "--slots", "0"])).is_err());
    }

    #[test]
    fn dev_defaults() {
        let cli = parse(&["dev", "--exit-when-done"]).unwrap();
        let Command::Dev(d) = cli.command else {
            panic!("not dev")
        };
        assert!(d.exit_when_done && !d.no_demo);
        assert_eq!(d.goal, serve::dev::DEFAULT_GOAL);
        assert_eq!(
            d.server.settings_with(|_| None).unwrap().data_dir,
            std::path::PathBuf::from("./.railyard")
        );
        assert!(parse(&["dev", "--exit-when-done", "--no-demo"]).is_err());
    }

    #[test]
    fn task_commands() {
        let cli = parse(&[
            "task",
            "fail",
            "tok",
            "--error-type",
            "Boom",
            "--message",
            "m",
            "--non-retryable",
        ])
        .unwrap();
        let Command::Task(task::TaskCommand::Fail(a)) = cli.command else {
            panic!("not task fail")
        };
        assert!(a.non_retryable);
        assert!(
            parse(&["task", "fail", "tok", "--message", "m"]).is_err(),
            "--error-type is required"
        );
        let cli = parse(&[
            "task",
            "complete",
            "tok",
            "--artifact",
            "a.txt",
            "--artifact",
            "b.txt",
        ])
        .unwrap();
        let Command::Task(task::TaskCommand::Complete(a)) = cli.command else {
            panic!("not task complete")
        };
        assert_eq!(a.artifacts, vec!["a.txt", "b.txt"]);
    }

    #[test]
    fn log_format_is_text_unless_json_is_asked_for() {
        assert_eq!(
            parse(&["queue", "describe", "q"]).unwrap().log_format,
            LogFormat::Text
        );
        let cli = parse(&["server", "--log-format", "json"]).unwrap();
        assert_eq!(cli.log_format, LogFormat::Json);
        let err = parse(&["server", "--log-format", "xml"]).unwrap_err();
        assert!(err.to_string().contains("--log-format"), "{err}");
    }
}
