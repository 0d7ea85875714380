//! The output stores, each against the same expectations.

use super::conformance::{check, chunk, head};
use super::redb::RedbOutput;
use super::*;
use railyard_model::output::ChunkBody;

#[test]
fn memory_output_keeps_reads_and_purges() {
    check(&MemoryOutput::default());
}

#[test]
fn redb_output_keeps_reads_and_purges_in_its_own_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = RedbOutput::open(dir.path(), 1 << 20).unwrap();
    check(&out);
    assert!(dir.path().join(super::redb::FILE_NAME).is_file());
    drop(out);
    // What was written is there after a reopen.
    let out = RedbOutput::open(dir.path(), 1 << 20).unwrap();
    assert_eq!(out.read(&RunKey::new("default", "r2"), 0, 10).unwrap().len(), 1);
}

#[test]
fn a_store_opened_on_a_directory_keeps_output_apart_from_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::Store::open(dir.path()).unwrap();
    store
        .output()
        .append(&[RunAppend {
            ns: "default".into(),
            run_id: "r".into(),
            chunks: vec![chunk(1, ChunkBody::Text("x".into()))],
            head: head(2, 1),
        }])
        .unwrap();
    assert!(dir.path().join("output.redb").is_file());
    // A write transaction on the history is open while output is written: separate files.
    store
        .backend()
        .write(&mut |_tx| {
            store
                .output()
                .append(&[RunAppend {
                    ns: "default".into(),
                    run_id: "r".into(),
                    chunks: vec![chunk(2, ChunkBody::Text("y".into()))],
                    head: head(3, 2),
                }])
                .map(|_| ())
        })
        .unwrap();
    assert_eq!(
        store
            .output()
            .read(&RunKey::new("default", "r"), 0, 10)
            .unwrap()
            .len(),
        2
    );
}
