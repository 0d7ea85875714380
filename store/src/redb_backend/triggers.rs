//! The trigger tables in redb: [`TriggerReads`] for snapshots and write
//! transactions (written once, over [`OpenForRead`]), [`TriggerWrites`] for write
//! transactions. Tables are opened when used, so a commit that touches none of them
//! writes none of their pages.

use railyard_model::RunKey;
use redb::{Key, ReadOnlyTable, ReadableTable, TableDefinition, Value};

use super::{RedbSnapshot, RedbTx};
use crate::backend::{TriggerReads, TriggerWrites};
use crate::error::StorageError;
use crate::records;
use railyard_model::Millis;
use railyard_model::trigger::{HookDelivery, KeyHolder, QueuedStart, Trigger};

/// (namespace, trigger id) → trigger record.
pub(crate) const TRIGGERS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("triggers");
/// (namespace, trigger id, delivery id) → hook delivery record.
pub(crate) const HOOK_DELIVERIES: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("hook_deliveries");
/// (received ms, namespace, trigger id, delivery id): deliveries by age, for the purge.
pub(crate) const HOOK_DELIVERY_TIMES: TableDefinition<(i64, &str, &str, &str), ()> =
    TableDefinition::new("hook_delivery_times");
/// (namespace, trigger id, concurrency key) → the run holding the key.
pub(crate) const TRIGGER_KEYS: TableDefinition<(&str, &str, &str), &str> =
    TableDefinition::new("trigger_keys");
/// (namespace, trigger id, concurrency key, seq) → queued start record.
pub(crate) const TRIGGER_QUEUE: TableDefinition<(&str, &str, &str, u64), &[u8]> =
    TableDefinition::new("trigger_queue");
/// (namespace, run id) → key holder record.
pub(crate) const TRIGGER_RUNS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("trigger_runs");

/// Creates the tables (at open).
pub(super) fn create_tables(tx: &super::logged::LoggedTx<'_>) -> Result<(), StorageError> {
    tx.open_table(TRIGGERS)?;
    tx.open_table(HOOK_DELIVERIES)?;
    tx.open_table(HOOK_DELIVERY_TIMES)?;
    tx.open_table(TRIGGER_KEYS)?;
    tx.open_table(TRIGGER_QUEUE)?;
    tx.open_table(TRIGGER_RUNS)?;
    Ok(())
}

type Pair = (&'static str, &'static str);
type Triple = (&'static str, &'static str, &'static str);
type Quad = (&'static str, &'static str, &'static str, u64);

fn trigger_in(
    t: &impl ReadableTable<Pair, &'static [u8]>,
    ns: &str,
    id: &str,
) -> Result<Option<Trigger>, StorageError> {
    t.get((ns, id))?
        .map(|v| records::decode_trigger(v.value()))
        .transpose()
}

fn triggers_in(
    t: &impl ReadableTable<Pair, &'static [u8]>,
    ns: Option<&str>,
    after: &str,
    visit: &mut dyn FnMut(Trigger) -> bool,
) -> Result<(), StorageError> {
    let range = match ns {
        Some(ns) => t.range((ns, after)..)?,
        None => t.range::<Pair>(..)?,
    };
    for row in range {
        let (k, v) = row?;
        let (row_ns, id) = k.value();
        if let Some(ns) = ns {
            if row_ns != ns {
                break;
            }
            if id == after {
                continue;
            }
        }
        if !visit(records::decode_trigger(v.value())?) {
            break;
        }
    }
    Ok(())
}

fn hook_delivery_in(
    t: &impl ReadableTable<Triple, &'static [u8]>,
    k: (&str, &str, &str),
) -> Result<Option<HookDelivery>, StorageError> {
    t.get(k)?
        .map(|v| records::decode_hook_delivery(v.value()))
        .transpose()
}

fn trigger_key_in(
    t: &impl ReadableTable<Triple, &'static str>,
    k: (&str, &str, &str),
) -> Result<Option<String>, StorageError> {
    Ok(t.get(k)?.map(|v| v.value().to_string()))
}

fn key_holder_in(
    t: &impl ReadableTable<Pair, &'static [u8]>,
    ns: &str,
    run_id: &str,
) -> Result<Option<KeyHolder>, StorageError> {
    t.get((ns, run_id))?
        .map(|v| records::decode_key_holder(v.value()))
        .transpose()
}

fn queued_in(
    t: &impl ReadableTable<Quad, &'static [u8]>,
    (ns, trigger, key): (&str, &str, &str),
    max: usize,
) -> Result<Vec<(u64, QueuedStart)>, StorageError> {
    let mut out = Vec::new();
    for row in t
        .range((ns, trigger, key, 0)..=(ns, trigger, key, u64::MAX))?
        .take(max)
    {
        let (k, v) = row?;
        out.push((k.value().3, records::decode_queued_start(v.value())?));
    }
    Ok(out)
}

/// A snapshot or a write transaction, which read the trigger tables alike: each
/// opened from the transaction under it when read.
pub(super) trait OpenForRead {
    /// The table as opened: read-only in a snapshot, writable in a write transaction.
    type Table<'a, K: Key + 'static, V: Value + 'static>: ReadableTable<K, V>
    where
        Self: 'a;

    /// Opens a table to read it.
    fn open_for_read<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<Self::Table<'_, K, V>, StorageError>;
}

impl OpenForRead for RedbSnapshot {
    type Table<'a, K: Key + 'static, V: Value + 'static> = ReadOnlyTable<K, V>;

    fn open_for_read<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<ReadOnlyTable<K, V>, StorageError> {
        Ok(self.tx.open_table(def)?)
    }
}

impl<'t> OpenForRead for RedbTx<'t> {
    type Table<'a, K: Key + 'static, V: Value + 'static>
        = super::logged::LoggedTable<'t, K, V>
    where
        Self: 'a;

    fn open_for_read<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<super::logged::LoggedTable<'t, K, V>, StorageError> {
        Ok(self.tx.open_table(def)?)
    }
}

impl<T: OpenForRead> TriggerReads for T {
    fn trigger(&self, ns: &str, id: &str) -> Result<Option<Trigger>, StorageError> {
        trigger_in(&self.open_for_read(TRIGGERS)?, ns, id)
    }

    fn triggers(
        &self,
        ns: Option<&str>,
        after: &str,
        visit: &mut dyn FnMut(Trigger) -> bool,
    ) -> Result<(), StorageError> {
        triggers_in(&self.open_for_read(TRIGGERS)?, ns, after, visit)
    }

    fn hook_delivery(
        &self,
        ns: &str,
        trigger: &str,
        delivery: &str,
    ) -> Result<Option<HookDelivery>, StorageError> {
        hook_delivery_in(&self.open_for_read(HOOK_DELIVERIES)?, (ns, trigger, delivery))
    }

    fn trigger_key(&self, ns: &str, trigger: &str, key: &str) -> Result<Option<String>, StorageError> {
        trigger_key_in(&self.open_for_read(TRIGGER_KEYS)?, (ns, trigger, key))
    }

    fn key_holder(&self, key: &RunKey) -> Result<Option<KeyHolder>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        key_holder_in(&self.open_for_read(TRIGGER_RUNS)?, ns, run_id)
    }

    fn queued_starts(
        &self,
        ns: &str,
        trigger: &str,
        key: &str,
        max: usize,
    ) -> Result<Vec<(u64, QueuedStart)>, StorageError> {
        queued_in(&self.open_for_read(TRIGGER_QUEUE)?, (ns, trigger, key), max)
    }
}

