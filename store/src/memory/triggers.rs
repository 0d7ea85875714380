//! The trigger tables as maps, for the reference backend.

use std::collections::{BTreeMap, BTreeSet};

use super::{Data, MemorySnapshot, MemoryTx};
use crate::backend::{TriggerReads, TriggerWrites};
use crate::error::StorageError;
use railyard_model::trigger::{HookDelivery, KeyHolder, QueuedStart, Trigger};
use railyard_model::{Millis, RunKey};

type Pair = (String, String);
type Triple = (String, String, String);

/// The trigger tables.
#[derive(Clone, Default)]
pub(super) struct TriggerData {
    triggers: BTreeMap<Pair, Trigger>,
    deliveries: BTreeMap<Triple, HookDelivery>,
    delivery_times: BTreeSet<(Millis, String, String, String)>,
    keys: BTreeMap<Triple, String>,
    queue: BTreeMap<(String, String, String, u64), QueuedStart>,
    holders: BTreeMap<RunKey, KeyHolder>,
}

fn t3(a: &str, b: &str, c: &str) -> Triple {
    (a.to_string(), b.to_string(), c.to_string())
}

impl TriggerData {
    fn triggers(&self, ns: Option<&str>, after: &str, visit: &mut dyn FnMut(Trigger) -> bool) {
        for ((row_ns, id), t) in &self.triggers {
            if let Some(ns) = ns
                && (row_ns.as_str() != ns || id.as_str() <= after)
            {
                continue;
            }
            if !visit(t.clone()) {
                break;
            }
        }
    }

    fn queued(&self, ns: &str, trigger: &str, key: &str, max: usize) -> Vec<(u64, QueuedStart)> {
        let (a, b, c) = t3(ns, trigger, key);
        self.queue
            .range((a.clone(), b.clone(), c.clone(), 0)..=(a, b, c, u64::MAX))
            .take(max)
            .map(|(k, q)| (k.3, q.clone()))
            .collect()
    }
}

macro_rules! trigger_reads {
    ($ty:ty) => {
        impl TriggerReads for $ty {
            fn trigger(&self, ns: &str, id: &str) -> Result<Option<Trigger>, StorageError> {
                Ok(self
                    .d()
                    .triggers
                    .triggers
                    .get(&(ns.to_string(), id.to_string()))
                    .cloned())
            }

            fn triggers(
                &self,
                ns: Option<&str>,
                after: &str,
                visit: &mut dyn FnMut(Trigger) -> bool,
            ) -> Result<(), StorageError> {
                self.d().triggers.triggers(ns, after, visit);
                Ok(())
            }

            fn hook_delivery(
                &self,
                ns: &str,
                trigger: &str,
                delivery: &str,
            ) -> Result<Option<HookDelivery>, StorageError> {
                Ok(self
                    .d()
                    .triggers
                    .deliveries
                    .get(&t3(ns, trigger, delivery))
                    .cloned())
            }

            fn trigger_key(
                &self,
                ns: &str,
                trigger: &str,
                key: &str,
            ) -> Result<Option<String>, StorageError> {
                Ok(self.d().triggers.keys.get(&t3(ns, trigger, key)).cloned())
            }

            fn key_holder(&self, run: &RunKey) -> Result<Option<KeyHolder>, StorageError> {
                Ok(self.d().triggers.holders.get(run).cloned())
            }

            fn queued_starts(
                &self,
                ns: &str,
                trigger: &str,
                key: &str,
                max: usize,
            ) -> Result<Vec<(u64, QueuedStart)>, StorageError> {
                Ok(self.d().triggers.queued(ns, trigger, key, max))
            }
        }
    };
}

impl MemorySnapshot {
    fn d(&self) -> &Data {
        &self.0
    }
}

impl MemoryTx<'_> {
    fn d(&self) -> &Data {
        &self.data
    }
}

trigger_reads!(MemorySnapshot);
trigger_reads!(MemoryTx<'_>);

impl TriggerWrites for MemoryTx<'_> {
    fn save_trigger(&mut self, t: &Trigger) -> Result<(), StorageError> {
        self.change(|d| {
            d.triggers
                .triggers
                .insert((t.namespace.clone(), t.id.clone()), t.clone());
        })
    }

    fn delete_trigger(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.triggers.triggers.remove(&(ns.to_string(), id.to_string()));
        })
    }

    fn put_hook_delivery(
        &mut self,
        ns: &str,
        trigger: &str,
        delivery: &str,
        h: &HookDelivery,
    ) -> Result<(), StorageError> {
        self.change(|d| {
            d.triggers.deliveries.insert(t3(ns, trigger, delivery), h.clone());
            d.triggers
                .delivery_times
                .insert((h.received_ms, ns.into(), trigger.into(), delivery.into()));
        })
    }

    fn purge_hook_deliveries(&mut self, before: Millis, max: usize) -> Result<usize, StorageError> {
        let old: Vec<_> = self
            .data
            .triggers
            .delivery_times
            .iter()
            .take_while(|k| k.0 < before)
            .take(max)
            .cloned()
            .collect();
        let n = old.len();
        self.change(|d| {
            for k in old {
                d.triggers.delivery_times.remove(&k);
                let (at, ns, trigger, delivery) = k;
                let key = (ns, trigger, delivery);
                if d.triggers
                    .deliveries
                    .get(&key)
                    .is_some_and(|h| h.received_ms == at)
                {
                    d.triggers.deliveries.remove(&key);
                }
            }
        })?;
        Ok(n)
    }

    fn set_trigger_key(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        run_id: Option<&str>,
    ) -> Result<(), StorageError> {
        self.change(|d| match run_id {
            Some(r) => {
                d.triggers.keys.insert(t3(ns, trigger, key), r.to_string());
            }
            None => {
                d.triggers.keys.remove(&t3(ns, trigger, key));
            }
        })
    }

    fn set_key_holder(&mut self, run: &RunKey, holder: Option<&KeyHolder>) -> Result<(), StorageError> {
        self.change(|d| match holder {
            Some(h) => {
                d.triggers.holders.insert(run.clone(), h.clone());
            }
            None => {
                d.triggers.holders.remove(run);
            }
        })
    }

    fn push_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        q: &QueuedStart,
    ) -> Result<u64, StorageError> {
        let (a, b, c) = t3(ns, trigger, key);
        let last = self
            .data
            .triggers
            .queue
            .range((a.clone(), b.clone(), c.clone(), 0)..=(a.clone(), b.clone(), c.clone(), u64::MAX))
            .next_back()
            .map(|(k, _)| k.3);
        let seq = last.map_or(1, |s| s + 1);
        self.change(|d| {
            d.triggers.queue.insert((a, b, c, seq), q.clone());
        })?;
        Ok(seq)
    }

    fn remove_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        seq: u64,
    ) -> Result<(), StorageError> {
        let (a, b, c) = t3(ns, trigger, key);
        self.change(|d| {
            d.triggers.queue.remove(&(a, b, c, seq));
        })
    }
}
