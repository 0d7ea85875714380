//! Dumps between redb stores (the format's own tests too, on redb): a round trip of the upgrade fixture and 10,000
//! generated runs, and every way a dump can be refused, each leaving the target as
//! it was (empty). The PostgreSQL legs are in `railyard-store-postgres`'s tests.

use railyard_model::RunKey;
use std::io::{BufReader, Cursor, Read};

use super::{RedbBackend, RedbReader};
use crate::Backend;
use crate::dump::testing::{copy_fixture, generate_runs, histories};
use crate::dump::*;

const CREATED: i64 = 1_800_000_000_000;

fn dump_of(dir: &std::path::Path) -> (Vec<u8>, Summary) {
    let reader = RedbReader::open(dir).unwrap();
    let mut out = Vec::new();
    let summary = export(&reader, &mut out, CREATED).unwrap();
    (out, summary)
}

fn import_into(target: &RedbBackend, dump: &[u8], replace: bool) -> Result<Summary, DumpError> {
    import(target, &mut Cursor::new(dump), &ImportOptions { replace })
}

/// A store of the migrated fixture and `runs` generated runs, and its dump.
fn source(runs: usize) -> (tempfile::TempDir, Vec<u8>, Summary) {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture(dir.path()).unwrap();
    let backend = RedbBackend::open(dir.path()).unwrap();
    generate_runs(&backend, "default", runs, 2500).unwrap();
    drop(backend);
    let (dump, summary) = dump_of(dir.path());
    (dir, dump, summary)
}

fn fresh() -> (tempfile::TempDir, RedbBackend) {
    let dir = tempfile::tempdir().unwrap();
    let backend = RedbBackend::open(dir.path()).unwrap();
    (dir, backend)
}

#[test]
fn a_redb_store_moves_to_another_whole_with_identical_histories() {
    let (src_dir, dump, exported) = source(10_000);
    assert!(exported.tables["runs"].rows >= 10_000, "{exported:?}");
    assert!(exported.tables["checkpoints"].rows > 1500, "{exported:?}");
    assert!(exported.tables["step_checkpoints"].rows > 4500, "{exported:?}");
    assert!(exported.tables["runs_by_close"].rows > 800, "{exported:?}");
    assert_eq!(exported.dump_bytes, dump.len() as u64);

    let (dst_dir, target) = fresh();
    let imported = import_into(&target, &dump, false).unwrap();
    assert_eq!(imported.tables, exported.tables);
    assert_eq!(imported.sha256, exported.sha256);
    assert_eq!(imported.source_backend, "redb");

    let source = RedbBackend::open(src_dir.path()).unwrap();
    let before = histories(&source).unwrap();
    assert!(before.len() > 10_000, "{} runs", before.len());
    assert_eq!(histories(&target).unwrap(), before);
    drop((source, target));
    // Every row of every table, byte for byte: the dumps are the same.
    let (again, _) = dump_of(dst_dir.path());
    assert!(again == dump, "the round trip changed the dump");
}

fn small() -> Vec<u8> {
    source(30).1
}

fn assert_format_error(e: &DumpError, wanted: &str) {
    let msg = e.to_string();
    assert!(msg.contains(wanted) && msg.contains("dump line"), "{msg}");
}

#[test]
fn a_dump_changed_after_export_is_refused_by_its_checksum_and_nothing_stays() {
    let mut dump = small();
    // One character of a value's base64 changed: still a valid line.
    let at = dump.windows(5).position(|w| w == b"\"b\":\"").unwrap() + 5;
    dump[at] = if dump[at] == b'A' { b'B' } else { b'A' };
    let (_d, target) = fresh();
    let e = import_into(&target, &dump, false).unwrap_err();
    assert_format_error(&e, "checksum mismatch");
    assert!(e.to_string().contains("emptied again"), "{e}");
    assert!(target.is_empty().unwrap());
}

