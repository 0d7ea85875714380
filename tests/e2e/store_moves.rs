//! `railyard store export` / `import` as processes: a running redb server's store
//! exported through the server and imported into a new data directory, whose
//! server then shows the same histories; an import into a store in use refused; the
//! memory of an export and an import of large checkpoints bounded well below the
//! dump's size; and (with `RAILYARD_TEST_POSTGRES`) redb -> PostgreSQL -> redb.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use railyard_store::Backend;
use railyard_store::dump::testing::generate_runs;
use railyard_store::redb_backend::RedbBackend;
use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};
use serde_json::Value;

use crate::support::*;

const WORKFLOW: &str = r#"{"id": "mv", "version": "1", "name": "Moved", "taskQueue": "mv",
  "steps": [{"id": "one", "title": "One", "prompt": "one {{goal}}"}]}"#;

/// `railyard store ARGS` with stdin from `input` and stdout to `output` (files), and
/// none of the store's environment variables.
fn store_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("store")
        .args(args)
        .env_remove("RAILYARD_STORE")
        .env_remove("RAILYARD_DATA_DIR")
        .env_remove("RAILYARD_SERVER_CONFIG")
        .env("RUST_LOG", "warn");
    c
}

/// Exports `store_flag` (`--data-dir DIR` or `--store URL`) into the file `to`.
fn export(store_flag: &[&str], to: &std::path::Path) -> Output {
    let file = std::fs::File::create(to).unwrap();
    store_cmd(&["export", "-o", "json"])
        .args(store_flag)
        .stdout(file)
        .output()
        .unwrap()
}

/// Imports the file `from` into `store_flag`.
fn import(store_flag: &[&str], from: &std::path::Path, more: &[&str]) -> Output {
    let file = std::fs::File::open(from).unwrap();
    store_cmd(&["import", "-o", "json"])
        .args(store_flag)
        .args(more)
        .stdin(file)
        .output()
        .unwrap()
}

/// The JSON summary a successful command printed on stderr.
fn summary(o: &Output) -> Value {
    assert!(o.status.success(), "failed: {}", stderr(o));
    let text = stderr(o);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no summary in {text}"));
    serde_json::from_str(line).unwrap()
}

fn rows(v: &Value, table: &str) -> u64 {
    v["tables"][table]["rows"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {table} in {v}"))
}

/// Every run's history, as `railyard run history -o json` prints it.
fn histories(server: &ServerProcess, runs: &[String]) -> Vec<Value> {
    runs.iter()
        .map(|r| json(server.ry(&["run", "history", r, "-o", "json"])))
        .collect()
}

fn start_runs(server: &ServerProcess, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let v = json(server.ry(&["run", "start", "mv", "--goal", &format!("goal {i}"), "-o", "json"]));
            v["run_id"].as_str().expect("run_id").to_string()
        })
        .collect()
}

