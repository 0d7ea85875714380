//! The write side: [`RedbTx`], the writer's transaction with every table it may
//! change opened once, its reads (through [`super::reads`]) and its writes.

use railyard_model::RunKey;
use std::collections::BTreeMap;

use redb::ReadableTable;

use super::logged::{LoggedTable as Table, LoggedTx};

use super::reads::*;
use super::{API_KEYS, CheckpointSlots, NAMESPACES, STATE_SLOT, purge};
use crate::StoredTask;
use crate::backend::{
    CheckpointAt, CheckpointDigest, CheckpointHead, CheckpointPage, DueTimer, Snapshot, TimerKey, WriteTx,
};
use crate::error::StorageError;
use crate::records::{self, DefinitionTableKey, Definitions};
use railyard_model::Millis;
use railyard_model::auth::ApiKey;
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, EventKind, RunState, Timer};

/// The open write transaction's tables.
pub(super) struct RedbTx<'t> {
    pub(super) tx: LoggedTx<'t>,
    pub(super) runs: Table<'t, RunsKey, &'static [u8]>,
    pub(super) open_runs: Table<'t, (&'static str, &'static str), ()>,
    pub(super) tasks: Table<'t, (&'static str, &'static str, u64), &'static str>,
    pub(super) timers: Table<'t, TimerKey, &'static [u8]>,
    pub(super) idempotency: Table<'t, (&'static str, &'static str), &'static str>,
    pub(super) by_start: Table<'t, (&'static str, i64, &'static str), ()>,
    pub(super) by_close: Table<'t, (&'static str, i64, &'static str), ()>,
    pub(super) children: Table<'t, (&'static str, &'static str, &'static str), ()>,
    /// Written only when a start uses a definition new to storage.
    pub(super) definitions: Table<'t, DefinitionTableKey, &'static [u8]>,
    pub(super) schedules: Table<'t, (&'static str, &'static str), &'static [u8]>,
    pub(super) terms: Table<'t, super::terms::TermsKey, ()>,
    pub(super) defs: &'t Definitions,
}

type WriteRunRows<'a, 't> =
    RunRows<'a, Table<'t, RunsKey, &'static [u8]>, Table<'t, DefinitionTableKey, &'static [u8]>>;

impl<'t> RedbTx<'t> {
    /// Writes `bytes` as segments `from..` of the checkpoint in `slots`, cut into
    /// [`pieces`](super::pieces) that fill redb's pages; answers the last segment's
    /// number. Segment 1 is the checkpoint's first slot, segment `k` from 2 is
    /// `slots.rest + k`.
    fn insert_pieces(
        &mut self,
        key: &RunKey,
        slots: &CheckpointSlots,
        from: u32,
        bytes: &[u8],
    ) -> Result<u32, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let mut segment = from;
        for piece in super::pieces::pieces(bytes, super::pieces::key_len(ns, run_id)) {
            let slot = if segment <= 1 {
                slots.first
            } else {
                slots.rest + u64::from(segment)
            };
            if segment > 1 && slot >= slots.end {
                return Err(StorageError::Encode(
                    format!("checkpoint of run {run_id:?} has too many segments ({segment})").into(),
                ));
            }
            self.runs.insert((ns, run_id, slot), piece)?;
            segment += 1;
        }
        Ok(segment.saturating_sub(1).max(from))
    }

    /// The `runs` table, ready to decode its rows.
    fn rows(&self) -> WriteRunRows<'_, 't> {
        RunRows {
            rows: &self.runs,
            defs: self.defs,
            definitions: &self.definitions,
        }
    }
}

