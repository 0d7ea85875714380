//! Writing the preloaded store of `railyard bench --preload`: closed and open runs
//! made by the model's own transitions (start, lease, complete) and written
//! straight through the redb backend, [`BATCH`] runs per write transaction, before
//! any server opens the directory. No gRPC, no writer: the figure that matters is
//! how the server then does on it, not how fast it was filled.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use railyard_model::run::{Event, Out, Phase, RunState, StartParams};
use railyard_model::token::TokenClaims;
use railyard_model::workflow::{WorkflowDef, parse_definition};
use railyard_store::redb_backend::RedbBackend;
use railyard_store::{Backend, StorageError};

/// Runs per write transaction.
const BATCH: u64 = 20_000;
/// The queue of the open runs' steps, which nothing polls: they stay scheduled.
pub(crate) const IDLE_QUEUE: &str = "preload-idle";
/// The workflow most preloaded runs are of.
pub(crate) const COMMON: &str = "preload-common";
/// The workflow one preloaded run in [`RARE_EVERY`] is of (open and closed alike):
/// listing it finds its runs among many others.
pub(crate) const RARE: &str = "preload-rare";
pub(crate) const RARE_EVERY: u64 = 100;
/// Between two preloaded runs' starts.
const SPACING_MS: i64 = 50;

/// What was written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Preloaded {
    pub(crate) closed: u64,
    pub(crate) open: u64,
    /// Of them, runs of [`RARE`].
    pub(crate) rare: u64,
}

fn definition(id: &str) -> anyhow::Result<Arc<WorkflowDef>> {
    let text = serde_json::json!({
        "id": id, "version": "1", "name": "Preloaded by railyard bench",
        "steps": [{ "id": "only", "title": "Only", "prompt": "Preloaded {{goal}}",
                    "taskQueue": IDLE_QUEUE }],
    })
    .to_string();
    Ok(Arc::new(
        parse_definition(&text).map_err(|e| anyhow!("the preload definition: {e}"))?,
    ))
}

/// Writes `closed` closed and `open` open runs into the default namespace of a redb
/// store in `dir`, started `SPACING_MS` apart and ending before `now_ms`, the open
/// ones spread evenly among the closed ones (so a page of open runs is not simply
/// the newest runs). Closed runs completed their one step (one in eight was
/// canceled before it was leased); open runs wait on [`IDLE_QUEUE`].
pub(crate) fn generate(dir: &Path, closed: u64, open: u64, now_ms: i64) -> anyhow::Result<Preloaded> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let backend =
        RedbBackend::open(dir).with_context(|| format!("cannot open a store in {}", dir.display()))?;
    let (common, rare) = (definition(COMMON)?, definition(RARE)?);
    let total = closed + open;
    let first_ms = now_ms - 60_000 - i64::try_from(total).unwrap_or(i64::MAX / SPACING_MS) * SPACING_MS;
    let ns = railyard_proto::DEFAULT_NAMESPACE;
    let mut seq = 1u64;
    let mut written = Preloaded {
        closed: 0,
        open: 0,
        rare: 0,
    };
    let mut k = 0;
    while k < total {
        let end = (k + BATCH).min(total);
        let mut made = Vec::with_capacity((end - k) as usize);
        for i in k..end {
            // Open where `i * open / total` steps up: `open` of them, evenly spread.
            let is_open = open > 0 && (i + 1) * open / total > i * open / total;
            let def = if i % RARE_EVERY == RARE_EVERY / 2 {
                &rare
            } else {
                &common
            };
            let start_ms = first_ms + i64::try_from(i).unwrap_or(0) * SPACING_MS;
            let (run, events) = one_run(ns, i, def, start_ms, is_open, &mut seq);
            if is_open != run.status.is_open() {
                bail!("preloaded run {} is {:?}, not as meant", run.run_id, run.status);
            }
            written.rare += u64::from(def.id == RARE);
            if is_open {
                written.open += 1;
            } else {
                written.closed += 1;
            }
            made.push((run, events));
        }
        backend
            .write(&mut |tx| {
                for (run, events) in &made {
                    tx.save_run(run, events)?;
                    tx.index_run(ns, run.start_ms, &run.run_id, "")?;
                    if run.status.is_open() {
                        tx.set_open(&railyard_model::RunKey::new(ns, &run.run_id), true)?;
                        if let Phase::Scheduled { task_seq, .. } = &run.phase {
                            tx.insert_task(ns, IDLE_QUEUE, *task_seq, &run.run_id)?;
                        }
                    } else {
                        tx.index_closed(ns, run.close_ms.unwrap_or(run.start_ms), &run.run_id)?;
                    }
                }
                Ok(())
            })
            .map_err(|e: StorageError| anyhow!("cannot write preloaded runs: {e}"))?;
        tracing::info!(written = end, of = total, "preloading runs");
        k = end;
    }
    Ok(written)
}