#[test]
fn a_running_redb_servers_store_moves_to_a_new_data_dir_with_the_same_histories() {
    let sandbox = Sandbox::new();
    sandbox.workflow("mv.json", WORKFLOW);
    let server = sandbox.server();
    let runs = start_runs(&server, 5);
    let before = histories(&server, &runs);
    let data = sandbox.path("data");
    let data = data.to_str().unwrap();

    // The running server holds its file alone: a direct export is refused, saying
    // how; through the server, a snapshot read while it runs.
    let dump = sandbox.path("dump");
    let direct = export(&["--data-dir", data], &dump);
    assert!(!direct.status.success());
    assert!(
        stderr(&direct).contains("in use by a running server") && stderr(&direct).contains("--from-server"),
        "{}",
        stderr(&direct)
    );
    let exported = summary(&export(&["--from-server", "--server", &server.url], &dump));
    assert_eq!(rows(&exported, "runs"), 5, "{exported}");
    assert_eq!(exported["source_backend"], "redb");
    assert!(exported["peak_rss_kib"].as_u64().is_some(), "{exported}");
    assert_eq!(
        exported["dump_bytes"].as_u64(),
        Some(std::fs::metadata(&dump).unwrap().len())
    );

    // Its own data directory is in use: refused, saying so, and the server goes on.
    let refused = import(&["--data-dir", data], &dump, &["--replace"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("in use by another process"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(histories(&server, &runs), before);

    // Into a new directory; a second import is refused unless --replace.
    let moved = sandbox.path("moved");
    let moved_dir = moved.to_str().unwrap();
    let imported = summary(&import(&["--data-dir", moved_dir], &dump, &[]));
    assert_eq!(imported["tables"], exported["tables"]);
    assert_eq!(imported["sha256"], exported["sha256"]);
    let again = import(&["--store", &format!("redb:{moved_dir}")], &dump, &[]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("is not empty") && stderr(&again).contains("--replace"),
        "{}",
        stderr(&again)
    );
    summary(&import(&["--data-dir", moved_dir], &dump, &["--replace"]));
    // The human summary names every table.
    let file = std::fs::File::open(&dump).unwrap();
    let human = store_cmd(&["import", "--replace", "--data-dir", moved_dir])
        .stdin(file)
        .output()
        .unwrap();
    assert!(human.status.success(), "{}", stderr(&human));
    assert!(
        stderr(&human).contains("imported ") && stderr(&human).contains("hook_deliveries"),
        "{}",
        stderr(&human)
    );

    drop(server);
    // The server on the moved store shows the same histories. (Its task-token keys
    // are new: the dump holds the store, not the data directory's key files.)
    let moved_server = ServerProcess::start(&moved, &sandbox.path("workflows"), None);
    assert_eq!(histories(&moved_server, &runs), before);
}

#[test]
fn a_bad_dump_is_refused_naming_its_line_and_the_target_stays_empty() {
    let sandbox = Sandbox::new();
    let src = sandbox.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let backend = RedbBackend::open(&src).unwrap();
    generate_runs(&backend, "default", 20, 20).unwrap();
    drop(backend);
    let dump = sandbox.path("dump");
    summary(&export(&["--data-dir", src.to_str().unwrap()], &dump));
    let text = std::fs::read_to_string(&dump).unwrap();
    let bad = sandbox.path("bad");
    // The last row's value changed: the checksum no longer matches.
    let at = text.rfind("\"b\":\"").unwrap() + 5;
    let flipped = if &text[at..at + 1] == "A" { "B" } else { "A" };
    std::fs::write(&bad, format!("{}{flipped}{}", &text[..at], &text[at + 1..])).unwrap();
    let target = sandbox.path("target");
    let o = import(&["--data-dir", target.to_str().unwrap()], &bad, &[]);
    assert!(!o.status.success());
    let said = stderr(&o);
    assert!(
        said.contains("checksum mismatch") && said.contains("dump line") && said.contains("emptied again"),
        "{said}"
    );
    // Empty: a good import needs no --replace.
    summary(&import(&["--data-dir", target.to_str().unwrap()], &dump, &[]));
}

/// Value bytes of the large checkpoints, and how many.
const CHECKPOINT_BYTES: usize = 2 << 20;
const CHECKPOINTS: usize = 64;
/// The bound on either process's peak memory: well below the dump (about 170 MiB;
/// each process peaks near 60-70 MiB, most of it the debug binary itself).
const PEAK_LIMIT_KIB: u64 = 110 << 10;

#[test]
fn export_and_import_of_large_checkpoints_stay_in_bounded_memory() {
    let sandbox = Sandbox::new();
    let src = sandbox.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let backend = RedbBackend::open(&src).unwrap();
    generate_runs(&backend, "default", CHECKPOINTS, CHECKPOINTS).unwrap();
    // Bytes that do not repeat within a checkpoint (nothing along the way compresses,
    // but nothing should look like it could), made once; each checkpoint its own first bytes.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut bytes: Vec<u8> = Vec::with_capacity(CHECKPOINT_BYTES);
    while bytes.len() < CHECKPOINT_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    for i in 0..CHECKPOINTS {
        bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let digest = railyard_proto::checkpoint::full(&bytes);
        backend
            .write(&mut |tx| {
                tx.set_checkpoint(
                    &railyard_model::RunKey::new("default", format!("gen-{i:05}")),
                    railyard_store::CheckpointAt::Run,
                    Some((&bytes, &digest)),
                )
            })
            .unwrap();
    }
    drop(backend);

    // Piped straight from one process into the other: no file holds the dump.
    let mut exporter = store_cmd(&["export", "-o", "json", "--data-dir", src.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = exporter.stdout.take().unwrap();
    let target = sandbox.path("target");
    let importer = store_cmd(&["import", "-o", "json", "--data-dir", target.to_str().unwrap()])
        .stdin(pipe)
        .output()
        .unwrap();
    let exported = exporter.wait_with_output().unwrap();
    let (exported, imported) = (summary(&exported), summary(&importer));
    let dump_bytes = exported["dump_bytes"].as_u64().unwrap();
    assert!(dump_bytes > (CHECKPOINTS * CHECKPOINT_BYTES) as u64, "{exported}");
    assert_eq!(rows(&imported, "checkpoints"), CHECKPOINTS as u64);
    for (what, v) in [("export", &exported), ("import", &imported)] {
        let peak = v["peak_rss_kib"].as_u64().unwrap();
        eprintln!(
            "{what}: peak {} MiB for a dump of {} MiB",
            peak >> 10,
            dump_bytes >> 20
        );
        assert!(
            peak < PEAK_LIMIT_KIB,
            "{what} peaked at {peak} KiB; dump {dump_bytes} bytes"
        );
    }
    let _ = std::io::stderr().flush();
}

#[test]
fn a_store_moves_from_redb_to_postgres_and_back_through_the_cli() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("store_moves::a_store_moves_from_redb_to_postgres_and_back_through_the_cli")
        );
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    sandbox.workflow("mv.json", WORKFLOW);
    let server = sandbox.server();
    let runs = start_runs(&server, 4);
    let before = histories(&server, &runs);
    let dump = sandbox.path("dump");
    summary(&export(&["--from-server", "--server", &server.url], &dump));
    drop(server);

    let into_pg = summary(&import(&["--store", db.url()], &dump, &[]));
    assert_eq!(rows(&into_pg, "runs"), 4);
    let pg_server =
        ServerProcess::start_on_store(db.url(), &sandbox.path("keys"), &sandbox.path("workflows"));
    assert_eq!(histories(&pg_server, &runs), before);
    // A server writes to the database: an import is refused by its writer lease.
    let refused = import(&["--store", db.url()], &dump, &["--replace"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("another railyard server writes to this database"),
        "{}",
        stderr(&refused)
    );
    // An export reads beside it.
    let back_dump = sandbox.path("back");
    let from_pg = summary(&export(&["--store", db.url()], &back_dump));
    assert_eq!(from_pg["source_backend"], "postgres");
    assert_eq!(from_pg["tables"], into_pg["tables"]);
    drop(pg_server);

    let back = sandbox.path("back-data");
    summary(&import(&["--data-dir", back.to_str().unwrap()], &back_dump, &[]));
    let back_server = ServerProcess::start(&back, &sandbox.path("workflows"), None);
    assert_eq!(histories(&back_server, &runs), before);
}