impl Snapshot for RedbTx<'_> {
    fn run(&self, key: &RunKey) -> Result<Option<RunState>, StorageError> {
        self.rows().run(&key.namespace, &key.run_id)
    }

    fn history(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<Event>, StorageError> {
        self.rows().history(&key.namespace, &key.run_id, from, limit)
    }

    fn checkpoint(&self, key: &RunKey, at: CheckpointAt) -> Result<Vec<u8>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        checkpoint_in(&self.runs, ns, run_id, at)
    }

    fn checkpoint_head(
        &self,
        key: &RunKey,
        at: CheckpointAt,
    ) -> Result<Option<CheckpointHead>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        checkpoint_head_in(&self.runs, ns, run_id, at)
    }

    fn checkpoint_page(
        &self,
        key: &RunKey,
        at: CheckpointAt,
        offset: u64,
        limit: usize,
    ) -> Result<CheckpointPage, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        checkpoint_page_in(&self.runs, ns, run_id, at, offset, limit)
    }

    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        runs_by_start_in(&self.by_start, &self.rows(), ns, from_ms, before, visit)
    }

    fn runs_by_term(
        &self,
        ns: &str,
        term: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        super::terms::runs_by_term_in(&self.terms, &self.rows(), ns, term, from_ms, before, visit)
    }

    fn term_count(&self, ns: &str, term: &str, cap: u64) -> Result<u64, StorageError> {
        super::terms::term_count_in(&self.terms, ns, term, cap)
    }

    fn next_term(&self, ns: &str, from: &str, inclusive: bool) -> Result<Option<String>, StorageError> {
        super::terms::next_term_in(&self.terms, ns, from, inclusive)
    }

    fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
        children_in(&self.children, ns, parent)
    }

    fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
        ready_tasks_in(&self.tasks)
    }

    fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError> {
        open_runs_in(&self.open_runs, &self.rows(), visit)
    }

    fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
        next_timer_due_in(&self.timers)
    }

    fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError> {
        due_timers_in(&self.timers, now, max)
    }

    fn namespaces(&self) -> Result<Vec<String>, StorageError> {
        // Not among the tables the writer opens: opened only if asked.
        namespaces_in(&self.tx.open_table(NAMESPACES)?)
    }

    fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError> {
        namespace_in(&self.tx.open_table(NAMESPACES)?, name)
    }

    fn idempotency(&self, ns: &str, key: &str) -> Result<Option<String>, StorageError> {
        idempotency_in(&self.idempotency, ns, key)
    }

    fn max_seq(&self) -> Result<u64, StorageError> {
        max_seq_in(&self.tasks, &self.timers)
    }

    fn schedule(
        &self,
        ns: &str,
        id: &str,
    ) -> Result<Option<railyard_model::schedule::Schedule>, StorageError> {
        schedule_in(&self.schedules, ns, id)
    }

    fn schedules(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(railyard_model::schedule::Schedule) -> bool,
    ) -> Result<(), StorageError> {
        schedules_in(&self.schedules, ns, after, visit)
    }

    fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        schedule_counts_in(&self.schedules)
    }

    fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError> {
        purge::closed_runs_in(&self.by_close, ns, after, up_to_ms, limit)
    }

    // Keys are not among the tables the writer opens: opened only if asked.
    fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
        api_key_in(&self.tx.open_table(API_KEYS)?, key_id)
    }

    fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError> {
        api_keys_in(&self.tx.open_table(API_KEYS)?, after, visit)
    }
}

