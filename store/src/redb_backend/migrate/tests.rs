//! The migration on the checked-in layout-2 fixture (`store/tests/fixtures/layout2`,
//! written by the release before records) and on broken or unknown files.

use railyard_model::RunKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition, TableHandle};

use super::*;
use crate::Store;
use crate::records;
use crate::redb_backend::OpenError;
use crate::redb_backend::RedbBackend;
use railyard_model::run::{EventKind, Phase, RunStatus, Timer};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layout2/data/railyard.redb")
}

/// A copy of the fixture database in a temporary directory.
fn copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(), dir.path().join("railyard.redb")).unwrap();
    dir
}

fn schema(path: &Path) -> Option<u64> {
    let db = Database::create(path).unwrap();
    let tx = db.begin_read().unwrap();
    tx.open_table(META)
        .unwrap()
        .get("schema")
        .unwrap()
        .map(|v| v.value())
}

#[test]
fn the_layout_2_fixture_migrates_in_one_pass_and_reads_back() {
    let dir = copy();
    let path = dir.path().join("railyard.redb");
    assert_eq!(schema(&path), Some(LAYOUT_2));
    let done = {
        let db = Database::create(&path).unwrap();
        from_layout_2(&db).unwrap()
    };
    assert_eq!(
        (done.runs, done.timers, done.definitions),
        (5, 1, 2),
        "five runs, one backoff timer, two workflows: {done:?}"
    );
    assert!(done.events > 20, "{done:?}");
    assert_eq!(schema(&path), Some(SCHEMA_VERSION));

    let backend = Arc::new(RedbBackend::open(dir.path()).unwrap());
    let store = Store::new(backend.clone());
    let run = |id: &str| store.run(&RunKey::new("default", id)).unwrap().unwrap();
    assert_eq!(run("done").status, RunStatus::Completed);
    assert_eq!(run("done").steps[0].notes, "fetched");
    assert_eq!(
        run("done").context.get("source").map(String::as_str),
        Some("noaa")
    );
    assert!(matches!(run("backoff").phase, Phase::BackingOff { .. }));
    assert!(matches!(run("leased").phase, Phase::Started(ref l) if l.worker == "w-leased" && l.seq == 2));
    assert_eq!(run("signalled").pending_signals.len(), 1);
    assert!(matches!(run("queued").phase, Phase::Scheduled { ref queue, .. } if queue == "default"));
    // Runs of one workflow share one definition.
    assert!(Arc::ptr_eq(&run("leased").definition, &run("queued").definition));
    assert_eq!(run("done").definition.version, "7");

    for id in ["done", "backoff", "leased", "signalled", "queued"] {
        let events = store.history(&RunKey::new("default", id), 1, 1000).unwrap();
        assert_eq!(events.len() as u64, run(id).last_event_id, "{id}");
        assert!(
            events.iter().enumerate().all(|(i, e)| e.id == i as u64 + 1),
            "{id}"
        );
        let EventKind::RunStarted { definition, .. } = &events[0].kind else {
            panic!("{id} starts with {:?}", events[0].kind);
        };
        assert_eq!(definition, &run(id).definition);
    }
    assert_eq!(
        store.checkpoint(&RunKey::new("default", "leased")).unwrap(),
        br#"{"turn":3,"transcript":["draft v1"]}"#
    );
    let tx = backend.db().begin_read().unwrap();
    let timers: Vec<_> = tx
        .open_table(TIMERS)
        .unwrap()
        .iter()
        .unwrap()
        .map(|r| records::decode_timer(r.unwrap().1.value()).unwrap())
        .collect();
    assert!(
        matches!(&timers[..], [Timer::Backoff { run_id, attempt: 2, step_index: 0, .. }] if run_id == "backoff")
    );
    assert_eq!(tx.open_table(DEFINITIONS).unwrap().len().unwrap(), 2);
}

#[test]
fn open_migrates_a_layout_2_directory_once() {
    let dir = copy();
    drop(Store::open(dir.path()).unwrap());
    // Layout 3's tables, marked as a file with a redo log beside it.
    assert_eq!(
        schema(&dir.path().join("railyard.redb")),
        Some(crate::redb_backend::LOGGED_SCHEMA)
    );
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store
            .run(&RunKey::new("default", "queued"))
            .unwrap()
            .unwrap()
            .goal,
        "a sonnet"
    );
}

