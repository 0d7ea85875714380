//! The redo log under a disk that fails, tested against the in-memory reference
//! backend: torn appends at every byte of the last entry, a failed `fdatasync`, a
//! short write, a full disk, power lost mid-append; and recovery after any prefix of
//! the log. A "crash" stops the disk (every write and sync fails, so redb keeps
//! none of its unsynced commits) and drops the backend without a checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use railyard_model::RunKey;
use railyard_model::namespace::Namespace;

use super::faults::{DiskFaults, LogFault};
use super::wal::{self, LogLimits};
use super::{LOGGED_SCHEMA, RedbBackend};
use crate::backend::{Backend, CheckpointAt, WriteTx};
use crate::memory::MemoryBackend;

/// One change, through the storage trait.
#[derive(Debug, Clone)]
enum Op {
    Task(u8, u64, u8),
    Untask(u8, u64),
    Idempotency(u8, u8),
    Namespace(u8, String),
    Unnamespace(u8),
    Checkpoint(u8, Vec<u8>),
    Uncheckpoint(u8),
    Open(u8, bool),
}

fn apply(tx: &mut dyn WriteTx, op: &Op) -> Result<(), crate::StorageError> {
    let run = |r: &u8| RunKey::new("default", format!("r{r}"));
    match op {
        Op::Task(q, seq, r) => tx.insert_task("default", &format!("q{q}"), *seq, &format!("r{r}")),
        Op::Untask(q, seq) => tx.remove_task("default", &format!("q{q}"), *seq),
        Op::Idempotency(k, r) => tx.insert_idempotency("default", &format!("start:k{k}"), &format!("r{r}")),
        Op::Namespace(n, description) => tx.put_namespace(&Namespace {
            name: format!("ns{n}"),
            description: description.clone(),
            ..Namespace::default()
        }),
        Op::Unnamespace(n) => tx.remove_namespace(&format!("ns{n}")),
        Op::Checkpoint(r, bytes) => tx.set_checkpoint(&run(r), CheckpointAt::Run, Some((bytes, &[*r; 32]))),
        Op::Uncheckpoint(r) => tx.set_checkpoint(&run(r), CheckpointAt::Run, None),
        Op::Open(r, open) => tx.set_open(&run(r), *open),
    }
}

/// A batch: one write transaction, one log entry.
type Batch = Vec<Op>;

fn write(backend: &dyn Backend, batch: &Batch) -> Result<(), crate::StorageError> {
    backend.write(&mut |tx| batch.iter().try_for_each(|op| apply(tx, op)))
}

/// What the operations can change, read through the trait.
fn view(backend: &dyn Backend) -> String {
    let snap = backend.snapshot().unwrap();
    let mut out = BTreeMap::new();
    let mut tasks: Vec<_> = snap
        .ready_tasks()
        .unwrap()
        .into_iter()
        .map(|t| (t.queue, t.task_seq, t.run_id))
        .collect();
    tasks.sort();
    out.insert("tasks", format!("{tasks:?}"));
    let mut names = snap.namespaces().unwrap();
    names.sort();
    let described: Vec<_> = names
        .iter()
        .filter(|n| n.starts_with("ns"))
        .map(|n| snap.namespace(n).unwrap().map(|ns| ns.description))
        .collect();
    out.insert("namespaces", format!("{names:?} {described:?}"));
    let idem: Vec<_> = (0..4)
        .map(|k| snap.idempotency("default", &format!("start:k{k}")).unwrap())
        .collect();
    out.insert("idempotency", format!("{idem:?}"));
    let checkpoints: Vec<_> = (0..3)
        .map(|r| {
            snap.checkpoint(&RunKey::new("default", format!("r{r}")), CheckpointAt::Run)
                .unwrap()
        })
        .collect();
    out.insert("checkpoints", format!("{checkpoints:?}"));
    out.insert("max_seq", snap.max_seq().unwrap().to_string());
    format!("{out:?}")
}

/// The reference after `batches`.
fn reference(batches: &[Batch]) -> String {
    let memory = MemoryBackend::default();
    for b in batches {
        write(&memory, b).unwrap();
    }
    view(&memory)
}

