//! The writer's writes ([`WriteTx`]): one statement each, inserts as upserts (a
//! redb insert replaces the value under its key, and so does this), removals of rows
//! that may be absent as plain deletes. Each is held back ([`crate::conn::Conn::write`])
//! and sent with the transaction's next read or its `COMMIT`, in one pipeline.

use railyard_model::Millis;
use railyard_model::RunKey;
use railyard_model::auth::ApiKey;
use railyard_model::namespace::Namespace;
use railyard_model::run::{Event, EventKind, RunState, Timer};
use railyard_model::schedule::Schedule;
use railyard_store::backend::{CheckpointAt, CheckpointDigest, TimerKey, WriteTx, signal_key_prefix};
use railyard_store::{StorageError, records};

use crate::conn::params;
use crate::txn::{PgTxn, int};

impl WriteTx for PgTxn {
    fn save_run(&mut self, run: &RunState, events: &[Event]) -> Result<(), StorageError> {
        let (ns, id) = (run.namespace.clone(), run.run_id.clone());
        for ev in events {
            if let EventKind::RunStarted { definition, .. } = &ev.kind {
                // A new run: its definition's row in this same transaction, unless
                // the table has it (the cache may be ahead of a failed batch).
                let (key, record) = self.defs.record_of(definition)?;
                self.conn().write(
                    "INSERT INTO definitions (workflow_id, version, hash, record) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (workflow_id, version, hash) DO NOTHING",
                    params![key.workflow_id, key.version, key.hash, record],
                )?;
            }
            let record = records::encode_event(ev, &self.defs)?;
            self.conn().write(
                "INSERT INTO events (ns, run_id, event_id, record) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (ns, run_id, event_id) DO UPDATE SET record = excluded.record",
                params![ns.clone(), id.clone(), int(ev.id)?, record],
            )?;
        }
        let record = records::encode_run(run, &self.defs)?;
        self.conn().write(
            "INSERT INTO runs (ns, run_id, record) VALUES ($1, $2, $3)
             ON CONFLICT (ns, run_id) DO UPDATE SET record = excluded.record",
            params![ns, id, record],
        )?;
        let (removed, added) = railyard_model::query::index_delta(run, events);
        self.retag(run, &removed, &added)
    }

    fn set_checkpoint(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        checkpoint: Option<(&[u8], &CheckpointDigest)>,
    ) -> Result<(), StorageError> {
        self.set_checkpoint_at(key, at, checkpoint)
    }

    fn append_checkpoint(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        self.append_checkpoint_at(key, at, bytes, digest)
    }

    fn merge_checkpoint_tail(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        from: u32,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        self.merge_checkpoint_tail_at(key, at, from, bytes, digest)
    }

