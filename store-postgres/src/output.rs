//! Live output on PostgreSQL (`railyard_store::output`): the `run_output` and
//! `run_output_heads` tables, written in transactions of their own (never the
//! writer's, and not fenced by the writer lease: output is not history, and only the
//! leading node appends, since followers forward the append RPC to it).
//!
//! An append is one transaction of two statements whatever the batch holds: the
//! chunks and the heads go in as arrays (`unnest`).

use railyard_model::Millis;
use railyard_model::RunKey;
use railyard_model::output::OutputChunk;
use railyard_store::StorageError;
use railyard_store::output::{
    OutputHead, OutputStore, QuietRun, RunAppend, decode_chunk, decode_head, encode_chunk, encode_head,
};

use crate::conn::{Db, params};
use crate::txn::col;

/// Live output in the database's `run_output` tables.
pub struct PgOutput {
    pub(crate) db: Db,
}

impl PgOutput {
    fn in_tx<T>(
        &self,
        f: impl FnOnce(&crate::conn::Conn) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let conn = self.db.begin("BEGIN")?;
        match f(&conn).and_then(|v| conn.commit().map(|()| v)) {
            Ok(v) => Ok(v),
            Err(e) => {
                conn.rollback();
                Err(e)
            }
        }
    }
}

impl OutputStore for PgOutput {
    fn append(&self, batch: &[RunAppend]) -> Result<(), StorageError> {
        let (mut c_ns, mut c_run, mut c_off, mut c_rec) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut h_ns, mut h_run, mut h_last, mut h_rec) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for a in batch {
            for c in &a.chunks {
                c_ns.push(a.ns.clone());
                c_run.push(a.run_id.clone());
                c_off.push(i64::try_from(c.offset).unwrap_or(i64::MAX));
                c_rec.push(encode_chunk(c)?);
            }
            h_ns.push(a.ns.clone());
            h_run.push(a.run_id.clone());
            h_last.push(a.head.last_ms);
            h_rec.push(encode_head(&a.head)?);
        }
        self.in_tx(|conn| {
            conn.write(
                "INSERT INTO run_output (ns, run_id, \"offset\", record)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[])
                 ON CONFLICT (ns, run_id, \"offset\") DO UPDATE SET record = excluded.record",
                params![c_ns, c_run, c_off, c_rec],
            )?;
            conn.write(
                "INSERT INTO run_output_heads (ns, run_id, last_ms, record)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[])
                 ON CONFLICT (ns, run_id) DO UPDATE SET last_ms = excluded.last_ms, record = excluded.record",
                params![h_ns, h_run, h_last, h_rec],
            )?;
            Ok(())
        })
    }

    fn head(&self, key: &RunKey) -> Result<Option<OutputHead>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let row = self.in_tx(|conn| {
            conn.query_opt(
                "SELECT record FROM run_output_heads WHERE ns = $1 AND run_id = $2",
                params![ns.to_string(), run_id.to_string()],
            )
        })?;
        row.map(|r| decode_head(&col::<Vec<u8>>(&r, 0)?)).transpose()
    }

    fn read(&self, key: &RunKey, from: u64, limit: usize) -> Result<Vec<OutputChunk>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let rows = self.in_tx(|conn| {
            conn.query(
                "SELECT record FROM run_output WHERE ns = $1 AND run_id = $2 AND \"offset\" >= $3
                 ORDER BY \"offset\" LIMIT $4",
                params![
                    ns.to_string(),
                    run_id.to_string(),
                    i64::try_from(from).unwrap_or(i64::MAX),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
            )
        })?;
        rows.iter()
            .map(|r| decode_chunk(&col::<Vec<u8>>(r, 0)?))
            .collect()
    }

    fn quiet_runs(
        &self,
        up_to_ms: Millis,
        after: Option<&QuietRun>,
        limit: usize,
    ) -> Result<Vec<QuietRun>, StorageError> {
        let (a_ms, a_ns, a_run) = after.map_or((Millis::MIN, String::new(), String::new()), |a| {
            (a.last_ms, a.ns.clone(), a.run_id.clone())
        });
        let rows = self.in_tx(|conn| {
            conn.query(
                "SELECT last_ms, ns, run_id FROM run_output_heads
                 WHERE last_ms <= $1 AND (last_ms, ns, run_id) > ($2, $3, $4)
                 ORDER BY last_ms, ns, run_id LIMIT $5",
                params![
                    up_to_ms,
                    a_ms,
                    a_ns,
                    a_run,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
            )
        })?;
        rows.iter()
            .map(|r| {
                Ok(QuietRun {
                    last_ms: col(r, 0)?,
                    ns: col(r, 1)?,
                    run_id: col(r, 2)?,
                })
            })
            .collect()
    }

    fn purge(&self, runs: &[RunKey]) -> Result<(), StorageError> {
        let ns: Vec<String> = runs.iter().map(|r| r.namespace.clone()).collect();
        let ids: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
        self.in_tx(|conn| {
            conn.write(
                "DELETE FROM run_output WHERE (ns, run_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
                params![ns.clone(), ids.clone()],
            )?;
            conn.write(
                "DELETE FROM run_output_heads WHERE (ns, run_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
                params![ns, ids],
            )?;
            Ok(())
        })
    }
}