fn batch(i: u64) -> Batch {
    let r = (i % 3) as u8;
    vec![
        Op::Task((i % 2) as u8, i, r),
        Op::Idempotency((i % 4) as u8, r),
        Op::Checkpoint(r, vec![i as u8; 3 + (i as usize % 40)]),
        Op::Namespace((i % 3) as u8, format!("made by batch {i}")),
    ]
}

fn batches(n: u64) -> Vec<Batch> {
    (0..n).map(batch).collect()
}

/// No checkpoint but the ones at open and close.
fn no_checkpoints() -> LogLimits {
    LogLimits {
        checkpoint_entries: u64::MAX,
        checkpoint_bytes: u64::MAX,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        max_bytes: u64::MAX,
    }
}

/// Stops the disk and drops the backend as a crash would.
fn crash(backend: RedbBackend, faults: &DiskFaults) {
    faults.fail_writes(true);
    faults.fail_syncs(true);
    backend.crash();
    faults.heal();
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("wal")).unwrap();
    std::fs::copy(from.join("railyard.redb"), to.join("railyard.redb")).unwrap();
    for s in segments(from) {
        std::fs::copy(&s, to.join("wal").join(s.file_name().unwrap())).unwrap();
    }
}

#[test]
fn acknowledged_batches_survive_a_crash_that_loses_redbs_unsynced_commits() {
    let dir = tempfile::tempdir().unwrap();
    let faults = DiskFaults::default();
    let backend = RedbBackend::open_faulty_with(dir.path(), &faults, no_checkpoints()).unwrap();
    let all = batches(30);
    for b in &all {
        write(&backend, b).unwrap();
    }
    assert_eq!(view(&backend), reference(&all));
    crash(backend, &faults);
    // The file alone holds none of them: only the log does.
    {
        let db = redb::Database::create(dir.path().join("railyard.redb")).unwrap();
        assert_eq!(super::wal_applied_in(&db).unwrap(), 0);
    }
    let backend = RedbBackend::open(dir.path()).unwrap();
    assert_eq!(view(&backend), reference(&all));
    assert_eq!(backend.schema().unwrap(), Some(LOGGED_SCHEMA));
    // Recovery checkpointed: one fresh segment, nothing to replay.
    drop(backend);
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 1, "{segs:?}");
    assert_eq!(wal::read_entries(&dir.path().join("wal")).unwrap().len(), 0);
}

#[test]
fn checkpoints_delete_old_segments_and_a_crash_after_them_replays_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let faults = DiskFaults::default();
    let limits = LogLimits {
        checkpoint_entries: 4,
        ..no_checkpoints()
    };
    let backend = RedbBackend::open_faulty_with(dir.path(), &faults, limits).unwrap();
    let all = batches(23);
    for b in &all {
        write(&backend, b).unwrap();
        assert_eq!(segments(dir.path()).len(), 1);
    }
    crash(backend, &faults);
    // 23 entries, checkpoints after 4, 8, ... 20: three left in the log.
    let left = wal::read_entries(&dir.path().join("wal")).unwrap();
    assert_eq!(left.iter().map(|e| e.seq).collect::<Vec<_>>(), [21, 22, 23]);
    let backend = RedbBackend::open(dir.path()).unwrap();
    assert_eq!(view(&backend), reference(&all));
}

/// A crash mid-append leaves any prefix of the last entry on disk: recovery keeps
/// the entries before it, cuts it, and the log goes on after them.
#[test]
fn a_torn_last_entry_is_cut_at_every_byte_offset() {
    let base = tempfile::tempdir().unwrap();
    let faults = DiskFaults::default();
    let backend = RedbBackend::open_faulty_with(base.path(), &faults, no_checkpoints()).unwrap();
    let all = batches(6);
    for b in &all {
        write(&backend, b).unwrap();
    }
    crash(backend, &faults);
    let seg = segments(base.path()).pop().unwrap();
    let whole = std::fs::metadata(&seg).unwrap().len();
    let last = wal::encode_entry(6, &[0; 0]).len() as u64;
    // The last entry's length, from the log itself.
    let entries = wal::read_entries(&base.path().join("wal")).unwrap();
    let last_len = last + entries.last().unwrap().payload.len() as u64;
    let expected = reference(&all[..5]);
    let next = batch(99);
    let mut after = all[..5].to_vec();
    after.push(next.clone());
    let expected_after = reference(&after);
    for cut in whole - last_len..whole {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        let torn = dir.path().join("wal").join(seg.file_name().unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&torn)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let backend = RedbBackend::open(dir.path()).unwrap();
        assert_eq!(view(&backend), expected, "cut at {cut} of {whole}");
        write(&backend, &next).unwrap();
        drop(backend);
        let backend = RedbBackend::open(dir.path()).unwrap();
        assert_eq!(view(&backend), expected_after, "cut at {cut}, then a write");
    }
    // A corrupt byte anywhere in the last entry is found the same way.
    for at in (whole - last_len..whole).step_by(7) {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        let path = dir.path().join("wal").join(seg.file_name().unwrap());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at as usize] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        let backend = RedbBackend::open(dir.path()).unwrap();
        assert_eq!(view(&backend), expected, "flip at {at}");
    }
}

