//! The read side: [`RedbSnapshot`], a read transaction that opens each table as a
//! read needs it, so a snapshot never waits for the writer.

use railyard_model::RunKey;
use std::collections::BTreeMap;
use std::sync::Arc;

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable};

use super::reads::*;
use super::{
    API_KEYS, CHILDREN, DEFINITIONS, IDEMPOTENCY, NAMESPACES, OPEN_RUNS, RUNS, RUNS_BY_CLOSE, RUNS_BY_START,
    SCHEDULES, TASKS, TIMERS, purge,
};
use crate::StoredTask;
use crate::backend::{CheckpointAt, CheckpointHead, CheckpointPage, DueTimer, Snapshot};
use crate::error::StorageError;
use crate::records::{DefinitionTableKey, Definitions};
use railyard_model::Millis;
use railyard_model::auth::ApiKey;
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, RunState};

type ReadRunRows<'a> =
    RunRows<'a, ReadOnlyTable<RunsKey, &'static [u8]>, ReadOnlyTable<DefinitionTableKey, &'static [u8]>>;

/// A read transaction; each read opens the tables it needs.
pub(super) struct RedbSnapshot {
    pub(super) tx: ReadTransaction,
    pub(super) defs: Arc<Definitions>,
}

impl RedbSnapshot {
    /// Runs `f` over the `runs` table, ready to decode its rows.
    fn with_runs<T>(
        &self,
        f: impl FnOnce(&ReadRunRows<'_>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let rows = self.tx.open_table(RUNS)?;
        let definitions = self.tx.open_table(DEFINITIONS)?;
        f(&RunRows {
            rows: &rows,
            defs: &self.defs,
            definitions: &definitions,
        })
    }
}

impl Snapshot for RedbSnapshot {
    fn open_run_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        let mut counts = BTreeMap::new();
        for ns in namespaces_in(&self.tx.open_table(NAMESPACES)?)? {
            counts.insert(ns, 0);
        }
        for row in self.tx.open_table(OPEN_RUNS)?.iter()? {
            let row = row?;
            *counts.entry(row.0.value().0.to_string()).or_insert(0) += 1;
        }
        Ok(counts)
    }

    fn run(&self, key: &RunKey) -> Result<Option<RunState>, StorageError> {
        self.with_runs(|runs| runs.run(&key.namespace, &key.run_id))
    }

    fn history(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        self.with_runs(|runs| runs.history(&key.namespace, &key.run_id, from, limit))
    }

    fn checkpoint(&self, key: &RunKey, at: CheckpointAt) -> Result<Vec<u8>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        checkpoint_in(&self.tx.open_table(RUNS)?, ns, run_id, at)
    }

    fn checkpoint_head(
        &self,
        key: &RunKey,
        at: CheckpointAt,
    ) -> Result<Option<CheckpointHead>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        checkpoint_head_in(&self.tx.open_table(RUNS)?, ns, run_id, at)
    }

    fn checkpoint_page(
        &self,
        key: &RunKey,
        at: CheckpointAt,
        offset: u64,
        limit: usize,
    ) -> Result<CheckpointPage, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        checkpoint_page_in(&self.tx.open_table(RUNS)?, ns, run_id, at, offset, limit)
    }

    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        let index = self.tx.open_table(RUNS_BY_START)?;
        self.with_runs(|runs| runs_by_start_in(&index, runs, ns, from_ms, before, visit))
    }

    fn runs_by_term(
        &self,
        ns: &str,
        term: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        let index = self.tx.open_table(super::RUN_TERMS)?;
        self.with_runs(|runs| super::terms::runs_by_term_in(&index, runs, ns, term, from_ms, before, visit))
    }

    fn term_count(&self, ns: &str, term: &str, cap: u64) -> Result<u64, StorageError> {
        super::terms::term_count_in(&self.tx.open_table(super::RUN_TERMS)?, ns, term, cap)
    }

    fn next_term(&self, ns: &str, from: &str, inclusive: bool) -> Result<Option<String>, StorageError> {
        super::terms::next_term_in(&self.tx.open_table(super::RUN_TERMS)?, ns, from, inclusive)
    }

    fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
        children_in(&self.tx.open_table(CHILDREN)?, ns, parent)
    }

    fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
        ready_tasks_in(&self.tx.open_table(TASKS)?)
    }

    fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError> {
        let open = self.tx.open_table(OPEN_RUNS)?;
        self.with_runs(|runs| open_runs_in(&open, runs, visit))
    }

    fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
        next_timer_due_in(&self.tx.open_table(TIMERS)?)
    }

    fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError> {
        due_timers_in(&self.tx.open_table(TIMERS)?, now, max)
    }

    fn namespaces(&self) -> Result<Vec<String>, StorageError> {
        namespaces_in(&self.tx.open_table(NAMESPACES)?)
    }

    fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError> {
        namespace_in(&self.tx.open_table(NAMESPACES)?, name)
    }

    fn idempotency(&self, ns: &str, key: &str) -> Result<Option<String>, StorageError> {
        idempotency_in(&self.tx.open_table(IDEMPOTENCY)?, ns, key)
    }

    fn max_seq(&self) -> Result<u64, StorageError> {
        max_seq_in(&self.tx.open_table(TASKS)?, &self.tx.open_table(TIMERS)?)
    }

    fn schedule(
        &self,
        ns: &str,
        id: &str,
    ) -> Result<Option<railyard_model::schedule::Schedule>, StorageError> {
        schedule_in(&self.tx.open_table(SCHEDULES)?, ns, id)
    }

    fn schedules(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(railyard_model::schedule::Schedule) -> bool,
    ) -> Result<(), StorageError> {
        schedules_in(&self.tx.open_table(SCHEDULES)?, ns, after, visit)
    }

    fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        schedule_counts_in(&self.tx.open_table(SCHEDULES)?)
    }

    fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError> {
        purge::closed_runs_in(&self.tx.open_table(RUNS_BY_CLOSE)?, ns, after, up_to_ms, limit)
    }

    fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
        api_key_in(&self.tx.open_table(API_KEYS)?, key_id)
    }

    fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError> {
        api_keys_in(&self.tx.open_table(API_KEYS)?, after, visit)
    }
}
