//! Operating a server on PostgreSQL, as processes: `/healthz` names the node and
//! turns 503 with the cause when the database goes away, `/metrics` has the pool,
//! retries and the writer lease, and the logs name the node but never the password
//! of the connection string. Skipped, saying so, without `RAILYARD_TEST_POSTGRES`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};

use crate::support::*;

const PASSWORD: &str = "s3cret-never-shown";

/// A `railyard server` on `store` whose stderr goes to a file.
struct Logged {
    child: Child,
    http: String,
    log: std::path::PathBuf,
}

impl Logged {
    fn start(store: &str, sandbox: &Sandbox) -> Self {
        let log = sandbox.path("server.log");
        let mut child = Command::new(BIN)
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
            ])
            .args(["--store", store, "--keys-dir"])
            .arg(sandbox.path("keys"))
            .arg("--workflows")
            .arg(sandbox.path("workflows"))
            .env_remove("RAILYARD_AUTH")
            .env_remove("RAILYARD_STORE")
            .env_remove("RAILYARD_DATA_DIR")
            .env_remove("PGPASSWORD")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn railyard server");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        out.read_line(&mut line).expect("read listening line");
        assert!(line.starts_with("railyard server listening "), "{line:?}");
        assert!(!line.contains(PASSWORD), "{line}");
        let http = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http="))
            .expect("http address")
            .to_string();
        drain(out);
        Self { child, http, log }
    }

    /// `GET path`: the status code and the body.
    fn get(&self, path: &str) -> (u16, String) {
        let mut conn = TcpStream::connect(&self.http).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("read response");
        let code = response
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = response.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
        (code, body)
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `url` with a password in its user-info (the test cluster trusts local
/// connections, so any password is accepted, and none may be shown).
fn with_password(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (user, host) = rest.split_once('@').expect("a user in the URL");
    format!("{scheme}://{user}:{PASSWORD}@{host}")
}

#[test]
fn health_and_metrics_name_the_node_the_logs_never_the_password_and_a_lost_database_is_503() {
    let Some(url) = test_url() else {
        eprintln!("{}", skipped("postgres_ops::health_and_metrics_name_the_node"));
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.path("workflows")).unwrap();
    let server = Logged::start(&with_password(db.url()), &sandbox);
    let node = db
        .query_text("SELECT node FROM writer_lease WHERE id = 1")
        .unwrap()
        .expect("a lease row");

    let (code, body) = server.get("/healthz");
    assert_eq!(code, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["database"], "ok");
    assert_eq!(health["node"], node.as_str());
    assert_eq!(health["lease_held"], true);
    assert!(health["lease_epoch"].as_i64().unwrap_or(0) >= 1, "{body}");

    let (code, metrics) = server.get("/metrics");
    assert_eq!(code, 200);
    for line in [
        "railyard_db_pool_max 8".to_string(),
        "railyard_db_write_retries_total{cause=\"serialization\"} 0".into(),
        "railyard_db_write_retries_total{cause=\"deadlock\"} 0".into(),
        format!("railyard_db_lease_held{{node=\"{node}\"}} 1"),
        format!("railyard_db_claim_conflicts_total{{node=\"{node}\"}} 0"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    for family in [
        "railyard_db_pool_in_use",
        "railyard_db_pool_waiting",
        "railyard_db_lease_epoch",
        "railyard_db_lease_renewals_total",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(family)),
            "{family} in\n{metrics}"
        );
    }

    // The database goes away (dropped, its connections ended): unhealthy, saying why.
    drop(db);
    let (code, body) = eventually(Duration::from_secs(60), || {
        let (code, body) = server.get("/healthz");
        (code != 200).then_some((code, body))
    });
    assert_eq!(code, 503, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "unavailable");
    assert_eq!(health["database"], "unavailable");
    assert!(health["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
    assert!(!body.contains(PASSWORD));

    let logs = server.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("writer lease") && l.contains(&node)),
        "the logs name the node:\n{logs}"
    );
    assert!(!logs.contains(PASSWORD), "{logs}");
    assert!(logs.contains(":***@"), "the URL is shown redacted:\n{logs}");
}

#[test]
fn a_small_bench_on_postgres_completes_every_run_and_shows_the_store_without_its_password() {
    let Some(url) = test_url() else {
        eprintln!("{}", skipped("postgres_ops::a_small_bench_on_postgres"));
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let store = with_password(db.url());
    let out = Command::new(BIN)
        .args(["bench", "--store", &store])
        .args([
            "--runs",
            "20",
            "--workers",
            "2",
            "--starters",
            "2",
            "--connections",
            "2",
        ])
        .args(["--latency-runs", "5", "--timeout", "120", "-o", "json"])
        .env_remove("PGPASSWORD")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run railyard bench");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(PASSWORD));
    let v = json(out);
    assert_eq!(v["throughput"]["verified_completed"], 20, "{v}");
    assert_eq!(v["throughput"]["start_errors"], 0, "{v}");
    assert_eq!(v["latency"]["samples"], 5, "{v}");
    assert_eq!(v["latency"]["verified_completed"], 5, "{v}");
    let shown = v["settings"]["store"].as_str().unwrap_or_default();
    assert!(shown.starts_with("postgres://") && shown.contains(":***@"), "{v}");
    // The runs are in the database (the 25 measured, and those the latency phase
    // starts to time single RPCs).
    let runs: u64 = db
        .query_text("SELECT count(*) FROM runs")
        .unwrap()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(runs >= 25, "{runs} runs in the database");
}

#[test]
fn a_small_processes_bench_on_postgres_completes_every_run_without_showing_the_password() {
    let Some(url) = test_url() else {
        eprintln!("{}", skipped("postgres_ops::a_small_processes_bench_on_postgres"));
        return;
    };
    let sandbox = Sandbox::new();
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let store = with_password(db.url());
    let out = Command::new(BIN)
        .args(["bench", "--processes", "--store", &store])
        .args(["--runs", "20", "--workers", "2", "--worker-processes", "2"])
        .args(["--starters", "2", "--connections", "2", "--latency-runs", "5"])
        .args(["--timeout", "120", "-o", "json"])
        .env_remove("PGPASSWORD")
        .env("RUST_LOG", "warn")
        .env("TMPDIR", sandbox.dir.path())
        .output()
        .expect("run railyard bench --processes");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(PASSWORD));
    let v = json(out);
    assert_eq!(v["one_step"]["verified_completed"], 20, "{v}");
    assert_eq!(v["three_step_verified_completed"], 25, "{v}");
    assert!(
        v["floor"]["write_rpc_p50_ms"].as_f64().is_some_and(|f| f > 0.0),
        "{v}"
    );
    let shown = v["settings"]["store"].as_str().unwrap_or_default();
    assert!(shown.starts_with("postgres://") && shown.contains(":***@"), "{v}");
    let runs: u64 = db
        .query_text("SELECT count(*) FROM runs")
        .unwrap()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(runs >= 45, "{runs} runs in the database");
}
