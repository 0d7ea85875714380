//! The trigger tables: [`TriggerReads`] for snapshots and the writer's transaction,
//! [`TriggerWrites`] for the writer's.

use railyard_model::Millis;
use railyard_model::RunKey;
use railyard_model::trigger::{HookDelivery, KeyHolder, QueuedStart, Trigger};
use railyard_store::backend::{TriggerReads, TriggerWrites};
use railyard_store::{StorageError, records};

use crate::conn::params;
use crate::txn::{PgTxn, col, col_u64, int, limit};

/// Triggers fetched at a time by a listing its visitor may stop.
const PAGE: i64 = 100;

impl TriggerReads for PgTxn {
    fn trigger(&self, ns: &str, id: &str) -> Result<Option<Trigger>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT record FROM triggers WHERE ns = $1 AND trigger_id = $2",
            params![ns.to_string(), id.to_string()],
        )?;
        row.map(|r| records::decode_trigger(&col::<Vec<u8>>(&r, 0)?))
            .transpose()
    }

    fn triggers(
        &self,
        ns: Option<&str>,
        after: &str,
        visit: &mut dyn FnMut(Trigger) -> bool,
    ) -> Result<(), StorageError> {
        // One namespace after `after`; or every namespace, from the start (as the
        // other backends: `after` names an id within a namespace).
        let mut cursor: Option<(String, String)> = ns.map(|ns| (ns.to_string(), after.to_string()));
        loop {
            let rows = match (ns, &cursor) {
                (Some(ns), Some((_, after))) => self.conn().query(
                    "SELECT ns, trigger_id, record FROM triggers WHERE ns = $1 AND trigger_id > $2
                     ORDER BY trigger_id LIMIT $3",
                    params![ns.to_string(), after.clone(), PAGE],
                )?,
                (None, Some((last_ns, last_id))) => self.conn().query(
                    "SELECT ns, trigger_id, record FROM triggers WHERE (ns, trigger_id) > ($1, $2)
                     ORDER BY ns, trigger_id LIMIT $3",
                    params![last_ns.clone(), last_id.clone(), PAGE],
                )?,
                (_, None) => self.conn().query(
                    "SELECT ns, trigger_id, record FROM triggers ORDER BY ns, trigger_id LIMIT $1",
                    params![PAGE],
                )?,
            };
            for row in &rows {
                if !visit(records::decode_trigger(&col::<Vec<u8>>(row, 2)?)?) {
                    return Ok(());
                }
                cursor = Some((col(row, 0)?, col(row, 1)?));
            }
            if (rows.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }

    fn hook_delivery(
        &self,
        ns: &str,
        trigger: &str,
        delivery: &str,
    ) -> Result<Option<HookDelivery>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT record FROM hook_deliveries WHERE ns = $1 AND trigger_id = $2 AND delivery_id = $3",
            params![ns.to_string(), trigger.to_string(), delivery.to_string()],
        )?;
        row.map(|r| records::decode_hook_delivery(&col::<Vec<u8>>(&r, 0)?))
            .transpose()
    }

    fn trigger_key(&self, ns: &str, trigger: &str, key: &str) -> Result<Option<String>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT run_id FROM trigger_keys WHERE ns = $1 AND trigger_id = $2 AND key = $3",
            params![ns.to_string(), trigger.to_string(), key.to_string()],
        )?;
        row.map(|r| col(&r, 0)).transpose()
    }

    fn key_holder(&self, key: &RunKey) -> Result<Option<KeyHolder>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let row = self.conn().query_opt(
            "SELECT record FROM trigger_runs WHERE ns = $1 AND run_id = $2",
            params![ns.to_string(), run_id.to_string()],
        )?;
        row.map(|r| records::decode_key_holder(&col::<Vec<u8>>(&r, 0)?))
            .transpose()
    }

    fn queued_starts(
        &self,
        ns: &str,
        trigger: &str,
        key: &str,
        max: usize,
    ) -> Result<Vec<(u64, QueuedStart)>, StorageError> {
        let rows = self.conn().query(
            "SELECT seq, record FROM trigger_queue WHERE ns = $1 AND trigger_id = $2 AND key = $3
             ORDER BY seq LIMIT $4",
            params![ns.to_string(), trigger.to_string(), key.to_string(), limit(max)],
        )?;
        rows.iter()
            .map(|r| {
                Ok((
                    col_u64(r, 0, "queued start")?,
                    records::decode_queued_start(&col::<Vec<u8>>(r, 1)?)?,
                ))
            })
            .collect()
    }
}

impl TriggerWrites for PgTxn {
    fn save_trigger(&mut self, t: &Trigger) -> Result<(), StorageError> {
        let record = records::encode_trigger(t)?;
        self.conn().write(
            "INSERT INTO triggers (ns, trigger_id, record) VALUES ($1, $2, $3)
             ON CONFLICT (ns, trigger_id) DO UPDATE SET record = excluded.record",
            params![t.namespace.clone(), t.id.clone(), record],
        )?;
        Ok(())
    }

