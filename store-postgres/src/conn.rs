//! One transaction's pooled connection, and the statements run on it.
//!
//! The connection is owned by whichever side is using it: the caller's thread holds it
//! between statements, and hands it to the runtime ([`crate::runtime`]) for each one,
//! getting it back with the answer. A connection goes back to the pool only after
//! its transaction has ended ([`Conn::release`]); lost any other way (a statement
//! that outran its time, a failed `ROLLBACK`, a panic) it is closed rather than
//! returned, so a connection in an unknown transaction state is never reused.
//!
//! Statements whose answer nobody waits for (`BEGIN`, the writer's inserts and
//! deletes: [`Conn::write`]) are held back and sent with the next statement that is
//! waited for, or with `COMMIT`, in one pipeline: one round trip to the database for
//! all of them. They run in the order they were made, and the first error among them
//! is the error of the statement that sent them (the transaction is then aborted,
//! and the commit refused).

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use futures::future::BoxFuture;
use railyard_store::StorageError;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::runtime::Runner;
use crate::watchdog::Hung;

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
    /// Whether the database answers at all ([`crate::watchdog`]).
    pub(crate) hung: Hung,
}

impl Db {
    /// A pooled connection with a transaction begun by `begin`; at once an error
    /// while the database is hung, and the wait for a connection ends when it hangs.
    pub(crate) fn begin(&self, begin: &'static str) -> Result<Conn, StorageError> {
        if self.hung.now() {
            return Err(Hung::error());
        }
        let (pool, hung) = (self.pool.clone(), self.hung.clone());
        let client = self.runner.block(async move {
            tokio::select! {
                got = pool.get() => got.map_err(pool_error),
                () = hung.wait() => Err(Hung::error()),
            }
        })??;
        let conn = Conn::new(
            self.runner.clone(),
            Held::new(client),
            self.call_timeout,
            self.hung.clone(),
        );
        // Sent with the transaction's first statement.
        lock(&conn.state).pending.push(Stmt::Simple(begin));
        Ok(conn)
    }