/// Power lost part-way through an append, through the fault layer: every few bytes
/// of the entry.
#[test]
fn power_lost_mid_append_loses_only_the_unanswered_batch() {
    let all = batches(4);
    let expected = reference(&all[..3]);
    for budget in [0u64, 1, 15, 16, 17, 40, 90] {
        let dir = tempfile::tempdir().unwrap();
        let faults = DiskFaults::default();
        let backend = RedbBackend::open_faulty_with(dir.path(), &faults, no_checkpoints()).unwrap();
        for b in &all[..3] {
            write(&backend, b).unwrap();
        }
        faults.fail_log_after(budget, LogFault::Crash);
        let err = write(&backend, &all[3]).unwrap_err();
        assert!(matches!(err, crate::StorageError::Unavailable(_)), "{err}");
        crash(backend, &faults);
        let backend = RedbBackend::open(dir.path()).unwrap();
        assert_eq!(view(&backend), expected, "power lost after {budget} bytes");
    }
}

#[test]
fn a_failed_sync_a_short_write_and_a_full_disk_answer_unavailable_and_keep_only_what_was_answered() {
    let dir = tempfile::tempdir().unwrap();
    let faults = DiskFaults::default();
    let backend = RedbBackend::open_faulty_with(dir.path(), &faults, no_checkpoints()).unwrap();
    let mut answered = Vec::new();
    let mut i = 0;
    let mut next = |backend: &RedbBackend, answered: &mut Vec<Batch>| {
        i += 1;
        let b = batch(i);
        let r = write(backend, &b);
        if r.is_ok() {
            answered.push(b);
        }
        r
    };
    next(&backend, &mut answered).unwrap();

    // fdatasync fails: refused, and so is everything until the disk heals.
    faults.fail_syncs(true);
    let err = next(&backend, &mut answered).unwrap_err();
    assert!(err.to_string().contains("redo log failed to append"), "{err}");
    assert!(next(&backend, &mut answered).is_err());
    assert!(
        backend.snapshot().is_err(),
        "reads of the failed database wait for the reopen"
    );
    faults.heal();
    next(&backend, &mut answered).unwrap();
    assert_eq!(view(&backend), reference(&answered));
    assert!(backend.incarnation() >= 1);

    // A short write: refused once; the next write cuts it and goes on.
    faults.fail_log_after(10, LogFault::Short);
    assert!(next(&backend, &mut answered).is_err());
    next(&backend, &mut answered).unwrap();
    assert_eq!(view(&backend), reference(&answered));

    // The disk fills: refused (naming it) until there is room again.
    faults.fail_log_after(30, LogFault::NoSpace);
    let err = next(&backend, &mut answered).unwrap_err();
    assert!(err.to_string().contains("no space"), "{err}");
    assert!(next(&backend, &mut answered).is_err());
    faults.heal();
    next(&backend, &mut answered).unwrap();
    assert_eq!(view(&backend), reference(&answered));

    // After a crash, exactly the answered batches are there.
    crash(backend, &faults);
    let backend = RedbBackend::open(dir.path()).unwrap();
    assert_eq!(view(&backend), reference(&answered));
}

