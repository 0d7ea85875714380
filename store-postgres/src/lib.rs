//! Railyard's storage on PostgreSQL: [`PostgresBackend`] implements the storage
//! trait ([`railyard_store::Backend`]) over explicit tables ([`schema`]) holding the
//! same versioned records as the redb backend (`railyard_store::records`).
//!
//! - **Snapshots** are `REPEATABLE READ, READ ONLY` transactions, each holding one
//!   pooled connection until dropped: one consistent view, never waiting for the
//!   writer.
//! - **Writes** are one transaction at the database's default isolation, committed
//!   when the writer's closure returns `Ok`; one the database asks to retry (SQLSTATE
//!   40001 or 40P01) is run again, closure included, after a bounded backoff.
//! - **Bounds**: a fixed pool, a connect timeout, a wait for a free connection, and
//!   `statement_timeout` (and `idle_in_transaction_session_timeout`) set on every
//!   connection, so a dead database gives an error, not a hang.
//! - **One writer**: opening claims the database's writer lease ([`lease`]) or is
//!   refused while another server holds it (or stands by, [`Standby`], to claim it
//!   once it is free); every write transaction checks and
//!   renews it first, and a server that lost it writes nothing more.
//! - **Dumps** (`railyard store export` / `import`): [`PostgresReader`] reads every
//!   table from one snapshot without claiming the lease; the backend writes a
//!   dump's rows in its fenced transactions (`dump`).
//! - **Portability**: plain SQL that also holds under `SERIALIZABLE`: no sequences,
//!   `LISTEN`/`NOTIFY`, advisory locks or system columns.
//!
//! The trait is synchronous and the driver async: the backend owns a small runtime
//! ([`runtime`]) on which each call runs while the caller waits. Connection strings
//! are shown only through [`fn@redact`].

mod batches;
mod checkpoints;
mod conn;
mod dump;
mod keys;
mod lease;
mod output;
mod reads;
pub mod redact;
mod runtime;
mod schema;
pub mod session;
mod standby;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(test)]
mod tests;
mod tls;
mod triggers;
mod txn;
mod watchdog;
mod workflows;
mod writes;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use railyard_store::records::Definitions;
use railyard_store::{Backend, BackendStats, ClaimStats, PoolStats, Snapshot, StorageError, WriteTx};
use tokio_postgres::NoTls;
use tokio_postgres::config::SslMode;

pub use dump::PostgresReader;
pub use keys::{RotatedKey, rotate_token_key};
pub use output::PgOutput;
pub use redact::redact;
pub use session::Session;
pub use standby::{LeaderInfo, Standby};

use conn::{Conn, Db};
use lease::{Lease, Renewal};
use runtime::Runner;
use txn::PgTxn;

/// How the backend connects, and its bounds.
#[derive(Clone)]
pub struct PostgresOptions {
    /// Most connections open at once. Each snapshot holds one while it lives, and
    /// the writer's transaction one.
    pub pool_size: usize,
    /// How long opening a connection may take.
    pub connect_timeout: Duration,
    /// How long a call may wait for a free connection.
    pub wait_timeout: Duration,
    /// How long one statement may run: the server's `statement_timeout`, set on
    /// every connection. A call gives its connection up a few seconds after it.
    pub statement_timeout: Duration,
    /// How long a transaction may sit idle (the server's
    /// `idle_in_transaction_session_timeout`): a stuck caller's locks are freed.
    pub idle_in_transaction_timeout: Duration,
    /// Runs of a write transaction the database asks to retry, the first included.
    pub write_attempts: usize,
    /// The password, when the URL has none (from `PGPASSWORD`, say).
    pub password: Option<String>,
    /// The schema holding the tables (the connections' `search_path`); `None`: the
    /// database's default. The schema must exist.
    pub schema: Option<String>,
    /// Each connection's `application_name`.
    pub application_name: String,
    /// How long the writer lease lasts without a renewal: a server that stops
    /// (killed, paused, cut off) holds the database this long, and another server
    /// may claim it after.
    pub lease: Duration,
    /// How often an idle server renews its lease (each write renews it too); well
    /// within [`PostgresOptions::lease`].
    pub lease_renew_every: Duration,
    /// PEM root certificates the database's certificate must chain to, with
    /// `sslmode=require`, `verify-ca` or `verify-full` ([`tls`]); `None`: the
    /// system's (for `verify-ca`, `verify-full`) or none checked (`require`).
    pub root_certs_pem: Option<Vec<u8>>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_size: 8,
            connect_timeout: Duration::from_secs(10),
            wait_timeout: Duration::from_secs(30),
            statement_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Duration::from_secs(300),
            write_attempts: 5,
            password: None,
            schema: None,
            application_name: "railyard".into(),
            lease: Duration::from_secs(30),
            lease_renew_every: Duration::from_secs(10),
            root_certs_pem: None,
        }
    }
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("wait_timeout", &self.wait_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("idle_in_transaction_timeout", &self.idle_in_transaction_timeout)
            .field("write_attempts", &self.write_attempts)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("schema", &self.schema)
            .field(
                "root_certs_pem",
                &self.root_certs_pem.as_ref().map(|p| format!("{} bytes", p.len())),
            )
            .field("application_name", &self.application_name)
            .field("lease", &self.lease)
            .field("lease_renew_every", &self.lease_renew_every)
            .finish()
    }
}

