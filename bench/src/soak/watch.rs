//! What a soak under a long transaction watches (docs/postgres.md): a transaction held
//! open on a connection of its own, which holds back vacuum on the whole database for
//! as long as it lives, and the sizes and dead tuples of the backend's tables
//! meanwhile. Each on a [`Session`] of the Postgres backend's.

use std::time::Duration;

use anyhow::Context;
use railyard_store_postgres::{PostgresOptions, Session};

/// A transaction begun (`BEGIN; SELECT txid_current()`) and left idle on a
/// connection of its own, without the server's `idle_in_transaction_session_timeout`;
/// rolled back (its connection closed) on drop.
pub(crate) struct HeldTransaction {
    /// Holds the transaction while it lives.
    _session: Session,
    /// The transaction's id.
    pub txid: i64,
    /// The server process holding it (`pg_stat_activity.pid`).
    pub pid: i32,
}

/// One table's figures from `pg_stat_user_tables`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableFigures {
    /// The table's name.
    pub table: String,
    /// `pg_total_relation_size`: the table, its indexes and its TOAST, in bytes.
    pub total_bytes: i64,
    /// Estimated live rows.
    pub live_tuples: i64,
    /// Estimated dead rows (what vacuum has not reclaimed yet).
    pub dead_tuples: i64,
}

/// Reads the backend's table figures, on a connection of its own.
pub(crate) struct TableWatch {
    session: Session,
}

impl HeldTransaction {
    /// Connects to `url` (as a backend with `options` would) and begins the
    /// transaction. No idle timeout ends it: `0` turns Postgres's off.
    pub(crate) fn begin(url: &str, options: &PostgresOptions) -> anyhow::Result<Self> {
        let session = Session::open(url, options, "railyard-soak-hold", Duration::ZERO)?;
        session.batch("BEGIN")?;
        let rows = session.query("SELECT txid_current(), pg_backend_pid()", Vec::new())?;
        let row = rows.first().context("SELECT txid_current() answered no row")?;
        Ok(Self {
            txid: row.try_get(0)?,
            pid: row.try_get(1)?,
            _session: session,
        })
    }
}

impl TableWatch {
    /// Connects to `url` as a backend with `options` would (its schema too).
    pub(crate) fn open(url: &str, options: &PostgresOptions) -> anyhow::Result<Self> {
        let session = Session::open(
            url,
            options,
            "railyard-soak-watch",
            options.idle_in_transaction_timeout,
        )?;
        Ok(Self { session })
    }

    /// Every table of the backend's schema, largest first.
    pub(crate) fn tables(&self) -> anyhow::Result<Vec<TableFigures>> {
        let rows = self.session.query(
            "SELECT relname::text, pg_total_relation_size(relid), n_live_tup, n_dead_tup
             FROM pg_stat_user_tables WHERE schemaname = current_schema()
             ORDER BY 2 DESC, 1",
            Vec::new(),
        )?;
        rows.iter()
            .map(|r| {
                Ok(TableFigures {
                    table: r.try_get(0)?,
                    total_bytes: r.try_get(1)?,
                    live_tuples: r.try_get(2)?,
                    dead_tuples: r.try_get(3)?,
                })
            })
            .collect()
    }

    /// How many transactions old the snapshot of the server process `pid` is
    /// (`age(backend_xmin)`): it grows while a held transaction holds vacuum back.
    /// `None` when no such process holds a snapshot.
    pub(crate) fn xmin_age(&self, pid: i32) -> anyhow::Result<Option<i32>> {
        let rows = self.session.query(
            "SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = $1",
            vec![Box::new(pid)],
        )?;
        match rows.first() {
            Some(r) => Ok(r.try_get::<_, Option<i32>>(0)?),
            None => Ok(None),
        }
    }
}