#[test]
fn a_directory_without_a_log_opens_and_starts_one() {
    let dir = tempfile::tempdir().unwrap();
    // A file of the release before the log: layout 3, no wal/.
    drop(RedbBackend::open(dir.path()).unwrap());
    std::fs::remove_dir_all(dir.path().join("wal")).unwrap();
    {
        let db = redb::Database::create(dir.path().join("railyard.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut meta = tx.open_table(super::META).unwrap();
            meta.insert("schema", super::SCHEMA_VERSION).unwrap();
            meta.remove(super::WAL_APPLIED).unwrap();
        }
        tx.commit().unwrap();
    }
    let backend = RedbBackend::open(dir.path()).unwrap();
    assert_eq!(backend.schema().unwrap(), Some(LOGGED_SCHEMA));
    write(&backend, &batch(1)).unwrap();
    assert_eq!(segments(dir.path()).len(), 1);
    assert_eq!(view(&backend), reference(&[batch(1)]));
}

#[test]
fn the_offline_export_refuses_a_log_with_writes_the_file_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let backend = RedbBackend::open(dir.path()).unwrap();
    write(&backend, &batch(1)).unwrap();
    drop(backend);
    // Closed cleanly: checkpointed, nothing to replay, it exports.
    assert!(super::RedbReader::open(dir.path()).is_ok());
    // An entry the file lacks, as a server stopped before its checkpoint leaves.
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend(wal::encode_entry(2, b""));
    std::fs::write(&seg, bytes).unwrap();
    let err = super::RedbReader::open(dir.path()).err().expect("refused");
    assert!(
        err.to_string().contains("1 write(s) not yet in the database"),
        "{err}"
    );
    // Opened and closed once, it exports.
    drop(RedbBackend::open(dir.path()).unwrap());
    assert!(super::RedbReader::open(dir.path()).is_ok());
}

/// Replay finds a table's types in what opening the backend registered: every table
/// the file holds must be made (and so registered) at open, before any replay.
#[test]
fn every_table_of_the_file_is_known_to_replay_after_open() {
    use redb::{ReadableDatabase, TableHandle};
    let dir = tempfile::tempdir().unwrap();
    let backend = RedbBackend::open(dir.path()).unwrap();
    let tx = backend.db().begin_read().unwrap();
    let names: Vec<String> = tx.list_tables().unwrap().map(|t| t.name().to_string()).collect();
    assert!(names.len() > 10, "{names:?}");
    for name in names {
        assert!(
            super::logged::known(&name),
            "table {name} is not registered for replay"
        );
    }
}

/// The bytes of every segment of the log.
fn log_bytes(dir: &Path) -> u64 {
    segments(dir)
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum()
}

#[test]
fn checkpoints_by_bytes_and_by_time_keep_the_log_bounded() {
    let all = batches(60);
    let largest = all
        .iter()
        .map(|b| format!("{b:?}").len() as u64 * 4)
        .max()
        .unwrap();
    // By bytes: the segment never holds much more than the bound.
    let dir = tempfile::tempdir().unwrap();
    let faults = DiskFaults::default();
    let limits = LogLimits {
        checkpoint_bytes: 2048,
        ..no_checkpoints()
    };
    let backend = RedbBackend::open_faulty_with(dir.path(), &faults, limits).unwrap();
    let mut checkpointed = 0;
    for b in &all {
        write(&backend, b).unwrap();
        assert_eq!(segments(dir.path()).len(), 1);
        let size = log_bytes(dir.path());
        assert!(size < 2048 + largest, "{size} bytes of log");
        if wal::read_entries(&dir.path().join("wal")).unwrap().is_empty() {
            checkpointed += 1;
        }
    }
    assert!(checkpointed >= 3, "{checkpointed} checkpoints");
    crash(backend, &faults);
    let backend = RedbBackend::open(dir.path()).unwrap();
    assert_eq!(view(&backend), reference(&all));
    drop(backend);

    // By time: an interval of zero checkpoints after every write.
    let dir = tempfile::tempdir().unwrap();
    let limits = LogLimits {
        checkpoint_interval: std::time::Duration::ZERO,
        ..no_checkpoints()
    };
    let backend = RedbBackend::open_faulty_with(dir.path(), &faults, limits).unwrap();
    for b in &all[..10] {
        write(&backend, b).unwrap();
        assert!(wal::read_entries(&dir.path().join("wal")).unwrap().is_empty());
        assert_eq!(segments(dir.path()).len(), 1);
    }
    crash(backend, &faults);
    let backend = RedbBackend::open(dir.path()).unwrap();
    assert_eq!(view(&backend), reference(&all[..10]));
}

