//! A `railyard server --auth` process end to end: its bootstrap admin key makes a
//! client key and a worker key with `railyard key create`; a client command and a
//! `railyard worker` run a workflow with them; a wrong key, no key and a key of the
//! wrong role are refused with a one-line error; a revoked key stops working.

use std::time::Duration;

use crate::support::worker::WorkerProcess;
use crate::support::*;

const ONE: &str = r#"{"id":"one","version":"1","name":"One","taskQueue":"q1",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;
const SCRIPT: &str = r#"{"steps": {"a": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "done with auth"}}]}]}}"#;

/// `railyard ARGS --api-key KEY` against `server`.
fn ry_as(server: &ServerProcess, key: &str, args: &[&str]) -> std::process::Output {
    server.ry(&[args, &["--api-key", key]].concat())
}

/// The first line of a failed command's stderr, which must be its one error line.
fn error_line(o: std::process::Output) -> String {
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    let first = err.lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("error: "), "{err}");
    first
}

#[test]
fn a_server_with_auth_works_with_its_keys_and_refuses_the_rest() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let script = sandbox.path("one.script.json");
    std::fs::write(&script, SCRIPT).unwrap();
    let server = sandbox.server_with(&["--auth"]);
    let admin_key = std::fs::read_to_string(sandbox.path("data").join("admin.key"))
        .expect("the first start writes the admin key")
        .trim()
        .to_string();

    // The admin key makes a client key (printed alone on stdout) and a worker key.
    let client_key = ok(ry_as(&server, &admin_key, &["key", "create", "--role", "client"]));
    let client_key = client_key.trim().to_string();
    assert!(
        client_key.starts_with("ry_") && !client_key.contains('\n'),
        "{client_key}"
    );
    let created = json(ry_as(
        &server,
        &admin_key,
        &[
            "key",
            "create",
            "--role",
            "worker",
            "--queue",
            "q1",
            "--expires",
            "90d",
            "-o",
            "json",
        ],
    ));
    let worker_key = created["api_key"].as_str().unwrap().to_string();
    let worker_id = created["key_id"].as_str().unwrap().to_string();
    assert_eq!(created["role"], "worker");
    assert_eq!(created["task_queues"], serde_json::json!(["q1"]));
    assert!(created["expire_time"].is_string(), "{created}");

    // A client command and a worker with their keys run a workflow to the end.
    let started = json(ry_as(
        &server,
        &client_key,
        &["run", "start", "one", "--goal", "g", "-o", "json"],
    ));
    let run_id = started["run_id"].as_str().unwrap().to_string();
    // The worker reads its key from a file, so the key is not in its command line.
    let key_file = sandbox.path("worker.key");
    std::fs::write(&key_file, format!("{worker_key}\n")).unwrap();
    let worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "authed-worker",
        &[
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--queue",
            "q1",
            "--api-key-file",
            key_file.to_str().unwrap(),
        ],
        &[],
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", worker.child.id())).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(&worker_key[20..]),
        "the key is in the worker's command line"
    );
    eventually(Duration::from_secs(60), || {
        let run = json(ry_as(
            &server,
            &client_key,
            &["run", "describe", &run_id, "-o", "json"],
        ));
        (run["run"]["status"] == "COMPLETED").then_some(())
    });

    // The keys are listed, without their secrets.
    let listed = ok(ry_as(&server, &admin_key, &["key", "list"]));
    assert!(
        listed.contains(&worker_id) && listed.contains("worker"),
        "{listed}"
    );
    assert!(!listed.contains(&worker_key[20..]), "{listed}");

    // No key, a wrong key and the wrong role: one clear line each, naming what is wrong.
    let line = error_line(server.ry(&["run", "list"]));
    assert!(line.starts_with("error: unauthenticated: no API key"), "{line}");
    let wrong = format!("ry_0123456789abcdef_{}", "0".repeat(64));
    let line = error_line(ry_as(&server, &wrong, &["run", "list"]));
    assert_eq!(
        line,
        "error: unauthenticated: unknown API key 0123456789abcdef (no such key, or a wrong secret)"
    );
    let line = error_line(ry_as(&server, &worker_key, &["run", "list"]));
    assert_eq!(
        line,
        format!("error: permission denied: API key {worker_id} has role worker, which may not list runs")
    );
    let line = error_line(ry_as(&server, &client_key, &["key", "list"]));
    assert!(line.contains("which may not manage API keys"), "{line}");

    // Namespaces, by the admin key; a key of one is refused in another.
    let made = ok(ry_as(
        &server,
        &admin_key,
        &["namespace", "create", "team", "--description", "a team"],
    ));
    assert!(
        made.starts_with("namespace    team\ndescription  a team\n"),
        "{made}"
    );
    let listed = ok(ry_as(&server, &admin_key, &["namespace", "list"]));
    assert!(
        listed.contains("\ndefault ") && listed.contains("\nteam "),
        "{listed}"
    );
    let team_key = ok(ry_as(
        &server,
        &admin_key,
        &["key", "create", "-n", "team", "--role", "client"],
    ));
    let team_key = team_key.trim();
    ok(ry_as(&server, team_key, &["run", "list", "-n", "team"]));
    let line = error_line(ry_as(&server, team_key, &["run", "list"]));
    assert!(
        line.ends_with("is for namespace \"team\", not \"default\""),
        "{line}"
    );
    let line = error_line(ry_as(&server, &client_key, &["namespace", "create", "mine"]));
    assert!(line.contains("which may not manage namespaces"), "{line}");
    ok(ry_as(&server, &admin_key, &["namespace", "delete", "team"]));

    // Revoked: refused from the next request on.
    let revoked = ok(ry_as(&server, &admin_key, &["key", "revoke", &worker_key]));
    assert!(
        revoked.starts_with(&format!("revoked API key {worker_id} at ")),
        "{revoked}"
    );
    let line = error_line(ry_as(
        &server,
        &worker_key,
        &["task", "poll", "--queue", "q1", "--wait", "1"],
    ));
    assert!(
        line.contains(&format!("API key {worker_id} was revoked at")),
        "{line}"
    );
}