#[test]
fn a_truncated_dump_is_refused_naming_where_it_ends_and_nothing_stays() {
    let dump = small();
    let (_d, target) = fresh();
    // Cut inside a line, and cut at a line's end (the trailer missing).
    let inside = dump.len() / 2;
    let e = import_into(&target, &dump[..inside], false).unwrap_err();
    assert_format_error(&e, "truncated");
    assert!(target.is_empty().unwrap());
    let last_line = dump[..dump.len() - 1].iter().rposition(|b| *b == b'\n').unwrap() + 1;
    let e = import_into(&target, &dump[..last_line], false).unwrap_err();
    assert_format_error(&e, "without its trailer");
    assert!(target.is_empty().unwrap());
    // More after the trailer is refused as well.
    let mut more = dump.clone();
    more.extend_from_slice(b"{}\n");
    let e = import_into(&target, &more, false).unwrap_err();
    assert_format_error(&e, "more after the trailer");
    assert!(target.is_empty().unwrap());
}

#[test]
fn a_dump_of_another_format_version_or_not_a_dump_is_refused_before_any_write() {
    let dump = String::from_utf8(small()).unwrap();
    let (_d, target) = fresh();
    let newer = dump.replacen("\"version\":1", "\"version\":2", 1);
    let e = import_into(&target, newer.as_bytes(), false).unwrap_err();
    assert_format_error(&e, "dump format version 2; this build reads version 1");
    assert!(
        matches!(
            e,
            DumpError::Format {
                line: 1,
                offset: 0,
                ..
            }
        ),
        "{e:?}"
    );
    let e = import_into(&target, b"hello\n", false).unwrap_err();
    assert_format_error(&e, "not a Railyard dump");
    let e = import_into(&target, b"", false).unwrap_err();
    assert_format_error(&e, "empty");
    assert!(target.is_empty().unwrap());
}

#[test]
fn a_table_this_build_does_not_know_is_refused_by_name() {
    let dump = String::from_utf8(small()).unwrap();
    let header_end = dump.find('\n').unwrap() + 1;
    let bad = format!(
        "{}{{\"t\":\"token_keys\",\"k\":[\"k1\"],\"b\":\"e30=\"}}\n{}",
        &dump[..header_end],
        &dump[header_end..]
    );
    let (_d, target) = fresh();
    let e = import_into(&target, bad.as_bytes(), false).unwrap_err();
    assert_format_error(&e, "table \"token_keys\" is not one this build knows");
    assert!(
        matches!(&e, DumpError::Abandoned { source, .. } if matches!(**source, DumpError::Format { line: 2, .. }))
    );
    // A row of a known table in the wrong shape, too.
    let bad = format!(
        "{}{{\"t\":\"runs\",\"k\":[\"default\"],\"b\":\"e30=\"}}\n",
        &dump[..header_end]
    );
    let e = import_into(&target, bad.as_bytes(), false).unwrap_err();
    assert_format_error(&e, "a key of table runs must be [ns, run_id]");
    assert!(target.is_empty().unwrap());
}

#[test]
fn a_line_over_the_limit_is_refused_with_its_number_without_reading_it_whole() {
    let dump = small();
    let header_end = dump.iter().position(|b| *b == b'\n').unwrap() + 1;
    let long = Cursor::new(dump[..header_end].to_vec())
        .chain(Cursor::new(
            b"{\"t\":\"runs\",\"k\":[\"default\",\"r\"],\"b\":\"".to_vec(),
        ))
        .chain(std::io::repeat(b'A').take(MAX_LINE_BYTES as u64 + 10));
    let (_d, target) = fresh();
    let e = import(&target, &mut BufReader::new(long), &ImportOptions::default()).unwrap_err();
    assert_format_error(&e, "longer than the dump's limit");
    assert!(e.to_string().contains("dump line 2 "), "{e}");
    assert!(target.is_empty().unwrap());
}

#[test]
fn a_store_that_is_not_empty_is_refused_unless_replaced() {
    let dump = small();
    let (_d, target) = fresh();
    import_into(&target, &dump, false).unwrap();
    let e = import_into(&target, &dump, false).unwrap_err();
    assert!(matches!(e, DumpError::NotEmpty { .. }), "{e}");
    assert!(e.to_string().contains("--replace"), "{e}");
    // Something else written in: replaced by the dump, whole.
    target
        .write(&mut |tx| {
            tx.put_namespace(&railyard_model::namespace::Namespace {
                name: "extra".into(),
                ..Default::default()
            })
        })
        .unwrap();
    let before = histories(&target).unwrap();
    import_into(&target, &dump, true).unwrap();
    assert_eq!(histories(&target).unwrap(), before);
    let snap = target.snapshot().unwrap();
    assert!(!snap.namespaces().unwrap().contains(&"extra".to_string()));
}

