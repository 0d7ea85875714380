//! Dumps into and out of PostgreSQL: the round trip redb -> PostgreSQL -> redb of
//! the upgrade fixture and 10,000 generated runs, every table's shape, and the
//! refusals that hold on this backend too (a store that is not empty, a bad dump).

use railyard_model::RunKey;
use std::io::Cursor;

use railyard_store::dump::testing::{copy_fixture, generate_runs, histories};
use railyard_store::dump::{
    Column, DumpError, DumpSource, DumpTarget, ImportOptions, Part, Row, TABLES, Value, ValueKind, export,
    import,
};
use railyard_store::redb_backend::{RedbBackend, RedbReader};

use super::schema;

const CREATED: i64 = 1_800_000_000_000;

fn dump(source: &dyn DumpSource) -> Vec<u8> {
    let mut out = Vec::new();
    export(source, &mut out, CREATED).unwrap();
    out
}

fn load(
    target: &dyn DumpTarget,
    dump: &[u8],
    replace: bool,
) -> Result<railyard_store::dump::Summary, DumpError> {
    import(target, &mut Cursor::new(dump), &ImportOptions { replace })
}

#[test]
fn a_redb_store_moves_to_postgres_and_back_with_identical_histories() {
    let Some(s) = schema("a_redb_store_moves_to_postgres_and_back_with_identical_histories") else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    copy_fixture(src.path()).unwrap();
    let source = RedbBackend::open(src.path()).unwrap();
    generate_runs(&source, "default", 10_000, 2500).unwrap();
    let before = histories(&source).unwrap();
    assert!(before.len() > 10_000);
    drop(source);
    let first = dump(&RedbReader::open(src.path()).unwrap());

    let pg = s.open().unwrap();
    let into_pg = load(&pg, &first, false).unwrap();
    assert!(into_pg.tables["runs"].rows > 10_000);
    assert_eq!(histories(&pg).unwrap(), before, "histories on postgres");
    // Exported while the importing backend still holds the lease: the reader claims none.
    let second = dump(&s.reader().unwrap());
    drop(pg);

    let dst = tempfile::tempdir().unwrap();
    let back = RedbBackend::open(dst.path()).unwrap();
    let into_redb = load(&back, &second, false).unwrap();
    assert_eq!(into_redb.tables, into_pg.tables);
    assert_eq!(into_redb.source_backend, "postgres");
    assert_eq!(histories(&back).unwrap(), before, "histories back on redb");
    drop(back);
    // Every row of every table, byte for byte.
    assert!(
        dump(&RedbReader::open(dst.path()).unwrap()) == first,
        "the round trip changed a row"
    );
}

#[test]
fn every_table_round_trips_through_postgres() {
    let Some(s) = schema("every_table_round_trips_through_postgres") else {
        return;
    };
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
                ValueKind::Bytes => Value::Bytes(vec![0, 255, b'{', 10]),
            },
        })
        .collect();
    let pg = s.open().unwrap();
    assert!(pg.is_empty().unwrap());
    pg.load(&rows).unwrap();
    // Twice: a row of the same key is written over.
    pg.load(&rows).unwrap();
    assert!(!pg.is_empty().unwrap());
    let mut got = Vec::new();
    s.reader()
        .unwrap()
        .rows(&mut |row| {
            got.push(row);
            Ok(())
        })
        .unwrap();
    got.retain(|r| !(r.table.name == "namespaces" && r.key == [Part::Text("default".into())]));
    assert_eq!(got, rows, "one row per table, in table order");
    pg.clear().unwrap();
    assert!(pg.is_empty().unwrap());
}

#[test]
fn a_postgres_store_that_is_not_empty_is_refused_and_a_bad_dump_leaves_it_empty() {
    let Some(s) = schema("a_postgres_store_that_is_not_empty_is_refused_and_a_bad_dump_leaves_it_empty")
    else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let source = RedbBackend::open(src.path()).unwrap();
    generate_runs(&source, "default", 50, 50).unwrap();
    drop(source);
    let good = dump(&RedbReader::open(src.path()).unwrap());

    let pg = s.open().unwrap();
    load(&pg, &good, false).unwrap();
    let e = load(&pg, &good, false).unwrap_err();
    assert!(matches!(e, DumpError::NotEmpty { backend: "postgres" }), "{e}");
    load(&pg, &good, true).unwrap();

    // Truncated after some batches: refused, and the target is emptied again.
    let cut = &good[..good.len() - 200];
    let e = load(&pg, cut, true).unwrap_err();
    assert!(
        e.to_string().contains("truncated") && e.to_string().contains("emptied again"),
        "{e}"
    );
    assert!(pg.is_empty().unwrap());
}

/// A checkpoint grown by appended segments (one compacted) leaves PostgreSQL whole
/// and comes back whole, as one segment; `--replace` clears the segments too.
#[test]
fn a_checkpoint_of_appended_segments_moves_whole() {
    use railyard_store::{Backend, CheckpointAt};
    let Some(s) = schema("a_checkpoint_of_appended_segments_moves_whole") else {
        return;
    };
    let pg = s.open().unwrap();
    generate_runs(&pg, "default", 3, 3).unwrap();
    let run_id = histories(&pg).unwrap().keys().next().unwrap().run_id.clone();
    let digest = [7u8; 32];
    // The run's checkpoint of older releases, and a step's.
    let places = [CheckpointAt::Run, CheckpointAt::Step(1)];
    for at in places {
        pg.write(&mut |tx| {
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
            pg.snapshot()
                .unwrap()
                .checkpoint(&RunKey::new("default", &run_id), at)
                .unwrap(),
            whole
        );
    }
    let before = histories(&pg).unwrap();
    let out = dump(&s.reader().unwrap());
    // Into the same database, replacing what it holds: the segments go as well.
    load(&pg, &out, true).unwrap();
    let snapshot = pg.snapshot().unwrap();
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
    assert_eq!(histories(&pg).unwrap(), before);
}