fn one_run(
    ns: &str,
    i: u64,
    def: &Arc<WorkflowDef>,
    start_ms: i64,
    open: bool,
    seq: &mut u64,
) -> (RunState, Vec<Event>) {
    let mut out = Out::new(start_ms, seq);
    let params = StartParams {
        namespace: ns.into(),
        run_id: format!("preload-{i:08}"),
        goal: format!("preloaded run {i}"),
        context: BTreeMap::from([("i".into(), i.to_string())]),
        identity: "railyard bench --preload".into(),
        ..Default::default()
    };
    let mut run = RunState::start(params, def.clone(), &mut out);
    if open {
        return (run, out.events);
    }
    out.now = start_ms + 10;
    if i % 8 == 3 {
        // Canceled before any worker leased it: it closes at once.
        let _ = run.cancel("preload", "generated".into(), &mut out);
        return (run, out.events);
    }
    let task_seq = match &run.phase {
        Phase::Scheduled { task_seq, .. } => *task_seq,
        _ => 0,
    };
    if let Ok(lease) = run.lease(task_seq, "preload-worker", &mut out) {
        out.now = start_ms + 40;
        let claims = TokenClaims {
            namespace: ns.into(),
            run_id: run.run_id.clone(),
            step: "only".into(),
            attempt: 1,
            lease: lease.seq,
            kid: "k".into(),
        };
        let _ = run.complete(
            &claims,
            "preload-worker",
            format!("notes {i}"),
            vec![],
            BTreeMap::new(),
            &mut out,
        );
    }
    (run, out.events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_closed_and_open_runs_spread_among_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let written = generate(dir.path(), 1_000, 30, 1_800_000_000_000).unwrap();
        assert_eq!((written.closed, written.open), (1_000, 30));
        assert_eq!(written.rare, 1_030 / RARE_EVERY);
        let backend = RedbBackend::open(dir.path()).unwrap();
        let snap = backend.snapshot().unwrap();
        let (mut open, mut closed, mut positions) = (0, 0, Vec::new());
        let mut n = 0;
        snap.runs_by_start("default", i64::MIN, (i64::MAX, ""), &mut |_, _, run| {
            if run.status.is_open() {
                open += 1;
                positions.push(n);
            } else {
                closed += 1;
            }
            n += 1;
            true
        })
        .unwrap();
        assert_eq!((open, closed), (30, 1_000));
        let mut open_rows = 0;
        snap.open_runs(&mut |run| {
            assert!(run.status.is_open());
            open_rows += 1;
        })
        .unwrap();
        assert_eq!(open_rows, 30);
        // Spread: never two open runs among the newest few, the gaps all alike.
        assert!(
            positions.windows(2).all(|w| (30..=40).contains(&(w[1] - w[0]))),
            "{positions:?}"
        );
        let ready = snap.ready_tasks().unwrap();
        assert_eq!(ready.len(), 30);
        assert!(ready.iter().all(|t| t.queue == IDLE_QUEUE));
    }
}