impl TriggerWrites for RedbTx<'_> {
    fn save_trigger(&mut self, t: &Trigger) -> Result<(), StorageError> {
        let row = records::encode_trigger(t)?;
        self.tx
            .open_table(TRIGGERS)?
            .insert((t.namespace.as_str(), t.id.as_str()), row.as_slice())?;
        Ok(())
    }

    fn delete_trigger(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.tx.open_table(TRIGGERS)?.remove((ns, id))?;
        Ok(())
    }

    fn put_hook_delivery(
        &mut self,
        ns: &str,
        trigger: &str,
        delivery: &str,
        d: &HookDelivery,
    ) -> Result<(), StorageError> {
        let row = records::encode_hook_delivery(d)?;
        self.tx
            .open_table(HOOK_DELIVERIES)?
            .insert((ns, trigger, delivery), row.as_slice())?;
        self.tx
            .open_table(HOOK_DELIVERY_TIMES)?
            .insert((d.received_ms, ns, trigger, delivery), ())?;
        Ok(())
    }

    fn purge_hook_deliveries(&mut self, before: Millis, max: usize) -> Result<usize, StorageError> {
        let mut times = self.tx.open_table(HOOK_DELIVERY_TIMES)?;
        let mut deliveries = self.tx.open_table(HOOK_DELIVERIES)?;
        let mut old = Vec::new();
        for row in times
            .range::<(i64, &str, &str, &str)>(..(before, "", "", ""))?
            .take(max)
        {
            let (k, _) = row?;
            let (at, ns, trigger, delivery) = k.value();
            old.push((at, ns.to_string(), trigger.to_string(), delivery.to_string()));
        }
        for (at, ns, trigger, delivery) in &old {
            times.remove((*at, ns.as_str(), trigger.as_str(), delivery.as_str()))?;
            // A delivery id seen again later has a newer time row: keep its entry.
            let current = hook_delivery_in(&deliveries, (ns, trigger, delivery))?;
            if current.is_some_and(|d| d.received_ms == *at) {
                deliveries.remove((ns.as_str(), trigger.as_str(), delivery.as_str()))?;
            }
        }
        Ok(old.len())
    }

    fn set_trigger_key(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        run_id: Option<&str>,
    ) -> Result<(), StorageError> {
        let mut t = self.tx.open_table(TRIGGER_KEYS)?;
        match run_id {
            Some(r) => t.insert((ns, trigger, key), r)?,
            None => t.remove((ns, trigger, key))?,
        };
        Ok(())
    }

    fn set_key_holder(&mut self, key: &RunKey, holder: Option<&KeyHolder>) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let mut t = self.tx.open_table(TRIGGER_RUNS)?;
        match holder {
            Some(h) => {
                let row = records::encode_key_holder(h)?;
                t.insert((ns, run_id), row.as_slice())?;
            }
            None => {
                t.remove((ns, run_id))?;
            }
        }
        Ok(())
    }

    fn push_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        q: &QueuedStart,
    ) -> Result<u64, StorageError> {
        let mut t = self.tx.open_table(TRIGGER_QUEUE)?;
        let last = t
            .range((ns, trigger, key, 0)..=(ns, trigger, key, u64::MAX))?
            .next_back()
            .transpose()?
            .map(|(k, _)| k.value().3);
        let seq = last.map_or(1, |s| s + 1);
        let row = records::encode_queued_start(q)?;
        t.insert((ns, trigger, key, seq), row.as_slice())?;
        Ok(seq)
    }

    fn remove_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        seq: u64,
    ) -> Result<(), StorageError> {
        self.tx
            .open_table(TRIGGER_QUEUE)?
            .remove((ns, trigger, key, seq))?;
        Ok(())
    }
}