/// What a call may take beyond `statement_timeout` before its connection is given up.
const CALL_SLACK: Duration = Duration::from_secs(5);

/// Errors opening the database. Each names the database by its redacted URL, and
/// says the whole cause in its message (the driver's own errors say little).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid postgres connection string {url}: {problem}")]
    Url { url: String, problem: String },
    #[error("invalid postgres connection string {url}: {problem}")]
    Unsupported { url: String, problem: String },
    #[error("invalid postgres options: {problem}")]
    Options { problem: String },
    #[error(
        "another railyard server writes to this database {url} (node {node}, lease until {until} UTC, \
         {in_secs:.0} s from now); stop it or wait"
    )]
    Held {
        url: String,
        node: String,
        until: String,
        in_secs: f64,
    },
    #[error("TLS to the database {url}: {problem}")]
    Tls { url: String, problem: String },
    #[error("cannot rotate the task-token key of {url}: {problem}")]
    Keys { url: String, problem: String },
    #[error("cannot start the database runtime: {problem}")]
    Runtime { problem: String },
    #[error("cannot make the connection pool for {url}: {problem}")]
    Pool { url: String, problem: String },
    #[error("cannot connect to {url}: {problem}")]
    Connect { url: String, problem: String },
    #[error("cannot initialise database {url}: {problem}")]
    Init { url: String, problem: String },
    #[error(
        "cannot migrate database {url} from schema version {from} to {to}: {problem}; nothing was changed"
    )]
    Migrate {
        url: String,
        from: i64,
        to: i64,
        problem: String,
    },
    #[error(
        "database {url} has schema version {found}, this build knows versions up to {known}; \
         it was written by a newer Railyard"
    )]
    Schema { url: String, found: i64, known: i64 },
}

/// Railyard's tables in a PostgreSQL database, written by this backend alone while
/// it holds the database's writer lease. Dropping it gives the lease up.
pub struct PostgresBackend {
    db: Db,
    /// Definitions by content, shared by every snapshot and write transaction.
    defs: Arc<Definitions>,
    write_attempts: usize,
    lease: Arc<Lease>,
    /// Stopped before the lease is released on drop.
    renewal: Option<Renewal>,
    /// Write transactions run again, by cause: serialization failures, deadlocks.
    retried: [AtomicU64; 2],
    /// Write transactions that failed with the database unreachable: the commit may
    /// have happened all the same (its answer lost), so memory derived from the
    /// tables is rebuilt ([`Backend::incarnation`]).
    unsure: AtomicU64,
}

impl PostgresBackend {
    /// Connects to `url` (`postgres://user@host:port/db`, or a key-value string),
    /// creates or migrates the tables, makes sure the `default` namespace exists, and
    /// claims the writer lease, all in one transaction: refused ([`OpenError::Held`])
    /// while another server holds the lease, and then nothing is changed.
    pub fn open(url: &str, options: &PostgresOptions) -> Result<Self, OpenError> {
        let connected = connect(url, options)?;
        claim(&connected, lease::new_node_id())
    }

    /// [`PostgresBackend::open`], but a lease another node holds is not an error:
    /// the answer is then a [`Standby`] on the same database, which says who leads
    /// and claims the lease once it is free.
    pub fn open_or_standby(url: &str, options: &PostgresOptions) -> Result<Opening, OpenError> {
        let connected = connect(url, options)?;
        let node = lease::new_node_id();
        match claim(&connected, node.clone()) {
            Ok(backend) => Ok(Opening::Leader(backend)),
            Err(OpenError::Held {
                node: holder,
                in_secs,
                ..
            }) => {
                tracing::info!(
                    database = %connected.shown,
                    node = %node,
                    leader = %holder,
                    lease_left_secs = in_secs,
                    "another node holds the database's writer lease; standing by"
                );
                Ok(Opening::Standby(Standby::new(connected, node)))
            }
            Err(e) => Err(e),
        }
    }

