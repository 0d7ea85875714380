//! The writer lease: one server writes to a database at a time, and a server that
//! lost the database to another cannot write to it again.
//!
//! `writer_lease` holds one row: the holding node (a random id made at open), an
//! epoch that grows by one per claim, and an expiry in database time (`now()`, never
//! this node's clock). Opening claims it in the migrating transaction, when it is free
//! or expired ([`CLAIM`]), and is refused otherwise. Every write transaction first
//! renews it, fenced by the node and the epoch ([`Lease::fence`]): no row matched
//! means another node claimed it meanwhile, and the write keeps nothing. The fencing
//! `UPDATE` holds the row's lock until the transaction ends, so a claim cannot slip
//! in between the check and the commit. An idle backend renews on a timer thread
//! ([`Renewal`]); a lost lease is final: every later write fails with
//! [`StorageError::Fenced`] and nothing claims it back.
//!
//! The row also says where the holder serves (its advertised gRPC and HTTP
//! addresses, and whether they speak TLS), written by [`Lease::advertise`] once its
//! listeners are up and cleared by each claim: the other nodes, standing by
//! ([`crate::Standby`]), forward their calls there. A lost lease is announced on a
//! [`tokio::sync::watch`] channel ([`Lease::lost`]) so the server can step down.
//!
//! Plain SQL only (no advisory locks, `LISTEN`, system columns): it holds under
//! `SERIALIZABLE`, where a claim racing a renewal is a 40001 run again.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use railyard_store::StorageError;
use tokio::sync::watch;

use crate::conn::{Conn, Db, db_error, params};