    fn delete_trigger(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM triggers WHERE ns = $1 AND trigger_id = $2",
            params![ns.to_string(), id.to_string()],
        )?;
        Ok(())
    }

    fn put_hook_delivery(
        &mut self,
        ns: &str,
        trigger: &str,
        delivery: &str,
        d: &HookDelivery,
    ) -> Result<(), StorageError> {
        let record = records::encode_hook_delivery(d)?;
        self.conn().write(
            "INSERT INTO hook_deliveries (ns, trigger_id, delivery_id, record) VALUES ($1, $2, $3, $4)
             ON CONFLICT (ns, trigger_id, delivery_id) DO UPDATE SET record = excluded.record",
            params![ns.to_string(), trigger.to_string(), delivery.to_string(), record],
        )?;
        self.conn().write(
            "INSERT INTO hook_delivery_times (received_ms, ns, trigger_id, delivery_id) VALUES ($1, $2, $3, $4)
             ON CONFLICT (received_ms, ns, trigger_id, delivery_id) DO NOTHING",
            params![d.received_ms, ns.to_string(), trigger.to_string(), delivery.to_string()],
        )?;
        Ok(())
    }

    fn purge_hook_deliveries(&mut self, before: Millis, max: usize) -> Result<usize, StorageError> {
        let rows = self.conn().query(
            "SELECT received_ms, ns, trigger_id, delivery_id FROM hook_delivery_times
             WHERE received_ms < $1 ORDER BY received_ms, ns, trigger_id, delivery_id LIMIT $2",
            params![before, limit(max)],
        )?;
        for row in &rows {
            let (at, ns, trigger, delivery): (Millis, String, String, String) =
                (col(row, 0)?, col(row, 1)?, col(row, 2)?, col(row, 3)?);
            self.conn().write(
                "DELETE FROM hook_delivery_times
                 WHERE received_ms = $1 AND ns = $2 AND trigger_id = $3 AND delivery_id = $4",
                params![at, ns.clone(), trigger.clone(), delivery.clone()],
            )?;
            // A delivery id seen again later has a newer time row: keep its entry.
            let current = self.hook_delivery(&ns, &trigger, &delivery)?;
            if current.is_some_and(|d| d.received_ms == at) {
                self.conn().write(
                    "DELETE FROM hook_deliveries WHERE ns = $1 AND trigger_id = $2 AND delivery_id = $3",
                    params![ns, trigger, delivery],
                )?;
            }
        }
        Ok(rows.len())
    }

    fn set_trigger_key(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        run_id: Option<&str>,
    ) -> Result<(), StorageError> {
        match run_id {
            Some(run_id) => self.conn().write(
                "INSERT INTO trigger_keys (ns, trigger_id, key, run_id) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (ns, trigger_id, key) DO UPDATE SET run_id = excluded.run_id",
                params![
                    ns.to_string(),
                    trigger.to_string(),
                    key.to_string(),
                    run_id.to_string()
                ],
            )?,
            None => self.conn().write(
                "DELETE FROM trigger_keys WHERE ns = $1 AND trigger_id = $2 AND key = $3",
                params![ns.to_string(), trigger.to_string(), key.to_string()],
            )?,
        };
        Ok(())
    }

    fn set_key_holder(&mut self, key: &RunKey, holder: Option<&KeyHolder>) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        match holder {
            Some(h) => {
                let record = records::encode_key_holder(h)?;
                self.conn().write(
                    "INSERT INTO trigger_runs (ns, run_id, record) VALUES ($1, $2, $3)
                     ON CONFLICT (ns, run_id) DO UPDATE SET record = excluded.record",
                    params![ns.to_string(), run_id.to_string(), record],
                )?
            }
            None => self.conn().write(
                "DELETE FROM trigger_runs WHERE ns = $1 AND run_id = $2",
                params![ns.to_string(), run_id.to_string()],
            )?,
        };
        Ok(())
    }

    fn push_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        q: &QueuedStart,
    ) -> Result<u64, StorageError> {
        // One past the key's last: arrival order holds across restarts, with no
        // sequence (only the writer writes, so nothing races for the number).
        let row = self.conn().query_opt(
            "SELECT COALESCE(max(seq), 0) FROM trigger_queue WHERE ns = $1 AND trigger_id = $2 AND key = $3",
            params![ns.to_string(), trigger.to_string(), key.to_string()],
        )?;
        let last = row.map(|r| col_u64(&r, 0, "queued start")).transpose()?;
        let seq = last.unwrap_or(0) + 1;
        let record = records::encode_queued_start(q)?;
        self.conn().write(
            "INSERT INTO trigger_queue (ns, trigger_id, key, seq, record) VALUES ($1, $2, $3, $4, $5)",
            params![
                ns.to_string(),
                trigger.to_string(),
                key.to_string(),
                int(seq)?,
                record
            ],
        )?;
        Ok(seq)
    }

    fn remove_queued_start(
        &mut self,
        ns: &str,
        trigger: &str,
        key: &str,
        seq: u64,
    ) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM trigger_queue WHERE ns = $1 AND trigger_id = $2 AND key = $3 AND seq = $4",
            params![ns.to_string(), trigger.to_string(), key.to_string(), int(seq)?],
        )?;
        Ok(())
    }
}
