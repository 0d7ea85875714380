//! The batch tables as maps, for the reference backend.

use std::collections::{BTreeMap, BTreeSet};

use super::{Data, MemorySnapshot, MemoryTx};
use crate::backend::{BatchReads, BatchWrites};
use crate::error::StorageError;
use railyard_model::batch::{Batch, BatchItem};

/// The batch tables.
#[derive(Clone, Default)]
pub(super) struct BatchData {
    batches: BTreeMap<(String, String), Batch>,
    items: BTreeMap<(String, String, u64), BatchItem>,
    running: BTreeSet<(String, String)>,
}

impl BatchData {
    fn batches(&self, ns: &str, after: &str, visit: &mut dyn FnMut(Batch) -> bool) {
        let from = (ns.to_string(), after.to_string());
        for ((row_ns, id), b) in self.batches.range(from..) {
            if row_ns != ns {
                break;
            }
            if id == after {
                continue;
            }
            if !visit(b.clone()) {
                break;
            }
        }
    }

    fn items(&self, ns: &str, batch_id: &str, from: u64, limit: usize) -> Vec<(u64, BatchItem)> {
        let (a, b) = (ns.to_string(), batch_id.to_string());
        self.items
            .range((a.clone(), b.clone(), from)..=(a, b, u64::MAX))
            .take(limit)
            .map(|(k, v)| (k.2, v.clone()))
            .collect()
    }
}

fn reads(d: &Data) -> &BatchData {
    &d.batches
}

macro_rules! batch_reads {
    ($ty:ty, $data:ident) => {
        impl BatchReads for $ty {
            fn batch(&self, ns: &str, batch_id: &str) -> Result<Option<Batch>, StorageError> {
                Ok(reads($data(self))
                    .batches
                    .get(&(ns.to_string(), batch_id.to_string()))
                    .cloned())
            }

            fn batches(
                &self,
                ns: &str,
                after: &str,
                visit: &mut dyn FnMut(Batch) -> bool,
            ) -> Result<(), StorageError> {
                reads($data(self)).batches(ns, after, visit);
                Ok(())
            }

            fn running_batches(&self) -> Result<Vec<(String, String)>, StorageError> {
                Ok(reads($data(self)).running.iter().cloned().collect())
            }

            fn batch_items(
                &self,
                ns: &str,
                batch_id: &str,
                from: u64,
                limit: usize,
            ) -> Result<Vec<(u64, BatchItem)>, StorageError> {
                Ok(reads($data(self)).items(ns, batch_id, from, limit))
            }
        }
    };
}

fn snapshot_data(s: &MemorySnapshot) -> &Data {
    &s.0
}

fn tx_data<'a>(t: &'a MemoryTx<'_>) -> &'a Data {
    &t.data
}

batch_reads!(MemorySnapshot, snapshot_data);
batch_reads!(MemoryTx<'_>, tx_data);

impl BatchWrites for MemoryTx<'_> {
    fn save_batch(&mut self, b: &Batch) -> Result<(), StorageError> {
        self.change(|d| {
            let key = (b.namespace.clone(), b.batch_id.clone());
            if b.is_running() {
                d.batches.running.insert(key.clone());
            } else {
                d.batches.running.remove(&key);
            }
            d.batches.batches.insert(key, b.clone());
        })
    }

    fn put_batch_item(
        &mut self,
        ns: &str,
        batch_id: &str,
        index: u64,
        item: &BatchItem,
    ) -> Result<(), StorageError> {
        self.change(|d| {
            d.batches
                .items
                .insert((ns.to_string(), batch_id.to_string(), index), item.clone());
        })
    }

    fn purge_batch(
        &mut self,
        ns: &str,
        batch_id: &str,
        max_items: usize,
    ) -> Result<(usize, bool), StorageError> {
        let keys: Vec<u64> = self
            .data
            .batches
            .items(ns, batch_id, 0, max_items.saturating_add(1))
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        let deleted = keys.len().min(max_items);
        let gone = keys.len() <= max_items;
        self.change(|d| {
            for i in &keys[..deleted] {
                d.batches
                    .items
                    .remove(&(ns.to_string(), batch_id.to_string(), *i));
            }
            if gone {
                let key = (ns.to_string(), batch_id.to_string());
                d.batches.running.remove(&key);
                d.batches.batches.remove(&key);
            }
        })?;
        Ok((deleted, gone))
    }
}
