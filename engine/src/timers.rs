//! The timer loop: waits for the earliest timer to come due, then has the writer
//! fire every due timer in one transaction. Time comes from the server's [`Clock`].
//!
//! There are two kinds of timers. Durable timer rows (retry backoffs) live in the
//! `timers` table, so a restart loses none. Lease deadlines live in memory
//! ([`LeaseDeadlines`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::clock::Clock;
use crate::leases::LeaseDeadlines;
use crate::writer::Writer;
use railyard_store::Store;

/// Runs until `shutdown` turns true.
pub async fn run(
    store: Store,
    writer: Writer,
    leases: Arc<LeaseDeadlines>,
    clock: Arc<dyn Clock>,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        let row_due = match store.next_timer_due() {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "cannot read timers; retrying in 1s");
                Some(clock.now_ms() + 1000)
            }
        };
        let due = match (row_due, leases.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match due {
            Some(due) if due <= clock.now_ms() => {
                if let Err(e) = writer.call(crate::writer::FireTimers).await {
                    tracing::error!(error = %e, "firing timers failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            Some(due) => {
                tokio::select! {
                    _ = clock.sleep_until(due) => {}
                    _ = wake.notified() => {}
                    _ = shutdown.changed() => {}
                }
            }
            None => {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }
}
