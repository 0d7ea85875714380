//! Whether the database answers at all. A hung database (its processes stopped, a
//! network that drops packets) still accepts connections, the kernel does, and
//! answers nothing: every statement would wait its whole call timeout, and every
//! thread waiting on one with it. A watchdog asks `SELECT 1` every [`PING_EVERY`] on
//! a connection of its own; once a question has gone unanswered for [`HUNG_AFTER`]
//! the database is *hung*: new transactions fail at once, statements in flight give
//! up, and the health check says so, each with [`StorageError::Unavailable`]. Its
//! next answer ends that. A refused or closed connection is not a hang: calls fail
//! fast by themselves then, with the driver's own error.

use std::time::Duration;

use deadpool_postgres::{Object, Pool, PoolError};
use railyard_store::StorageError;
use tokio::sync::watch;

use crate::runtime::Runner;

/// How often the watchdog asks.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(1);
/// How long a question (connecting included) may go unanswered before the database
/// counts as hung.
pub(crate) const HUNG_AFTER: Duration = Duration::from_secs(3);

/// Whether the database is hung, as the watchdog last found.
#[derive(Clone)]
pub(crate) struct Hung(watch::Receiver<bool>);

impl Hung {
    /// Starts the watchdog on `runner`, asking on `pool` (a pool of its own, one
    /// connection). It stops once every [`Hung`] is dropped.
    pub(crate) fn watch(runner: &Runner, pool: Pool) -> Self {
        let (tx, rx) = watch::channel(false);
        runner.spawn(async move {
            while !tx.is_closed() {
                let hung = !answers(&pool).await;
                let changed = tx.send_if_modified(|was| std::mem::replace(was, hung) != hung);
                if changed && hung {
                    tracing::error!(
                        after_ms = HUNG_AFTER.as_millis() as u64,
                        "the database does not answer; every call to it fails until it does"
                    );
                } else if changed {
                    tracing::warn!("the database answers again");
                }
                tokio::time::sleep(PING_EVERY).await;
            }
        });
        Self(rx)
    }

    /// Whether the database is hung now.
    pub(crate) fn now(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the database is found hung (never, once the watchdog stopped).
    pub(crate) async fn wait(mut self) {
        if self.0.wait_for(|hung| *hung).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The error of a call the hang ended, or refused.
    pub(crate) fn error() -> StorageError {
        StorageError::Unavailable(format!(
            "the database does not answer (a question has gone unanswered for over {} s)",
            HUNG_AFTER.as_secs()
        ))
    }
}

/// Whether the database answered `SELECT 1` (or refused it) within [`HUNG_AFTER`],
/// connecting included. A connection that did not answer is closed, not kept.
async fn answers(pool: &Pool) -> bool {
    let asked = tokio::time::Instant::now();
    let client = match tokio::time::timeout(HUNG_AFTER, pool.get()).await {
        Ok(Ok(client)) => client,
        Ok(Err(PoolError::Timeout(_))) | Err(_) => return false,
        // Refused, or an error the database gave: it answers.
        Ok(Err(_)) => return true,
    };
    let left = HUNG_AFTER.saturating_sub(asked.elapsed());
    match tokio::time::timeout(left, client.simple_query("SELECT 1")).await {
        Ok(Ok(_)) => true,
        Ok(Err(_)) => {
            drop(Object::take(client));
            true
        }
        Err(_) => {
            drop(Object::take(client));
            false
        }
    }
}
