//! The server on PostgreSQL (`railyard server --store postgres://...`), as processes:
//! a run a worker completed is all there after SIGKILL of the server and a restart on
//! the same database (it follows the killed one until its lease expires, then leads),
//! and the restarted server goes on serving; a second server on a database one
//! already writes to follows it, and leads once the first stops. Each test has a
//! database of its own on the server `RAILYARD_TEST_POSTGRES` names; without it the
//! tests skip, saying so.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

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

    // SIGKILL: no shutdown code runs. Its writer lease outlives it: a new server
    // follows the killed one (naming it) until the lease expires, then leads.
    let mut server = server;
    server.kill9();
    let killed = lease_holder(&db);
    let server = server.restart();
    let health = healthz(&server);
    assert_eq!(health["role"], "follower", "{health}");
    assert_eq!(
        health["leader"]["node"].as_str(),
        Some(killed.as_str()),
        "{health}"
    );
    // Standing in for waiting out the lease (30 s); the node then claims it.
    db.execute("UPDATE writer_lease SET expires_at = now()").unwrap();
    eventually(RUN_LIMIT, || leads(&server).then_some(()));
    assert_ne!(lease_holder(&db), killed);
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

/// A node's `/healthz`: a follower's names its role and the leader; a leader's has
/// no role.
fn healthz(server: &ServerProcess) -> serde_json::Value {
    let (_, body) = crate::cluster::http_get(&server.http_addr, "/healthz").expect("healthz answers");
    serde_json::from_str(&body).expect("healthz is JSON")
}

/// Whether a node leads now (its `/healthz` answers without a role); `false` while
/// it changes role and its listeners are closed.
fn leads(server: &ServerProcess) -> bool {
    crate::cluster::role(server).as_deref() == Some("leader")
}

#[test]
fn a_second_server_on_the_same_database_follows_the_first_and_leads_once_it_stops() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("postgres::a_second_server_on_the_same_database_follows_the_first")
        );
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    sandbox.workflow("pg.json", WORKFLOW);
    let first = ServerProcess::start_on_store(db.url(), &sandbox.path("data"), &sandbox.path("workflows"));
    let node = lease_holder(&db);

    // The second follows the first, naming it, and forwards to it.
    let second = ServerProcess::start_on_store(db.url(), &sandbox.path("data"), &sandbox.path("workflows"));
    let health = healthz(&second);
    assert_eq!(health["role"], "follower", "{health}");
    assert_eq!(health["leader"]["node"].as_str(), Some(node.as_str()), "{health}");
    assert_eq!(lease_holder(&db), node, "a follower claims nothing");
    let api = Api::new(&second.url);
    let run = api.start("started through the follower");
    assert_eq!(Api::new(&first.url).status(&run), RunStatus::Running);
    drop(api);

    // SIGTERM: the first gives its lease up on the way out, so the second claims it
    // at its next try (a third of the 30 s lease), without waiting for it to expire.
    assert!(first.stop().success());
    eventually(RUN_LIMIT, || leads(&second).then_some(()));
    assert_ne!(lease_holder(&db), node);
    let api = Api::new(&second.url);
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
