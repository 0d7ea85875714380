//! The batch tables: [`BatchReads`] for snapshots and the writer's transaction,
//! [`BatchWrites`] for the writer's.

use railyard_model::batch::{Batch, BatchItem};
use railyard_store::backend::{BatchReads, BatchWrites};
use railyard_store::{StorageError, records};

use crate::conn::params;
use crate::txn::{PgTxn, bound, col, col_u64, int, limit};

/// Batches fetched at a time by a listing its visitor may stop.
const PAGE: i64 = 100;

impl BatchReads for PgTxn {
    fn batch(&self, ns: &str, batch_id: &str) -> Result<Option<Batch>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT record FROM batches WHERE ns = $1 AND batch_id = $2",
            params![ns.to_string(), batch_id.to_string()],
        )?;
        row.map(|r| records::decode_batch(&col::<Vec<u8>>(&r, 0)?))
            .transpose()
    }

    fn batches(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), StorageError> {
        let mut after = after.to_string();
        loop {
            let rows = self.conn().query(
                "SELECT batch_id, record FROM batches WHERE ns = $1 AND batch_id > $2
                 ORDER BY batch_id LIMIT $3",
                params![ns.to_string(), after.clone(), PAGE],
            )?;
            for row in &rows {
                if !visit(records::decode_batch(&col::<Vec<u8>>(row, 1)?)?) {
                    return Ok(());
                }
                after = col(row, 0)?;
            }
            if (rows.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }

    fn running_batches(&self) -> Result<Vec<(String, String)>, StorageError> {
        let rows = self.conn().query(
            "SELECT ns, batch_id FROM running_batches ORDER BY ns, batch_id",
            params![],
        )?;
        rows.iter().map(|r| Ok((col(r, 0)?, col(r, 1)?))).collect()
    }

    fn batch_items(
        &self,
        ns: &str,
        batch_id: &str,
        from: u64,
        max: usize,
    ) -> Result<Vec<(u64, BatchItem)>, StorageError> {
        let rows = self.conn().query(
            "SELECT idx, record FROM batch_items WHERE ns = $1 AND batch_id = $2 AND idx >= $3
             ORDER BY idx LIMIT $4",
            params![ns.to_string(), batch_id.to_string(), bound(from), limit(max)],
        )?;
        rows.iter()
            .map(|r| {
                Ok((
                    col_u64(r, 0, "batch item")?,
                    records::decode_batch_item(&col::<Vec<u8>>(r, 1)?)?,
                ))
            })
            .collect()
    }
}

impl BatchWrites for PgTxn {
    fn save_batch(&mut self, b: &Batch) -> Result<(), StorageError> {
        let record = records::encode_batch(b)?;
        self.conn().write(
            "INSERT INTO batches (ns, batch_id, record) VALUES ($1, $2, $3)
             ON CONFLICT (ns, batch_id) DO UPDATE SET record = excluded.record",
            params![b.namespace.clone(), b.batch_id.clone(), record],
        )?;
        if b.is_running() {
            self.conn().write(
                "INSERT INTO running_batches (ns, batch_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                params![b.namespace.clone(), b.batch_id.clone()],
            )?;
        } else {
            self.conn().write(
                "DELETE FROM running_batches WHERE ns = $1 AND batch_id = $2",
                params![b.namespace.clone(), b.batch_id.clone()],
            )?;
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
        let record = records::encode_batch_item(item)?;
        self.conn().write(
            "INSERT INTO batch_items (ns, batch_id, idx, record) VALUES ($1, $2, $3, $4)
             ON CONFLICT (ns, batch_id, idx) DO UPDATE SET record = excluded.record",
            params![ns.to_string(), batch_id.to_string(), int(index)?, record],
        )?;
        Ok(())
    }

    fn purge_batch(
        &mut self,
        ns: &str,
        batch_id: &str,
        max_items: usize,
    ) -> Result<(usize, bool), StorageError> {
        let deleted = self.conn().execute(
            "DELETE FROM batch_items WHERE (ns, batch_id, idx) IN (
                 SELECT ns, batch_id, idx FROM batch_items WHERE ns = $1 AND batch_id = $2
                 ORDER BY idx LIMIT $3)",
            params![ns.to_string(), batch_id.to_string(), limit(max_items)],
        )?;
        let left = self.conn().query_opt(
            "SELECT 1 FROM batch_items WHERE ns = $1 AND batch_id = $2 LIMIT 1",
            params![ns.to_string(), batch_id.to_string()],
        )?;
        let gone = left.is_none();
        if gone {
            self.conn().write(
                "DELETE FROM running_batches WHERE ns = $1 AND batch_id = $2",
                params![ns.to_string(), batch_id.to_string()],
            )?;
            self.conn().write(
                "DELETE FROM batches WHERE ns = $1 AND batch_id = $2",
                params![ns.to_string(), batch_id.to_string()],
            )?;
        }
        Ok((usize::try_from(deleted).unwrap_or(usize::MAX), gone))
    }
}
