//! The retention purge: a background task that removes closed runs once their
//! namespace's retention has passed since they closed, and live output past its own
//! retention (`engine::output::purge`).
//!
//! Each sweep walks every namespace's close-time index (`Snapshot::closed_runs`)
//! up to "now minus its retention", and hands the writer at most
//! [`PurgeConfig::batch`] runs per command ([`PurgeRuns`]): each batch is one
//! commit, each run goes whole in it, and other commands interleave between
//! batches, so purging never stalls the writer. It keeps going while a sweep finds
//! work and then sleeps [`PurgeConfig::interval_ms`] on the server's `Clock` (a
//! `ManualClock` in tests). A run that must stay (`may_purge`, asked on the
//! sweep's snapshot and again by the writer) is passed over for the rest of the
//! sweep and looked at again by the next; the runs that stay cost reads, never
//! writer commands.
//!
//! Finished batches (completed or stopped) go the same way once
//! [`PurgeConfig::batch_retention_ms`] has passed since they closed
//! ([`PurgeBatches`]): each sweep reads the namespaces' batch headers (batches are
//! few: each is a job over up to 10,000 runs, at most four running per namespace)
//! and hands the writer at most [`PurgeConfig::batch`] batches and
//! [`BATCH_ITEMS_PER_COMMIT`] of their items per command, a large batch's items
//! over several commits and its header last.

use railyard_model::RunKey;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use tokio::sync::watch;

use railyard_model::Millis;

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::writer::{PurgeBatches, PurgeCandidate, PurgeRuns, WriteError, Writer, batch_due, may_purge};
use railyard_store::StorageError;
use railyard_store::Store;

/// How the purge runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeConfig {
    /// Most runs purged per commit.
    pub batch: usize,
    /// Time between sweeps that found nothing more to do.
    pub interval_ms: Millis,
    /// How long a finished batch (completed or stopped) is kept after it closed,
    /// with its items and their outcomes; 0 keeps batches for good.
    pub batch_retention_ms: Millis,
}

/// The default [`PurgeConfig::batch_retention_ms`]: 30 days.
pub const DEFAULT_BATCH_RETENTION_MS: Millis = 30 * 86_400_000;

/// Most batch items the purge deletes in one commit.
pub const BATCH_ITEMS_PER_COMMIT: usize = 1_000;

impl Default for PurgeConfig {
    fn default() -> Self {
        Self {
            batch: 100,
            interval_ms: 60_000,
            batch_retention_ms: DEFAULT_BATCH_RETENTION_MS,
        }
    }
}

/// Runs the purge until `shutdown` turns true.
pub async fn run(
    store: Store,
    writer: Writer,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    config: PurgeConfig,
    output_retention_ms: Millis,
    mut shutdown: watch::Receiver<bool>,
) {
    let batch = config.batch.max(1);
    loop {
        if *shutdown.borrow() {
            break;
        }
        let now = clock.now_ms();
        if let Err(e) = sweep(&store, &writer, &metrics, now, batch, &shutdown).await {
            tracing::error!(error = %e, "retention purge failed; it tries again at the next sweep");
        }
        match sweep_batches(&store, &writer, now, config.batch_retention_ms, batch, &shutdown).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(batches = n, "purged finished batches past the batch retention"),
            Err(e) => {
                tracing::error!(error = %e, "batch purge failed; it tries again at the next sweep")
            }
        }
        match crate::output::purge::sweep(&store, now, output_retention_ms) {
            Ok(0) => {}
            Ok(n) => tracing::info!(runs = n, "purged live output past its retention"),
            Err(e) => {
                tracing::error!(error = %e, "live output purge failed; it tries again at the next sweep")
            }
        }
        tokio::select! {
            _ = clock.sleep_until(now.saturating_add(config.interval_ms.max(1))) => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    tracing::debug!("retention purge stopped");
}

/// One sweep: batches until every namespace's due runs were looked at.
async fn sweep(
    store: &Store,
    writer: &Writer,
    metrics: &Metrics,
    now: Millis,
    batch: usize,
    shutdown: &watch::Receiver<bool>,
) -> Result<(), WriteError> {
    // Where the sweep is in each namespace's index, and the namespaces done.
    let mut cursors: BTreeMap<String, (Millis, String)> = BTreeMap::new();
    let mut done: BTreeSet<String> = BTreeSet::new();
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let Some(candidates) = collect(store, now, batch, &mut cursors, &mut done)? else {
            return Ok(());
        };
        if candidates.is_empty() {
            // All read must stay: read on, without a command, letting others run.
            tokio::task::yield_now().await;
            continue;
        }
        let found = candidates.len();
        let purged = writer.call(PurgeRuns { candidates }).await?;
        let mut by_ns: BTreeMap<&str, u64> = BTreeMap::new();
        for run in &purged.purged {
            *by_ns.entry(run.namespace.as_str()).or_insert(0) += 1;
        }
        for (ns, n) in &by_ns {
            metrics.record_purged(ns, *n);
        }
        tracing::info!(
            purged = purged.purged.len(),
            kept = purged.kept,
            candidates = found,
            namespaces = ?by_ns,
            "purged closed runs past their namespace's retention"
        );
    }
}

