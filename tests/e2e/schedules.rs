//! Schedules end to end: the `railyard schedule` commands against a real server
//! process, and a schedule firing every second across SIGKILLs of that server.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use railyard_proto::v1::{ListRunsRequest, RunInfo};
use railyard_sdk::Client;
use serde_json::Value;

use crate::support::*;

const NS: &str = "default";

/// A one-step workflow; nothing works its steps, so every run a schedule starts stays open.
fn workflow(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","version":"1","name":"{id}","description":"one step","steps":[
            {{"id":"only","title":"Only","prompt":"Do {{{{goal}}}}"}}]}}"#
    )
}

/// The one line a failed command prints on stderr, after checking it is one line and exit code 1.
fn one_error_line(o: std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let text = stderr(&o);
    let lines: Vec<_> = text.lines().filter(|l| !l.starts_with("hint: ")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {text:?}");
    assert!(lines[0].starts_with("error: "), "{text}");
    lines[0].to_string()
}

/// The wall clock, in unix ms: the server fires on it, so the test compares due times with it.
#[expect(
    clippy::disallowed_methods,
    reason = "a real server process fires on the wall clock; the test reads the same clock"
)]
fn wall_clock_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

fn millis(text: &str) -> i64 {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text:?} is not RFC 3339: {e}"))
        .timestamp_millis()
}

