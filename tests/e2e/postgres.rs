//! The server on PostgreSQL (`railyard server --store postgres://...`), as processes:
//! a run a worker completed is all there after SIGKILL of the server and a restart on
//! the same database, and the restarted server goes on serving; a second server on
//! a database one already writes to exits, naming the first's node. Each test has a
//! database of its own on the server `RAILYARD_TEST_POSTGRES` names; without it the
//! tests skip, saying so.

use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use railyard_proto::v1::{HistoryEvent, RunStatus};
use railyard_sdk::Client;
use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};

use crate::support::worker::WorkerProcess;
use crate::support::*;

const RUN_LIMIT: Duration = Duration::from_secs(90);

const WORKFLOW: &str = r#"{"id": "pg", "version": "1", "name": "On Postgres", "taskQueue": "pg",
  "steps": [{"id": "one", "title": "One", "prompt": "one"},
            {"id": "two", "title": "Two", "prompt": "two"}]}"#;

const SCRIPT: &str = r#"{"steps": {
  "one": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "one done"}}]}],
  "two": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "two done"}}]}]}}"#;

/// A client on its own small runtime.
struct Api {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Api {
    fn new(url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(Client::connect(url)).expect("client");
        Self { rt, client }
    }

    fn start(&self, goal: &str) -> String {
        self.rt
            .block_on(self.client.start_run("default", "pg", goal, HashMap::new()))
            .expect("start run")
    }

    fn status(&self, run_id: &str) -> RunStatus {
        let run = self
            .rt
            .block_on(self.client.describe_run("default", run_id))
            .expect("describe")
            .run
            .expect("run");
        RunStatus::try_from(run.status).expect("status")
    }

    fn wait_closed(&self, run_id: &str) -> RunStatus {
        eventually(RUN_LIMIT, || {
            let s = self.status(run_id);
            (s != RunStatus::Running).then_some(s)
        })
    }

    fn history(&self, run_id: &str) -> Vec<HistoryEvent> {
        self.rt
            .block_on(self.client.full_history("default", run_id))
            .expect("history")
    }
}

fn worker(sandbox: &Sandbox, server: &ServerProcess, identity: &str) -> WorkerProcess {
    let script = sandbox.path("pg.script.json");
    std::fs::write(&script, SCRIPT).unwrap();
    let script = script.to_str().unwrap().to_string();
    WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        identity,
        &["--provider", "scripted", "--script", &script, "--queue", "pg"],
        &[],
    )
}

fn types(history: &[HistoryEvent]) -> Vec<(u64, String)> {
    history
        .iter()
        .map(|e| (e.event_id, e.event_type.clone()))
        .collect()
}

#[test]
fn a_completed_run_is_all_there_after_sigkill_and_a_restart_on_the_same_database() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("postgres::a_completed_run_is_all_there_after_sigkill")
        );
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    sandbox.workflow("pg.json", WORKFLOW);
    let server = ServerProcess::start_on_store(db.url(), &sandbox.path("data"), &sandbox.path("workflows"));
    // The task-token keys are in the database, the runs too: nothing local.
    assert!(!sandbox.path("data").join("keys.json").exists());
    assert!(!sandbox.path("data").join("railyard.redb").exists());

    let mut first_worker = worker(&sandbox, &server, "pg-worker");
    let api = Api::new(&server.url);
    let run = api.start("before the crash");
    assert_eq!(api.wait_closed(&run), RunStatus::Completed);
    let before = api.history(&run);
    let kinds = types(&before);
    assert_eq!(kinds.first().map(|k| k.1.as_str()), Some("RunStarted"));
    assert_eq!(kinds.last().map(|k| k.1.as_str()), Some("RunCompleted"));
    assert_eq!(
        kinds.iter().filter(|k| k.1 == "StepCompleted").count(),
        2,
        "{kinds:?}"
    );
    first_worker.kill9();
    drop(api);

    // SIGKILL: no shutdown code runs. Its writer lease outlives it: a new server is
    // refused, naming the killed one's node, until the lease expires.
    let mut server = server;
    server.kill9();
    let killed = lease_holder(&db);
    let (ok, said) = refused(db.url(), &sandbox);
    assert!(!ok && said.contains(&format!("node {killed}")), "{said}");
    // Standing in for waiting out the lease (30 s); then the next server opens the
    // same database.
    db.execute("UPDATE writer_lease SET expires_at = now()").unwrap();
    let server = server.restart();
    let api = Api::new(&server.url);
    assert_eq!(api.status(&run), RunStatus::Completed);
    let after = api.history(&run);
    assert_eq!(types(&after), kinds);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b.attributes_json, &b.identity, b.time_unix_ms),
            (&a.attributes_json, &a.identity, a.time_unix_ms),
            "event {}",
            b.event_id
        );
    }

    // And it goes on serving: a new run, a new worker.
    let _second_worker = worker(&sandbox, &server, "pg-worker-2");
    let next = api.start("after the crash");
    assert_eq!(api.wait_closed(&next), RunStatus::Completed);
}

