//! Stores to move, for tests (the `testing` feature): many small runs written
//! through the storage trait in large batches, and every run's history read back
//! for comparing two stores.

use railyard_model::RunKey;
use sha2::Digest;
use std::collections::BTreeMap;
use std::sync::Arc;

use railyard_model::run::{Event, Out, Phase, RunState, StartParams};
use railyard_model::token::TokenClaims;
use railyard_model::workflow::parse_definition;

use crate::{Backend, CheckpointAt, StorageError};

const DEF: &str = r#"{"id":"gen","version":"1","name":"Generated","steps":[
  {"id":"a","title":"A","prompt":"first {{goal}}","heartbeatTimeoutSeconds":30},
  {"id":"b","title":"B","prompt":"second"}]}"#;

/// Writes `n` runs into namespace `ns` (ids `gen-00000`, ...), `batch` per write
/// transaction, in three shapes: scheduled (a ready task), leased with a signal and
/// a checkpoint (by step, or every other one by run as older releases kept it), and
/// completed (first step done, its checkpoint kept, the second scheduled, then every
/// run in four closes by failing). Each is indexed by start time, open ones are in
/// `open_runs`, and each has an idempotency key.
pub fn generate_runs(backend: &dyn Backend, ns: &str, n: usize, batch: usize) -> Result<(), StorageError> {
    let def = Arc::new(parse_definition(DEF).map_err(|e| StorageError::Backend(e.to_string().into()))?);
    let mut seq = 0u64;
    let mut i = 0;
    while i < n {
        let end = (i + batch.max(1)).min(n);
        let mut made = Vec::with_capacity(end - i);
        for k in i..end {
            made.push(one_run(ns, k, &def, &mut seq));
        }
        backend.write(&mut |tx| {
            for (run, events, checkpoint) in &made {
                tx.save_run(run, events)?;
                tx.index_run(ns, run.start_ms, &run.run_id, "")?;
                tx.insert_idempotency(ns, &format!("start:{}", run.run_id), &run.run_id)?;
                if let Some((at, bytes)) = checkpoint {
                    // A whole checkpoint's digest, as `railyard_proto::checkpoint` makes it.
                    let digest: [u8; 32] = sha2::Sha256::new()
                        .chain_update([0u8; 32])
                        .chain_update(bytes)
                        .finalize()
                        .into();
                    tx.set_checkpoint(&RunKey::new(ns, &run.run_id), *at, Some((bytes, &digest)))?;
                }
                if run.status.is_open() {
                    tx.set_open(&RunKey::new(ns, &run.run_id), true)?;
                    if let Phase::Scheduled { task_seq, .. } = &run.phase {
                        tx.insert_task(ns, "default", *task_seq, &run.run_id)?;
                    }
                } else {
                    tx.index_closed(ns, run.close_ms.unwrap_or(run.start_ms), &run.run_id)?;
                }
            }
            Ok(())
        })?;
        i = end;
    }
    Ok(())
}

type Made = (RunState, Vec<Event>, Option<(CheckpointAt, Vec<u8>)>);

fn one_run(ns: &str, k: usize, def: &Arc<railyard_model::workflow::WorkflowDef>, seq: &mut u64) -> Made {
    let now = 1_700_000_000_000 + k as i64 * 1000;
    let mut out = Out::new(now, seq);
    let params = StartParams {
        namespace: ns.into(),
        run_id: format!("gen-{k:05}"),
        goal: format!("goal {k}"),
        context: BTreeMap::from([("k".into(), k.to_string())]),
        request_id: format!("req-{k}"),
        ..Default::default()
    };
    let mut run = RunState::start(params, def.clone(), &mut out);
    let mut checkpoint = None;
    if !k.is_multiple_of(3) {
        let task_seq = match &run.phase {
            Phase::Scheduled { task_seq, .. } => *task_seq,
            _ => 0,
        };
        if let Ok(lease) = run.lease(task_seq, "w1", &mut out) {
            if k % 3 == 1 {
                let _ = run.signal("u", "steer".into(), format!("{{\"n\":{k}}}"), &mut out);
                let at = if k.is_multiple_of(2) {
                    CheckpointAt::Run
                } else {
                    CheckpointAt::Step(0)
                };
                checkpoint = Some((at, format!("checkpoint of {k}").into_bytes()));
            } else {
                let claims = TokenClaims {
                    namespace: ns.into(),
                    run_id: run.run_id.clone(),
                    step: "a".into(),
                    attempt: 1,
                    lease: lease.seq,
                    kid: "k".into(),
                };
                let _ = run.complete(
                    &claims,
                    "w1",
                    format!("notes {k}"),
                    vec![],
                    BTreeMap::new(),
                    &mut out,
                );
                checkpoint = Some((CheckpointAt::Step(0), format!("transcript of {k}").into_bytes()));
                if k % 4 == 2 {
                    let _ = run.cancel("u", "generated".into(), &mut out);
                }
            }
        }
    }
    (run, out.events, checkpoint)
}

/// Every run's history in every namespace, by run, read through the
/// storage trait: what `railyard run history` shows, as the store holds it.
pub fn histories(backend: &dyn Backend) -> Result<BTreeMap<RunKey, Vec<Event>>, StorageError> {
    let snap = backend.snapshot()?;
    let mut out = BTreeMap::new();
    for ns in snap.namespaces()? {
        let mut ids = Vec::new();
        snap.runs_by_start(&ns, i64::MIN, (i64::MAX, ""), &mut |_, id, _| {
            ids.push(id.to_string());
            true
        })?;
        for id in ids {
            let key = RunKey::new(&ns, id);
            let history = snap.history(&key, 1, usize::MAX)?;
            out.insert(key, history);
        }
    }
    Ok(out)
}

/// Copies the upgrade fixture (`store/tests/fixtures/layout2`, a database of storage
/// layout 2) into `dir`; opening it migrates it.
pub fn copy_fixture(dir: &std::path::Path) -> Result<(), String> {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layout2/data/railyard.redb");
    std::fs::copy(&fixture, dir.join("railyard.redb"))
        .map(drop)
        .map_err(|e| format!("{}: {e}", fixture.display()))
}