    /// Records where this node serves (`host:port` of its gRPC and HTTP listeners,
    /// and whether they speak TLS) on the writer lease, fenced like a write, for the
    /// nodes standing by to forward to.
    pub fn advertise(&self, grpc: &str, http: &str, tls: bool) -> Result<(), StorageError> {
        self.lease.advertise(&self.db, grpc, http, tls)
    }

    /// A receiver that turns to `Some(node)` once `node` took the writer lease from
    /// this backend (a write or a renewal found it fenced): from then on every
    /// write fails, and the server should step down.
    pub fn lost(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.lease.lost()
    }

    /// This server's node id: random, made at open, recorded in the writer lease.
    pub fn node(&self) -> &str {
        self.lease.node()
    }

    /// The writer lease's epoch this backend claimed (one more than the last claim's).
    pub fn lease_epoch(&self) -> i64 {
        self.lease.epoch()
    }

    /// Test hook: stops (`true`) or resumes renewing the lease on the timer, as if
    /// the process were stopped (SIGSTOP) while idle.
    #[cfg(feature = "testing")]
    pub fn pause_lease_renewal(&self, paused: bool) {
        self.lease.pause(paused);
    }

    /// A pooled connection with a transaction begun by `begin`.
    pub(crate) fn begin(&self, begin: &'static str) -> Result<Conn, StorageError> {
        self.db.begin(begin)
    }

    /// Live output on this database, in transactions of its own.
    pub fn output_store(&self) -> PgOutput {
        PgOutput { db: self.db.clone() }
    }

    /// A store over this backend, its live output in the same database.
    pub fn into_store(self) -> railyard_store::Store {
        let output = std::sync::Arc::new(self.output_store());
        railyard_store::Store::new(Arc::new(self)).with_output(output)
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        // The timer first, so that nothing renews the lease once it is given up.
        drop(self.renewal.take());
        self.lease.release(&self.db);
    }
}

/// What opening a backend or a standby is.
pub enum Opening {
    /// This node claimed the writer lease.
    Leader(PostgresBackend),
    /// Another node holds it.
    Standby(Standby),
}

/// A database connected to (its pool and runtime), before any claim.
pub(crate) struct Connected {
    pub(crate) db: Db,
    /// The URL, redacted.
    pub(crate) shown: String,
    pub(crate) options: PostgresOptions,
    pub(crate) write_attempts: usize,
}

/// Checks the options and the URL and makes the pool (connecting lazily), with TLS
/// when the URL asks for it.
fn connect(url: &str, options: &PostgresOptions) -> Result<Connected, OpenError> {
    let shown = redact(url);
    if options.lease.is_zero()
        || options.lease_renew_every.is_zero()
        || options.lease_renew_every >= options.lease
    {
        return Err(OpenError::Options {
            problem: format!(
                "lease_renew_every ({:?}) must be more than zero and less than lease ({:?})",
                options.lease_renew_every, options.lease
            ),
        });
    }
    let (url, asked) = tls::take_verify_mode(url);
    let mut config = tokio_postgres::Config::from_str(&url).map_err(|e| OpenError::Url {
        url: shown.clone(),
        problem: conn::describe(&e),
    })?;
    let roots = options.root_certs_pem.as_deref();
    let tls = if config.get_ssl_mode() == SslMode::Require {
        let verify = asked.unwrap_or(if roots.is_some() {
            tls::Verify::Chain
        } else {
            tls::Verify::Nothing
        });
        let client = tls::client_config(verify, roots).map_err(|problem| OpenError::Tls {
            url: shown.clone(),
            problem,
        })?;
        Some(tls::MakeRustls::new(client))
    } else if roots.is_some() {
        return Err(OpenError::Tls {
            url: shown,
            problem:
                "root certificates were given, but the connection string's sslmode does not ask for TLS: \
                      add sslmode=verify-full (or verify-ca, require)"
                    .into(),
        });
    } else {
        None
    };
    if config.get_password().is_none()
        && let Some(password) = &options.password
    {
        config.password(password.as_str());
    }
    if config.get_application_name().is_none() {
        config.application_name(options.application_name.as_str());
    }
    config.connect_timeout(options.connect_timeout);
    config.options(session_options(config.get_options(), options, &shown)?);
    let runner = Arc::new(Runner::new().map_err(|e| OpenError::Runtime {
        problem: e.to_string(),
    })?);
    let manager_config = ManagerConfig {
        // Connections come back only after their transaction ended (see `conn`), so
        // checking them costs a round trip for nothing.
        recycling_method: RecyclingMethod::Fast,
    };
    // The watchdog's connection is a pool of its own, so that a busy pool never
    // looks like a hung database.
    let (manager, watchdog_manager) = match tls {
        Some(tls) => (
            Manager::from_config(config.clone(), tls.clone(), manager_config.clone()),
            Manager::from_config(config, tls, manager_config),
        ),
        None => (
            Manager::from_config(config.clone(), NoTls, manager_config.clone()),
            Manager::from_config(config, NoTls, manager_config),
        ),
    };
    let watchdog_pool = Pool::builder(watchdog_manager)
        .max_size(1)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| OpenError::Pool {
            url: shown.clone(),
            problem: e.to_string(),
        })?;
    let pool = Pool::builder(manager)
        .max_size(options.pool_size.max(1))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(options.wait_timeout))
        .create_timeout(Some(options.connect_timeout))
        .recycle_timeout(Some(options.connect_timeout))
        .build()
        .map_err(|e| OpenError::Pool {
            url: shown.clone(),
            problem: e.to_string(),
        })?;
    let hung = watchdog::Hung::watch(&runner, watchdog_pool);
    let db = Db {
        runner,
        pool,
        call_timeout: options.statement_timeout + CALL_SLACK,
        hung,
    };
    Ok(Connected {
        db,
        shown,
        options: options.clone(),
        write_attempts: options.write_attempts.max(1),
    })
}

