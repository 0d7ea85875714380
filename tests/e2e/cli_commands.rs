//! The client commands against a real `railyard server` process: output, exit codes,
//! and error lines. Needs a working server (`RunningServer::start`).

use std::process::Command;

use crate::support::*;

/// A server over a sandbox with a two-step workflow and a broken definition.
fn start_server() -> (Sandbox, ServerProcess) {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "demo.json",
        r#"{"id":"demo","version":"1","name":"Demo","description":"two steps","steps":[
            {"id":"plan","title":"Plan","prompt":"Plan {{goal}} in {{context.lang}}"},
            {"id":"write","title":"Write","prompt":"Write it"}]}"#,
    );
    sandbox.workflow("broken.json", r#"{"id":"broken","steps":3}"#);
    let server = sandbox.server();
    (sandbox, server)
}

fn poll_token(server: &ServerProcess) -> (String, serde_json::Value) {
    let task = json(server.ry(&[
        "task",
        "poll",
        "--wait",
        "5",
        "--identity",
        "t-worker",
        "-o",
        "json",
    ]));
    (task["task_token"].as_str().unwrap().to_string(), task)
}

#[test]
fn client_commands_against_a_server() {
    let (_sandbox, server) = start_server();

    let list = ok(server.ry(&["workflow", "list"]));
    assert!(list.lines().next().unwrap().starts_with("ID "), "{list}");
    assert!(
        list.contains("demo") && list.contains("invalid workflow files (1):"),
        "{list}"
    );
    assert!(list.contains("broken.json"), "{list}");

    let started = ok(server.ry(&[
        "run",
        "start",
        "demo",
        "--goal",
        "haiku",
        "--context",
        "lang=rust",
        "--run-id",
        "r1",
    ]));
    assert_eq!(started.trim(), "started run r1 of demo");

    // Server errors: one line on stderr, exit code 1.
    let again = server.ry(&["run", "start", "demo", "--goal", "x", "--run-id", "r1"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).starts_with("error: already exists: "),
        "{}",
        stderr(&again)
    );
    let missing = server.ry(&["run", "describe", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).starts_with("error: not found: "),
        "{}",
        stderr(&missing)
    );

    // Usage errors name the flag and exit with 2.
    let bad = server.ry(&["run", "start", "demo", "--goal", "x", "--context", "novalue"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--context"), "{}", stderr(&bad));
    let bad_file = server.ry(&[
        "run",
        "start",
        "demo",
        "--goal",
        "x",
        "--context-file",
        "/nonexistent.json",
    ]);
    assert_eq!(bad_file.status.code(), Some(1));
    assert!(
        stderr(&bad_file).contains("--context-file /nonexistent.json"),
        "{}",
        stderr(&bad_file)
    );

    // Play worker: the first step completes, the second fails for good.
    let (token, task) = poll_token(&server);
    assert_eq!(task["run_id"], "r1");
    assert_eq!(task["prompt"], "Plan haiku in rust");
    ok(server.ry(&["run", "signal", "r1", "steer", "--payload", r#"{"text":"short"}"#]));
    let beat = ok(server.ry(&["task", "heartbeat", &token, "--checkpoint", "turn 1"]));
    assert!(beat.contains("signal steer"), "{beat}");
    ok(server.ry(&[
        "task",
        "complete",
        &token,
        "--notes",
        "planned",
        "--context",
        "style=terse",
    ]));
    let stale = server.ry(&["task", "complete", &token]);
    assert_eq!(stale.status.code(), Some(1));
    assert!(
        stderr(&stale).starts_with("error: failed precondition: "),
        "{}",
        stderr(&stale)
    );

    let (token, task) = poll_token(&server);
    assert_eq!(task["step_id"], "write");
    assert_eq!(task["context"]["style"], "terse");
    let failed = ok(server.ry(&[
        "task",
        "fail",
        &token,
        "--error-type",
        "Fatal",
        "--message",
        "no",
        "--non-retryable",
    ]));
    assert!(failed.contains("no further attempt"), "{failed}");

    // watch: events, the final status, and exit code 3 for a run that did not complete.
    let watch = server.ry(&["run", "watch", "r1"]);
    assert_eq!(watch.status.code(), Some(3), "{}", stderr(&watch));
    let text = stdout(&watch);
    assert!(text.lines().next().unwrap().contains("RunStarted"), "{text}");
    assert!(
        text.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("run r1 closed: FAILED"),
        "{text}"
    );

    let history = json(server.ry(&["run", "history", "r1", "-o", "json"]));
    let events = history.as_array().unwrap();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["event_id"], i as u64 + 1);
    }
    assert_eq!(events[0]["event_type"], "RunStarted");
    let human = ok(server.ry(&["run", "history", "r1", "--from", "2"]));
    assert!(
        human.lines().next().unwrap().trim_start().starts_with("2  "),
        "{human}"
    );
    let followed = ok(server.ry(&["run", "history", "r1", "--follow"]));
    assert_eq!(followed.lines().count(), events.len());

    let described = json(server.ry(&["run", "describe", "r1", "-o", "json"]));
    assert_eq!(described["run"]["status"], "FAILED");
    assert_eq!(described["run"]["steps"][0]["notes"], "planned");
    assert_eq!(described["definition"]["id"], "demo");

    // list, filters and paging.
    ok(server.ry(&["run", "start", "demo", "--goal", "second", "--run-id", "r2"]));
    let all = ok(server.ry(&["run", "list"]));
    assert!(all.contains("r1") && all.contains("r2"), "{all}");
    let failed_only = json(server.ry(&["run", "list", "--status", "failed", "-o", "json"]));
    assert_eq!(failed_only["runs"].as_array().unwrap().len(), 1);
    let page = ok(server.ry(&["run", "list", "--limit", "1"]));
    assert!(page.contains("next page: --page-token "), "{page}");
    let future = ok(server.ry(&["run", "list", "--since", "2999-01-01T00:00:00Z"]));
    assert_eq!(future.trim(), "no runs");

    ok(server.ry(&["run", "cancel", "r2", "--reason", "enough"]));
    let r2 = json(server.ry(&["run", "describe", "r2", "-o", "json"]));
    assert_eq!(r2["run"]["status"], "CANCELED");

    let queue = ok(server.ry(&["queue", "describe", "default"]));
    assert!(queue.contains("t-worker"), "{queue}");

    assert!(server.stop().success());
}

#[test]
fn start_wait_follows_the_run_to_completion() {
    let (_sandbox, server) = start_server();
    let url = server.url.clone();
    let waiter = std::thread::spawn(move || {
        Command::new(BIN)
            .args([
                "run", "start", "demo", "--goal", "g", "--run-id", "w1", "--wait", "--server", &url,
            ])
            .output()
            .unwrap()
    });
    for _ in 0..2 {
        let (token, _) = poll_token(&server);
        ok(server.ry(&["task", "complete", &token, "--notes", "done"]));
    }
    let out = waiter.join().unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).trim_end().ends_with("run w1 closed: COMPLETED"),
        "{}",
        stdout(&out)
    );
}

/// `railyard server --config railyard.toml`: the file's [server] section is used
/// (relative paths from the file's directory), a flag wins over it, and a bad value
/// stops the server with the key and the file named.
#[test]
fn server_reads_its_config_file() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let sandbox = Sandbox::new();
    sandbox.workflow(
        "demo.json",
        r#"{"id":"demo","version":"1","name":"Demo","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
    );
    let config = sandbox.path("railyard.toml");
    std::fs::write(
        &config,
        "[server]\ndata_dir = \"data\"\nworkflows = \"workflows\"\nlisten = \"127.0.0.1:1\"\n\
         http_listen = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let server = |extra: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.arg("server").arg("--config").arg(&config).args(extra);
        for var in [
            "RAILYARD_DATA_DIR",
            "RAILYARD_LISTEN",
            "RAILYARD_HTTP_LISTEN",
            "RAILYARD_WORKFLOWS",
        ] {
            cmd.env_remove(var);
        }
        cmd
    };
    let mut child = server(&["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
            .to_string()
    };
    assert_eq!(
        field("data="),
        sandbox.path("data").display().to_string(),
        "{line}"
    );
    assert_eq!(
        field("workflows="),
        sandbox.path("workflows").display().to_string()
    );
    assert_ne!(field("grpc="), "127.0.0.1:1", "the flag wins over the file");
    let listed = ok(ry(&format!("http://{}", field("grpc=")), &["workflow", "list"]));
    assert!(listed.contains("demo"), "{listed}");
    child.kill().unwrap();
    child.wait().unwrap();

    std::fs::write(&config, "[server]\nlisten = \"nowhere\"\n").unwrap();
    let out = server(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("railyard.toml") && err.contains("`server.listen`"),
        "{err}"
    );
}

#[test]
fn control_characters_in_stored_fields_are_escaped_in_human_output() {
    let (_sandbox, server) = start_server();
    let goal = "\u{1b}[2J\u{1b}[H\nstatus    COMPLETED\r";
    ok(server.ry(&["run", "start", "demo", "--goal", goal, "--run-id", "spoof"]));
    for args in [
        &["run", "describe", "spoof"][..],
        &["run", "list"][..],
        &["run", "history", "spoof"][..],
    ] {
        let out = ok(server.ry(args));
        assert!(
            !out.chars().any(|c| c.is_control() && c != '\n'),
            "{args:?} printed a control character: {out:?}"
        );
        assert!(
            !out.lines()
                .any(|l| l.trim_start().starts_with("status    COMPLETED")),
            "{args:?} printed the goal's fake line: {out}"
        );
    }
    let described = ok(server.ry(&["run", "describe", "spoof"]));
    assert!(described.contains("\\u{1b}[2J"), "{described}");
    // JSON output keeps the goal exactly.
    let j = json(server.ry(&["run", "describe", "spoof", "-o", "json"]));
    assert_eq!(j["run"]["goal"], goal);
}

/// Completions and man pages come from the binary itself, with no server.
#[test]
fn completion_and_man_pages_are_generated_from_the_binary() {
    let run = |args: &[&str]| Command::new(BIN).args(args).output().expect("run railyard");

    let bash = ok(run(&["completion", "bash"]));
    assert!(bash.contains("_railyard()"), "{bash}");
    for name in ["server", "worker", "schedule", "backfill", "--namespace"] {
        assert!(bash.contains(name), "{name} missing from the bash completion");
    }
    let fish = ok(run(&["completion", "fish"]));
    assert!(fish.contains("complete -c railyard"), "{fish}");
    let bad = run(&["completion", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));

    let page = ok(run(&["man"]));
    assert!(page.contains(".TH railyard 1"), "{page}");
    assert!(page.contains(".SH NAME\nrailyard"), "{page}");
    assert!(page.contains("schedule"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    ok(run(&["man", "--dir", dir.path().to_str().unwrap()]));
    let start = std::fs::read_to_string(dir.path().join("railyard-run-start.1")).unwrap();
    assert!(start.contains(".TH railyard-run-start 1"), "{start}");
    assert!(start.contains("\\-\\-goal"), "{start}");
    // Where a man reader is installed, the page renders and names the binary.
    if let Ok(out) = Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(dir.path().join("railyard.1"))
        .env("MANWIDTH", "80")
        .output()
        && out.status.success()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("railyard"), "{text}");
    }
}

/// The page cache's size is a server setting: a bad value is refused naming the key
/// and the flag, and a server with a small cache serves.
#[test]
fn a_server_takes_its_cache_size_from_a_flag() {
    let (sandbox, _server) = start_server();
    let out = Command::new(BIN)
        .args(["server", "--cache-size-mib", "0", "--listen", "127.0.0.1:0"])
        .args(["--http-listen", "127.0.0.1:0", "--data-dir"])
        .arg(sandbox.path("other-data"))
        .output()
        .expect("run railyard server");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("server.cache_size_mib") && err.contains("--cache-size-mib"),
        "{err}"
    );

    let small = Sandbox::new();
    small.workflow(
        "demo.json",
        r#"{"id":"demo","version":"1","name":"Demo","steps":[{"id":"plan","title":"Plan","prompt":"Plan {{goal}}"}]}"#,
    );
    let server = small.server_with(&["--cache-size-mib", "1"]);
    let v = json(server.ry(&["run", "start", "demo", "--goal", "g", "-o", "json"]));
    let run_id = v["run_id"].as_str().unwrap();
    let run = json(server.ry(&["run", "describe", run_id, "-o", "json"]));
    assert_eq!(run["run"]["status"], "RUNNING", "{run}");
}
