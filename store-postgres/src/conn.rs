//! One transaction's pooled connection, and the statements run on it.
//!
//! The connection is owned by whichever side is using it: the caller's thread holds it
//! between statements, and hands it to the runtime ([`crate::runtime`]) for each one,
//! getting it back with the answer. A connection goes back to the pool only after
//! its transaction has ended ([`Conn::release`]); lost any other way (a statement
//! that outran its time, a failed `ROLLBACK`, a panic) it is closed rather than
//! returned, so a connection in an unknown transaction state is never reused.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use railyard_store::StorageError;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::runtime::Runner;

/// A statement parameter, owned so that it can travel to the runtime.
pub(crate) type Param = Box<dyn ToSql + Send + Sync>;

/// Statement parameters: `params![a, b]`, each moved into a [`Param`].
macro_rules! params {
    ($($p:expr),* $(,)?) => {
        vec![$(Box::new($p) as $crate::conn::Param),*]
    };
}
pub(crate) use params;

/// A driver error as a [`StorageError`]: boxed, so the boundary names no driver type.
/// A driver error that means the database cannot be reached (no SQLSTATE: the
/// connection failed or closed; class 08, connection exception; 57P01-57P03, the
/// server shutting down or starting) is [`StorageError::Unavailable`].
pub(crate) fn db_error(e: tokio_postgres::Error) -> StorageError {
    let unreachable = match e.code() {
        None => true,
        Some(c) => c.code().starts_with("08") || ["57P01", "57P02", "57P03"].contains(&c.code()),
    };
    if unreachable {
        return StorageError::Unavailable(describe(&e));
    }
    StorageError::Backend(Box::new(DriverError(e)))
}

/// A pool error as a [`StorageError`]: no connection could be had, so the database
/// cannot be reached (the driver's error when it has one).
pub(crate) fn pool_error(e: deadpool_postgres::PoolError) -> StorageError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_error(e),
        other => StorageError::Unavailable(format!("no database connection: {other}")),
    }
}

/// A driver error with what the server said: the driver's own message is only its
/// kind ("db error"), the server's words are in its source.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    let mut out = format!("postgres: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        out.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    if let Some(code) = e.code() {
        out.push_str(&format!(" (SQLSTATE {})", code.code()));
    }
    out
}

/// The driver's error, shown as [`describe`] says.
#[derive(Debug)]
struct DriverError(tokio_postgres::Error);

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe(&self.0))
    }
}

// The server's words are in the message; no source, so a chain is not shown twice.
impl std::error::Error for DriverError {}

/// Whether the database asked for the transaction to be run again: a serialization
/// failure (40001) or a deadlock (40P01).
pub(crate) fn asks_retry(e: &tokio_postgres::Error) -> bool {
    retry_cause(e).is_some()
}

/// Why the database asked for the transaction to be run again, as `/metrics` names
/// it: `serialization` (40001) or `deadlock` (40P01).
pub(crate) fn retry_cause(e: &tokio_postgres::Error) -> Option<&'static str> {
    match e.code() {
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => Some("serialization"),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED => Some("deadlock"),
        _ => None,
    }
}

/// The pool and the runtime its connections live on: where transactions begin.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) runner: Arc<Runner>,
    pub(crate) pool: Pool,
    /// The longest one statement may take (see [`Conn`]).
    pub(crate) call_timeout: Duration,
}

impl Db {
    /// A pooled connection with a transaction begun by `begin`.
    pub(crate) fn begin(&self, begin: &'static str) -> Result<Conn, StorageError> {
        let pool = self.pool.clone();
        let client = self
            .runner
            .block(async move { pool.get().await })?
            .map_err(pool_error)?;
        let conn = Conn::new(self.runner.clone(), Held::new(client), self.call_timeout);
        conn.simple(begin)?;
        Ok(conn)
    }

    /// A trivial query on a pooled connection, answered within `within` (the wait
    /// for a free connection included); a connection abandoned by the bound is
    /// closed, not pooled.
    pub(crate) fn ping(&self, within: Duration) -> Result<(), StorageError> {
        let pool = self.pool.clone();
        let ping = async move {
            let held = Held::new(pool.get().await.map_err(pool_error)?);
            if let Some(client) = held.0.as_ref() {
                client.simple_query("SELECT 1").await.map_err(db_error)?;
            }
            held.release();
            Ok(())
        };
        self.runner
            .block(async move { tokio::time::timeout(within, ping).await })?
            .unwrap_or_else(|_elapsed| {
                Err(StorageError::Backend(
                    format!("the database did not answer within {} ms", within.as_millis()).into(),
                ))
            })
    }
}

/// A pooled connection, closed rather than pooled when dropped: see the module docs.
pub(crate) struct Held(Option<Object>);

impl Held {
    pub(crate) fn new(client: Object) -> Self {
        Self(Some(client))
    }

    /// Back to the pool: only once its transaction has ended.
    fn release(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            // Out of the pool for good: dropping the client closes the connection,
            // and the server ends whatever transaction it had open.
            drop(Object::take(client));
        }
    }
}

/// Why a statement produced no answer.
enum Failure {
    Db(tokio_postgres::Error),
    /// The connection was already lost (cannot happen while a `Held` is alive).
    Lost,
}

/// A transaction's connection and what it has seen.
pub(crate) struct Conn {
    runner: Arc<Runner>,
    state: Mutex<State>,
    /// The longest one statement may take, the server's `statement_timeout` plus
    /// slack: past it the connection is given up (a dead server or network).
    call_timeout: Duration,
}

