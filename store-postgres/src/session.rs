//! A connection of its own to the database, outside any backend's pool, for a tool
//! that watches the database beside a running server: `railyard bench --soak` holds a
//! transaction open on one and reads the tables' sizes on another.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object};
use railyard_store::StorageError;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::conn::{Db, db_error, pool_error};
use crate::{Connected, OpenError, PostgresOptions};

/// One connection, opened as a backend opens its pool's (TLS, password, schema,
/// `statement_timeout`), and closed when the session drops, which ends whatever
/// transaction is open on it.
pub struct Session {
    /// Taken off its pool, so dropping it closes the connection; dropped before `db`,
    /// whose runtime drives the connection.
    client: Arc<ClientWrapper>,
    db: Db,
}

impl Session {
    /// Connects to `url` as a backend with `options` would, named `application_name`
    /// (in `pg_stat_activity`), with `idle_in_transaction_session_timeout` set to
    /// `idle_timeout`: `Duration::ZERO` turns it off, so a transaction begun on the
    /// session stays open until the session drops.
    pub fn open(
        url: &str,
        options: &PostgresOptions,
        application_name: &str,
        idle_timeout: Duration,
    ) -> Result<Self, OpenError> {
        let options = PostgresOptions {
            pool_size: 1,
            application_name: application_name.into(),
            idle_in_transaction_timeout: idle_timeout,
            ..options.clone()
        };
        let Connected { db, shown, .. } = crate::connect(url, &options)?;
        let pool = db.pool.clone();
        let failed = |problem: String| OpenError::Connect {
            url: shown.clone(),
            problem,
        };
        let client = db
            .runner
            .block(async move { pool.get().await })
            .map_err(|e| failed(e.to_string()))?
            .map_err(|e| failed(pool_error(e).to_string()))?;
        Ok(Self {
            client: Arc::new(Object::take(client)),
            db,
        })
    }

    /// Runs `sql`, one or more statements without parameters, and drops their rows:
    /// `BEGIN` leaves a transaction open on the session.
    pub fn batch(&self, sql: &str) -> Result<(), StorageError> {
        let (client, sql) = (self.client.clone(), sql.to_string());
        self.call(async move { client.batch_execute(&sql).await.map_err(db_error) })
    }

    /// The rows `sql` answers, its `$1`, `$2`, ... bound to `params`.
    pub fn query(
        &self,
        sql: &str,
        params: Vec<Box<dyn ToSql + Send + Sync>>,
    ) -> Result<Vec<Row>, StorageError> {
        let (client, sql) = (self.client.clone(), sql.to_string());
        self.call(async move {
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as _).collect();
            client.query(&sql, &refs).await.map_err(db_error)
        })
    }

    /// Runs `call` on the backend's runtime, waiting at most as long as a backend's
    /// statement may take.
    fn call<T: Send + 'static>(
        &self,
        call: impl Future<Output = Result<T, StorageError>> + Send + 'static,
    ) -> Result<T, StorageError> {
        let within = self.db.call_timeout;
        self.db
            .runner
            .block(async move { tokio::time::timeout(within, call).await })?
            .unwrap_or_else(|_elapsed| {
                Err(StorageError::Unavailable(format!(
                    "the database did not answer within {} ms",
                    within.as_millis()
                )))
            })
    }
}
