//! The batch task: works through every running batch at its rate, on the leader
//! only (the server runs it; a follower runs no engine).
//!
//! Each pass reads the running batches (`Snapshot::running_batches`) and, for each,
//! hands the writer an [`AdvanceBatch`] for as many items as its rate allows by now
//! (at most [`CHUNK`] a command, so other commands interleave). The rate is counted
//! from an anchor this task keeps in memory: the time it first saw the batch (its
//! creation time if it was made while the task ran) and the items done by then; by
//! time `t` at most `rate × (t − anchor) / 1000` more items are reached. A restarted
//! server anchors afresh, so the runs acted on never exceed the rate over the time
//! a leader was working on them, and a crash never makes up for lost time in a
//! burst. Time is the server's [`Clock`]: with a `ManualClock`, nothing moves until
//! the test advances it.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Notify, watch};

use railyard_model::Millis;
use railyard_model::batch::Batch;

use crate::clock::Clock;
use crate::writer::{AdvanceBatch, Writer};
use railyard_store::{StorageError, Store};

/// Most items one writer command acts on.
pub const CHUNK: u64 = 64;
/// How long to wait before trying again after a storage error.
const RETRY_MS: Millis = 1_000;

/// Where a batch's rate is counted from: (time, items reached by then).
type Anchor = (Millis, u64);

/// Runs the batch task until `shutdown` turns true. `wake` is notified when a batch
/// starts or stops.
pub async fn run(
    store: Store,
    writer: Writer,
    clock: Arc<dyn Clock>,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let started = clock.now_ms();
    let mut anchors: HashMap<(String, String), Anchor> = HashMap::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        let next = match pass(&store, &writer, &*clock, started, &mut anchors).await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(error = %e, "batch task failed; it tries again");
                Some(clock.now_ms().saturating_add(RETRY_MS))
            }
        };
        let sleep = async {
            match next {
                Some(due) => clock.sleep_until(due).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = wake.notified() => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    tracing::debug!("batch task stopped");
}

/// One pass over the running batches: acts on what each one's rate allows by now
/// (at most [`CHUNK`] items each). Answers when the next item of any of them comes
/// due (`None`: none is running); a time already past means at once.
async fn pass(
    store: &Store,
    writer: &Writer,
    clock: &dyn Clock,
    started: Millis,
    anchors: &mut HashMap<(String, String), Anchor>,
) -> Result<Option<Millis>, Box<dyn std::error::Error + Send + Sync>> {
    let running = store.backend().snapshot()?.running_batches()?;
    anchors.retain(|k, _| running.contains(k));
    let mut next_due: Option<Millis> = None;
    for key in running {
        let Some(mut b) = batch(store, &key)? else {
            continue;
        };
        let anchor = *anchors
            .entry(key.clone())
            .or_insert_with(|| (b.created_ms.max(started), b.next));
        // One command per batch and pass, so that a fast batch does not hold the
        // others up; a batch with more due asks for the next pass at once.
        let due = allowed(&b, anchor, clock.now_ms())
            .saturating_sub(b.next)
            .min(CHUNK);
        if due > 0 && b.is_running() {
            let new_run_ids = if b.action.starts_runs() {
                (0..due).map(|_| uuid::Uuid::now_v7().to_string()).collect()
            } else {
                Vec::new()
            };
            b = writer
                .call(AdvanceBatch {
                    ns: b.namespace.clone(),
                    batch_id: b.batch_id.clone(),
                    max: due,
                    new_run_ids,
                })
                .await?;
            tracing::debug!(batch_id = %b.batch_id, reached = b.next, total = b.total, "batch advanced");
            if !b.is_running() {
                tracing::info!(
                    namespace = %b.namespace,
                    batch_id = %b.batch_id,
                    state = b.state.name(),
                    succeeded = b.succeeded,
                    skipped = b.skipped,
                    failed = b.failed,
                    "batch ended"
                );
            }
        }
        if b.is_running() {
            let due = due_at(&b, anchor);
            next_due = Some(next_due.map_or(due, |d| d.min(due)));
        }
    }
    Ok(next_due)
}

fn batch(store: &Store, (ns, id): &(String, String)) -> Result<Option<Batch>, StorageError> {
    store.backend().snapshot()?.batch(ns, id)
}

/// Items the rate allows reached by `now`, counted from `anchor`.
fn allowed(b: &Batch, (at, done): Anchor, now: Millis) -> u64 {
    let elapsed = u64::try_from(now.saturating_sub(at)).unwrap_or(0);
    done.saturating_add(elapsed.saturating_mul(u64::from(b.rate)) / 1000)
}

/// When the item after `b.next` comes due.
fn due_at(b: &Batch, (at, done): Anchor) -> Millis {
    let rate = u64::from(b.rate.max(1));
    let ahead = b.next.saturating_sub(done) + 1;
    // The least elapsed ms with elapsed × rate / 1000 ≥ ahead.
    let ms = (ahead.saturating_mul(1000)).div_ceil(rate);
    at.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_model::batch::{BatchAction, BatchState};

    fn b(rate: u32, next: u64) -> Batch {
        Batch {
            namespace: "n".into(),
            batch_id: "b".into(),
            action: BatchAction::Cancel,
            query: "q".into(),
            reason: String::new(),
            rate,
            identity: String::new(),
            created_ms: 0,
            closed_ms: None,
            state: BatchState::Running,
            stopped_by: String::new(),
            stop_reason: String::new(),
            total: 100,
            next,
            succeeded: 0,
            skipped: 0,
            failed: 0,
        }
    }

    #[test]
    fn the_rate_allows_rate_times_elapsed_and_the_next_item_comes_due_after() {
        assert_eq!(allowed(&b(10, 0), (1000, 0), 1000), 0);
        assert_eq!(allowed(&b(10, 0), (1000, 0), 1099), 0);
        assert_eq!(allowed(&b(10, 0), (1000, 0), 1100), 1);
        assert_eq!(allowed(&b(10, 0), (1000, 0), 3000), 20);
        assert_eq!(allowed(&b(3, 5), (0, 5), 1000), 8);
        assert_eq!(due_at(&b(10, 0), (1000, 0)), 1100);
        assert_eq!(due_at(&b(3, 5), (0, 5)), 334);
        assert_eq!(due_at(&b(3, 7), (0, 5)), 1000);
        for (rate, next) in [(1, 0), (7, 3), (1000, 40)] {
            let x = b(rate, next);
            let due = due_at(&x, (0, 0));
            assert!(allowed(&x, (0, 0), due) > next && allowed(&x, (0, 0), due - 1) <= next);
        }
    }
}
