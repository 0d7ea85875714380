//! What a soak under a long transaction watches (`railyard bench --soak
//! --hold-transaction`, docs/postgres.md): a transaction held open on a connection of
//! its own, which holds back vacuum on the whole database for as long as it lives,
//! and the sizes and dead tuples of the backend's tables meanwhile.

use std::time::Duration;

use deadpool_postgres::Object;

use crate::conn::{Db, describe};
use crate::{Connected, OpenError, PostgresOptions};

/// A transaction begun (`BEGIN; SELECT txid_current()`) and left idle on a
/// connection of its own, without the server's `idle_in_transaction_session_timeout`;
/// rolled back (its connection closed) on drop.
pub struct HeldTransaction {
    /// Taken off its pool and closed on drop, before `_db`.
    client: Option<Object>,
    /// The runtime the connection lives on.
    _db: Db,
    /// The transaction's id.
    pub txid: i64,
    /// The server process holding it (`pg_stat_activity.pid`).
    pub pid: i32,
}

/// One table's figures from `pg_stat_user_tables`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFigures {
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
pub struct TableWatch {
    db: Db,
}

fn connected(
    url: &str,
    options: &PostgresOptions,
    name: &str,
    idle_timeout: Duration,
) -> Result<Connected, OpenError> {
    let options = PostgresOptions {
        pool_size: 1,
        application_name: name.into(),
        idle_in_transaction_timeout: idle_timeout,
        ..options.clone()
    };
    crate::connect(url, &options)
}

fn failed(shown: &str, problem: String) -> OpenError {
    OpenError::Connect {
        url: shown.to_string(),
        problem,
    }
}

impl HeldTransaction {
    /// Connects to `url` (as a backend with `options` would, its pool of one) and
    /// begins the transaction. No idle timeout ends it: `0` turns Postgres's off.
    pub fn begin(url: &str, options: &PostgresOptions) -> Result<Self, OpenError> {
        let Connected { db, shown, .. } = connected(url, options, "railyard-soak-hold", Duration::ZERO)?;
        let pool = db.pool.clone();
        let begun = db
            .runner
            .block(async move {
                let client = pool.get().await.map_err(|e| e.to_string())?;
                client.batch_execute("BEGIN").await.map_err(|e| describe(&e))?;
                let row = client
                    .query_one("SELECT txid_current(), pg_backend_pid()", &[])
                    .await
                    .map_err(|e| describe(&e))?;
                let txid: i64 = row.try_get(0).map_err(|e| describe(&e))?;
                let pid: i32 = row.try_get(1).map_err(|e| describe(&e))?;
                Ok::<_, String>((client, txid, pid))
            })
            .map_err(|e| failed(&shown, e.to_string()))?
            .map_err(|e| failed(&shown, e))?;
        let (client, txid, pid) = begun;
        Ok(Self {
            client: Some(client),
            _db: db,
            txid,
            pid,
        })
    }
}

impl Drop for HeldTransaction {
    fn drop(&mut self) {
        // Detached from the pool, the connection closes when the client drops,
        // which rolls the transaction back.
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}

impl TableWatch {
    /// Connects to `url` as a backend with `options` would (its schema too).
    pub fn open(url: &str, options: &PostgresOptions) -> Result<Self, OpenError> {
        let Connected { db, .. } = connected(
            url,
            options,
            "railyard-soak-watch",
            options.idle_in_transaction_timeout,
        )?;
        Ok(Self { db })
    }

    /// Every table of the backend's schema, largest first.
    pub fn tables(&self) -> Result<Vec<TableFigures>, String> {
        let pool = self.db.pool.clone();
        self.db
            .runner
            .block(async move {
                let client = pool.get().await.map_err(|e| e.to_string())?;
                let rows = client
                    .query(
                        "SELECT relname::text, pg_total_relation_size(relid), n_live_tup, n_dead_tup
                         FROM pg_stat_user_tables WHERE schemaname = current_schema()
                         ORDER BY 2 DESC, 1",
                        &[],
                    )
                    .await
                    .map_err(|e| describe(&e))?;
                rows.iter()
                    .map(|r| {
                        Ok(TableFigures {
                            table: r.try_get(0).map_err(|e| describe(&e))?,
                            total_bytes: r.try_get(1).map_err(|e| describe(&e))?,
                            live_tuples: r.try_get(2).map_err(|e| describe(&e))?,
                            dead_tuples: r.try_get(3).map_err(|e| describe(&e))?,
                        })
                    })
                    .collect()
            })
            .map_err(|e| e.to_string())?
    }

    /// How many transactions old the snapshot of the server process `pid` is
    /// (`age(backend_xmin)`): it grows while a held transaction holds vacuum back.
    /// `None` when no such process holds a snapshot.
    pub fn xmin_age(&self, pid: i32) -> Result<Option<i32>, String> {
        let pool = self.db.pool.clone();
        self.db
            .runner
            .block(async move {
                let client = pool.get().await.map_err(|e| e.to_string())?;
                let row = client
                    .query_opt(
                        "SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = $1",
                        &[&pid],
                    )
                    .await
                    .map_err(|e| describe(&e))?;
                match row {
                    Some(r) => r.try_get::<_, Option<i32>>(0).map_err(|e| describe(&e)),
                    None => Ok(None),
                }
            })
            .map_err(|e| e.to_string())?
    }
}