#[test]
fn an_unreadable_layout_2_row_stops_the_migration_and_changes_nothing() {
    let dir = copy();
    let path = dir.path().join("railyard.redb");
    {
        let db = Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(RUNS)
            .unwrap()
            .insert(
                ("default", "queued", 3),
                b"{\"id\":3,\"kind\":{\"type\":\"Nope\"}}".as_slice(),
            )
            .unwrap();
        tx.commit().unwrap();
    }
    let err = Store::open(dir.path()).err().expect("refused");
    assert!(matches!(err, OpenError::Migrate { from: 2, .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("railyard.redb")
            && msg.contains(r#"("default", "queued", 3)"#)
            && msg.contains("nothing was changed"),
        "{msg}"
    );
    assert_eq!(schema(&path), Some(LAYOUT_2));
    let db = Database::create(&path).unwrap();
    let tx = db.begin_read().unwrap();
    assert!(
        !tx.list_tables().unwrap().any(|t| t.name() == DEFINITIONS.name()),
        "no table was added"
    );
    let row = tx
        .open_table(RUNS)
        .unwrap()
        .get(("default", "done", STATE_SLOT))
        .unwrap()
        .unwrap()
        .value()
        .to_vec();
    assert!(
        String::from_utf8(row).unwrap().contains("\"definition\":{"),
        "still layout 2"
    );
}

#[test]
fn a_newer_layout_is_refused_by_name_and_left_alone() {
    let dir = copy();
    let path = dir.path().join("railyard.redb");
    {
        let db = Database::create(&path).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META).unwrap().insert("schema", 99).unwrap();
        tx.commit().unwrap();
    }
    let err = Store::open(dir.path()).err().expect("refused").to_string();
    assert!(
        err.contains("storage layout 99") && err.contains(&format!("reads layout {SCHEMA_VERSION}")),
        "{err}"
    );
    assert_eq!(schema(&path), Some(99));
    let db = Database::create(&path).unwrap();
    let tx = db.begin_read().unwrap();
    let names: Vec<String> = tx.list_tables().unwrap().map(|t| t.name().to_string()).collect();
    assert!(!names.iter().any(|n| n == DEFINITIONS.name()), "{names:?}");
    let old: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("runs");
    assert!(
        tx.open_table(old)
            .unwrap()
            .get(("default", "done", 0))
            .unwrap()
            .is_some()
    );
}

/// The migration is frozen, so what it writes is too: every row of the migrated
/// fixture, as `tests/fixtures/layout2/migrated-rows.txt` has it (the rows the
/// migration wrote when it still went through the model and the current records).
#[test]
fn the_migration_writes_the_rows_it_always_has() {
    let dir = copy();
    let db = Database::create(dir.path().join("railyard.redb")).unwrap();
    from_layout_2(&db).unwrap();
    let tx = db.begin_read().unwrap();
    let mut rows = String::new();
    for row in tx.open_table(RUNS).unwrap().iter().unwrap() {
        let (k, v) = row.unwrap();
        rows += &format!("runs {:?} {}\n", k.value(), String::from_utf8_lossy(v.value()));
    }
    for row in tx.open_table(TIMERS).unwrap().iter().unwrap() {
        let (k, v) = row.unwrap();
        rows += &format!("timers {:?} {}\n", k.value(), String::from_utf8_lossy(v.value()));
    }
    for row in tx.open_table(DEFINITIONS).unwrap().iter().unwrap() {
        let (k, v) = row.unwrap();
        rows += &format!("defs {:?} {}\n", k.value(), String::from_utf8_lossy(v.value()));
    }
    for row in tx.open_table(META).unwrap().iter().unwrap() {
        let (k, v) = row.unwrap();
        rows += &format!("meta {:?} {}\n", k.value(), v.value());
    }
    let expected = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layout2/migrated-rows.txt");
    let expected = std::fs::read_to_string(expected).unwrap();
    for (i, (got, want)) in rows.lines().zip(expected.lines()).enumerate() {
        assert_eq!(got, want, "row {i}");
    }
    assert_eq!(rows.lines().count(), expected.lines().count());
}