#[test]
fn a_server_on_a_network_address_without_auth_does_not_start() {
    let sandbox = Sandbox::new();
    let out = std::process::Command::new(BIN)
        .args(["server", "--listen", "0.0.0.0:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(sandbox.path("data"))
        .arg("--workflows")
        .arg(sandbox.path("workflows"))
        .env_remove("RAILYARD_AUTH")
        .output()
        .expect("run railyard server");
    let line = error_line(out);
    assert!(
        line.contains("refusing to listen on 0.0.0.0:0 without auth") && line.contains("--insecure"),
        "{line}"
    );
}

#[test]
fn only_an_admin_of_every_namespace_may_export_the_store_through_the_server() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let server = sandbox.server_with(&["--auth"]);
    let admin_key = std::fs::read_to_string(sandbox.path("data").join("admin.key"))
        .expect("the first start writes the admin key")
        .trim()
        .to_string();
    let ns_admin = ok(ry_as(
        &server,
        &admin_key,
        &["key", "create", "--role", "admin", "-n", "default"],
    ));
    let client = ok(ry_as(&server, &admin_key, &["key", "create", "--role", "client"]));
    for key in [ns_admin.trim(), client.trim()] {
        let line = error_line(ry_as(&server, key, &["store", "export", "--from-server"]));
        assert!(line.contains("permission denied"), "{line}");
    }
    let line = error_line(server.ry(&["store", "export", "--from-server"]));
    assert!(
        line.contains("unauthenticated") || line.contains("API key"),
        "{line}"
    );

    let exported = ry_as(
        &server,
        &admin_key,
        &["store", "export", "--from-server", "-o", "json"],
    );
    assert!(exported.status.success(), "{}", stderr(&exported));
    let dump = stdout(&exported);
    assert!(
        dump.starts_with("{\"format\":\"railyard-dump\""),
        "{}",
        &dump[..dump.len().min(200)]
    );
    let summary: serde_json::Value =
        serde_json::from_str(stderr(&exported).lines().last().unwrap_or_default()).unwrap();
    assert_eq!(summary["dump_bytes"].as_u64(), Some(dump.len() as u64));
    assert!(
        summary["tables"]["api_keys"]["rows"].as_u64() >= Some(3),
        "{summary}"
    );
}

/// What a step's `bash` writes of its parent's command line.
const PEEK: &str = r#"{"steps": {"a": [
  {"tool_calls": [{"name": "bash", "input": {"command": "tr '\\0' ' ' < /proc/$PPID/cmdline > parent-cmdline.txt"}}]},
  {"tool_calls": [{"name": "complete_step", "input": {"notes": "looked"}}]}]}}"#;

#[test]
fn bash_does_not_find_the_workers_api_key_in_its_command_line() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let script = sandbox.path("peek.script.json");
    std::fs::write(&script, PEEK).unwrap();
    let server = sandbox.server_with(&["--auth"]);
    let admin_key = std::fs::read_to_string(sandbox.path("data").join("admin.key"))
        .expect("the first start writes the admin key")
        .trim()
        .to_string();
    let worker_key = ok(ry_as(
        &server,
        &admin_key,
        &["key", "create", "--role", "worker", "--queue", "q1"],
    ))
    .trim()
    .to_string();
    let client_key = ok(ry_as(&server, &admin_key, &["key", "create", "--role", "client"]))
        .trim()
        .to_string();
    let worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "cmdline-worker",
        &[
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--queue",
            "q1",
            "--api-key",
            &worker_key,
        ],
        &[],
    );
    let started = json(ry_as(
        &server,
        &client_key,
        &["run", "start", "one", "--goal", "g", "-o", "json"],
    ));
    let run_id = started["run_id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(60), || {
        let run = json(ry_as(
            &server,
            &client_key,
            &["run", "describe", &run_id, "-o", "json"],
        ));
        (run["run"]["status"] == "COMPLETED").then_some(())
    });
    let secret = &worker_key[20..];
    let seen = std::fs::read_to_string(sandbox.path("workspace").join(&run_id).join("parent-cmdline.txt"))
        .expect("bash wrote its parent's command line");
    assert!(seen.contains("--queue q1 --api-key"), "{seen}");
    assert!(!seen.contains(secret), "bash read the worker's key: {seen}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", worker.child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(secret));
}
