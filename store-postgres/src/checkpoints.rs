//! Checkpoints: the run's one of older releases (`checkpoints`, `checkpoint_segments`)
//! and each step's (`step_checkpoints`, `step_checkpoint_segments`, schema version 10),
//! the same statements over either pair of tables. A step's checkpoint stays where it
//! was written when its step ends: that is its transcript, kept with no bytes copied.

use railyard_model::RunKey;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use railyard_store::StorageError;
use railyard_store::backend::{CheckpointAt, CheckpointDigest, CheckpointHead, CheckpointPage};

use crate::conn::{Param, params};
use crate::txn::{PgTxn, bound, col, col_u64, int};

/// A statement for the checkpoint `at` a run, from a template naming the head table
/// `{H}`, the segments' `{S}`, the key condition `{K}` (over unqualified columns),
/// the key columns `{C}` and their values `{V}`; the statement's own parameters are
/// `$A`, `$B`, `$C2`, `$D`, `$E`, numbered after the key's. Made once per template and
/// place (a handful, leaked: the driver takes `&'static str`).
fn sql(at: CheckpointAt, template: &'static str) -> &'static str {
    static MADE: OnceLock<Mutex<HashMap<(&'static str, bool), &'static str>>> = OnceLock::new();
    let step = matches!(at, CheckpointAt::Step(_));
    let mut made = MADE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    made.entry((template, step)).or_insert_with(|| {
        let (h, s, k, c, v, first) = if step {
            (
                "step_checkpoints",
                "step_checkpoint_segments",
                "ns = $1 AND run_id = $2 AND step = $3",
                "ns, run_id, step",
                "$1, $2, $3",
                4,
            )
        } else {
            (
                "checkpoints",
                "checkpoint_segments",
                "ns = $1 AND run_id = $2",
                "ns, run_id",
                "$1, $2",
                3,
            )
        };
        let mut out = template
            .replace("{H}", h)
            .replace("{S}", s)
            .replace("{K}", k)
            .replace("{C}", c)
            .replace("{V}", v);
        for (i, p) in ["$A", "$B", "$C2", "$D", "$E"].iter().enumerate() {
            out = out.replace(p, &format!("${}", first + i));
        }
        Box::leak(out.into_boxed_str())
    })
}

/// The key's parameters, then `more`.
fn run_params(key: &RunKey, at: CheckpointAt, more: Vec<Param>) -> Vec<Param> {
    let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
    let mut p = params![ns.to_string(), run_id.to_string()];
    if let CheckpointAt::Step(n) = at {
        p.push(Box::new(i64::from(n)));
    }
    p.extend(more);
    p
}

impl PgTxn {
    pub(crate) fn checkpoint_whole(&self, key: &RunKey, at: CheckpointAt) -> Result<Vec<u8>, StorageError> {
        let row = self.conn().query_opt(
            sql(at, "SELECT bytes, segments FROM {H} WHERE {K}"),
            run_params(key, at, vec![]),
        )?;
        let Some(row) = row else {
            return Ok(Vec::new());
        };
        let mut out: Vec<u8> = col(&row, 0)?;
        if col::<i32>(&row, 1)? > 1 {
            let rows = self.conn().query(
                sql(at, "SELECT bytes FROM {S} WHERE {K} ORDER BY seq"),
                run_params(key, at, vec![]),
            )?;
            for r in &rows {
                out.extend_from_slice(&col::<Vec<u8>>(r, 0)?);
            }
        }
        Ok(out)
    }

    pub(crate) fn checkpoint_head_at(
        &self,
        key: &RunKey,
        at: CheckpointAt,
    ) -> Result<Option<CheckpointHead>, StorageError> {
        let row = self.conn().query_opt(
            sql(
                at,
                "SELECT COALESCE(len, octet_length(bytes)::bigint), digest, segments, merged FROM {H} WHERE {K}",
            ),
            run_params(key, at, vec![]),
        )?;
        row.map(|row| head_of(&row, 0)).transpose()
    }

    /// The heads of every step's checkpoint of the run, in one query.
    pub(crate) fn step_heads(&self, key: &RunKey) -> Result<Vec<(u32, CheckpointHead)>, StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let rows = self.conn().query(
            "SELECT COALESCE(len, octet_length(bytes)::bigint), digest, segments, merged, step
             FROM step_checkpoints WHERE ns = $1 AND run_id = $2 ORDER BY step",
            params![ns.to_string(), run_id.to_string()],
        )?;
        rows.iter()
            .map(|r| {
                Ok((
                    u32::try_from(col::<i64>(r, 4)?).unwrap_or(u32::MAX),
                    head_of(r, 0)?,
                ))
            })
            .collect()
    }

    pub(crate) fn checkpoint_page_at(
        &self,
        key: &RunKey,
        at: CheckpointAt,
        offset: u64,
        limit_: usize,
    ) -> Result<CheckpointPage, StorageError> {
        let Some(head) = self.checkpoint_head_at(key, at)? else {
            return Ok(CheckpointPage::default());
        };
        let mut page = CheckpointPage {
            total: head.len,
            bytes: Vec::new(),
            rows_read: 1,
        };
        let limit_ = limit_.min(i32::MAX as usize);
        if offset >= head.len || limit_ == 0 {
            return Ok(page);
        }
        // Only the slices of the segments the page overlaps leave the database
        // (`octet_length` of a stored value reads its header, not its bytes).
        let rows = self.conn().query(
            sql(
                at,
                "WITH segs AS (
                     SELECT 1 AS seq, bytes FROM {H} WHERE {K}
                     UNION ALL
                     SELECT seq, bytes FROM {S} WHERE {K}
                 ), placed AS (
                     SELECT seq, bytes, octet_length(bytes)::bigint AS len,
                            (SUM(octet_length(bytes)) OVER (ORDER BY seq))::bigint AS upto
                     FROM segs
                 )
                 SELECT substring(bytes FROM (GREATEST($A::bigint - (upto - len), 0) + 1)::integer FOR $B::integer)
                 FROM placed WHERE upto > $A::bigint AND upto - len < $A::bigint + $B::integer ORDER BY seq",
            ),
            run_params(
                key,
                at,
                params![bound(offset), i32::try_from(limit_).unwrap_or(i32::MAX)],
            ),
        )?;
        for r in &rows {
            page.rows_read += 1;
            page.bytes.extend_from_slice(&col::<Vec<u8>>(r, 0)?);
        }
        page.bytes.truncate(limit_);
        Ok(page)
    }

    pub(crate) fn set_checkpoint_at(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        checkpoint: Option<(&[u8], &CheckpointDigest)>,
    ) -> Result<(), StorageError> {
        if self.checkpoint_head_at(key, at)?.is_some_and(|h| h.segments > 1) {
            self.conn()
                .write(sql(at, "DELETE FROM {S} WHERE {K}"), run_params(key, at, vec![]))?;
        }
        match checkpoint {
            Some((bytes, digest)) => self.conn().write(
                sql(
                    at,
                    "INSERT INTO {H} ({C}, bytes, len, digest, segments, merged)
                     VALUES ({V}, $A, $B, $C2, 1, 1)
                     ON CONFLICT ({C}) DO UPDATE SET bytes = excluded.bytes, len = excluded.len,
                         digest = excluded.digest, segments = 1, merged = 1",
                ),
                run_params(
                    key,
                    at,
                    params![bytes.to_vec(), int(bytes.len() as u64)?, digest.to_vec()],
                ),
            )?,
            None => self
                .conn()
                .write(sql(at, "DELETE FROM {H} WHERE {K}"), run_params(key, at, vec![]))?,
        };
        Ok(())
    }

    pub(crate) fn append_checkpoint_at(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        let Some(head) = self.checkpoint_head_at(key, at)? else {
            return self.set_checkpoint_at(key, at, Some((bytes, digest)));
        };
        let seq = head.segments + 1;
        let seq = i32::try_from(seq)
            .map_err(|_| StorageError::Encode(format!("checkpoint segment {seq} does not fit").into()))?;
        self.conn().write(
            sql(at, "INSERT INTO {S} ({C}, seq, bytes) VALUES ({V}, $A, $B)"),
            run_params(key, at, params![seq, bytes.to_vec()]),
        )?;
        // The first segment's bytes are not rewritten: an unchanged TOASTed value keeps its place.
        self.conn().write(
            sql(
                at,
                "UPDATE {H} SET len = $A, digest = $B, segments = $C2 WHERE {K}",
            ),
            run_params(
                key,
                at,
                params![int(head.len + bytes.len() as u64)?, digest.to_vec(), seq],
            ),
        )?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn merge_checkpoint_tail_at(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        from: u32,
        bytes: &[u8],
        digest: &CheckpointDigest,
    ) -> Result<(), StorageError> {
        let Some(head) = self.checkpoint_head_at(key, at)? else {
            return self.set_checkpoint_at(key, at, Some((bytes, digest)));
        };
        let from = from.clamp(2, head.segments.max(2));
        let seq = i32::try_from(from)
            .map_err(|_| StorageError::Encode(format!("checkpoint segment {from} does not fit").into()))?;
        let rows = self.conn().query(
            sql(at, "SELECT bytes FROM {S} WHERE {K} AND seq >= $A ORDER BY seq"),
            run_params(key, at, params![seq]),
        )?;
        let mut merged = Vec::new();
        for r in &rows {
            merged.extend_from_slice(&col::<Vec<u8>>(r, 0)?);
        }
        merged.extend_from_slice(bytes);
        self.conn().write(
            sql(at, "DELETE FROM {S} WHERE {K} AND seq >= $A"),
            run_params(key, at, params![seq]),
        )?;
        self.conn().write(
            sql(at, "INSERT INTO {S} ({C}, seq, bytes) VALUES ({V}, $A, $B)"),
            run_params(key, at, params![seq, merged]),
        )?;
        self.conn().write(
            sql(
                at,
                "UPDATE {H} SET len = $A, digest = $B, segments = $C2, merged = $C2 WHERE {K}",
            ),
            run_params(
                key,
                at,
                params![int(head.len + bytes.len() as u64)?, digest.to_vec(), seq],
            ),
        )?;
        Ok(())
    }
}

/// A head from columns `at..at + 4` (length, digest, segments, merged).
fn head_of(row: &tokio_postgres::Row, at: usize) -> Result<CheckpointHead, StorageError> {
    let digest = match col::<Option<Vec<u8>>>(row, at + 1)? {
        None => None,
        Some(d) => Some(
            <[u8; 32]>::try_from(d.as_slice()).map_err(|_| StorageError::Corrupt {
                what: "checkpoint head",
                source: format!("a digest of {} bytes", d.len()).into(),
            })?,
        ),
    };
    Ok(CheckpointHead {
        len: col_u64(row, at, "checkpoint head")?,
        digest,
        segments: u32::try_from(col::<i32>(row, at + 2)?).unwrap_or(0),
        merged: u32::try_from(col::<i32>(row, at + 3)?).unwrap_or(1),
    })
}