/// Migrates and claims the writer lease for `node` ([`migrate`]); a backend holding
/// it, with its renewal timer running.
pub(crate) fn claim(c: &Connected, node: String) -> Result<PostgresBackend, OpenError> {
    let options = &c.options;
    let epoch = migrate(&c.db, &c.shown, node.clone(), options.lease, c.write_attempts)?;
    let lease = Arc::new(Lease::new(node, epoch, options.lease));
    let mut backend = PostgresBackend {
        db: c.db.clone(),
        defs: Arc::default(),
        write_attempts: c.write_attempts,
        lease: lease.clone(),
        renewal: None,
        retried: Default::default(),
        unsure: AtomicU64::new(0),
    };
    // From here on a failure drops `backend`, which releases the lease.
    backend.renewal = Some(
        Renewal::start(lease, c.db.clone(), options.lease_renew_every).map_err(|e| OpenError::Runtime {
            problem: format!("cannot start the lease renewal thread: {e}"),
        })?,
    );
    tracing::info!(
        database = %c.shown,
        node = backend.lease.node(),
        epoch,
        lease = ?options.lease,
        "postgres storage open; this server holds the database's writer lease"
    );
    Ok(backend)
}

/// Applies the missing migrations and claims the lease (answering its epoch), or
/// refuses a newer schema or a database another server holds.
fn migrate(db: &Db, shown: &str, node: String, lease: Duration, attempts: usize) -> Result<i64, OpenError> {
    let url = shown.to_string();
    let first_key = keys::new_secret().map_err(|problem| OpenError::Init {
        url: url.clone(),
        problem,
    })?;
    let outcome = db
        .runner
        .block(txn::migrate(
            db.pool.clone(),
            node,
            first_key,
            lease::millis(lease),
            attempts,
        ))
        .map_err(|e| OpenError::Init {
            url: url.clone(),
            problem: e.to_string(),
        })?;
    let known = schema::latest();
    match outcome {
        Ok((0, epoch)) if known > 0 => {
            tracing::info!(database = %url, version = known, "created the tables");
            Ok(epoch)
        }
        Ok((from, epoch)) if from < known => {
            tracing::info!(database = %url, from, to = known, "migrated the tables");
            Ok(epoch)
        }
        Ok((_, epoch)) => Ok(epoch),
        Err(txn::MigrateError::Held { node, until, in_secs }) => Err(OpenError::Held {
            url,
            node,
            until,
            in_secs,
        }),
        Err(txn::MigrateError::Connect(e)) => Err(OpenError::Connect {
            url,
            problem: tls_hint(e.to_string()),
        }),
        Err(txn::MigrateError::Init(e)) => Err(OpenError::Init {
            url,
            problem: e.to_string(),
        }),
        Err(txn::MigrateError::Newer(found)) => Err(OpenError::Schema { url, found, known }),
        Err(txn::MigrateError::Migrate { from, source }) => Err(OpenError::Migrate {
            url,
            from,
            to: known,
            problem: source.to_string(),
        }),
    }
}

/// `problem`, with what to do when it is the database's certificate that did not
/// verify.
fn tls_hint(problem: String) -> String {
    if problem.contains("invalid peer certificate") {
        format!(
            "{problem} (the database's certificate does not verify against the root certificates: give the \
             ones it chains to, the server's store_ca / --store-ca, or check the URL's sslmode)"
        )
    } else {
        problem
    }
}