#[test]
fn schedule_commands_against_a_server() {
    let sandbox = Sandbox::new();
    sandbox.workflow("demo.json", &workflow("demo"));
    let server = sandbox.server();

    // Create: a one-line confirmation and the next fire times the server computed.
    let created = ok(server.ry(&[
        "schedule",
        "create",
        "nightly",
        "--workflow",
        "demo",
        "--goal",
        "report for {{scheduledTime}}",
        "--context",
        "schedule={{scheduleId}}",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
        "--memo",
        "the nightly report",
    ]));
    assert!(
        created.starts_with("created schedule nightly of demo\n"),
        "{created}"
    );
    assert!(created.contains("next fire  "), "{created}");

    // Describe, human: spec, policies, state, next fires in the schedule's zone and
    // UTC, whatever zone the machine running the CLI is in.
    let text = ok(server.ry_env(&["schedule", "describe", "nightly"], &[("TZ", "Asia/Tokyo")]));
    for expected in [
        "schedule ",
        "workflow ",
        r#"cron "0 9 * * *" in Europe/Berlin"#,
        "overlap      SKIP",
        "state        active",
        "memo         the nightly report",
        "next fires (the schedule's zone, Europe/Berlin, and UTC)",
        "0 taken, no limit",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
    // 09:00 in Berlin is 08:00 or 07:00 UTC, depending on daylight saving.
    let utc_lines = text
        .lines()
        .filter(|l| l.ends_with(":00:00Z") && (l.contains("T08:00:00Z") || l.contains("T07:00:00Z")))
        .count();
    assert!(utc_lines >= 1, "no next fire at 09:00 Berlin in:\n{text}");
    let zoned = text
        .lines()
        .filter(|l| l.contains(" 09:00:00 CET ") || l.contains(" 09:00:00 CEST "))
        .count();
    assert!(zoned >= 1, "no next fire shown at 09:00 Berlin time in:\n{text}");
    assert!(!text.contains("JST"), "shown in the CLI machine's zone:\n{text}");

    // Describe, JSON, with five next fire times, one day apart, all 09:00 in Berlin.
    let info = json(server.ry(&["schedule", "describe", "nightly", "--next", "5", "-o", "json"]));
    assert_eq!(info["schedule_id"], "nightly");
    assert_eq!(info["action"]["workflow_id"], "demo");
    assert_eq!(info["spec"]["time_zone"], "Europe/Berlin");
    assert_eq!(info["policies"]["overlap"], "SKIP");
    assert_eq!(info["memo"], "the nightly report");
    let next: Vec<i64> = info["next_fire_times_unix_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(next.len(), 5, "{info}");
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    for t in &next {
        let local = DateTime::<Utc>::from_timestamp_millis(*t)
            .unwrap()
            .with_timezone(&berlin);
        assert_eq!(local.format("%H:%M:%S").to_string(), "09:00:00", "{info}");
    }
    assert!(next.windows(2).all(|w| w[0] < w[1]), "{info}");

    // List: a table with the schedule; JSON with its summary.
    let table = ok(server.ry(&["schedule", "list"]));
    let header = table.lines().next().unwrap();
    assert!(header.starts_with("SCHEDULE  WORKFLOW"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("nightly ") && l.contains(" demo ") && l.contains("active")),
        "{table}"
    );
    let listed = json(server.ry(&["schedule", "list", "-o", "json"]));
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["schedules"][0]["schedule_id"], "nightly");
    assert_eq!(listed["schedules"][0]["next_fire_time_unix_ms"], next[0]);

    // Pause with a note; describe and list show it; unpause clears it.
    let paused = ok(server.ry(&["schedule", "pause", "nightly", "--note", "maintenance window"]));
    assert_eq!(paused.trim(), "paused schedule nightly: maintenance window");
    let info = json(server.ry(&["schedule", "describe", "nightly", "-o", "json"]));
    assert_eq!(info["state"]["paused"], true, "{info}");
    assert_eq!(info["state"]["note"], "maintenance window", "{info}");
    let text = ok(server.ry(&["schedule", "describe", "nightly"]));
    assert!(text.contains("PAUSED: maintenance window"), "{text}");
    let table = ok(server.ry(&["schedule", "list"]));
    assert!(table.contains("PAUSED: maintenance window"), "{table}");
    let unpaused = json(server.ry(&["schedule", "unpause", "nightly", "-o", "json"]));
    assert_eq!(unpaused["unpaused"], true);
    let info = json(server.ry(&["schedule", "describe", "nightly", "-o", "json"]));
    assert_eq!(info["state"]["paused"], false, "{info}");

    // Trigger: a run starts now, with the templates rendered, and describe lists it.
    let triggered = json(server.ry(&[
        "schedule",
        "trigger",
        "nightly",
        "--overlap",
        "allow-all",
        "-o",
        "json",
    ]));
    let run_id = triggered["run_id"].as_str().unwrap().to_string();
    assert!(run_id.starts_with("nightly-"), "{triggered}");
    let run = json(server.ry(&["run", "describe", &run_id, "-o", "json"]))["run"].take();
    assert_eq!(run["workflow_id"], "demo");
    let goal = run["goal"].as_str().unwrap();
    let due = goal
        .strip_prefix("report for ")
        .unwrap_or_else(|| panic!("goal {goal:?}"));
    assert_eq!(
        format!(
            "nightly-{}",
            DateTime::<Utc>::from_timestamp_millis(millis(due))
                .unwrap()
                .to_rfc3339_opts(SecondsFormat::Millis, true)
        ),
        run_id,
        "the run id is the schedule id and the due time"
    );
    assert_eq!(run["context"]["schedule"], "nightly");
    let text = eventually(Duration::from_secs(60), || {
        let text = ok(server.ry(&["schedule", "describe", "nightly"]));
        text.contains(&run_id).then_some(text)
    });
    assert!(text.contains("recent actions"), "{text}");
    assert!(text.contains("trigger"), "{text}");

    // Update: only what is given changes; the state (the triggered action) is kept.
    let updated = ok(server.ry(&[
        "schedule",
        "update",
        "nightly",
        "--cron",
        "30 6 * * *",
        "--overlap",
        "buffer-all",
    ]));
    assert!(updated.starts_with("updated schedule nightly\n"), "{updated}");
    let info = json(server.ry(&["schedule", "describe", "nightly", "-o", "json"]));
    assert_eq!(info["spec"]["cron"], serde_json::json!(["30 6 * * *"]), "{info}");
    assert_eq!(info["spec"]["time_zone"], "Europe/Berlin", "{info}");
    assert_eq!(info["policies"]["overlap"], "BUFFER_ALL", "{info}");
    assert_eq!(info["action"]["goal"], "report for {{scheduledTime}}", "{info}");
    assert_eq!(info["memo"], "the nightly report", "{info}");
    assert_eq!(info["state"]["total_actions"], 1, "{info}");
    let first = info["next_fire_times_unix_ms"][0].as_i64().unwrap();
    let local = DateTime::<Utc>::from_timestamp_millis(first)
        .unwrap()
        .with_timezone(&berlin);
    assert_eq!(local.format("%H:%M").to_string(), "06:30", "{info}");

    // Stored text is shown inert: control characters escaped for people, kept in JSON.
    ok(server.ry(&["schedule", "update", "nightly", "--memo", "ops\u{1b}[2J\nteam"]));
    let text = ok(server.ry(&["schedule", "describe", "nightly"]));
    assert!(text.contains("memo         ops\\u{1b}[2J\\nteam"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    let table = ok(server.ry(&["schedule", "list"]));
    assert!(!table.contains('\u{1b}'), "{table:?}");
    let info = json(server.ry(&["schedule", "describe", "nightly", "-o", "json"]));
    assert_eq!(info["memo"], "ops\u{1b}[2J\nteam");
    ok(server.ry(&["schedule", "update", "nightly", "--memo", "the nightly report"]));

    // Bad input: one clear line each, and nothing created.
    let bad_cron = one_error_line(server.ry(&[
        "schedule",
        "create",
        "broken",
        "--workflow",
        "demo",
        "--cron",
        "0 25 * * *",
    ]));
    assert!(
        bad_cron.contains("invalid argument")
            && bad_cron.contains("0 25 * * *")
            && bad_cron.contains("hour field"),
        "{bad_cron}"
    );
    let unknown = one_error_line(server.ry(&[
        "schedule",
        "create",
        "orphan",
        "--workflow",
        "no-such-workflow",
        "--cron",
        "@daily",
    ]));
    assert!(unknown.contains("no-such-workflow"), "{unknown}");
    let duplicate = one_error_line(server.ry(&[
        "schedule",
        "create",
        "nightly",
        "--workflow",
        "demo",
        "--interval",
        "every 1h",
    ]));
    assert!(
        duplicate.starts_with("error: already exists: ") && duplicate.contains("nightly"),
        "{duplicate}"
    );
    let bad_interval = one_error_line(server.ry(&[
        "schedule",
        "create",
        "odd",
        "--workflow",
        "demo",
        "--interval",
        "every 15m offset 20m",
    ]));
    assert!(bad_interval.contains("offset"), "{bad_interval}");
    let listed = json(server.ry(&["schedule", "list", "-o", "json"]));
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1, "{listed}");
    // A bad flag value is a usage error naming the flag.
    let usage = server.ry(&["schedule", "trigger", "nightly", "--overlap", "sometimes"]);
    assert_eq!(usage.status.code(), Some(2));
    assert!(stderr(&usage).contains("--overlap"), "{}", stderr(&usage));

    // Delete: gone for describe (one line, not found), its run left alone.
    let deleted = ok(server.ry(&["schedule", "delete", "nightly"]));
    assert_eq!(deleted.trim(), "deleted schedule nightly");
    let gone = one_error_line(server.ry(&["schedule", "describe", "nightly"]));
    assert!(gone.starts_with("error: not found: "), "{gone}");
    let run = json(server.ry(&["run", "describe", &run_id, "-o", "json"]))["run"].take();
    assert_eq!(run["run_id"], run_id.as_str());
    assert_eq!(ok(server.ry(&["schedule", "list"])).trim(), "no schedules");
}

#[test]
fn backfill_takes_each_past_fire_once() {
    let sandbox = Sandbox::new();
    sandbox.workflow("demo.json", &workflow("demo"));
    let server = sandbox.server();
    ok(server.ry(&[
        "schedule",
        "create",
        "hourly",
        "--workflow",
        "demo",
        "--goal",
        "catch up {{scheduledTime}}",
        "--interval",
        "every 1h",
    ]));
    let out = ok(server.ry(&[
        "schedule",
        "backfill",
        "hourly",
        "--start",
        "2026-01-01T00:00:00Z",
        "--end",
        "2026-01-01T02:00:00Z",
        "--overlap",
        "allow-all",
    ]));
    assert!(
        out.starts_with("backfilling schedule hourly from 2026-01-01T00:00:00Z to 2026-01-01T02:00:00Z"),
        "{out}"
    );
    for hour in ["00", "01", "02"] {
        let run_id = format!("hourly-2026-01-01T{hour}:00:00.000Z");
        let run = eventually(Duration::from_secs(60), || {
            let o = server.ry(&["run", "describe", &run_id, "-o", "json"]);
            o.status.success().then(|| json(o)["run"].take())
        });
        assert_eq!(run["goal"], format!("catch up 2026-01-01T{hour}:00:00Z"));
    }
    let info = json(server.ry(&["schedule", "describe", "hourly", "-o", "json"]));
    let backfilled: Vec<&Value> = info["recent_actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["origin"] == "backfill")
        .collect();
    assert_eq!(backfilled.len(), 3, "{info}");
    // The range ends before it starts: refused by the CLI, one line.
    let err = one_error_line(server.ry(&[
        "schedule",
        "backfill",
        "hourly",
        "--start",
        "2026-01-02T00:00:00Z",
        "--end",
        "2026-01-01T00:00:00Z",
    ]));
    assert!(err.contains("before --start"), "{err}");
}

/// Every run of `workflow`, following pages, each described whole (list summaries
/// leave out the context, which holds the rendered due time).
async fn all_runs(client: &Client, workflow: &str) -> Vec<RunInfo> {
    let mut runs = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_runs(ListRunsRequest {
                namespace: NS.into(),
                workflow_id: workflow.into(),
                page_size: 200,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await
            .expect("list runs");
        for summary in page.runs {
            let run = client
                .describe_run(NS, &summary.run_id)
                .await
                .expect("describe run")
                .run
                .expect("a described run");
            runs.push(run);
        }
        if page.next_page_token.is_empty() {
            return runs;
        }
        page_token = page.next_page_token;
    }
}

/// The due time of each run of a schedule's fires, from the `due` context entry its
/// action rendered from `{{scheduledTime}}`.
fn due_of(run: &RunInfo) -> i64 {
    let due = run
        .context
        .get("due")
        .unwrap_or_else(|| panic!("run {} has no due context", run.run_id));
    millis(due)
}

/// A server on the sandbox's data at `addr` again (the port may linger a moment after a kill).
fn restart_on(sandbox: &Sandbox, addr: &str) -> ServerProcess {
    let (data, workflows) = (sandbox.path("data"), sandbox.path("workflows"));
    eventually(Duration::from_secs(30), || {
        std::panic::catch_unwind(|| ServerProcess::start(&data, &workflows, Some(addr))).ok()
    })
}

#[test]
fn every_second_schedule_survives_sigkills_without_gap_or_double() {
    let sandbox = Sandbox::new();
    sandbox.workflow("tick.json", &workflow("tick"));
    let mut server = sandbox.server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let created = json(server.ry(&[
        "schedule",
        "create",
        "ticks",
        "--workflow",
        "tick",
        "--goal",
        "tick {{scheduledTime}}",
        "--context",
        "due={{scheduledTime}}",
        "--cron",
        "* * * * * *",
        "--overlap",
        "allow-all",
        "-o",
        "json",
    ]));
    let create_ms = created["schedule"]["create_time_unix_ms"].as_i64().unwrap();

    let count_runs = |url: &str| {
        rt.block_on(async {
            let client = Client::connect(url).await.unwrap();
            all_runs(&client, "tick").await
        })
    };
    // Firing before the first kill.
    eventually(Duration::from_secs(120), || {
        (count_runs(&server.url).len() >= 2).then_some(())
    });

    // Kill it three times while it is firing; the first two stay down for two
    // seconds, so that due times pass while no server runs and must be caught up.
    let mut last_restart = 0;
    let mut downtimes = Vec::new();
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(1500));
        if round < 2 {
            let addr = server.grpc_addr.clone();
            server.kill9();
            let killed = wall_clock_ms();
            std::thread::sleep(Duration::from_secs(2));
            drop(server);
            server = restart_on(&sandbox, &addr);
            downtimes.push((killed, wall_clock_ms()));
        } else {
            server = server.crash_and_restart();
        }
        last_restart = wall_clock_ms();
    }
    // Fires resume, and catch up on what was due while it was down.
    eventually(Duration::from_secs(180), || {
        let runs = count_runs(&server.url);
        runs.iter()
            .any(|r| due_of(r) >= last_restart + 2_000)
            .then_some(())
    });
    // Pause, so the set of runs stops changing, then check it.
    ok(server.ry(&["schedule", "pause", "ticks", "--note", "checking"]));

    let (runs, histories, info) = rt.block_on(async {
        let client = Client::connect(&server.url).await.unwrap();
        let runs = all_runs(&client, "tick").await;
        let mut histories = Vec::new();
        for run in &runs {
            histories.push(client.full_history(NS, &run.run_id).await.expect("history"));
        }
        let info = client.describe_schedule(NS, "ticks", 0).await.expect("describe");
        (runs, histories, info)
    });

    // Each due second started exactly once.
    let mut by_due: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for run in &runs {
        by_due.entry(due_of(run)).or_default().push(run.run_id.clone());
    }
    let doubles: Vec<_> = by_due.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(
        doubles.is_empty(),
        "due times started more than once: {doubles:?}"
    );
    for (due, ids) in &by_due {
        let expected = format!(
            "ticks-{}",
            DateTime::<Utc>::from_timestamp_millis(*due)
                .unwrap()
                .to_rfc3339_opts(SecondsFormat::Millis, true)
        );
        assert_eq!(
            ids[0], expected,
            "a fire's run id is the schedule id and its due time"
        );
    }
    // No gap: every second from the first fire after creation to the last one taken.
    let first = *by_due.keys().next().unwrap();
    let last = *by_due.keys().next_back().unwrap();
    assert_eq!(
        first,
        (create_ms / 1000 + 1) * 1000,
        "the first fire is the first second after creation"
    );
    assert!(last >= last_restart + 2_000);
    let missing: Vec<_> = (first / 1000..=last / 1000)
        .map(|s| s * 1000)
        .filter(|t| !by_due.contains_key(t))
        .map(|t| DateTime::<Utc>::from_timestamp_millis(t).unwrap().to_rfc3339())
        .collect();
    assert!(missing.is_empty(), "due seconds with no run: {missing:?}");

    // Due times that passed while the server was down were started after it came back.
    for (killed, restarted) in &downtimes {
        let caught_up: Vec<_> = runs
            .iter()
            .filter(|r| due_of(r) > *killed && due_of(r) < *restarted)
            .collect();
        assert!(
            !caught_up.is_empty(),
            "no due time inside the downtime {killed}..{restarted}"
        );
        for run in caught_up {
            assert!(
                run.start_time_unix_ms > *killed,
                "run {} due while the server was down started before the kill",
                run.run_id
            );
        }
    }

    // Each run's history holds one start.
    for (run, events) in runs.iter().zip(&histories) {
        let starts = events.iter().filter(|e| e.event_type == "RunStarted").count();
        assert_eq!(starts, 1, "run {} has {starts} RunStarted events", run.run_id);
        assert_eq!(events[0].event_type, "RunStarted", "run {}", run.run_id);
    }
    // The schedule's own count agrees, and nothing was skipped or missed.
    let state = info.state.expect("state");
    assert_eq!(state.total_actions, runs.len() as u64);
    assert_eq!(
        (
            state.skipped_overlap,
            state.missed_catchup_window,
            state.buffer_overflow
        ),
        (0, 0, 0)
    );
    assert!(state.paused);
}