/// The node holding the database's writer lease.
fn lease_holder(db: &TestDatabase) -> String {
    db.query_text("SELECT node FROM writer_lease WHERE id = 1")
        .unwrap()
        .expect("a lease row")
}

/// Starts `railyard server` on `store` and waits (bounded) for it to exit: whether
/// it exited with success, and what it said on stderr. A server that starts instead
/// is killed and fails the test.
fn refused(store: &str, sandbox: &Sandbox) -> (bool, String) {
    let keys = sandbox.path("refused-keys");
    let mut child = Command::new(BIN)
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(["--store", store, "--keys-dir"])
        .arg(&keys)
        .arg("--workflows")
        .arg(sandbox.path("workflows"))
        .env_remove("RAILYARD_AUTH")
        .env_remove("RAILYARD_STORE")
        .env_remove("RAILYARD_DATA_DIR")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn railyard server");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second server on the same database did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut said = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut said)
        .expect("read stderr");
    (status.success(), said)
}

#[test]
fn a_second_server_on_the_same_database_exits_naming_the_first_and_a_stopped_one_lets_the_next_in() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("postgres::a_second_server_on_the_same_database_exits")
        );
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    sandbox.workflow("pg.json", WORKFLOW);
    let first = ServerProcess::start_on_store(db.url(), &sandbox.path("data"), &sandbox.path("workflows"));
    let node = lease_holder(&db);

    let (ok, said) = refused(db.url(), &sandbox);
    assert!(!ok, "the second server exits with an error: {said}");
    assert!(
        said.contains("another railyard server writes to this database")
            && said.contains(&format!("node {node}"))
            && said.contains("stop it or wait"),
        "{said}"
    );
    // The first goes on serving.
    let api = Api::new(&first.url);
    let run = api.start("the first still writes");
    assert_eq!(api.status(&run), RunStatus::Running);
    drop(api);

    // SIGTERM: the first gives its lease up on the way out, so the next starts at
    // once (with a 30 s lease, a refusal here would be the lease not released).
    assert!(first.stop().success());
    let next = ServerProcess::start_on_store(db.url(), &sandbox.path("data"), &sandbox.path("workflows"));
    assert_ne!(lease_holder(&db), node);
    let api = Api::new(&next.url);
    assert_eq!(api.status(&run), RunStatus::Running);
}

/// `railyard task poll` on queue `pg`: the task token.
fn poll(server: &ServerProcess) -> String {
    let task = json(ry(
        &server.url,
        &[
            "task", "poll", "--queue", "pg", "--wait", "30", "--output", "json",
        ],
    ));
    task["task_token"].as_str().expect("a task token").to_string()
}

/// The key id a task token names (its payload is plain base64 JSON).
fn token_kid(token: &str) -> String {
    use base64::Engine;
    let payload = token.split('.').next().unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("a token payload");
    let claims: serde_json::Value = serde_json::from_slice(&bytes).expect("token claims");
    claims["kid"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_task_token_one_server_signed_completes_on_another_and_survives_a_key_rotation() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("postgres::a_task_token_one_server_signed_completes_on_another")
        );
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    sandbox.workflow("pg.json", WORKFLOW);
    // Each server has a local directory of its own: they share no file.
    let first = ServerProcess::start_on_store(db.url(), &sandbox.path("a"), &sandbox.path("workflows"));
    let run = Api::new(&first.url).start("tokens across servers");
    let one = poll(&first);
    assert_eq!(token_kid(&one), "k1");
    assert!(first.stop().success());

    let second = ServerProcess::start_on_store(db.url(), &sandbox.path("b"), &sandbox.path("workflows"));
    let rotated = Command::new(BIN)
        .args(["server", "rotate-token-key", "--store", db.url()])
        .env_remove("RAILYARD_STORE")
        .env_remove("RAILYARD_SERVER_CONFIG")
        .output()
        .expect("run railyard");
    let said = ok(rotated);
    assert!(
        said.contains("added task-token key k2") && said.contains("all 2 keys"),
        "{said}"
    );
    // The token the first server signed, before the rotation, completes here.
    ok(ry(
        &second.url,
        &["task", "complete", &one, "--notes", "one done"],
    ));
    assert!(second.stop().success());

    // A server started after the rotation signs with the new key; its token
    // completes the run.
    let third = ServerProcess::start_on_store(db.url(), &sandbox.path("c"), &sandbox.path("workflows"));
    let two = poll(&third);
    assert_eq!(token_kid(&two), "k2");
    ok(ry(&third.url, &["task", "complete", &two, "--notes", "two done"]));
    let api = Api::new(&third.url);
    assert_eq!(api.wait_closed(&run), RunStatus::Completed);
    for dir in ["a", "b", "c"] {
        assert!(!sandbox.path(dir).join("keys.json").exists(), "{dir}");
    }
}