    fn set_open(&mut self, key: &RunKey, open: bool) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let sql = if open {
            "INSERT INTO open_runs (ns, run_id) VALUES ($1, $2) ON CONFLICT (ns, run_id) DO NOTHING"
        } else {
            "DELETE FROM open_runs WHERE ns = $1 AND run_id = $2"
        };
        self.conn()
            .write(sql, params![ns.to_string(), run_id.to_string()])?;
        Ok(())
    }

    fn insert_task(&mut self, ns: &str, queue: &str, seq: u64, run_id: &str) -> Result<(), StorageError> {
        self.conn().write(
            "INSERT INTO tasks (ns, queue, seq, run_id) VALUES ($1, $2, $3, $4)
             ON CONFLICT (ns, queue, seq) DO UPDATE SET run_id = excluded.run_id",
            params![ns.to_string(), queue.to_string(), int(seq)?, run_id.to_string()],
        )?;
        Ok(())
    }

    fn remove_task(&mut self, ns: &str, queue: &str, seq: u64) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM tasks WHERE ns = $1 AND queue = $2 AND seq = $3",
            params![ns.to_string(), queue.to_string(), int(seq)?],
        )?;
        Ok(())
    }

    fn insert_timer(&mut self, key: TimerKey, timer: &Timer) -> Result<(), StorageError> {
        let record = records::encode_timer(timer)?;
        self.conn().write(
            "INSERT INTO timers (due_ms, seq, record) VALUES ($1, $2, $3)
             ON CONFLICT (due_ms, seq) DO UPDATE SET record = excluded.record",
            params![key.0, int(key.1)?, record],
        )?;
        Ok(())
    }

    fn remove_timer(&mut self, key: TimerKey) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM timers WHERE due_ms = $1 AND seq = $2",
            params![key.0, int(key.1)?],
        )?;
        Ok(())
    }

    fn index_run(
        &mut self,
        ns: &str,
        start_ms: Millis,
        run_id: &str,
        parent: &str,
    ) -> Result<(), StorageError> {
        self.conn().write(
            "INSERT INTO runs_by_start (ns, start_ms, run_id) VALUES ($1, $2, $3)
             ON CONFLICT (ns, start_ms, run_id) DO NOTHING",
            params![ns.to_string(), start_ms, run_id.to_string()],
        )?;
        if !parent.is_empty() {
            self.conn().write(
                "INSERT INTO children (ns, parent_id, child_id) VALUES ($1, $2, $3)
                 ON CONFLICT (ns, parent_id, child_id) DO NOTHING",
                params![ns.to_string(), parent.to_string(), run_id.to_string()],
            )?;
        }
        Ok(())
    }

    fn index_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.conn().write(
            "INSERT INTO runs_by_close (ns, close_ms, run_id) VALUES ($1, $2, $3)
             ON CONFLICT (ns, close_ms, run_id) DO NOTHING",
            params![ns.to_string(), close_ms, run_id.to_string()],
        )?;
        Ok(())
    }

    fn purge_run(&mut self, run: &RunState) -> Result<(), StorageError> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        let key = || params![ns.to_string(), id.to_string()];
        for sql in [
            "DELETE FROM runs WHERE ns = $1 AND run_id = $2",
            "DELETE FROM events WHERE ns = $1 AND run_id = $2",
            "DELETE FROM checkpoints WHERE ns = $1 AND run_id = $2",
            "DELETE FROM checkpoint_segments WHERE ns = $1 AND run_id = $2",
            "DELETE FROM step_checkpoints WHERE ns = $1 AND run_id = $2",
            "DELETE FROM step_checkpoint_segments WHERE ns = $1 AND run_id = $2",
            "DELETE FROM open_runs WHERE ns = $1 AND run_id = $2",
            // The run's own children's entries (they stay, unparented, as in redb).
            "DELETE FROM children WHERE ns = $1 AND parent_id = $2",
        ] {
            self.conn().write(sql, key())?;
        }
        self.conn().write(
            "DELETE FROM runs_by_start WHERE ns = $1 AND start_ms = $2 AND run_id = $3",
            params![ns.to_string(), run.start_ms, id.to_string()],
        )?;
        self.retag(run, &railyard_model::query::index_terms(run), &[])?;
        if let Some(close_ms) = run.close_ms {
            self.unindex_closed(ns, close_ms, id)?;
        }
        if !run.parent_run_id.is_empty() {
            self.conn().write(
                "DELETE FROM children WHERE ns = $1 AND parent_id = $2 AND child_id = $3",
                params![ns.to_string(), run.parent_run_id.clone(), id.to_string()],
            )?;
        }
        if !run.request_id.is_empty() {
            // The start's key, unless another run holds it now.
            self.conn().write(
                "DELETE FROM idempotency WHERE ns = $1 AND key = $2 AND run_id = $3",
                params![
                    ns.to_string(),
                    format!("start:{}", run.request_id),
                    id.to_string()
                ],
            )?;
        }
        // Every signal key of the run: those from its prefix up to the prefix with
        // its last byte (`/`) raised by one (`0`), in byte order (no LIKE, so no
        // escaping of the run id).
        let prefix = signal_key_prefix(id);
        let mut end = prefix.clone();
        end.pop();
        end.push('0');
        self.conn().write(
            "DELETE FROM idempotency WHERE ns = $1 AND key >= $2 AND key < $3",
            params![ns.to_string(), prefix, end],
        )?;
        Ok(())
    }

    fn unindex_closed(&mut self, ns: &str, close_ms: Millis, run_id: &str) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM runs_by_close WHERE ns = $1 AND close_ms = $2 AND run_id = $3",
            params![ns.to_string(), close_ms, run_id.to_string()],
        )?;
        Ok(())
    }

    fn insert_idempotency(&mut self, ns: &str, key: &str, run_id: &str) -> Result<(), StorageError> {
        self.conn().write(
            "INSERT INTO idempotency (ns, key, run_id) VALUES ($1, $2, $3)
             ON CONFLICT (ns, key) DO UPDATE SET run_id = excluded.run_id",
            params![ns.to_string(), key.to_string(), run_id.to_string()],
        )?;
        Ok(())
    }

    fn save_schedule(&mut self, s: &Schedule) -> Result<(), StorageError> {
        let record = records::encode_schedule(s)?;
        self.conn().write(
            "INSERT INTO schedules (ns, schedule_id, record) VALUES ($1, $2, $3)
             ON CONFLICT (ns, schedule_id) DO UPDATE SET record = excluded.record",
            params![s.namespace.clone(), s.id.clone(), record],
        )?;
        Ok(())
    }

    fn delete_schedule(&mut self, ns: &str, schedule_id: &str) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM schedules WHERE ns = $1 AND schedule_id = $2",
            params![ns.to_string(), schedule_id.to_string()],
        )?;
        Ok(())
    }

    fn put_api_key(&mut self, key: &ApiKey) -> Result<(), StorageError> {
        let record = records::encode_api_key(key)?;
        self.conn().write(
            "INSERT INTO api_keys (key_id, record) VALUES ($1, $2)
             ON CONFLICT (key_id) DO UPDATE SET record = excluded.record",
            params![key.key_id.clone(), record],
        )?;
        Ok(())
    }

    fn put_namespace(&mut self, ns: &Namespace) -> Result<(), StorageError> {
        let record = records::encode_namespace(ns)?;
        self.conn().write(
            "INSERT INTO namespaces (name, record) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET record = excluded.record",
            params![ns.name.clone(), record],
        )?;
        Ok(())
    }

    fn remove_namespace(&mut self, name: &str) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM namespaces WHERE name = $1",
            params![name.to_string()],
        )?;
        Ok(())
    }
}

impl PgTxn {
    /// Removes and adds a run's index terms (`run_terms`).
    fn retag(&mut self, run: &RunState, removed: &[String], added: &[String]) -> Result<(), StorageError> {
        // One statement each way, however many terms (a start adds one per word of
        // its goal): a round trip per term would slow every start.
        if !removed.is_empty() {
            self.conn().write(
                "DELETE FROM run_terms WHERE ns = $1 AND term = ANY($2::text[]) AND start_ms = $3 AND run_id = $4",
                params![
                    run.namespace.clone(),
                    removed.to_vec(),
                    run.start_ms,
                    run.run_id.clone()
                ],
            )?;
        }
        if !added.is_empty() {
            self.conn().write(
                "INSERT INTO run_terms (ns, term, start_ms, run_id)
                 SELECT $1::text, t, $3::bigint, $4::text FROM unnest($2::text[]) AS t
                 ON CONFLICT DO NOTHING",
                params![
                    run.namespace.clone(),
                    added.to_vec(),
                    run.start_ms,
                    run.run_id.clone()
                ],
            )?;
        }
        Ok(())
    }
}