/// The database file's syncs fail, so no checkpoint can succeed while appends still
/// could: writes are refused with an error naming it, the log stops growing, and
/// once the disk heals writes resume with exactly the answered batches kept.
#[test]
fn a_writer_that_cannot_checkpoint_refuses_writes_and_the_log_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let faults = DiskFaults::default();
    let max_bytes = 4096;
    let limits = LogLimits {
        checkpoint_entries: 4,
        max_bytes,
        ..no_checkpoints()
    };
    let backend = RedbBackend::open_faulty_with(dir.path(), &faults, limits).unwrap();
    let mut answered = Vec::new();
    for i in 0..2 {
        write(&backend, &batch(i)).unwrap();
        answered.push(batch(i));
    }
    faults.fail_database_syncs(true);
    let mut refused = Vec::new();
    for i in 2..200 {
        match write(&backend, &batch(i)) {
            Ok(()) => answered.push(batch(i)),
            Err(e) => refused.push(e),
        }
        let size = log_bytes(dir.path());
        assert!(size <= max_bytes + 1024, "{size} bytes of log after batch {i}");
    }
    assert!(refused.len() > 150, "{} refused", refused.len());
    for e in &refused {
        assert!(matches!(e, crate::StorageError::Unavailable(_)), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("injected database sync failure") || text.contains("past its bound"),
            "{text}"
        );
    }
    faults.heal();
    write(&backend, &batch(500)).unwrap();
    answered.push(batch(500));
    assert_eq!(view(&backend), reference(&answered));
    crash(backend, &faults);
    let backend = RedbBackend::open(dir.path()).unwrap();
    assert_eq!(view(&backend), reference(&answered));
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..2u8, 0..6u64, 0..3u8).prop_map(|(q, s, r)| Op::Task(q, s, r)),
        (0..2u8, 0..6u64).prop_map(|(q, s)| Op::Untask(q, s)),
        (0..4u8, 0..3u8).prop_map(|(k, r)| Op::Idempotency(k, r)),
        (0..3u8, "[a-z]{0,12}").prop_map(|(n, d)| Op::Namespace(n, d)),
        (0..3u8).prop_map(Op::Unnamespace),
        (0..3u8, proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(r, b)| Op::Checkpoint(r, b)),
        (0..3u8).prop_map(Op::Uncheckpoint),
        (0..3u8, any::<bool>()).prop_map(|(r, o)| Op::Open(r, o)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Recovery after any prefix of the log (whole entries, and a torn one after
    /// them) equals the reference after as many batches.
    #[test]
    fn recovery_after_any_prefix_of_the_log_equals_the_reference(
        all in proptest::collection::vec(proptest::collection::vec(op(), 1..6), 1..12),
        keep in any::<prop::sample::Index>(),
        torn in any::<prop::sample::Index>(),
    ) {
        let base = tempfile::tempdir().unwrap();
        let faults = DiskFaults::default();
        let backend = RedbBackend::open_faulty_with(base.path(), &faults, no_checkpoints()).unwrap();
        // The batches up to each entry (a batch that changes nothing logs none).
        let mut upto = vec![0];
        for (i, b) in all.iter().enumerate() {
            write(&backend, b).unwrap();
            let logged = wal::read_entries(&base.path().join("wal")).unwrap().len();
            if logged == upto.len() {
                upto.push(i + 1);
            }
        }
        crash(backend, &faults);
        let entries = wal::read_entries(&base.path().join("wal")).unwrap();
        prop_assert_eq!(entries.len() + 1, upto.len());
        let k = keep.index(entries.len() + 1);
        // Where entry k ends, and a cut inside entry k + 1.
        let head = 8u64;
        let ends: Vec<u64> = entries
            .iter()
            .scan(head, |at, e| {
                *at += wal::encode_entry(e.seq, &e.payload).len() as u64;
                Some(*at)
            })
            .collect();
        let end = if k == 0 { head } else { ends[k - 1] };
        let cut = match ends.get(k) {
            Some(next) => end + torn.index((next - end) as usize) as u64,
            None => end,
        };
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        let seg = segments(dir.path()).pop().unwrap();
        std::fs::OpenOptions::new().write(true).open(&seg).unwrap().set_len(cut).unwrap();
        let backend = RedbBackend::open(dir.path()).unwrap();
        prop_assert_eq!(view(&backend), reference(&all[..upto[k]]));
    }
}