    /// A trivial query on a pooled connection, answered within `within` (the wait
    /// for a free connection included); a connection abandoned by the bound is
    /// closed, not pooled.
    pub(crate) fn ping(&self, within: Duration) -> Result<(), StorageError> {
        if self.hung.now() {
            return Err(Hung::error());
        }
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

/// A statement to send.
enum Stmt {
    /// Without parameters, unprepared (`BEGIN`, `COMMIT`).
    Simple(&'static str),
    /// Prepared (once per connection, cached) and run with its parameters.
    Prepared(&'static str, Vec<Param>),
}

/// What a statement answered.
enum Answer {
    Done,
    Count(u64),
    Rows(Vec<Row>),
}

/// Held-back statements sent at once before a waited-for one, at most: a long
/// batch of writes is sent in pipelines of this many.
const MAX_PENDING: usize = 256;

/// A transaction's connection and what it has seen.
pub(crate) struct Conn {
    runner: Arc<Runner>,
    state: Mutex<State>,
    /// The longest one statement may take, the server's `statement_timeout` plus
    /// slack: past it the connection is given up (a dead server or network).
    call_timeout: Duration,
    /// Ends a statement in flight once the database is found hung.
    hung: Hung,
}

struct State {
    /// `None` once lost, released or ended.
    held: Option<Held>,
    /// A statement failed: the transaction is aborted and must not be committed.
    failed: bool,
    /// A statement failed because the database asks for a retry, and why.
    retry: Option<&'static str>,
    /// Statements not sent yet, in order (see the module docs).
    pending: Vec<Stmt>,
    /// Whether anything was sent: until then there is no transaction to end.
    sent: bool,
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
    pub(crate) fn new(runner: Arc<Runner>, held: Held, call_timeout: Duration, hung: Hung) -> Self {
        Self {
            runner,
            state: Mutex::new(State {
                held: Some(held),
                failed: false,
                retry: None,
                pending: Vec::new(),
                sent: false,
            }),
            call_timeout,
            hung,
        }
    }

    /// Runs a query and returns its rows.
    pub(crate) fn query(&self, sql: &'static str, params: Vec<Param>) -> Result<Vec<Row>, StorageError> {
        match self.call(Stmt::Prepared(sql, params), true)? {
            Answer::Rows(rows) => Ok(rows),
            Answer::Done | Answer::Count(_) => Ok(Vec::new()),
        }
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
        match self.call(Stmt::Prepared(sql, params), false)? {
            Answer::Count(n) => Ok(n),
            Answer::Done | Answer::Rows(_) => Ok(0),
        }
    }

    /// Holds a statement back, to be sent with the next one waited for (or the
    /// commit): for a write whose count nobody reads. Its error, if any, is that
    /// later statement's.
    pub(crate) fn write(&self, sql: &'static str, params: Vec<Param>) -> Result<(), StorageError> {
        let full = {
            let mut state = lock(&self.state);
            state.pending.push(Stmt::Prepared(sql, params));
            state.pending.len() >= MAX_PENDING
        };
        if full {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends every held-back statement and waits for their answers.
    fn flush(&self) -> Result<(), StorageError> {
        let last = lock(&self.state).pending.pop();
        match last {
            Some(last) => self.call(last, false).map(drop),
            None => Ok(()),
        }
    }

    /// Runs statements without parameters (`BEGIN`, `COMMIT`), unprepared.
    pub(crate) fn simple(&self, sql: &'static str) -> Result<(), StorageError> {
        self.call(Stmt::Simple(sql), false).map(drop)
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
        let (has, sent) = {
            let mut state = lock(&self.state);
            state.pending.clear();
            (state.held.is_some(), state.sent)
        };
        if has && (!sent || self.simple("ROLLBACK").is_ok()) {
            self.release();
        }
        // Else the connection is already gone, or the failed call dropped it.
    }

    /// Rolls back without waiting (for `Drop`): the connection returns to the pool
    /// once the server has answered, or is closed if it does not.
    pub(crate) fn rollback_in_background(&self) {
        let (held, sent) = {
            let mut state = lock(&self.state);
            (state.held.take(), state.sent)
        };
        let Some(held) = held else {
            return;
        };
        if !sent {
            // Nothing was sent: there is no transaction to end.
            held.release();
            return;
        }
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

    /// Hands the connection to the runtime for the held-back statements and `last`,
    /// sent in one pipeline and bounded by the call timeout together, and takes it
    /// back with `last`'s answer (its rows when `rows`).
    fn call(&self, last: Stmt, rows: bool) -> Result<Answer, StorageError> {
        let (held, mut stmts) = {
            let mut state = lock(&self.state);
            let held = state.held.take().ok_or_else(lost)?;
            state.sent = true;
            (held, std::mem::take(&mut state.pending))
        };
        stmts.push(last);
        let timeout = self.call_timeout;
        let fut = async move {
            let answer = match held.0.as_ref() {
                Some(client) => pipeline(client, &stmts, rows).await.map_err(Failure::Db),
                None => Err(Failure::Lost),
            };
            (held, answer)
        };
        let hung = self.hung.clone();
        let outcome = self.runner.block(async move {
            tokio::select! {
                answered = tokio::time::timeout(timeout, fut) => answered.map_err(|_elapsed| None),
                // The statements are dropped with their connection, which is closed.
                () = hung.wait() => Err(Some(Hung::error())),
            }
        });
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
            Ok(Err(Some(hung))) => {
                state.failed = true;
                Err(hung)
            }
            Ok(Err(None)) => {
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

/// Runs `stmts` in order in one pipeline: each prepared statement the connection
/// has not prepared yet is prepared first (together), then every statement is sent
/// before the first answer is awaited. The last statement's answer (its rows when
/// `rows`), or the first error.
async fn pipeline(client: &Object, stmts: &[Stmt], rows: bool) -> Result<Answer, tokio_postgres::Error> {
    let mut sqls: Vec<&'static str> = Vec::new();
    for stmt in stmts {
        if let Stmt::Prepared(sql, _) = stmt
            && !sqls.contains(sql)
        {
            sqls.push(sql);
        }
    }
    let prepared = futures::future::try_join_all(sqls.iter().map(|sql| client.prepare_cached(sql))).await?;
    let statement = |sql: &str| {
        sqls.iter()
            .zip(&prepared)
            .find(|(s, _)| **s == sql)
            .map(|(_, statement)| statement.clone())
    };
    let last = stmts.len().saturating_sub(1);
    let mut sends: Vec<BoxFuture<'_, Result<Answer, tokio_postgres::Error>>> =
        stmts
            .iter()
            .enumerate()
            .map(|(i, stmt)| -> BoxFuture<'_, _> {
                match stmt {
                    Stmt::Simple(sql) => {
                        Box::pin(async move { client.batch_execute(sql).await.map(|()| Answer::Done) })
                    }
                    Stmt::Prepared(sql, params) => {
                        match statement(sql) {
                            Some(statement) if i == last && rows => Box::pin(async move {
                                client.query(&statement, &refs(params)).await.map(Answer::Rows)
                            }),
                            Some(statement) => Box::pin(async move {
                                client.execute(&statement, &refs(params)).await.map(Answer::Count)
                            }),
                            // Not reached: every statement's text was prepared above.
                            None => Box::pin(async move {
                                client.execute(*sql, &refs(params)).await.map(Answer::Count)
                            }),
                        }
                    }
                }
            })
            .collect();
    // A request is sent when its future is first polled: poll each once, in order,
    // so that all are on their way, in order, before any answer is awaited.
    let mut answers = Vec::with_capacity(sends.len());
    for send in &mut sends {
        answers.push(match futures::poll!(send.as_mut()) {
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => None,
        });
    }
    let mut first_error = None;
    let mut last_answer = Answer::Done;
    for (send, answer) in sends.into_iter().zip(answers) {
        let answer = match answer {
            Some(answer) => answer,
            None => send.await,
        };
        match answer {
            Ok(answer) => last_answer = answer,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(last_answer),
    }
}