/// Takes the lease when it is free (no row) or expired; answers the new epoch, or no
/// row when another node holds it. The last holder's addresses are cleared: the new
/// one says its own once it serves. `$1`: this node, `$2`: the lease in ms.
pub(crate) const CLAIM: &str = "INSERT INTO writer_lease (id, node, epoch, expires_at)
    VALUES (1, $1, 1, now() + $2::float8 * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET node = excluded.node, epoch = writer_lease.epoch + 1,
        expires_at = excluded.expires_at, grpc_addr = '', http_addr = '', tls = false
    WHERE writer_lease.expires_at <= now()
    RETURNING epoch";

/// The holder of a lease that has not expired, and where it serves.
pub(crate) const LEADER: &str = "SELECT node, epoch, grpc_addr, http_addr, tls,
    (expires_at AT TIME ZONE 'UTC')::text, CAST(extract(epoch FROM expires_at - now()) AS float8)
    FROM writer_lease WHERE id = 1 AND expires_at > now()";

/// Records where the holder serves (after the fence, in its transaction).
const ADVERTISE: &str = "UPDATE writer_lease SET grpc_addr = $3, http_addr = $4, tls = $5 WHERE id = 1 AND epoch = $1 AND node = $2";

/// Who holds the lease, until when (UTC), and in how many seconds that is.
pub(crate) const HOLDER: &str = "SELECT node, (expires_at AT TIME ZONE 'UTC')::text,
    CAST(extract(epoch FROM expires_at - now()) AS float8)
    FROM writer_lease WHERE id = 1";

/// The fence: renews the lease if this node still holds it at this epoch.
const FENCE: &str = "UPDATE writer_lease SET expires_at = now() + $3::float8 * interval '1 millisecond'
    WHERE id = 1 AND epoch = $1 AND node = $2";

/// Gives the lease up at once (a clean close), if still held.
const RELEASE: &str = "UPDATE writer_lease SET expires_at = now() WHERE id = 1 AND epoch = $1 AND node = $2";

const CURRENT_NODE: &str = "SELECT node FROM writer_lease WHERE id = 1";

/// A random node id: 16 hex digits. `RandomState`'s keys come from the operating
/// system's randomness (and differ for each state made), so no crate is needed.
pub(crate) fn new_node_id() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// A duration as the `float8` milliseconds the statements take.
pub(crate) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// This backend's claim on the database.
pub(crate) struct Lease {
    node: String,
    epoch: i64,
    duration: Duration,
    /// Held by each write transaction and each renewal, so that this backend never
    /// races itself on the lease row (a 40001 under `SERIALIZABLE` would fail a
    /// writer's batch).
    turn: Mutex<()>,
    /// The node that took the lease from this one, once it has.
    lost_to: Mutex<Option<String>>,
    /// Test hook: the timer skips its renewals (a node stopped by SIGSTOP).
    paused: AtomicBool,
    /// Turns to the node that took the lease, once one has.
    lost: watch::Sender<Option<String>>,
    /// Renewals made, and renewals that found another node holding the lease.
    renewals: AtomicU64,
    conflicts: AtomicU64,
}

impl Lease {
    pub(crate) fn new(node: String, epoch: i64, duration: Duration) -> Self {
        Self {
            node,
            epoch,
            duration,
            turn: Mutex::new(()),
            lost_to: Mutex::new(None),
            paused: AtomicBool::new(false),
            lost: watch::Sender::new(None),
            renewals: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
        }
    }

    /// A receiver that turns to `Some(node)` once `node` took the lease from this one.
    pub(crate) fn lost(&self) -> watch::Receiver<Option<String>> {
        self.lost.subscribe()
    }

    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    pub(crate) fn epoch(&self) -> i64 {
        self.epoch
    }

    /// For `/metrics`: renewals made, and renewals that found another node holding it.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.renewals.load(Ordering::Relaxed),
            self.conflicts.load(Ordering::Relaxed),
        )
    }

    #[cfg(feature = "testing")]
    pub(crate) fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
    }

    /// This backend's turn on the lease row.
    pub(crate) fn turn(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data: a panic while it was held leaves nothing broken.
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lost_to(&self) -> MutexGuard<'_, Option<String>> {
        self.lost_to.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fence error, once the lease is lost: no write is tried again.
    pub(crate) fn check(&self) -> Result<(), StorageError> {
        match &*self.lost_to() {
            Some(holder) => Err(StorageError::Fenced {
                holder: holder.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Records that `holder` took the lease, saying so once; answers the fence error.
    fn lose(&self, holder: String) -> StorageError {
        let mut lost = self.lost_to();
        if lost.is_none() {
            tracing::error!(
                node = %self.node,
                epoch = self.epoch,
                holder = %holder,
                "this server lost its claim on the database to another node; it stops writing \
                 (every later write fails; restart it to claim the database again once the other node stops)"
            );
            *lost = Some(holder.clone());
            self.lost.send_replace(Some(holder.clone()));
        }
        StorageError::Fenced { holder }
    }

    /// The fence, first in a write transaction: renews the lease if this node still
    /// holds it, and fails with [`StorageError::Fenced`] (the lease lost for good)
    /// if another node claimed it.
    pub(crate) fn fence(&self, conn: &Conn) -> Result<(), StorageError> {
        let renewed = conn.execute(
            FENCE,
            params![self.epoch, self.node.clone(), millis(self.duration)],
        )?;
        if renewed == 1 {
            self.renewals.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.conflicts.fetch_add(1, Ordering::Relaxed);
        let holder = conn
            .query_opt(CURRENT_NODE, params![])?
            .map(|row| row.try_get::<_, String>(0).map_err(db_error))
            .transpose()?
            .unwrap_or_else(|| "(none)".into());
        Err(self.lose(holder))
    }

    /// One renewal in a transaction of its own (the timer's).
    fn renew(&self, db: &Db) -> Result<(), StorageError> {
        self.check()?;
        let _turn = self.turn();
        let conn = db.begin("BEGIN")?;
        self.fence(&conn)?;
        conn.commit()
    }

    /// Records, fenced, where this node serves, for the nodes standing by.
    pub(crate) fn advertise(&self, db: &Db, grpc: &str, http: &str, tls: bool) -> Result<(), StorageError> {
        self.check()?;
        let _turn = self.turn();
        let conn = db.begin("BEGIN")?;
        self.fence(&conn)?;
        conn.execute(
            ADVERTISE,
            params![
                self.epoch,
                self.node.clone(),
                grpc.to_string(),
                http.to_string(),
                tls
            ],
        )?;
        conn.commit()
    }

    /// Gives the lease up at once, if this node still holds it (a clean close).
    pub(crate) fn release(&self, db: &Db) {
        if self.check().is_err() {
            return;
        }
        let _turn = self.turn();
        let released = db.begin("BEGIN").and_then(|conn| {
            conn.execute(RELEASE, params![self.epoch, self.node.clone()])?;
            conn.commit()
        });
        match released {
            Ok(()) => {
                tracing::info!(node = %self.node, epoch = self.epoch, "released the database's writer lease")
            }
            Err(e) => tracing::warn!(
                node = %self.node,
                error = %e,
                "could not release the database's writer lease; the next server claims it when it expires"
            ),
        }
    }
}

/// The thread renewing the lease of an idle backend; stopped (and joined) on drop.
pub(crate) struct Renewal {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Renewal {
    /// Renews every `every` until stopped or the lease is lost.
    pub(crate) fn start(lease: Arc<Lease>, db: Db, every: Duration) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("railyard-lease".into())
            .spawn(move || {
                loop {
                    match stopped.recv_timeout(every) {
                        Err(RecvTimeoutError::Timeout) => {}
                        // A stop, or the backend gone.
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                    if lease.paused.load(Ordering::SeqCst) {
                        continue;
                    }
                    match lease.renew(&db) {
                        Ok(()) => {}
                        // Said once by `lose`; nothing more to do.
                        Err(StorageError::Fenced { .. }) => return,
                        Err(e) => tracing::warn!(
                            node = %lease.node,
                            error = %e,
                            "could not renew the database's writer lease; trying again"
                        ),
                    }
                }
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // A renewal in progress ends within the call timeout.
            let _ = thread.join();
        }
    }
}
