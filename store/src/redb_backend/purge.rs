//! The close-time index and what the retention purge removes, in redb; and the
//! one-time step that builds the index for a database written before it.
//!
//! `runs_by_close` (namespace, close ms, run id) holds every closed run, written in
//! the commit that closes it, so the purge finds the runs past a namespace's
//! retention by a range read. Signal idempotency keys are `signal/<run id>/<request
//! id>`, so a purge finds a run's by prefix; the release before them wrote
//! `signal:<request id>`, which the same step rewrites.

use redb::{Database, ReadableTable, TableDefinition};

use super::reads::RunRows;
use super::{CHECKPOINT_SLOT, IDEMPOTENCY, META, OPEN_RUNS, RUNS, RUNS_BY_START, RedbTx, STATE_SLOT};
use crate::backend::{signal_key, signal_key_prefix};
use crate::error::StorageError;
use crate::records::Definitions;
use railyard_model::Millis;
use railyard_model::run::RunState;

/// (namespace, close ms, run id): closed runs by close time, for the purge.
pub(crate) const RUNS_BY_CLOSE: TableDefinition<(&str, i64, &str), ()> =
    TableDefinition::new("runs_by_close");

/// The `meta` entry saying `runs_by_close` is complete (1). Without it, the index
/// is built at open.
pub(super) const CLOSE_INDEX_META: &str = "close_index";

pub(super) fn closed_runs_in(
    t: &impl ReadableTable<(&'static str, i64, &'static str), ()>,
    ns: &str,
    after: Option<(Millis, &str)>,
    up_to_ms: Millis,
    limit: usize,
) -> Result<Vec<(Millis, String)>, StorageError> {
    let mut out = Vec::new();
    let (from_ms, from_id) = after.unwrap_or((Millis::MIN, ""));
    for row in t.range((ns, from_ms, from_id)..=(ns, up_to_ms, "\u{10FFFF}"))? {
        let row = row?;
        let (_, ms, id) = row.0.value();
        if after == Some((ms, id)) {
            continue;
        }
        out.push((ms, id.to_string()));
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

impl RedbTx<'_> {
    pub(super) fn purge(&mut self, run: &RunState) -> Result<(), StorageError> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        self.runs
            .retain_in((ns, id, STATE_SLOT)..=(ns, id, CHECKPOINT_SLOT), |_, _| false)?;
        self.open_runs.remove((ns, id))?;
        self.by_start.remove((ns, run.start_ms, id))?;
        super::terms::retag(
            &mut self.terms,
            run,
            &railyard_model::query::index_terms(run),
            &[],
        )?;
        if let Some(close_ms) = run.close_ms {
            self.by_close.remove((ns, close_ms, id))?;
        }
        if !run.parent_run_id.is_empty() {
            self.children.remove((ns, run.parent_run_id.as_str(), id))?;
        }
        self.children
            .retain_in((ns, id, "")..=(ns, id, "\u{10FFFF}"), |_, _| false)?;
        if !run.request_id.is_empty() {
            let start = format!("start:{}", run.request_id);
            let ours = self
                .idempotency
                .get((ns, start.as_str()))?
                .is_some_and(|v| v.value() == id);
            if ours {
                self.idempotency.remove((ns, start.as_str()))?;
            }
        }
        let prefix = signal_key_prefix(id);
        // Every key with the prefix sorts before the prefix with its last byte
        // (`/`) raised by one (`0`).
        let mut end = prefix.clone();
        end.pop();
        end.push('0');
        self.idempotency
            .retain_in((ns, prefix.as_str())..(ns, end.as_str()), |_, _| false)?;
        Ok(())
    }
}

