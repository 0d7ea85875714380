//! Fixtures shared by the integration tests: a server on free loopback ports with a
//! client connected to it, its `/metrics` text, and the backend the suite runs on.
//!
//! The suite runs on redb by default. With `RAILYARD_TEST_BACKEND=postgres` (and
//! `RAILYARD_TEST_POSTGRES` naming a database) the same test binary runs every test
//! on PostgreSQL instead: [`start`] serves a fresh schema for each data directory (the
//! same schema again when a test restarts its server on that directory), and the
//! tests that only make sense on redb say they skipped ([`redb_only`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use railyard_sdk::Client;
use railyard_server::{RunningServer, ServerConfig};
use railyard_store::Store;
use railyard_store_postgres::testing::{TEST_DATABASE_VAR, TestSchema, test_url};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The environment variable choosing the suite's backend: `redb` (or unset) or
/// `postgres`.
pub const BACKEND_VAR: &str = "RAILYARD_TEST_BACKEND";

/// The backend this run of the suite serves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Redb,
    Postgres,
}

/// The backend [`BACKEND_VAR`] chose. Postgres without a database to run on is a
/// mistake of whoever ran the suite, not a skip: it panics saying so.
pub fn backend() -> Backend {
    static CHOSEN: OnceLock<Backend> = OnceLock::new();
    *CHOSEN.get_or_init(|| match std::env::var(BACKEND_VAR).as_deref() {
        Err(_) | Ok("") | Ok("redb") => Backend::Redb,
        Ok("postgres") => {
            assert!(
                test_url().is_some(),
                "{BACKEND_VAR}=postgres needs {TEST_DATABASE_VAR} (a postgres:// URL); source .ci/postgres.sh"
            );
            eprintln!("the integration suite runs on PostgreSQL");
            Backend::Postgres
        }
        Ok(other) => panic!("{BACKEND_VAR}={other:?}: expected redb or postgres"),
    })
}

/// Whether a test that only makes sense on redb (its files, its faults) runs: on
/// Postgres it says that `test` skipped, and why.
pub fn redb_only(test: &str, why: &str) -> bool {
    let on_redb = backend() == Backend::Redb;
    if !on_redb {
        eprintln!("skipped {test} on PostgreSQL: {why}");
    }
    on_redb
}

/// The Postgres schemas of the data directories the tests started servers on. A
/// schema lives as long as its directory: each start drops those whose directory
/// is gone, and the rest go when the test process exits.
fn schemas() -> &'static Mutex<HashMap<PathBuf, Arc<TestSchema>>> {
    static SCHEMAS: OnceLock<Mutex<HashMap<PathBuf, Arc<TestSchema>>>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        extern "C" fn drop_all() {
            if let Some(all) = SCHEMAS.get() {
                let left: Vec<_> = all.lock().map(|mut m| m.drain().collect()).unwrap_or_default();
                drop(left);
            }
        }
        // SAFETY: registers a plain function with no arguments, run once at exit.
        unsafe { libc::atexit(drop_all) };
        Mutex::new(HashMap::new())
    })
}

/// The schema for `data_dir` (made at its first use, with the directory: a
/// directory that does not exist is taken for one a finished test removed).
fn schema_for(data_dir: &Path) -> Arc<TestSchema> {
    let url = test_url().expect("checked by backend()");
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(data_dir)
        .unwrap();
    let gone: Vec<Arc<TestSchema>>;
    let schema = {
        let mut all = schemas().lock().unwrap();
        let dead: Vec<PathBuf> = all.keys().filter(|p| !p.exists()).cloned().collect();
        gone = dead.iter().filter_map(|p| all.remove(p)).collect();
        all.entry(data_dir.to_path_buf())
            .or_insert_with(|| Arc::new(TestSchema::create(&url).unwrap()))
            .clone()
    };
    // Dropped outside the lock: dropping a schema is a round trip to the database.
    drop(gone);
    schema
}

/// The store a server on `data_dir` serves on this run's backend: the redb file in
/// it, or a new backend on its Postgres schema. On Postgres a store takes the
/// database's writer lease: only one may be open (and its server running) at once.
pub async fn store_for(data_dir: &Path) -> Store {
    match backend() {
        Backend::Redb => Store::open(data_dir).unwrap(),
        Backend::Postgres => {
            let schema = schema_for(data_dir);
            // A restarted server opens again once the previous one let go of the
            // lease (it does as its store is dropped); the deadline only bounds a hang.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let s = schema.clone();
                match tokio::task::spawn_blocking(move || s.open()).await.unwrap() {
                    Ok(backend) => return Store::new(Arc::new(backend)),
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        eprintln!("opening the test schema again: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("cannot open the test schema: {e}"),
                }
            }
        }
    }
}

/// Starts a server with `config` as it is, except that unless `config` names a
/// store, it serves its data directory's on this run's backend.
pub async fn serve(mut config: ServerConfig) -> RunningServer {
    if config.store.is_none() && backend() == Backend::Postgres {
        config.store = Some(store_for(&config.data_dir).await);
    }
    RunningServer::start(config).await.unwrap()
}

/// Starts a server with `config` on free loopback ports (its listen addresses are
/// set here) and connects a client to its gRPC listener. Unless `config` names a
/// store, the server serves its data directory's on this run's backend.
pub async fn start(mut config: ServerConfig) -> (RunningServer, Client) {
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    let server = serve(config).await;
    let client = Client::connect(&format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    (server, client)
}

/// The whole answer (head and body) to `GET /metrics` over HTTP/1.0 on `http_addr`.
pub async fn metrics(http_addr: SocketAddr) -> String {
    let mut conn = tokio::net::TcpStream::connect(http_addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    text
}

/// A secrets policy declaring each of `names` for every namespace.
pub fn secrets(names: &[&str]) -> railyard_engine::secrets::SecretPolicy {
    railyard_engine::secrets::SecretPolicy::new(
        names
            .iter()
            .map(|n| (n.to_string(), vec!["*".to_string()]))
            .collect(),
    )
    .unwrap()
}
