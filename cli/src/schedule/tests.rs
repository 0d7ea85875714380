//! Tests of how the `railyard schedule` subcommands and their flags parse.

use clap::Parser;

use super::*;
use crate::{Cli, Command};

fn parse(args: &[&str]) -> Result<ScheduleCommand, clap::Error> {
    let cli = Cli::try_parse_from(["railyard", "schedule"].iter().chain(args.iter()).copied())?;
    match cli.command {
        Command::Schedule(c) => Ok(c),
        other => panic!("not a schedule command: {other:?}"),
    }
}

#[test]
fn create_takes_the_spec_flags() {
    let c = parse(&[
        "create",
        "nightly",
        "--workflow",
        "demo",
        "--goal",
        "report {{scheduledTime}}",
        "--context",
        "team=infra",
        "--cron",
        "0 9 * * *",
        "--cron",
        "30 17 * * FRI",
        "--tz",
        "Europe/Berlin",
        "--jitter",
        "30s",
        "--overlap",
        "buffer-one",
        "--catchup-window",
        "1d",
        "--pause-on-failure",
        "--paused",
        "--note",
        "not yet",
        "--memo",
        "the nightly report",
    ])
    .unwrap();
    let ScheduleCommand::Create(a) = c else {
        panic!("not create")
    };
    assert_eq!(a.schedule_id, "nightly");
    assert_eq!(a.spec.cron.len(), 2);
    assert_eq!(a.spec.pause_on_failure, Some(true));
    assert_eq!(a.spec.overlap, Some(OverlapPolicy::BufferOne));
    assert!(a.paused);
    assert_eq!(a.note.as_deref(), Some("not yet"));
}

#[test]
fn create_needs_one_calendar() {
    let err = parse(&["create", "s", "--workflow", "demo"]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let err = parse(&[
        "create",
        "s",
        "--workflow",
        "demo",
        "--cron",
        "* * * * *",
        "--interval",
        "every 1m",
    ])
    .unwrap_err();
    assert!(err.to_string().contains("--interval"), "{err}");
    assert!(
        parse(&["create", "s", "--cron", "* * * * *"]).is_err(),
        "--workflow is required"
    );
    assert!(
        parse(&[
            "create",
            "s",
            "--workflow",
            "w",
            "--interval",
            "every 1m",
            "--note",
            "n"
        ])
        .is_err()
    );
    let ok = parse(&[
        "create",
        "s",
        "--workflow",
        "w",
        "--interval",
        "every 15m offset 2m",
    ])
    .unwrap();
    let ScheduleCommand::Create(a) = ok else {
        panic!("not create")
    };
    assert_eq!(a.spec.interval.as_deref(), Some("every 15m offset 2m"));
}

#[test]
fn bad_values_name_the_flag() {
    let err = parse(&["trigger", "s", "--overlap", "never"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--overlap") && err.contains("unknown overlap policy"),
        "{err}"
    );
    let err = parse(&["update", "s", "--jitter", "soon"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--jitter"), "{err}");
    let err = parse(&["backfill", "s", "--start", "yesterday", "--end", "now"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--start") && err.contains("RFC 3339"), "{err}");
}

#[test]
fn update_and_the_rest() {
    let ScheduleCommand::Update(a) = parse(&[
        "update",
        "s",
        "--interval",
        "every 1h",
        "--end",
        "none",
        "--pause-on-failure=false",
    ])
    .unwrap() else {
        panic!("not update")
    };
    assert_eq!(a.spec.end, Some(flags::Bound::None));
    assert_eq!(a.spec.pause_on_failure, Some(false));
    let ScheduleCommand::Backfill(b) = parse(&[
        "backfill",
        "s",
        "--start",
        "2026-01-01T00:00:00Z",
        "--end",
        "2026-01-02T00:00:00Z",
        "--overlap",
        "allow-all",
    ])
    .unwrap() else {
        panic!("not backfill")
    };
    assert_eq!(b.end - b.start, 86_400_000);
    assert_eq!(b.overlap, Some(OverlapPolicy::AllowAll));
    assert!(matches!(
        parse(&["pause", "s", "--note", "n"]).unwrap(),
        ScheduleCommand::Pause(_)
    ));
    // A bare --pause-on-failure does not swallow the id after it.
    let ScheduleCommand::Create(c) = parse(&[
        "create",
        "--pause-on-failure",
        "nightly",
        "--workflow",
        "w",
        "--cron",
        "@daily",
    ])
    .unwrap() else {
        panic!("not create")
    };
    assert_eq!(
        (c.schedule_id.as_str(), c.spec.pause_on_failure),
        ("nightly", Some(true))
    );
    assert!(matches!(
        parse(&["delete", "s"]).unwrap(),
        ScheduleCommand::Delete(_)
    ));
}