/// Builds `runs_by_close` from the closed runs, and rewrites signal idempotency
/// keys of the old form, for a database written before them; one write
/// transaction (on failure nothing changes, and the next open tries again). A
/// database that has the index is left alone.
pub(super) fn build_close_index(db: &Database, defs: &Definitions) -> Result<(), StorageError> {
    let tx = db.begin_write()?;
    let (closed, rewritten) = {
        let mut meta = tx.open_table(META)?;
        if meta.get(CLOSE_INDEX_META)?.map(|v| v.value()) == Some(1) {
            return Ok(());
        }
        let rows = tx.open_table(RUNS)?;
        let definitions = tx.open_table(super::DEFINITIONS)?;
        let runs = RunRows {
            rows: &rows,
            defs,
            definitions: &definitions,
        };
        let open = tx.open_table(OPEN_RUNS)?;
        let by_start = tx.open_table(RUNS_BY_START)?;
        let mut by_close = tx.open_table(RUNS_BY_CLOSE)?;
        let mut closed = 0u64;
        for row in by_start.iter()? {
            let row = row?;
            let (ns, _, id) = row.0.value();
            if open.get((ns, id))?.is_some() {
                continue;
            }
            let Some(run) = runs.run(ns, id)? else {
                continue;
            };
            if run.status.is_open() {
                continue;
            }
            by_close.insert((ns, run.close_ms.unwrap_or(run.start_ms), id), ())?;
            closed += 1;
        }
        let mut idempotency = tx.open_table(IDEMPOTENCY)?;
        let mut old = Vec::new();
        for row in idempotency.iter()? {
            let row = row?;
            let (ns, key) = row.0.value();
            if let Some(request_id) = key.strip_prefix("signal:") {
                old.push((
                    ns.to_string(),
                    key.to_string(),
                    signal_key(row.1.value(), request_id),
                    row.1.value().to_string(),
                ));
            }
        }
        for (ns, key, new_key, run_id) in &old {
            idempotency.remove((ns.as_str(), key.as_str()))?;
            idempotency.insert((ns.as_str(), new_key.as_str()), run_id.as_str())?;
        }
        meta.insert(CLOSE_INDEX_META, 1)?;
        (closed, old.len())
    };
    tx.commit()?;
    if closed > 0 || rewritten > 0 {
        tracing::info!(
            closed_runs = closed,
            signal_keys = rewritten,
            "built the close-time index of closed runs (for retention)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::Backend;
    use crate::redb_backend::RedbBackend;
    use railyard_model::run::{Out, StartParams};

    const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
      {"id":"a","title":"A","prompt":"do a"}]}"#;

    /// A run started at 1,000 and terminated at 5,000, written as any release would.
    fn closed_run(backend: &RedbBackend, id: &str) {
        let def = Arc::new(railyard_model::workflow::parse_definition(ONE).unwrap());
        let mut seq = 0;
        let params = StartParams {
            namespace: "default".into(),
            run_id: id.into(),
            ..Default::default()
        };
        let mut out = Out::new(1_000, &mut seq);
        let mut run = RunState::start(params, def, &mut out);
        let mut events = out.events;
        let mut out = Out::new(5_000, &mut seq);
        run.terminate("op", "done".into(), &mut out).unwrap();
        events.extend(out.events);
        backend
            .write(&mut |tx| {
                tx.save_run(&run, &events)?;
                tx.index_run("default", run.start_ms, id, "")
            })
            .unwrap();
    }

    #[test]
    fn a_file_from_before_the_close_index_gets_it_at_open_and_its_signal_keys_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        {
            let backend = RedbBackend::open(dir.path()).unwrap();
            closed_run(&backend, "old");
            // What the release before wrote: no index, no meta entry, signal keys
            // by request id alone.
            let tx = backend.db().begin_write().unwrap();
            tx.delete_table(RUNS_BY_CLOSE).unwrap();
            tx.open_table(META).unwrap().remove(CLOSE_INDEX_META).unwrap();
            tx.open_table(IDEMPOTENCY)
                .unwrap()
                .insert(("default", "signal:s-1"), "old")
                .unwrap();
            tx.commit().unwrap();
        }
        let backend = RedbBackend::open(dir.path()).unwrap();
        let snap = backend.snapshot().unwrap();
        assert_eq!(
            snap.closed_runs("default", None, Millis::MAX, 10).unwrap(),
            [(5_000, "old".to_string())]
        );
        assert_eq!(snap.idempotency("default", "signal:s-1").unwrap(), None);
        assert_eq!(
            snap.idempotency("default", &signal_key("old", "s-1"))
                .unwrap()
                .as_deref(),
            Some("old")
        );
        drop(snap);
        // Opened again, it is left as it is.
        drop(backend);
        let backend = RedbBackend::open(dir.path()).unwrap();
        let snap = backend.snapshot().unwrap();
        assert_eq!(snap.closed_runs("default", None, 4_999, 10).unwrap(), []);
        assert_eq!(snap.closed_runs("default", None, 5_000, 10).unwrap().len(), 1);
    }
}