#[test]
fn every_table_round_trips_through_redb() {
    // One row per table, of its shape: what the export reads is what the import wrote.
    let rows: Vec<Row> = TABLES
        .iter()
        .map(|t| Row {
            table: t,
            key: t
                .key
                .iter()
                .enumerate()
                .map(|(i, (_, c))| match c {
                    Column::Text => Part::Text(format!("k{i}")),
                    Column::Int => Part::Int(7 + i as i64),
                })
                .collect(),
            value: match t.value.1 {
                ValueKind::None => Value::None,
                ValueKind::Text => Value::Text("run-1".into()),
                ValueKind::Bytes => Value::Bytes(format!("{{\"table\":\"{}\"}}", t.name).into_bytes()),
            },
        })
        .collect();
    let (dir, target) = fresh();
    target.clear().unwrap();
    target.load(&rows).unwrap();
    assert!(!target.is_empty().unwrap());
    drop(target);
    let reader = RedbReader::open(dir.path()).unwrap();
    let mut got = Vec::new();
    reader
        .rows(&mut |row| {
            got.push(row);
            Ok(())
        })
        .unwrap();
    got.retain(|r| !(r.table.name == "namespaces" && r.key == [Part::Text("default".into())]));
    let key = |r: &Row| (r.table.name, r.key.clone());
    got.sort_by_key(key);
    let mut want = rows;
    want.sort_by_key(key);
    assert_eq!(got, want);
}

#[test]
fn an_export_by_a_writing_backend_reads_one_consistent_snapshot_and_no_other_process_reads_its_file() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const BATCH: usize = 200;
    let (dir, writer) = fresh();
    let (stop, rounds) = (AtomicBool::new(false), AtomicUsize::new(0));
    std::thread::scope(|s| {
        let writing = s.spawn(|| {
            // Each round one transaction of BATCH runs in a namespace of its own.
            while !stop.load(Ordering::SeqCst) {
                let round = rounds.load(Ordering::SeqCst);
                generate_runs(&writer, &format!("live{round}"), BATCH, BATCH).unwrap();
                rounds.fetch_add(1, Ordering::SeqCst);
            }
        });
        while rounds.load(Ordering::SeqCst) < 2 {
            assert!(!writing.is_finished(), "the writer stopped");
            std::thread::yield_now();
        }
        // The server holds its file alone: a read-only handle beside it is refused,
        // saying how to export instead.
        let e = RedbReader::open(dir.path()).err().unwrap().to_string();
        assert!(
            e.contains("in use by a running server") && e.contains("--from-server"),
            "{e}"
        );
        // The backend's own snapshot, as the server exports itself (`ExportStore`).
        for _ in 0..3 {
            let mut out = Vec::new();
            let summary = export(&writer, &mut out, CREATED).unwrap();
            let n = |t: &str| summary.tables[t].rows;
            // Whole transactions only, and every table from the same moment.
            assert!(n("runs") >= 2 * BATCH as u64, "{summary:?}");
            assert_eq!(n("runs") % BATCH as u64, 0, "{summary:?}");
            assert_eq!(n("runs_by_start"), n("runs"), "{summary:?}");
            assert_eq!(n("idempotency"), n("runs"), "{summary:?}");
            let (_d, target) = fresh();
            import_into(&target, &out, false).unwrap();
        }
        stop.store(true, Ordering::SeqCst);
    });
}

#[test]
fn an_export_refuses_a_missing_or_older_database_and_an_import_one_in_use() {
    let empty = tempfile::tempdir().unwrap();
    let e = RedbReader::open(empty.path()).err().unwrap().to_string();
    assert!(e.contains("no database at") && e.contains("railyard.redb"), "{e}");
    // Layout 2 is migrated by a server, not by an export; the file is left as it was.
    copy_fixture(empty.path()).unwrap();
    let e = RedbReader::open(empty.path()).err().unwrap().to_string();
    assert!(
        e.contains("storage layout 2") && e.contains("start `railyard server`"),
        "{e}"
    );
    // A second writer (an import while a server runs on the directory) is refused.
    let (dir, _writer) = fresh();
    let e = RedbBackend::open(dir.path()).err().unwrap().to_string();
    assert!(e.contains("in use by another process"), "{e}");
}