/// The connection's startup options: the caller's own (from the URL), then the
/// timeouts and the schema, as `-c name=value` (`options` in libpq's terms).
fn session_options(given: Option<&str>, o: &PostgresOptions, shown: &str) -> Result<String, OpenError> {
    let mut out = given.unwrap_or_default().to_string();
    let mut set = |name: &str, value: String| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&format!("-c {name}={value}"));
    };
    set("statement_timeout", o.statement_timeout.as_millis().to_string());
    set(
        "idle_in_transaction_session_timeout",
        o.idle_in_transaction_timeout.as_millis().to_string(),
    );
    if let Some(schema) = &o.schema {
        // Startup options split on spaces and take backslash escapes: a plain name
        // needs neither.
        if schema.is_empty() || !schema.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(OpenError::Unsupported {
                url: shown.to_string(),
                problem: format!("schema {schema:?}: only letters, digits and _"),
            });
        }
        set("search_path", schema.clone());
    }
    Ok(out)
}

impl Backend for PostgresBackend {
    /// `SELECT 1` on a pooled connection within `within`; fails at once when this
    /// server lost its writer lease.
    fn ping(&self, within: Duration) -> Result<(), StorageError> {
        self.lease.check()?;
        self.db.ping(within)
    }

    fn stats(&self) -> BackendStats {
        let pool = self.db.pool.status();
        let (renewals, conflicts) = self.lease.counts();
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        BackendStats {
            pool: Some(PoolStats {
                max: n(pool.max_size),
                open: n(pool.size),
                in_use: n(pool.size.saturating_sub(pool.available)),
                waiting: n(pool.waiting),
            }),
            retries: vec![
                ("serialization", self.retried[0].load(Ordering::Relaxed)),
                ("deadlock", self.retried[1].load(Ordering::Relaxed)),
            ],
            claim: Some(ClaimStats {
                node: self.lease.node().to_string(),
                epoch: self.lease.epoch(),
                held: self.lease.check().is_ok(),
                renewals,
                conflicts,
            }),
        }
    }

    /// The `token_keys` table, read in a transaction of its own.
    fn shared_keys(&self) -> Result<Option<railyard_store::SharedKeys>, StorageError> {
        let conn = self.begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        let keys = keys::read(&conn)?;
        conn.commit()?;
        Ok(Some(keys))
    }

    fn snapshot(&self) -> Result<Box<dyn Snapshot>, StorageError> {
        let conn = self.begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        Ok(Box::new(PgTxn::new(conn, self.defs.clone())))
    }

    /// Fenced: the transaction first renews this server's writer lease, and fails
    /// with [`StorageError::Fenced`], keeping nothing, if another server claimed it;
    /// once that happened every later write fails the same way at once.
    fn write(
        &self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.transaction(&mut |tx| f(tx))
    }

    /// One more after each write transaction that failed with the database
    /// unreachable: a `COMMIT` whose answer was lost may have committed, and the
    /// writer rebuilds what it keeps in memory from the tables.
    fn incarnation(&self) -> u64 {
        self.unsure.load(Ordering::Relaxed)
    }
}

impl PostgresBackend {
    /// One fenced write transaction running `f` (see [`Backend::write`]), run
    /// again when the database asks.
    pub(crate) fn transaction(
        &self,
        f: &mut dyn FnMut(&mut PgTxn) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.lease.check()?;
        let _turn = self.lease.turn();
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(10))
            .with_max_delay(Duration::from_millis(500))
            .with_max_times(self.write_attempts - 1)
            .with_jitter()
            .build();
        let mut attempt = 1;
        loop {
            // `BEGIN` alone: the database's default isolation.
            let mut tx = PgTxn::new(self.begin("BEGIN")?, self.defs.clone());
            let outcome = self
                .lease
                .fence(tx.conn())
                .and_then(|()| f(&mut tx))
                .and_then(|()| tx.conn().commit());
            let Err(e) = outcome else {
                return Ok(());
            };
            let retry = tx.conn().asks_retry();
            tx.conn().rollback();
            drop(tx);
            match (retry, delays.next()) {
                (Some(cause), Some(delay)) => {
                    self.retried[usize::from(cause == "deadlock")].fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, attempt, cause, ?delay, "the database asked to retry the write transaction");
                    attempt += 1;
                    std::thread::sleep(delay);
                }
                _ => {
                    if matches!(e, StorageError::Unavailable(_)) {
                        self.unsure.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(e);
                }
            }
        }
    }
}