/// One sweep of finished batches: every namespace's batch headers read from one
/// snapshot, those past `retention_ms` purged, at most `per_commit` batches and
/// [`BATCH_ITEMS_PER_COMMIT`] items a command. Answers the batches purged.
async fn sweep_batches(
    store: &Store,
    writer: &Writer,
    now: Millis,
    retention_ms: Millis,
    per_commit: usize,
    shutdown: &watch::Receiver<bool>,
) -> Result<usize, WriteError> {
    if retention_ms <= 0 {
        return Ok(0);
    }
    let mut due = VecDeque::new();
    {
        let snap = store.backend().snapshot()?;
        for ns in snap.namespaces()? {
            snap.batches(&ns, "", &mut |b| {
                if batch_due(&b, retention_ms, now) {
                    due.push_back((ns.clone(), b.batch_id));
                }
                true
            })?;
        }
    }
    let mut purged = 0;
    while !due.is_empty() && !*shutdown.borrow() {
        let candidates: Vec<_> = due.iter().take(per_commit).cloned().collect();
        let done = writer
            .call(PurgeBatches {
                candidates,
                retention_ms,
                max_items: BATCH_ITEMS_PER_COMMIT,
            })
            .await?;
        tracing::debug!(
            batches = done.purged.len(),
            items = done.items,
            "purged finished batches"
        );
        purged += done.purged.len();
        due.drain(..done.processed.min(due.len()));
    }
    Ok(purged)
}

/// Index entries read per namespace at a time while filling a batch.
const SCAN_CHUNK: usize = 256;

/// The next batch of candidates: closed runs past retention that [`may_purge`]
/// lets go as a snapshot sees them, after each namespace's cursor, at most `batch`
/// in all (perhaps none, when all it read must stay); `None` when every namespace
/// has been read to its end and nothing is left to send. Reads at most `4 * batch + SCAN_CHUNK` index entries, so a namespace
/// full of runs that must stay cannot hold a batch up for long.
fn collect(
    store: &Store,
    now: Millis,
    batch: usize,
    cursors: &mut BTreeMap<String, (Millis, String)>,
    done: &mut BTreeSet<String>,
) -> Result<Option<Vec<PurgeCandidate>>, StorageError> {
    let snap = store.backend().snapshot()?;
    let mut out = Vec::new();
    let mut scanned = 0usize;
    for name in snap.namespaces()? {
        if done.contains(&name) {
            continue;
        }
        let Some(ns) = snap.namespace(&name)? else {
            continue;
        };
        if ns.retention_ms <= 0 {
            done.insert(name);
            continue;
        }
        let up_to = now.saturating_sub(ns.retention_ms);
        while out.len() < batch && scanned < 4 * batch {
            let after = cursors.get(&name).map(|(ms, id)| (*ms, id.as_str()));
            let found = snap.closed_runs(&name, after, up_to, SCAN_CHUNK)?;
            scanned += found.len();
            let exhausted = found.len() < SCAN_CHUNK;
            for (close_ms, run_id) in found {
                cursors.insert(name.clone(), (close_ms, run_id.clone()));
                let wanted = match snap.run(&RunKey::new(&name, &run_id))? {
                    Some(run) => may_purge(&*snap, &run)?,
                    // A stale index entry: the writer drops it.
                    None => true,
                };
                if wanted {
                    out.push(PurgeCandidate {
                        ns: name.clone(),
                        close_ms,
                        run_id,
                    });
                }
                if out.len() >= batch {
                    return Ok(Some(out));
                }
            }
            if exhausted {
                done.insert(name.clone());
                break;
            }
        }
        if scanned >= 4 * batch {
            return Ok(Some(out));
        }
    }
    // Every namespace looked at to its end: the sweep is over once this is sent.
    Ok((!out.is_empty()).then_some(out))
}
