//! The client commands against a real `railyard server` process: output, exit codes,
//! and error lines. Needs a working server (`RunningServer::start`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_railyard");

/// A server process on free ports, stopped with SIGTERM when dropped.
struct Server {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workflows = dir.path().join("workflows");
        std::fs::create_dir_all(&workflows).unwrap();
        std::fs::write(
            workflows.join("demo.json"),
            r#"{"id":"demo","version":"1","name":"Demo","description":"two steps","steps":[
                {"id":"plan","title":"Plan","prompt":"Plan {{goal}} in {{context.lang}}"},
                {"id":"write","title":"Write","prompt":"Write it"}]}"#,
        )
        .unwrap();
        std::fs::write(workflows.join("broken.json"), r#"{"id":"broken","steps":3}"#).unwrap();
        let mut child = Command::new(BIN)
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--workflows")
            .arg(&workflows)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("railyard server listening "), "{line:?}");
        let grpc = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("grpc="))
            .unwrap();
        Self {
            child,
            url: format!("http://{grpc}"),
            _dir: dir,
        }
    }

    fn ry(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .args(["--server", &self.url])
            .env_remove("RAILYARD_NAMESPACE")
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    }

    fn stop(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "command failed: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

fn json(o: Output) -> serde_json::Value {
    serde_json::from_str(&ok(o)).unwrap()
}

fn poll_token(server: &Server) -> (String, serde_json::Value) {
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
    let server = Server::start();

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
    let server = Server::start();
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
