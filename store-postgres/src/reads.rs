//! The reads ([`Snapshot`]), one query each, for snapshots and the writer's
//! transaction alike. A read whose caller may stop early (a listing's visitor) is
//! fetched a page at a time, continuing after the last key seen.

use railyard_model::RunKey;
use std::collections::BTreeMap;

use railyard_model::Millis;
use railyard_model::auth::ApiKey;
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, RunState};
use railyard_model::schedule::Schedule;
use railyard_store::backend::{CheckpointAt, CheckpointHead, CheckpointPage, DueTimer, Snapshot};
use railyard_store::records;
use railyard_store::{StorageError, StoredTask};

use crate::conn::params;
use crate::txn::{PgTxn, bound, col, col_u64, limit};

/// Rows fetched at a time by a read that a visitor may stop.
const PAGE: i64 = 100;

impl PgTxn {
    fn decode_run(&self, bytes: &[u8]) -> Result<RunState, StorageError> {
        records::decode_run(bytes, &self.defs, &self.definitions())
    }
}

impl Snapshot for PgTxn {
    fn run(&self, key: &RunKey) -> Result<Option<RunState>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let row = self.conn().query_opt(
            "SELECT record FROM runs WHERE ns = $1 AND run_id = $2",
            params![ns.to_string(), run_id.to_string()],
        )?;
        row.map(|r| self.decode_run(&col::<Vec<u8>>(&r, 0)?)).transpose()
    }

    fn history(&self, key: &RunKey, from: u64, limit_: usize) -> Result<Vec<Event>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let rows = self.conn().query(
            "SELECT record FROM events WHERE ns = $1 AND run_id = $2 AND event_id >= $3
             ORDER BY event_id LIMIT $4",
            params![
                ns.to_string(),
                run_id.to_string(),
                bound(from.max(1)),
                limit(limit_)
            ],
        )?;
        rows.iter()
            .map(|r| records::decode_event(&col::<Vec<u8>>(r, 0)?, &self.defs, &self.definitions()))
            .collect()
    }

    fn checkpoint(&self, key: &RunKey, at: CheckpointAt) -> Result<Vec<u8>, StorageError> {
        self.checkpoint_whole(key, at)
    }

    fn checkpoint_head(
        &self,
        key: &RunKey,
        at: CheckpointAt,
    ) -> Result<Option<CheckpointHead>, StorageError> {
        self.checkpoint_head_at(key, at)
    }

    fn checkpoint_page(
        &self,
        key: &RunKey,
        at: CheckpointAt,
        offset: u64,
        limit_: usize,
    ) -> Result<CheckpointPage, StorageError> {
        self.checkpoint_page_at(key, at, offset, limit_)
    }

    fn step_checkpoint_heads(
        &self,
        key: &RunKey,
        _steps: u32,
    ) -> Result<Vec<(u32, CheckpointHead)>, StorageError> {
        self.step_heads(key)
    }

    fn runs_by_start(
        &self,
        ns: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        let mut before = (before.0, before.1.to_string());
        loop {
            // Newest first, strictly before the cursor; an index entry whose run is
            // gone is skipped, as in the other backends.
            let rows = self.conn().query(
                "SELECT s.start_ms, s.run_id, r.record FROM runs_by_start s
                 JOIN runs r ON r.ns = s.ns AND r.run_id = s.run_id
                 WHERE s.ns = $1 AND s.start_ms >= $2 AND (s.start_ms, s.run_id) < ($3, $4)
                 ORDER BY s.start_ms DESC, s.run_id DESC LIMIT $5",
                params![ns.to_string(), from_ms, before.0, before.1.clone(), PAGE],
            )?;
            for row in &rows {
                let (ms, id): (i64, String) = (col(row, 0)?, col(row, 1)?);
                let run = self.decode_run(&col::<Vec<u8>>(row, 2)?)?;
                if !visit(ms, &id, run) {
                    return Ok(());
                }
                before = (ms, id);
            }
            if (rows.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }

    fn runs_by_term(
        &self,
        ns: &str,
        term: &str,
        from_ms: Millis,
        before: (Millis, &str),
        visit: &mut dyn FnMut(Millis, &str, RunState) -> bool,
    ) -> Result<(), StorageError> {
        let mut before = (before.0, before.1.to_string());
        loop {
            let rows = self.conn().query(
                "SELECT t.start_ms, t.run_id, r.record FROM run_terms t
                 JOIN runs r ON r.ns = t.ns AND r.run_id = t.run_id
                 WHERE t.ns = $1 AND t.term = $2 AND t.start_ms >= $3 AND (t.start_ms, t.run_id) < ($4, $5)
                 ORDER BY t.start_ms DESC, t.run_id DESC LIMIT $6",
                params![
                    ns.to_string(),
                    term.to_string(),
                    from_ms,
                    before.0,
                    before.1.clone(),
                    PAGE
                ],
            )?;
            for row in &rows {
                let (ms, id): (i64, String) = (col(row, 0)?, col(row, 1)?);
                let run = self.decode_run(&col::<Vec<u8>>(row, 2)?)?;
                if !visit(ms, &id, run) {
                    return Ok(());
                }
                before = (ms, id);
            }
            if (rows.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }

    fn term_count(&self, ns: &str, term: &str, cap: u64) -> Result<u64, StorageError> {
        let row = self.conn().query_opt(
            "SELECT count(*) FROM (SELECT 1 FROM run_terms WHERE ns = $1 AND term = $2 LIMIT $3) t",
            params![
                ns.to_string(),
                term.to_string(),
                i64::try_from(cap).unwrap_or(i64::MAX)
            ],
        )?;
        Ok(row.map_or(Ok(0), |r| col::<i64>(&r, 0))?.try_into().unwrap_or(0))
    }

    fn next_term(&self, ns: &str, from: &str, inclusive: bool) -> Result<Option<String>, StorageError> {
        // One probe of the primary key (ns, term, ...) either way.
        let sql = if inclusive {
            "SELECT term FROM run_terms WHERE ns = $1 AND term >= $2 ORDER BY term LIMIT 1"
        } else {
            "SELECT term FROM run_terms WHERE ns = $1 AND term > $2 ORDER BY term LIMIT 1"
        };
        let row = self
            .conn()
            .query_opt(sql, params![ns.to_string(), from.to_string()])?;
        row.map(|r| col::<String>(&r, 0)).transpose()
    }

    fn children(&self, ns: &str, parent: &str) -> Result<Vec<String>, StorageError> {
        let rows = self.conn().query(
            "SELECT child_id FROM children WHERE ns = $1 AND parent_id = $2 ORDER BY child_id",
            params![ns.to_string(), parent.to_string()],
        )?;
        rows.iter().map(|r| col(r, 0)).collect()
    }

    fn ready_tasks(&self) -> Result<Vec<StoredTask>, StorageError> {
        let rows = self.conn().query(
            "SELECT ns, queue, seq, run_id FROM tasks ORDER BY ns, queue, seq",
            params![],
        )?;
        rows.iter()
            .map(|r| {
                Ok(StoredTask {
                    namespace: col(r, 0)?,
                    queue: col(r, 1)?,
                    task_seq: col_u64(r, 2, "task")?,
                    run_id: col(r, 3)?,
                })
            })
            .collect()
    }

    fn open_runs(&self, visit: &mut dyn FnMut(RunState)) -> Result<(), StorageError> {
        // Read at start, to rebuild lease deadlines: every one is wanted.
        let rows = self.conn().query(
            "SELECT r.record FROM open_runs o JOIN runs r ON r.ns = o.ns AND r.run_id = o.run_id
             ORDER BY o.ns, o.run_id",
            params![],
        )?;
        for row in &rows {
            visit(self.decode_run(&col::<Vec<u8>>(row, 0)?)?);
        }
        Ok(())
    }

    fn open_run_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        let mut counts: BTreeMap<String, u64> = self.namespaces()?.into_iter().map(|ns| (ns, 0)).collect();
        let rows = self
            .conn()
            .query("SELECT ns, count(*) FROM open_runs GROUP BY ns", params![])?;
        for row in &rows {
            counts.insert(col(row, 0)?, col_u64(row, 1, "open run count")?);
        }
        Ok(counts)
    }

    fn next_timer_due(&self) -> Result<Option<Millis>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT due_ms FROM timers ORDER BY due_ms, seq LIMIT 1",
            params![],
        )?;
        row.map(|r| col(&r, 0)).transpose()
    }

    fn due_timers(&self, now: Millis, max: usize) -> Result<Vec<DueTimer>, StorageError> {
        let rows = self.conn().query(
            "SELECT due_ms, seq, record FROM timers WHERE due_ms <= $1 ORDER BY due_ms, seq LIMIT $2",
            params![now, limit(max)],
        )?;
        rows.iter()
            .map(|r| {
                let key = (col(r, 0)?, col_u64(r, 1, "timer")?);
                Ok((key, records::decode_timer(&col::<Vec<u8>>(r, 2)?)))
            })
            .collect()
    }

    fn namespaces(&self) -> Result<Vec<String>, StorageError> {
        let rows = self
            .conn()
            .query("SELECT name FROM namespaces ORDER BY name", params![])?;
        rows.iter().map(|r| col(r, 0)).collect()
    }

    fn namespace(&self, name: &str) -> Result<Option<Namespace>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT record FROM namespaces WHERE name = $1",
            params![name.to_string()],
        )?;
        row.map(|r| records::decode_namespace(name, &col::<Vec<u8>>(&r, 0)?))
            .transpose()
    }

    fn idempotency(&self, ns: &str, key: &str) -> Result<Option<String>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT run_id FROM idempotency WHERE ns = $1 AND key = $2",
            params![ns.to_string(), key.to_string()],
        )?;
        row.map(|r| col(&r, 0)).transpose()
    }

    fn max_seq(&self) -> Result<u64, StorageError> {
        let row = self.conn().query_opt(
            "SELECT (SELECT COALESCE(max(seq), 0) FROM tasks), (SELECT COALESCE(max(seq), 0) FROM timers)",
            params![],
        )?;
        let Some(row) = row else {
            return Ok(0);
        };
        Ok(col_u64(&row, 0, "task")?.max(col_u64(&row, 1, "timer")?))
    }

    fn schedule(&self, ns: &str, schedule_id: &str) -> Result<Option<Schedule>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT record FROM schedules WHERE ns = $1 AND schedule_id = $2",
            params![ns.to_string(), schedule_id.to_string()],
        )?;
        row.map(|r| records::decode_schedule(&col::<Vec<u8>>(&r, 0)?))
            .transpose()
    }

    fn schedules(
        &self,
        ns: &str,
        after: &str,
        visit: &mut dyn FnMut(Schedule) -> bool,
    ) -> Result<(), StorageError> {
        let mut after = after.to_string();
        loop {
            let rows = self.conn().query(
                "SELECT schedule_id, record FROM schedules WHERE ns = $1 AND schedule_id > $2
                 ORDER BY schedule_id LIMIT $3",
                params![ns.to_string(), after.clone(), PAGE],
            )?;
            for row in &rows {
                if !visit(records::decode_schedule(&col::<Vec<u8>>(row, 1)?)?) {
                    return Ok(());
                }
                after = col(row, 0)?;
            }
            if (rows.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }

    fn schedule_counts(&self) -> Result<BTreeMap<String, u64>, StorageError> {
        let rows = self
            .conn()
            .query("SELECT ns, count(*) FROM schedules GROUP BY ns", params![])?;
        rows.iter()
            .map(|r| Ok((col(r, 0)?, col_u64(r, 1, "schedule count")?)))
            .collect()
    }

    fn closed_runs(
        &self,
        ns: &str,
        after: Option<(Millis, &str)>,
        up_to_ms: Millis,
        limit_: usize,
    ) -> Result<Vec<(Millis, String)>, StorageError> {
        let rows = match after {
            Some((ms, id)) => self.conn().query(
                "SELECT close_ms, run_id FROM runs_by_close
                 WHERE ns = $1 AND (close_ms, run_id) > ($2, $3) AND close_ms <= $4
                 ORDER BY close_ms, run_id LIMIT $5",
                params![ns.to_string(), ms, id.to_string(), up_to_ms, limit(limit_)],
            )?,
            None => self.conn().query(
                "SELECT close_ms, run_id FROM runs_by_close WHERE ns = $1 AND close_ms <= $2
                 ORDER BY close_ms, run_id LIMIT $3",
                params![ns.to_string(), up_to_ms, limit(limit_)],
            )?,
        };
        rows.iter().map(|r| Ok((col(r, 0)?, col(r, 1)?))).collect()
    }

    fn api_key(&self, key_id: &str) -> Result<Option<ApiKey>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT record FROM api_keys WHERE key_id = $1",
            params![key_id.to_string()],
        )?;
        row.map(|r| records::decode_api_key(&col::<Vec<u8>>(&r, 0)?))
            .transpose()
    }

    fn api_keys(&self, after: &str, visit: &mut dyn FnMut(ApiKey) -> bool) -> Result<(), StorageError> {
        let mut after = after.to_string();
        loop {
            let rows = self.conn().query(
                "SELECT key_id, record FROM api_keys WHERE key_id > $1 ORDER BY key_id LIMIT $2",
                params![after.clone(), PAGE],
            )?;
            for row in &rows {
                if !visit(records::decode_api_key(&col::<Vec<u8>>(row, 1)?)?) {
                    return Ok(());
                }
                after = col(row, 0)?;
            }
            if (rows.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }
}
