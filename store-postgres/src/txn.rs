//! [`PgTxn`], the one transaction type behind both a snapshot (read only) and the
//! writer's transaction: the reads are written once ([`crate::reads`],
//! [`crate::triggers`]) and see the transaction's own writes ([`crate::writes`]).
//! Also the conversions between rows and model values, and the migration at open.

use std::sync::Arc;

use deadpool_postgres::Pool;
use railyard_store::StorageError;
use railyard_store::records::{DefinitionKey, DefinitionLookup, DefinitionRows, Definitions};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::conn::{Conn, db_error, params, pool_error};
use crate::schema;

/// A transaction: its connection and the definition cache.
pub(crate) struct PgTxn {
    conn: Conn,
    pub(crate) defs: Arc<Definitions>,
}

impl PgTxn {
    pub(crate) fn new(conn: Conn, defs: Arc<Definitions>) -> Self {
        Self { conn, defs }
    }

    pub(crate) fn conn(&self) -> &Conn {
        &self.conn
    }

    /// The `definitions` rows, for decoding a run or an event whose definition the
    /// cache has not seen.
    pub(crate) fn definitions(&self) -> impl DefinitionRows + '_ {
        DefinitionLookup(move |key: &DefinitionKey| {
            let row = self.conn.query_opt(
                "SELECT record FROM definitions WHERE workflow_id = $1 AND version = $2 AND hash = $3",
                params![key.workflow_id.clone(), key.version.clone(), key.hash.clone()],
            )?;
            row.map(|r| col::<Vec<u8>>(&r, 0)).transpose()
        })
    }
}

/// Column `i` of `row`.
pub(crate) fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, StorageError> {
    row.try_get(i).map_err(db_error)
}

/// A `bigint` column holding a sequence number or an event id.
pub(crate) fn col_u64(row: &Row, i: usize, what: &'static str) -> Result<u64, StorageError> {
    let v: i64 = col(row, i)?;
    u64::try_from(v).map_err(|_| StorageError::Corrupt {
        what,
        source: format!("negative number {v}").into(),
    })
}

/// A sequence number or an event id as a `bigint` parameter.
pub(crate) fn int(v: u64) -> Result<i64, StorageError> {
    i64::try_from(v).map_err(|_| StorageError::Encode(format!("{v} does not fit a bigint column").into()))
}

/// An upper bound as a `bigint`: a bound past the largest value is the largest value.
pub(crate) fn bound(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A count or a limit as a `bigint`.
pub(crate) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Why opening could not make the tables ready.
pub(crate) enum MigrateError {
    /// No connection could be had.
    Connect(StorageError),
    /// Reading or writing the version failed.
    Init(StorageError),
    /// The database's schema is newer than this build's.
    Newer(i64),
    /// A migration failed (from this version).
    Migrate { from: i64, source: StorageError },
}

/// Creates the version table, and in one transaction reads the version, applies the
/// missing migrations, writes the new version and the `default` namespace. Answers
/// the version found.
pub(crate) async fn migrate(pool: Pool) -> Result<i64, MigrateError> {
    let init = |e| MigrateError::Init(db_error(e));
    let mut client = pool
        .get()
        .await
        .map_err(|e| MigrateError::Connect(pool_error(e)))?;
    client
        .batch_execute(schema::CREATE_VERSION_TABLE)
        .await
        .map_err(init)?;
    let tx = client.transaction().await.map_err(init)?;
    let found: i64 = match tx.query_opt(schema::READ_VERSION, &[]).await.map_err(init)? {
        Some(row) => row.try_get(0).map_err(init)?,
        None => 0,
    };
    let known = schema::latest();
    if found > known {
        // Dropping `tx` rolls back: nothing was changed.
        return Err(MigrateError::Newer(found));
    }
    let from = usize::try_from(found).map_err(|_| {
        MigrateError::Init(StorageError::Corrupt {
            what: "schema version",
            source: format!("negative version {found}").into(),
        })
    })?;
    for migration in &schema::MIGRATIONS[from..] {
        tx.batch_execute(migration)
            .await
            .map_err(|e| MigrateError::Migrate {
                from: found,
                source: db_error(e),
            })?;
    }
    tx.execute(schema::WRITE_VERSION, &[&known]).await.map_err(init)?;
    let default = railyard_model::namespace::DEFAULT_NAMESPACE;
    tx.execute(schema::DEFAULT_NAMESPACE, &[&default, &b"{}".as_slice()])
        .await
        .map_err(init)?;
    tx.commit().await.map_err(init)?;
    Ok(found)
}