struct State {
    /// `None` once lost, released or ended.
    held: Option<Held>,
    /// A statement failed: the transaction is aborted and must not be committed.
    failed: bool,
    /// A statement failed because the database asks for a retry, and why.
    retry: Option<&'static str>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state is three plain fields; a panic cannot leave them inconsistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn lost() -> StorageError {
    StorageError::Unavailable(
        "the database connection of this transaction was lost after an earlier error".into(),
    )
}

impl Conn {
    pub(crate) fn new(runner: Arc<Runner>, held: Held, call_timeout: Duration) -> Self {
        Self {
            runner,
            state: Mutex::new(State {
                held: Some(held),
                failed: false,
                retry: None,
            }),
            call_timeout,
        }
    }

    /// Runs a query and returns its rows.
    pub(crate) fn query(&self, sql: &'static str, params: Vec<Param>) -> Result<Vec<Row>, StorageError> {
        self.call(move |held| async move {
            let rows = match held.0.as_ref() {
                Some(client) => query_on(client, sql, &params).await.map_err(Failure::Db),
                None => Err(Failure::Lost),
            };
            (held, rows)
        })
    }

    /// Runs a query that answers at most one row.
    pub(crate) fn query_opt(
        &self,
        sql: &'static str,
        params: Vec<Param>,
    ) -> Result<Option<Row>, StorageError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Runs a statement and returns how many rows it changed.
    pub(crate) fn execute(&self, sql: &'static str, params: Vec<Param>) -> Result<u64, StorageError> {
        self.call(move |held| async move {
            let n = match held.0.as_ref() {
                Some(client) => execute_on(client, sql, &params).await.map_err(Failure::Db),
                None => Err(Failure::Lost),
            };
            (held, n)
        })
    }

    /// Runs statements without parameters (`BEGIN`, `COMMIT`), unprepared.
    pub(crate) fn simple(&self, sql: &'static str) -> Result<(), StorageError> {
        self.call(move |held| async move {
            let done = match held.0.as_ref() {
                Some(client) => client.batch_execute(sql).await.map_err(Failure::Db),
                None => Err(Failure::Lost),
            };
            (held, done)
        })
    }

    /// Why a statement failed, when the database asks for the transaction to be run
    /// again (`serialization`, `deadlock`).
    pub(crate) fn asks_retry(&self) -> Option<&'static str> {
        lock(&self.state).retry
    }

    /// Commits, and returns the connection to the pool. A transaction one of whose
    /// statements failed is aborted on the server, where `COMMIT` would quietly roll
    /// it back: it is refused here instead.
    pub(crate) fn commit(&self) -> Result<(), StorageError> {
        if lock(&self.state).failed {
            return Err(StorageError::Backend(
                "a statement of this transaction failed; it was rolled back".into(),
            ));
        }
        self.simple("COMMIT")?;
        self.release();
        Ok(())
    }

    /// Rolls back and waits for it, returning the connection to the pool (or closing
    /// it if the rollback fails). Nothing to do once the connection is gone.
    pub(crate) fn rollback(&self) {
        let has = lock(&self.state).held.is_some();
        if has && self.simple("ROLLBACK").is_ok() {
            self.release();
        }
        // Else the connection is already gone, or the failed call dropped it.
    }

    /// Rolls back without waiting (for `Drop`): the connection returns to the pool
    /// once the server has answered, or is closed if it does not.
    pub(crate) fn rollback_in_background(&self) {
        let Some(held) = lock(&self.state).held.take() else {
            return;
        };
        let timeout = self.call_timeout;
        self.runner.spawn(async move {
            let Some(client) = held.0.as_ref() else {
                return;
            };
            let ended = tokio::time::timeout(timeout, client.batch_execute("ROLLBACK")).await;
            if matches!(ended, Ok(Ok(()))) {
                held.release();
            }
            // Else `held` is dropped here, closing the connection.
        });
    }

    /// Returns the connection to the pool (its transaction has ended).
    fn release(&self) {
        if let Some(held) = lock(&self.state).held.take() {
            held.release();
        }
    }

    /// Hands the connection to the runtime for one statement, bounded by the call
    /// timeout, and takes it back with the answer.
    fn call<T, F>(&self, op: impl FnOnce(Held) -> F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: Future<Output = (Held, Result<T, Failure>)> + Send + 'static,
    {
        let held = lock(&self.state).held.take().ok_or_else(lost)?;
        let timeout = self.call_timeout;
        let fut = op(held);
        let outcome = self
            .runner
            .block(async move { tokio::time::timeout(timeout, fut).await });
        let mut state = lock(&self.state);
        match outcome {
            Ok(Ok((held, Ok(value)))) => {
                state.held = Some(held);
                Ok(value)
            }
            Ok(Ok((held, Err(Failure::Db(e))))) => {
                state.failed = true;
                state.retry = state.retry.or(retry_cause(&e));
                // A failure that closed the connection leaves nothing to give back.
                if !e.is_closed() {
                    state.held = Some(held);
                }
                Err(db_error(e))
            }
            Ok(Ok((_, Err(Failure::Lost)))) => {
                state.failed = true;
                Err(lost())
            }
            Ok(Err(_elapsed)) => {
                // The connection went down with the abandoned statement.
                state.failed = true;
                Err(StorageError::Unavailable(format!(
                    "the database did not answer within {} ms; the connection was closed",
                    timeout.as_millis()
                )))
            }
            Err(e) => {
                state.failed = true;
                Err(e)
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // A transaction nobody committed (a snapshot, or a write that failed) ends here.
        self.rollback_in_background();
    }
}

fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
}

async fn query_on(client: &Object, sql: &str, params: &[Param]) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query(&statement, &refs(params)).await
}

async fn execute_on(client: &Object, sql: &str, params: &[Param]) -> Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.execute(&statement, &refs(params)).await
}
