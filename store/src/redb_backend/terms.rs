//! The index-term table (`run_terms`): (namespace, term, start ms, run id) for each
//! of a run's [`index_terms`] (its status, its workflow, its search
//! attributes'), kept by `save_run` and `purge` in the writer's transaction, so that
//! a filtered listing reads only the runs under its term. A database written before
//! it, or before the terms it lacks, gets them at open (the `term_index` meta entry
//! says which terms are complete: [`TERM_INDEX_VERSION`]).

use redb::{Database, ReadableTable, TableDefinition};

use super::reads::{RunRows, RunsKey};
use super::{DEFINITIONS, META, RUNS, RUNS_BY_START};
use crate::error::StorageError;
use crate::records::{DefinitionTableKey, Definitions};
use railyard_model::Millis;
use railyard_model::query::index_terms;
use railyard_model::run::RunState;

/// (namespace, index term, start ms, run id).
pub(crate) const RUN_TERMS: TableDefinition<(&str, &str, i64, &str), ()> = TableDefinition::new("run_terms");

/// The `meta` entry saying `run_terms` is complete ([`TERM_INDEX_VERSION`]). Without
/// it, or at an older version, the table is built at open from every run.
pub(super) const TERM_INDEX_META: &str = "term_index";

/// The terms `run_terms` holds: 1, status and workflow (and search attributes set
/// since); 2, also the words of goals and text attributes.
pub(super) const TERM_INDEX_VERSION: u64 = 2;

pub(super) type TermsKey = (&'static str, &'static str, i64, &'static str);

pub(super) fn runs_by_term_in(
    index: &impl ReadableTable<TermsKey, ()>,
    runs: &RunRows<
        '_,
        impl ReadableTable<RunsKey, &'static [u8]>,
        impl ReadableTable<DefinitionTableKey, &'static [u8]>,
    >,
    ns: &str,
    term: &str,
    from_ms: Millis,
    before: (Millis, &str),
    visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
) -> Result<(), StorageError> {
    if (from_ms, "") >= before {
        return Ok(());
    }
    for row in index
        .range((ns, term, from_ms, "")..(ns, term, before.0, before.1))?
        .rev()
    {
        let row = row?;
        let (_, _, ms, id) = row.0.value();
        let Some(run) = runs.run(ns, id)? else {
            continue;
        };
        if !visit(ms, id, run) {
            break;
        }
    }
    Ok(())
}

pub(super) fn term_count_in(
    index: &impl ReadableTable<TermsKey, ()>,
    ns: &str,
    term: &str,
    cap: u64,
) -> Result<u64, StorageError> {
    let mut n = 0;
    for row in index.range((ns, term, Millis::MIN, "")..(ns, term, Millis::MAX, ""))? {
        row?;
        n += 1;
        if n >= cap {
            break;
        }
    }
    Ok(n)
}

pub(super) fn next_term_in(
    index: &impl ReadableTable<TermsKey, ()>,
    ns: &str,
    from: &str,
    inclusive: bool,
) -> Result<Option<String>, StorageError> {
    // Past every key of `from` itself: the smallest string after it.
    let past = format!("{from}\0");
    let start = if inclusive { from } else { past.as_str() };
    let Some(row) = index.range((ns, start, Millis::MIN, "")..)?.next() else {
        return Ok(None);
    };
    let row = row?;
    let (row_ns, term, _, _) = row.0.value();
    Ok((row_ns == ns).then(|| term.to_string()))
}

/// Removes and adds a run's terms in `run_terms` (held open for the whole write
/// transaction: opening a table per save costs the writer more than the rows).
pub(super) fn retag(
    terms: &mut super::logged::LoggedTable<'_, TermsKey, ()>,
    run: &RunState,
    removed: &[String],
    added: &[String],
) -> Result<(), StorageError> {
    let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
    for term in removed {
        terms.remove((ns, term.as_str(), run.start_ms, id))?;
    }
    for term in added {
        terms.insert((ns, term.as_str(), run.start_ms, id), ())?;
    }
    Ok(())
}

/// Builds `run_terms` from every run, for a database written before it (or before
/// its current terms: inserting a term a run has is a no-op); one write transaction
/// (on failure nothing changes, and the next open tries again). A database whose
/// index is at [`TERM_INDEX_VERSION`] is left alone.
pub(super) fn build_term_index(db: &Database, defs: &Definitions) -> Result<(), StorageError> {
    let tx = db.begin_write()?;
    let indexed = {
        let mut meta = tx.open_table(META)?;
        if meta
            .get(TERM_INDEX_META)?
            .is_some_and(|v| v.value() >= TERM_INDEX_VERSION)
        {
            return Ok(());
        }
        let rows = tx.open_table(RUNS)?;
        let definitions = tx.open_table(DEFINITIONS)?;
        let runs = RunRows {
            rows: &rows,
            defs,
            definitions: &definitions,
        };
        let by_start = tx.open_table(RUNS_BY_START)?;
        let mut terms = tx.open_table(RUN_TERMS)?;
        let mut indexed = 0u64;
        for row in by_start.iter()? {
            let row = row?;
            let (ns, ms, id) = row.0.value();
            let Some(run) = runs.run(ns, id)? else {
                continue;
            };
            for term in index_terms(&run) {
                terms.insert((ns, term.as_str(), ms, id), ())?;
            }
            indexed += 1;
        }
        meta.insert(TERM_INDEX_META, TERM_INDEX_VERSION)?;
        indexed
    };
    tx.commit()?;
    if indexed > 0 {
        tracing::info!(runs = indexed, "built the index terms of runs (for queries)");
    }
    Ok(())
}
