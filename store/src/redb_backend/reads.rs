//! The reads, written once over redb's `ReadableTable` so that the snapshot
//! ([`super::snapshot`]) and the write transaction ([`super::write`]) share them:
//! each takes the tables it reads and decodes rows through [`records`].

use std::collections::BTreeMap;

use redb::ReadableTable;

use super::{CheckpointSlots, STATE_SLOT, STEP_CHECKPOINT_SLOTS_FROM};
use crate::StoredTask;
use crate::backend::{CheckpointAt, CheckpointHead, CheckpointPage, DueTimer, TimerKey};
use crate::error::StorageError;
use crate::records::{self, DefinitionTableKey, Definitions};
use railyard_model::Millis;
use railyard_model::auth::ApiKey;
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, RunState};

pub(super) type RunsKey = (&'static str, &'static str, u64);

/// The `runs` table with what decoding its rows needs: the definition cache, and
/// the `definitions` table for a definition the cache has not seen yet.
pub(super) struct RunRows<'a, R, D> {
    pub(super) rows: &'a R,
    pub(super) defs: &'a Definitions,
    pub(super) definitions: &'a D,
}

impl<R, D> RunRows<'_, R, D>
where
    R: ReadableTable<RunsKey, &'static [u8]>,
    D: ReadableTable<DefinitionTableKey, &'static [u8]>,
{
    pub(super) fn run(&self, ns: &str, run_id: &str) -> Result<Option<RunState>, StorageError> {
        self.rows
            .get((ns, run_id, STATE_SLOT))?
            .map(|v| records::decode_run(v.value(), self.defs, self.definitions))
            .transpose()
    }

    pub(super) fn history(
        &self,
        ns: &str,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StorageError> {
        let mut out = Vec::new();
        for row in self
            .rows
            .range((ns, run_id, from.max(STATE_SLOT + 1))..(ns, run_id, STEP_CHECKPOINT_SLOTS_FROM))?
            .take(limit)
        {
            out.push(records::decode_event(
                row?.1.value(),
                self.defs,
                self.definitions,
            )?);
        }
        Ok(out)
    }
}

/// The checkpoint `at` a run, whole: its first segment, then the others in order.
pub(super) fn checkpoint_in(
    t: &impl ReadableTable<RunsKey, &'static [u8]>,
    ns: &str,
    run_id: &str,
    at: CheckpointAt,
) -> Result<Vec<u8>, StorageError> {
    let slots = CheckpointSlots::of(at);
    let Some(first) = t.get((ns, run_id, slots.first))? else {
        return Ok(Vec::new());
    };
    let mut out = first.value().to_vec();
    let tail = slots.tail();
    for row in t.range((ns, run_id, tail.start)..(ns, run_id, tail.end))? {
        out.extend_from_slice(row?.1.value());
    }
    Ok(out)
}

/// Bytes `offset..offset + limit` of the checkpoint `at` a run: the head row for its
/// length, then its segments in order until the page is full, copying only the
/// page's bytes.
pub(super) fn checkpoint_page_in(
    t: &impl ReadableTable<RunsKey, &'static [u8]>,
    ns: &str,
    run_id: &str,
    at: CheckpointAt,
    offset: u64,
    limit: usize,
) -> Result<CheckpointPage, StorageError> {
    let Some(head) = checkpoint_head_in(t, ns, run_id, at)? else {
        return Ok(CheckpointPage::default());
    };
    let slots = CheckpointSlots::of(at);
    let mut page = CheckpointPage {
        total: head.len,
        bytes: Vec::new(),
        rows_read: 1,
    };
    let end = offset.saturating_add(limit as u64).min(head.len);
    if offset >= end {
        return Ok(page);
    }
    // Where the next segment starts in the whole checkpoint.
    let mut at = 0u64;
    let mut take = |bytes: &[u8], page: &mut CheckpointPage| {
        page.rows_read += 1;
        let (from, to) = (at, at + bytes.len() as u64);
        at = to;
        if to > offset && from < end {
            let lo = usize::try_from(offset.saturating_sub(from)).unwrap_or(usize::MAX);
            let hi = usize::try_from(end.min(to) - from).unwrap_or(usize::MAX);
            page.bytes
                .extend_from_slice(&bytes[lo.min(bytes.len())..hi.min(bytes.len())]);
        }
        at < end
    };
    let Some(first) = t.get((ns, run_id, slots.first))? else {
        return Ok(page);
    };
    if !take(first.value(), &mut page) {
        return Ok(page);
    }
    let tail = slots.tail();
    for row in t.range((ns, run_id, tail.start)..(ns, run_id, tail.end))? {
        if !take(row?.1.value(), &mut page) {
            break;
        }
    }
    Ok(page)
}

/// The head of the checkpoint `at` a run: its head row, or for a checkpoint written
/// whole without one (by an older release, or imported), its length with no digest.
pub(super) fn checkpoint_head_in(
    t: &impl ReadableTable<RunsKey, &'static [u8]>,
    ns: &str,
    run_id: &str,
    at: CheckpointAt,
) -> Result<Option<CheckpointHead>, StorageError> {
    let slots = CheckpointSlots::of(at);
    if let Some(row) = t.get((ns, run_id, slots.head))? {
        return records::decode_checkpoint_head(row.value()).map(Some);
    }
    Ok(t.get((ns, run_id, slots.first))?.map(|first| CheckpointHead {
        len: first.value().len() as u64,
        digest: None,
        segments: 1,
        merged: 1,
    }))
}

pub(super) fn runs_by_start_in(
    index: &impl ReadableTable<(&'static str, i64, &'static str), ()>,
    runs: &RunRows<
        '_,
        impl ReadableTable<RunsKey, &'static [u8]>,
        impl ReadableTable<DefinitionTableKey, &'static [u8]>,
    >,
    ns: &str,
    from_ms: Millis,
    before: (Millis, &str),
    visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
) -> Result<(), StorageError> {
    for row in index.range((ns, from_ms, "")..(ns, before.0, before.1))?.rev() {
        let row = row?;
        let (_, ms, id) = row.0.value();
        let Some(run) = runs.run(ns, id)? else {
            continue;
        };
        if !visit(ms, id, run) {
            break;
        }
    }
    Ok(())
}

pub(super) fn children_in(
    t: &impl ReadableTable<(&'static str, &'static str, &'static str), ()>,
    ns: &str,
    parent: &str,
) -> Result<Vec<String>, StorageError> {
    let mut out = Vec::new();
    for row in t.range((ns, parent, "")..=(ns, parent, "\u{10FFFF}"))? {
        out.push(row?.0.value().2.to_string());
    }
    Ok(out)
}

pub(super) fn ready_tasks_in(
    t: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
) -> Result<Vec<StoredTask>, StorageError> {
    let mut out = Vec::new();
    for row in t.iter()? {
        let row = row?;
        let (namespace, queue, task_seq) = row.0.value();
        out.push(StoredTask {
            namespace: namespace.into(),
            queue: queue.into(),
            task_seq,
            run_id: row.1.value().into(),
        });
    }
    Ok(out)
}

pub(super) fn open_runs_in(
    open: &impl ReadableTable<(&'static str, &'static str), ()>,
    runs: &RunRows<
        '_,
        impl ReadableTable<RunsKey, &'static [u8]>,
        impl ReadableTable<DefinitionTableKey, &'static [u8]>,
    >,
    visit: &mut dyn FnMut(RunState),
) -> Result<(), StorageError> {
    for row in open.iter()? {
        let row = row?;
        let (ns, id) = row.0.value();
        if let Some(run) = runs.run(ns, id)? {
            visit(run);
        }
    }
    Ok(())
}

pub(super) fn next_timer_due_in(
    t: &impl ReadableTable<TimerKey, &'static [u8]>,
) -> Result<Option<Millis>, StorageError> {
    Ok(t.first()?.map(|(k, _)| k.value().0))
}

pub(super) fn due_timers_in(
    t: &impl ReadableTable<TimerKey, &'static [u8]>,
    now: Millis,
    max: usize,
) -> Result<Vec<DueTimer>, StorageError> {
    let mut out = Vec::new();
    for row in t.range(..=(now, u64::MAX))?.take(max) {
        let row = row?;
        out.push((row.0.value(), records::decode_timer(row.1.value())));
    }
    Ok(out)
}

pub(super) fn namespaces_in(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<String>, StorageError> {
    let mut out = Vec::new();
    for row in t.iter()? {
        out.push(row?.0.value().to_string());
    }
    Ok(out)
}

pub(super) fn namespace_in(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<Option<Namespace>, StorageError> {
    t.get(name)?
        .map(|v| records::decode_namespace(name, v.value()))
        .transpose()
}

pub(super) fn idempotency_in(
    t: &impl ReadableTable<(&'static str, &'static str), &'static str>,
    ns: &str,
    key: &str,
) -> Result<Option<String>, StorageError> {
    Ok(t.get((ns, key))?.map(|v| v.value().to_string()))
}

// Sequence numbers only need to be unique among rows that exist, so the counter is
// derived at start rather than written on every commit.
pub(super) fn max_seq_in(
    tasks: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
    timers: &impl ReadableTable<TimerKey, &'static [u8]>,
) -> Result<u64, StorageError> {
    let mut max = 0;
    for row in tasks.iter()? {
        max = max.max(row?.0.value().2);
    }
    for row in timers.iter()? {
        max = max.max(row?.0.value().1);
    }
    Ok(max)
}

pub(super) type SchedulesTable = (&'static str, &'static str);

pub(super) fn schedule_in(
    t: &impl ReadableTable<SchedulesTable, &'static [u8]>,
    ns: &str,
    id: &str,
) -> Result<Option<railyard_model::schedule::Schedule>, StorageError> {
    t.get((ns, id))?
        .map(|v| records::decode_schedule(v.value()))
        .transpose()
}

pub(super) fn schedules_in(
    t: &impl ReadableTable<SchedulesTable, &'static [u8]>,
    ns: &str,
    after: &str,
    visit: &mut dyn FnMut(railyard_model::schedule::Schedule) -> bool,
) -> Result<(), StorageError> {
    use std::ops::Bound;
    let range = t.range::<(&str, &str)>((Bound::Excluded((ns, after)), Bound::Unbounded))?;
    for row in range {
        let (k, v) = row?;
        if k.value().0 != ns {
            break;
        }
        if !visit(records::decode_schedule(v.value())?) {
            break;
        }
    }
    Ok(())
}

pub(super) fn api_key_in(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    key_id: &str,
) -> Result<Option<ApiKey>, StorageError> {
    t.get(key_id)?
        .map(|v| records::decode_api_key(v.value()))
        .transpose()
}

pub(super) fn api_keys_in(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    after: &str,
    visit: &mut dyn FnMut(ApiKey) -> bool,
) -> Result<(), StorageError> {
    use std::ops::Bound;
    for row in t.range::<&str>((Bound::Excluded(after), Bound::Unbounded))? {
        if !visit(records::decode_api_key(row?.1.value())?) {
            break;
        }
    }
    Ok(())
}

pub(super) fn schedule_counts_in(
    t: &impl ReadableTable<SchedulesTable, &'static [u8]>,
) -> Result<BTreeMap<String, u64>, StorageError> {
    let mut counts = BTreeMap::new();
    for row in t.iter()? {
        *counts.entry(row?.0.value().0.to_string()).or_insert(0) += 1;
    }
    Ok(counts)
}
