//! The batch tables in redb: [`BatchReads`] for snapshots and write transactions
//! (over [`OpenForRead`]), [`BatchWrites`] for write transactions. Made at every
//! open when missing, so an older file gains them empty.

use redb::{ReadableTable, TableDefinition};

use super::RedbTx;
use super::triggers::OpenForRead;
use crate::backend::{BatchReads, BatchWrites};
use crate::error::StorageError;
use crate::records;
use railyard_model::batch::{Batch, BatchItem};

/// (namespace, batch id) → batch record.
pub(crate) const BATCHES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("batches");
/// (namespace, batch id, index) → batch item record.
pub(crate) const BATCH_ITEMS: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("batch_items");
/// (namespace, batch id) of each running batch.
pub(crate) const RUNNING_BATCHES: TableDefinition<(&str, &str), ()> = TableDefinition::new("running_batches");

/// Creates the tables (at open).
pub(super) fn create_tables(tx: &super::logged::LoggedTx<'_>) -> Result<(), StorageError> {
    tx.open_table(BATCHES)?;
    tx.open_table(BATCH_ITEMS)?;
    tx.open_table(RUNNING_BATCHES)?;
    Ok(())
}

impl<T: OpenForRead> BatchReads for T {
    fn batch(&self, ns: &str, batch_id: &str) -> Result<Option<Batch>, StorageError> {
        self.open_for_read(BATCHES)?
            .get((ns, batch_id))?
            .map(|v| records::decode_batch(v.value()))
            .transpose()
    }

    fn batches(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), StorageError> {
        let t = self.open_for_read(BATCHES)?;
        for row in t.range((ns, after)..)? {
            let (k, v) = row?;
            let (row_ns, id) = k.value();
            if row_ns != ns {
                break;
            }
            if id == after {
                continue;
            }
            if !visit(records::decode_batch(v.value())?) {
                break;
            }
        }
        Ok(())
    }

    fn running_batches(&self) -> Result<Vec<(String, String)>, StorageError> {
        let t = self.open_for_read(RUNNING_BATCHES)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, _) = row?;
            let (ns, id) = k.value();
            out.push((ns.to_string(), id.to_string()));
        }
        Ok(out)
    }

    fn batch_items(
        &self,
        ns: &str,
        batch_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, BatchItem)>, StorageError> {
        let t = self.open_for_read(BATCH_ITEMS)?;
        let mut out = Vec::new();
        for row in t
            .range((ns, batch_id, from)..=(ns, batch_id, u64::MAX))?
            .take(limit)
        {
            let (k, v) = row?;
            out.push((k.value().2, records::decode_batch_item(v.value())?));
        }
        Ok(out)
    }
}

impl BatchWrites for RedbTx<'_> {
    fn save_batch(&mut self, b: &Batch) -> Result<(), StorageError> {
        let row = records::encode_batch(b)?;
        let key = (b.namespace.as_str(), b.batch_id.as_str());
        self.tx.open_table(BATCHES)?.insert(key, row.as_slice())?;
        let mut running = self.tx.open_table(RUNNING_BATCHES)?;
        if b.is_running() {
            running.insert(key, ())?;
        } else {
            running.remove(key)?;
        }
        Ok(())
    }

    fn put_batch_item(
        &mut self,
        ns: &str,
        batch_id: &str,
        index: u64,
        item: &BatchItem,
    ) -> Result<(), StorageError> {
        let row = records::encode_batch_item(item)?;
        self.tx
            .open_table(BATCH_ITEMS)?
            .insert((ns, batch_id, index), row.as_slice())?;
        Ok(())
    }

    fn purge_batch(
        &mut self,
        ns: &str,
        batch_id: &str,
        max_items: usize,
    ) -> Result<(usize, bool), StorageError> {
        let mut items = self.tx.open_table(BATCH_ITEMS)?;
        let keys: Vec<u64> = items
            .range((ns, batch_id, 0)..=(ns, batch_id, u64::MAX))?
            .take(max_items.saturating_add(1))
            .map(|row| row.map(|(k, _)| k.value().2))
            .collect::<Result<_, _>>()?;
        let deleted = keys.len().min(max_items);
        for i in &keys[..deleted] {
            items.remove((ns, batch_id, *i))?;
        }
        let gone = keys.len() <= max_items;
        if gone {
            self.tx.open_table(BATCHES)?.remove((ns, batch_id))?;
            self.tx.open_table(RUNNING_BATCHES)?.remove((ns, batch_id))?;
        }
        Ok((deleted, gone))
    }
}
