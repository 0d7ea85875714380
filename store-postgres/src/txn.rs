//! [`PgTxn`], the one transaction type behind both a snapshot (read only) and the
//! writer's transaction: the reads are written once ([`crate::reads`],
//! [`crate::triggers`]) and see the transaction's own writes ([`crate::writes`]).
//! Also the conversions between rows and model values, and the migration at open.

use std::sync::Arc;

use deadpool_postgres::{Object, Pool};
use railyard_store::StorageError;
use railyard_store::records::{DefinitionKey, DefinitionLookup, DefinitionRows, Definitions};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::conn::{Conn, asks_retry, db_error, describe, params, pool_error};
use crate::{keys, lease, schema};

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

/// Why opening could not make the tables ready, or claim them.
pub(crate) enum MigrateError {
    /// No connection could be had.
    Connect(StorageError),
    /// Reading or writing the version failed.
    Init(StorageError),
    /// The database's schema is newer than this build's.
    Newer(i64),
    /// A migration failed (from this version).
    Migrate { from: i64, source: StorageError },
    /// Another node holds the writer lease: its id, until when (UTC), and in how
    /// many seconds from now.
    Held {
        node: String,
        until: String,
        in_secs: f64,
    },
}

/// What one run of the opening transaction found.
enum Opened {
    /// Migrated from this version, and claimed the lease at this epoch.
    Claimed {
        from: i64,
        epoch: i64,
    },
    Newer(i64),
    Negative(i64),
    Held {
        node: String,
        until: String,
        in_secs: f64,
    },
}

/// A driver error of the opening transaction, and the migration it happened in.
struct Failed {
    migrating_from: Option<i64>,
    error: tokio_postgres::Error,
}

impl From<tokio_postgres::Error> for Failed {
    fn from(error: tokio_postgres::Error) -> Self {
        Self {
            migrating_from: None,
            error,
        }
    }
}

/// Creates the version table, and in one transaction reads the version, applies the
/// missing migrations, writes the new version, the `default` namespace and the first
/// task-token key when there is none ([`crate::keys`]), and claims
/// the writer lease for `node` ([`crate::lease`]); a lease held by another node rolls
/// all of it back. A run the database asks to retry (40001, 40P01) is run again, at
/// most `attempts` runs in all. Answers the version found and the lease's epoch.
pub(crate) async fn migrate(
    pool: Pool,
    node: String,
    first_key: Vec<u8>,
    lease_ms: f64,
    attempts: usize,
) -> Result<(i64, i64), MigrateError> {
    let init = |e| MigrateError::Init(db_error(e));
    let mut client = pool
        .get()
        .await
        .map_err(|e| MigrateError::Connect(pool_error(e)))?;
    client
        .batch_execute(schema::CREATE_VERSION_TABLE)
        .await
        .map_err(init)?;
    let mut attempt = 1;
    loop {
        match migrate_once(&mut client, &node, &first_key, lease_ms).await {
            Ok(Opened::Claimed { from, epoch }) => return Ok((from, epoch)),
            Ok(Opened::Newer(found)) => return Err(MigrateError::Newer(found)),
            Ok(Opened::Negative(found)) => {
                return Err(MigrateError::Init(StorageError::Corrupt {
                    what: "schema version",
                    source: format!("negative version {found}").into(),
                }));
            }
            Ok(Opened::Held { node, until, in_secs }) => {
                return Err(MigrateError::Held { node, until, in_secs });
            }
            Err(Failed { error, .. }) if asks_retry(&error) && attempt < attempts => {
                tracing::warn!(error = %describe(&error), attempt, "the database asked to retry opening");
                tokio::time::sleep(std::time::Duration::from_millis(20 * attempt as u64)).await;
                attempt += 1;
            }
            Err(Failed {
                migrating_from: Some(from),
                error,
            }) => {
                return Err(MigrateError::Migrate {
                    from,
                    source: db_error(error),
                });
            }
            Err(Failed { error, .. }) => return Err(init(error)),
        }
    }
}