impl WriteTx for RedbTx<'_> {
    fn save_run(&mut self, run: &RunState, events: &[Event]) -> Result<(), StorageError> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        for ev in events {
            if let EventKind::RunStarted { definition, .. } = &ev.kind {
                // A new run: its definition's row, in this same transaction (the
                // check is of the table, not the cache, so a failed batch cannot
                // leave a run naming a definition that is not stored).
                self.defs.store(definition, &mut self.definitions)?;
            }
            let row = records::encode_event(ev, self.defs)?;
            self.runs.insert((ns, id, ev.id), row.as_slice())?;
        }
        let row = records::encode_run(run, self.defs)?;
        self.runs.insert((ns, id, STATE_SLOT), row.as_slice())?;
        let (removed, added) = railyard_model::query::index_delta(run, events);
        super::terms::retag(&mut self.terms, run, &removed, &added)
    }

    fn set_checkpoint(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        checkpoint: Option<(&[u8], &CheckpointDigest)>,
    ) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let slots = CheckpointSlots::of(at);
        let segments = checkpoint_head_in(&self.runs, ns, run_id, at)?.map_or(0, |h| h.segments);
        if segments > 1 {
            let tail = slots.tail();
            self.runs
                .retain_in((ns, run_id, tail.start)..(ns, run_id, tail.end), |_, _| false)?;
        }
        match checkpoint {
            Some((bytes, digest)) => {
                let rows = self.insert_pieces(key, &slots, 1, bytes)?;
                let head = records::encode_checkpoint_head(bytes.len() as u64, digest, rows, rows)?;
                self.runs.insert((ns, run_id, slots.head), head.as_slice())?;
            }
            None => {
                self.runs.remove((ns, run_id, slots.first))?;
                self.runs.remove((ns, run_id, slots.head))?;
            }
        }
        Ok(())
    }

    fn append_checkpoint(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let Some(head) = checkpoint_head_in(&self.runs, ns, run_id, at)? else {
            return self.set_checkpoint(key, at, Some((bytes, digest)));
        };
        let slots = CheckpointSlots::of(at);
        let last = self.insert_pieces(key, &slots, head.segments + 1, bytes)?;
        let head = records::encode_checkpoint_head(head.len + bytes.len() as u64, digest, last, head.merged)?;
        self.runs.insert((ns, run_id, slots.head), head.as_slice())?;
        Ok(())
    }

    fn merge_checkpoint_tail(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        from: u32,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let Some(head) = checkpoint_head_in(&self.runs, ns, run_id, at)? else {
            return self.set_checkpoint(key, at, Some((bytes, digest)));
        };
        let slots = CheckpointSlots::of(at);
        let from = from.clamp(2, head.segments.max(2));
        let first = slots.rest + u64::from(from);
        let mut merged = Vec::new();
        for row in self.runs.range((ns, run_id, first)..(ns, run_id, slots.end))? {
            merged.extend_from_slice(row?.1.value());
        }
        merged.extend_from_slice(bytes);
        self.runs
            .retain_in((ns, run_id, first)..(ns, run_id, slots.end), |_, _| false)?;
        let last = self.insert_pieces(key, &slots, from, &merged)?;
        let head = records::encode_checkpoint_head(head.len + bytes.len() as u64, digest, last, last)?;
        self.runs.insert((ns, run_id, slots.head), head.as_slice())?;
        Ok(())
    }

    fn set_open(&mut self, key: &RunKey, open: bool) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        if open {
            self.open_runs.insert((ns, run_id), ())?;
        } else {
            self.open_runs.remove((ns, run_id))?;
        }
        Ok(())
    }

    fn insert_task(&mut self, ns: &str, queue: &str, seq: u64, run_id: &str) -> Result<(), StorageError> {
        self.tasks.insert((ns, queue, seq), run_id)?;
        Ok(())
    }

    fn remove_task(&mut self, ns: &str, queue: &str, seq: u64) -> Result<(), StorageError> {
        self.tasks.remove((ns, queue, seq))?;
        Ok(())
    }

    fn insert_timer(&mut self, key: TimerKey, timer: &Timer) -> Result<(), StorageError> {
        self.timers
            .insert(key, records::encode_timer(timer)?.as_slice())?;
        Ok(())
    }

    fn remove_timer(&mut self, key: TimerKey) -> Result<(), StorageError> {
        self.timers.remove(key)?;
        Ok(())
    }

    fn index_run(
        &mut self,
        ns: &str,
        start_ms: Millis,
        run_id: &str,
        parent: &str,
    ) -> Result<(), StorageError> {
        self.by_start.insert((ns, start_ms, run_id), ())?;
        if !parent.is_empty() {
            self.children.insert((ns, parent, run_id), ())?;
        }
        Ok(())
    }

    fn index_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.by_close.insert((ns, close_ms, run_id), ())?;
        Ok(())
    }

    fn unindex_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.by_close.remove((ns, close_ms, run_id))?;
        Ok(())
    }

    fn purge_run(&mut self, run: &RunState) -> Result<(), StorageError> {
        self.purge(run)
    }

    fn insert_idempotency(&mut self, ns: &str, key: &str, run_id: &str) -> Result<(), StorageError> {
        self.idempotency.insert((ns, key), run_id)?;
        Ok(())
    }

    fn save_schedule(&mut self, s: &railyard_model::schedule::Schedule) -> Result<(), StorageError> {
        let row = records::encode_schedule(s)?;
        self.schedules
            .insert((s.namespace.as_str(), s.id.as_str()), row.as_slice())?;
        Ok(())
    }

    fn delete_schedule(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.schedules.remove((ns, id))?;
        Ok(())
    }

    fn put_api_key(&mut self, key: &ApiKey) -> Result<(), StorageError> {
        let row = records::encode_api_key(key)?;
        self.tx
            .open_table(API_KEYS)?
            .insert(key.key_id.as_str(), row.as_slice())?;
        Ok(())
    }

    fn put_namespace(&mut self, ns: &Namespace) -> Result<(), StorageError> {
        let row = records::encode_namespace(ns)?;
        self.tx
            .open_table(NAMESPACES)?
            .insert(ns.name.as_str(), row.as_slice())?;
        Ok(())
    }

    fn remove_namespace(&mut self, name: &str) -> Result<(), StorageError> {
        self.tx.open_table(NAMESPACES)?.remove(name)?;
        Ok(())
    }
}
