//! `railyard`: the one binary of Railyard, a durable task-queue service for
//! long-running AI-agent workflows.
//!
//! - `railyard server` runs the history server.
//! - `railyard run|workflow|task|queue ...` are client commands over gRPC; they take
//!   `--server`, `--namespace` and `--output` (see [`global::GlobalOpts`]).
//! - `railyard bench` measures an in-process server.
//!
//! One module per command group. Errors are `anyhow` only here at the edge: a failed
//! command prints one `error: ...` line on stderr and exits with code 1 (2 for usage
//! errors, from clap; 3 when a followed run closed without completing).

mod args;
mod bench;
mod global;
mod output;
mod queue;
mod run;
mod run_view;
mod server_cmd;
mod task;
mod timefmt;
mod view;
mod workflow;
// Still to come, once the worker library is ready: `mod worker_cmd;` (`railyard worker`)
// and `mod dev;` (`railyard dev`: server + worker in one process).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Exit code of a command that failed (server error, bad input, I/O).
const EXIT_ERROR: u8 = 1;

/// Railyard: durable task queues for long-running agent workflows.
#[derive(Debug, Parser)]
#[command(
    name = "railyard",
    version,
    after_help = "Exit codes: 0 success, 1 error, 2 usage error, 3 a followed run closed without completing.\n\
                  Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) to change what is logged."
)]
struct Cli {
    #[command(flatten)]
    global: global::GlobalOpts,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the history server (gRPC and HTTP) until SIGTERM or Ctrl-C.
    Server(server_cmd::ServerArgs),
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
    /// Measure throughput and latency of an in-process server over real gRPC.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The bench's in-process server would log every run it starts.
    let default_filter = match cli.command {
        Command::Bench(_) => "info,railyard_server=warn",
        _ => "info",
    };
    init_tracing(default_filter);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let outcome = runtime.block_on(dispatch(cli));
    // Do not hang on background tasks (connection drivers, a server that would not stop).
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match outcome {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if let Some(hint) = hint_for(&e) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(EXIT_ERROR)
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let g = &cli.global;
    match cli.command {
        Command::Server(a) => server_cmd::run(a).await.map(|()| ExitCode::SUCCESS),
        Command::Run(c) => run::run(g, c).await,
        Command::Workflow(c) => workflow::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Task(c) => task::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Queue(c) => queue::run(g, c).await.map(|()| ExitCode::SUCCESS),
        Command::Bench(a) => bench::run(g, a).await.map(|()| ExitCode::SUCCESS),
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (`default_filter` when it is unset or invalid).
fn init_tracing(default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// A next step for errors people commonly meet.
fn hint_for(e: &anyhow::Error) -> Option<&'static str> {
    match e.downcast_ref::<railyard_proto::ClientError>()? {
        railyard_proto::ClientError::Unavailable { .. } => {
            Some("is `railyard server` running there? Point --server (or RAILYARD_SERVER) at it.")
        }
        _ => None,
    }
}

/// Whether the error is stdout closing under us (`railyard run history X | head`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
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
            Some(args::Since::Ago(std::time::Duration::from_secs(3600)))
        );
        assert_eq!(a.limit, 5);
    }

    #[test]
    fn server_defaults() {
        let cli = parse(&["server", "--listen", "127.0.0.1:0"]).unwrap();
        let Command::Server(a) = cli.command else {
            panic!("not server")
        };
        let config = a.config();
        assert_eq!(config.grpc_listen.port(), 0);
        assert_eq!(config.http_listen.to_string(), "127.0.0.1:7401");
        assert_eq!(config.data_dir, std::path::PathBuf::from("./.railyard"));
        assert_eq!(config.workflows_dir, std::path::PathBuf::from("./workflows"));
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
}
