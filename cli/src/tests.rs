//! Tests of the command line as parsed: global flags after the subcommand, flag errors
//! that name the flag, the worker's typed flags, and the defaults of `server`, `dev`
//! and `--log-format`.

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
    let config = a.args.settings_with(|_| None).unwrap().config();
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

#[test]
fn bash_completion_names_real_subcommands() {
    let mut out = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::Bash,
        &mut Cli::command(),
        "railyard",
        &mut out,
    );
    let script = String::from_utf8(out).unwrap();
    for name in [
        "server",
        "worker",
        "schedule",
        "backfill",
        "completion",
        "--namespace",
    ] {
        assert!(script.contains(name), "{name} missing from the bash completion");
    }
    assert!(parse(&["completion", "fish"]).is_ok());
    assert!(parse(&["completion", "tcsh"]).is_err());
}