/// A checkpoint grown by appended segments (and one compacted) leaves whole and
/// comes back whole: the same bytes, as one segment; a step's (kept after its step
/// ended) as the run's of older releases.
#[test]
fn a_checkpoint_of_appended_segments_moves_whole() {
    use crate::backend::CheckpointAt;
    let (src_dir, source) = fresh();
    generate_runs(&source, "default", 3, 3).unwrap();
    let run_id = histories(&source).unwrap().keys().next().unwrap().run_id.clone();
    let digest = [7u8; 32];
    let places = [CheckpointAt::Run, CheckpointAt::Step(1)];
    for at in places {
        source
            .write(&mut |tx| {
                tx.set_checkpoint(&RunKey::new("default", &run_id), at, Some((b"first.", &digest)))?;
                tx.append_checkpoint(&RunKey::new("default", &run_id), at, b"second.", &digest)?;
                tx.append_checkpoint(&RunKey::new("default", &run_id), at, b"third.", &digest)?;
                tx.merge_checkpoint_tail(&RunKey::new("default", &run_id), at, 2, b"fourth.", &digest)?;
                tx.append_checkpoint(&RunKey::new("default", &run_id), at, b"fifth.", &digest)
            })
            .unwrap();
    }
    let whole = b"first.second.third.fourth.fifth.".to_vec();
    for at in places {
        assert_eq!(
            source
                .snapshot()
                .unwrap()
                .checkpoint(&RunKey::new("default", &run_id), at)
                .unwrap(),
            whole
        );
    }
    let before = histories(&source).unwrap();
    let steps_before = source
        .snapshot()
        .unwrap()
        .step_checkpoint_heads(&RunKey::new("default", &run_id), 2)
        .unwrap()
        .len();
    drop(source);

    let (dump, summary) = dump_of(src_dir.path());
    // Segments and heads are no rows of their own, nor events.
    assert_eq!(
        summary.tables["events"].rows,
        before.values().map(|h| h.len() as u64).sum::<u64>()
    );
    let (_dst, target) = fresh();
    import_into(&target, &dump, false).unwrap();
    let snapshot = target.snapshot().unwrap();
    for at in places {
        assert_eq!(
            snapshot.checkpoint(&RunKey::new("default", &run_id), at).unwrap(),
            whole
        );
        let head = snapshot
            .checkpoint_head(&RunKey::new("default", &run_id), at)
            .unwrap()
            .unwrap();
        assert_eq!((head.len, head.segments), (whole.len() as u64, 1));
    }
    assert_eq!(
        snapshot
            .step_checkpoint_heads(&RunKey::new("default", &run_id), 2)
            .unwrap()
            .len(),
        steps_before
    );
    assert_eq!(histories(&target).unwrap(), before);
}

#[test]
fn the_query_index_is_rebuilt_on_import_even_from_a_dump_without_it() {
    use redb::ReadableTableMetadata;
    let dir = tempfile::tempdir().unwrap();
    let backend = RedbBackend::open(dir.path()).unwrap();
    generate_runs(&backend, "default", 200, 200).unwrap();
    let count = |b: &RedbBackend| {
        use redb::ReadableDatabase;
        b.db()
            .begin_read()
            .unwrap()
            .open_table(crate::redb_backend::RUN_TERMS)
            .unwrap()
            .len()
            .unwrap()
    };
    let complete = count(&backend);
    assert_eq!(complete, 400, "status and workflow, a run");
    // A file of the release before the index, exported before this build opens it:
    // no run_terms table at all.
    let tx = backend.db().begin_write().unwrap();
    tx.delete_table(crate::redb_backend::RUN_TERMS).unwrap();
    tx.commit().unwrap();
    drop(backend);
    let (dump, exported) = dump_of(dir.path());
    assert_eq!(exported.tables["run_terms"].rows, 0);

    let (_dst, target) = fresh();
    import_into(&target, &dump, false).unwrap();
    assert_eq!(count(&target), complete);
    let store = crate::Store::new(std::sync::Arc::new(target));
    let canceled = crate::RunFilter {
        status: Some(railyard_model::run::RunStatus::Canceled),
        ..crate::RunFilter::default()
    };
    let (runs, _, stats) = store
        .list_runs_counted("default", &canceled, None, 1_000, usize::MAX, &|_| 0)
        .unwrap();
    assert!(!runs.is_empty());
    assert_eq!(stats.index, "Status=CANCELED");
    assert_eq!(stats.rows_read, runs.len() as u64);
}