/// Runs read at a time by [`backfill_terms`].
const BACKFILL_PAGE: i64 = 500;

/// Adds every stored run's index terms to `run_terms` (those it has are left), in
/// the opening transaction: for a database from before [`schema::RUN_WORDS_VERSION`].
/// A row that does not decode keeps the terms it had, with a warning.
async fn backfill_terms(tx: &deadpool_postgres::Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    let (mut after_ns, mut after_id) = (String::new(), String::new());
    let mut runs = 0u64;
    loop {
        let rows = tx
            .query(
                "SELECT ns, run_id, record FROM runs WHERE (ns, run_id) > ($1, $2)
                 ORDER BY ns, run_id LIMIT $3",
                &[&after_ns, &after_id, &BACKFILL_PAGE],
            )
            .await?;
        let (mut nss, mut terms, mut starts, mut ids) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for row in &rows {
            let (ns, id): (String, String) = (row.try_get(0)?, row.try_get(1)?);
            let record: Vec<u8> = row.try_get(2)?;
            match railyard_store::records::run_index_terms(&record) {
                Ok((start_ms, run_terms)) => {
                    for term in run_terms {
                        nss.push(ns.clone());
                        terms.push(term);
                        starts.push(start_ms);
                        ids.push(id.clone());
                    }
                    runs += 1;
                }
                Err(e) => {
                    tracing::warn!(namespace = %ns, run_id = %id, error = %e, "cannot read a run to index its words")
                }
            }
            (after_ns, after_id) = (ns, id);
        }
        tx.execute(
            "INSERT INTO run_terms (ns, term, start_ms, run_id)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
             ON CONFLICT DO NOTHING",
            &[&nss, &terms, &starts, &ids],
        )
        .await?;
        if (rows.len() as i64) < BACKFILL_PAGE {
            break;
        }
    }
    if runs > 0 {
        tracing::info!(
            runs,
            "indexed the words of the stored runs' goals and text attributes"
        );
    }
    Ok(())
}

/// One run of the opening transaction; dropping its transaction unanswered rolls it
/// back.
async fn migrate_once(
    client: &mut Object,
    node: &str,
    first_key: &[u8],
    lease_ms: f64,
) -> Result<Opened, Failed> {
    let tx = client.transaction().await?;
    let found: i64 = match tx.query_opt(schema::READ_VERSION, &[]).await? {
        Some(row) => row.try_get(0)?,
        None => 0,
    };
    let known = schema::latest();
    if found > known {
        return Ok(Opened::Newer(found));
    }
    let Ok(from) = usize::try_from(found) else {
        return Ok(Opened::Negative(found));
    };
    for migration in &schema::MIGRATIONS[from..] {
        tx.batch_execute(migration).await.map_err(|error| Failed {
            migrating_from: Some(found),
            error,
        })?;
    }
    if found > 0 && found < schema::RUN_WORDS_VERSION {
        backfill_terms(&tx).await.map_err(|error| Failed {
            migrating_from: Some(found),
            error,
        })?;
    }
    tx.execute(schema::WRITE_VERSION, &[&known]).await?;
    let default = railyard_model::namespace::DEFAULT_NAMESPACE;
    tx.execute(schema::DEFAULT_NAMESPACE, &[&default, &b"{}".as_slice()])
        .await?;
    // Two openings racing on an empty table: the second's insert waits for the
    // first's commit and then does nothing (or, under SERIALIZABLE, is retried).
    tx.execute(keys::FIRST, &[&first_key]).await?;
    let claimed = tx.query_opt(lease::CLAIM, &[&node, &lease_ms]).await?;
    let Some(row) = claimed else {
        let row = tx.query_one(lease::HOLDER, &[]).await?;
        return Ok(Opened::Held {
            node: row.try_get(0)?,
            until: row.try_get(1)?,
            in_secs: row.try_get(2)?,
        });
    };
    let epoch: i64 = row.try_get(0)?;
    tx.commit().await?;
    Ok(Opened::Claimed { from: found, epoch })
}
