//! Live output: the hub that numbers, bounds and batches every step's output
//! chunks, writes them to the output store (`railyard_store::output`) a few times a
//! second, and only then hands them to live watchers.
//!
//! - **Not the durable path.** Appends never go through the writer: the hub keeps
//!   each run's pending chunks in memory and one flusher task writes all of them in
//!   one output-store transaction every [`OutputSettings::flush_interval_ms`] (or
//!   sooner when much is pending, or a step ends with output pending: never for a
//!   step without output, which would cost every stream's commit at that rate). An append is answered before its
//!   chunks are written, so a server crash loses at most the last flush interval
//!   of output (and the worker's own unsent batch).
//! - **Watchers see only what is stored.** A chunk is broadcast after its write
//!   committed, so a watcher that resumes from storage at an offset finds every
//!   chunk it could have been sent live: no gap, no repeat, even across a restart
//!   (offsets of chunks lost in a crash were never sent to anyone, and are given
//!   again after it).
//! - **Bounded.** Each attempt and each run has a byte cap ([`OutputSettings`]); past
//!   it chunks are dropped, counted, and a `Dropped` marker says how many (at the
//!   first drop, then at most once per [`OutputSettings::marker_interval_ms`], and
//!   when the attempt ends). Each run's live channel holds
//!   [`OutputSettings::watch_buffer`] chunks: a watcher further behind is told it
//!   lagged and reads on from storage.

pub mod purge;

use railyard_model::RunKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, broadcast, watch};

use railyard_model::Millis;
use railyard_model::output::{ChunkBody, OutputChunk};
use railyard_model::token::TokenClaims;
use railyard_store::output::{OutputHead, RunAppend};
use railyard_store::{StorageError, Store};

use crate::clock::Clock;

/// Bounds and timing of live output (`[server.output]` in the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSettings {
    /// Most bytes kept per step attempt (text plus 16 per chunk).
    pub attempt_cap_bytes: u64,
    /// Most bytes kept per run, over all its attempts.
    pub run_cap_bytes: u64,
    /// How long a run's output is kept after it was last written, once the run is
    /// closed (0: until the run itself is purged).
    pub retention_ms: Millis,
    /// Time between flushes of pending output.
    pub flush_interval_ms: u64,
    /// Least time between two drop markers of one attempt.
    pub marker_interval_ms: Millis,
    /// Chunks a run's live channel holds for its slowest watcher.
    pub watch_buffer: usize,
}

impl Default for OutputSettings {
    fn default() -> Self {
        Self {
            attempt_cap_bytes: 4 << 20,
            run_cap_bytes: 16 << 20,
            retention_ms: 7 * 86_400_000,
            flush_interval_ms: 200,
            marker_interval_ms: 10_000,
            watch_buffer: 1024,
        }
    }
}

/// Pending chunks past which the flusher is woken before its interval.
const FLUSH_SOON: usize = 4096;
/// How long an accepted lease is trusted before an append reads the run again.
const LEASE_RECHECK: Duration = Duration::from_secs(1);
/// Runs kept in memory with nothing pending, past which idle ones are forgotten.
const CACHED_RUNS: usize = 4096;

/// What an append did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Appended {
    pub accepted: u32,
    pub dropped: u32,
}

/// Why an append was refused before the hub looked at it.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The lease the token names is not the run's current one.
    #[error("stale lease: the step's output is taken from lease {current} now, not {given}")]
    Stale { current: u64, given: u64 },
    /// The run has no step in flight under the token's lease (it moved on, or closed).
    #[error("lease {given} is not the run's current lease: the step moved on or the run closed")]
    NotLeased { given: u64 },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

struct RunOut {
    head: OutputHead,
    /// The lease whose appends are taken, and when the store last said so.
    lease: u64,
    checked: Option<Instant>,
    pending: Vec<OutputChunk>,
    /// The head changed since the last flush.
    dirty: bool,
}

#[derive(Default)]
struct HubState {
    runs: HashMap<RunKey, RunOut>,
    channels: HashMap<RunKey, broadcast::Sender<Arc<OutputChunk>>>,
}

/// The live-output hub: one per server (the leading node's, on a shared database).
pub struct OutputHub {
    store: Store,
    clock: Arc<dyn Clock>,
    settings: OutputSettings,
    state: Mutex<HubState>,
    wake: Notify,
    /// Counts finished flushes, for [`OutputHub::flushed`].
    flushes: watch::Sender<u64>,
}

impl OutputHub {
    /// A hub over `store`'s output.
    pub fn new(store: Store, clock: Arc<dyn Clock>, settings: OutputSettings) -> Self {
        Self {
            store,
            clock,
            settings,
            state: Mutex::default(),
            wake: Notify::new(),
            flushes: watch::channel(0).0,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &OutputSettings {
        &self.settings
    }

    fn state(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `bodies`, in order, as the output of the attempt `claims` leases (the
    /// caller checked the token's signature). Never waits for a write.
    pub fn append(&self, claims: &TokenClaims, bodies: Vec<ChunkBody>) -> Result<Appended, AppendError> {
        let key = claims.run_key();
        self.check_lease(&key, claims)?;
        let now = self.clock.now_ms();
        let mut st = self.state();
        let Some(run) = st.runs.get_mut(&key) else {
            // Forgotten between the check and here (a failed flush): the next append reloads.
            return Ok(Appended {
                accepted: 0,
                dropped: bodies.len() as u32,
            });
        };
        let mut done = Appended::default();
        let s = &self.settings;
        let new_segment =
            run.head.next_offset <= 1 || run.head.step != claims.step || run.head.attempt != claims.attempt;
        if new_segment {
            mark_drops(run, now, true);
            run.head.step = claims.step.clone();
            run.head.attempt = claims.attempt;
            run.head.attempt_bytes = 0;
            run.head.dropped_chunks = 0;
            run.head.dropped_bytes = 0;
            run.head.marked_chunks = 0;
            run.head.marked_ms = 0;
            push(run, now, ChunkBody::SegmentStart);
        }
        for body in bodies {
            let w = body.weight();
            if run.head.attempt_bytes.saturating_add(w) > s.attempt_cap_bytes
                || run.head.run_bytes.saturating_add(w) > s.run_cap_bytes
            {
                run.head.dropped_chunks += 1;
                run.head.dropped_bytes += w;
                done.dropped += 1;
                continue;
            }
            run.head.attempt_bytes += w;
            run.head.run_bytes += w;
            push(run, now, body);
            done.accepted += 1;
        }
        let due = run.head.marked_ms == 0 || now.saturating_sub(run.head.marked_ms) >= s.marker_interval_ms;
        mark_drops(run, now, due);
        run.head.last_ms = now;
        run.dirty = true;
        let pending: usize = run.pending.len();
        drop(st);
        if pending >= FLUSH_SOON {
            self.wake.notify_one();
        }
        Ok(done)
    }

    /// The attempt `claims` leases ended (completed, failed, waiting): its last drop
    /// marker is written, and its output, if any is pending, flushed soon.
    pub fn attempt_ended(&self, claims: &TokenClaims) {
        let key = claims.run_key();
        let now = self.clock.now_ms();
        let mut st = self.state();
        let mut pending = false;
        if let Some(run) = st.runs.get_mut(&key)
            && run.head.step == claims.step
            && run.head.attempt == claims.attempt
        {
            mark_drops(run, now, true);
            // The next append of this lease (there should be none) reads the run again.
            run.checked = None;
            pending = run.dirty;
        }
        drop(st);
        // Only then: a step without output must not cost a flush, and a flush while
        // others stream is a commit of every run's pending chunks (an fsync of
        // output.redb beside the writer's) at the rate steps end.
        if pending {
            self.wake.notify_one();
        }
    }

    /// Makes sure the run is cached with `claims`' lease accepted.
    fn check_lease(&self, key: &RunKey, claims: &TokenClaims) -> Result<(), AppendError> {
        {
            let st = self.state();
            if let Some(run) = st.runs.get(key) {
                if run.lease > claims.lease {
                    return Err(AppendError::Stale {
                        current: run.lease,
                        given: claims.lease,
                    });
                }
                if run.lease == claims.lease && run.checked.is_some_and(|t| t.elapsed() < LEASE_RECHECK) {
                    return Ok(());
                }
            }
        }
        let current = match self.store.run(key)? {
            Some(r) => r.check_lease(claims).ok().map(|l| l.seq),
            None => None,
        };
        let Some(lease) = current else {
            return Err(AppendError::NotLeased { given: claims.lease });
        };
        let cached = self.state().runs.contains_key(key);
        let head = if cached {
            None
        } else {
            Some(self.store.output().head(key)?)
        };
        let mut st = self.state();
        let run = st.runs.entry(key.clone()).or_insert_with(|| RunOut {
            head: head.flatten().unwrap_or(OutputHead {
                next_offset: 1,
                ..OutputHead::default()
            }),
            lease,
            checked: None,
            pending: Vec::new(),
            dirty: false,
        });
        run.lease = run.lease.max(lease);
        run.checked = Some(Instant::now());
        Ok(())
    }

    /// A receiver of the run's chunks as they are stored.
    pub fn subscribe(&self, key: &RunKey) -> broadcast::Receiver<Arc<OutputChunk>> {
        let mut st = self.state();
        st.channels
            .entry(key.clone())
            .or_insert_with(|| broadcast::channel(self.settings.watch_buffer.max(1)).0)
            .subscribe()
    }

    /// Resolves once everything appended before the call is stored.
    pub async fn flushed(&self) {
        let mut rx = self.flushes.subscribe();
        let start = *rx.borrow_and_update();
        self.wake.notify_one();
        // The flush running now may have taken its batch before the call: wait for
        // the one after it too.
        let _ = rx.wait_for(|n| *n >= start + 2).await;
    }

    /// Writes every run's pending chunks in one output-store transaction, then
    /// hands them to the runs' live channels.
    pub async fn flush(self: &Arc<Self>) {
        let batch: Vec<RunAppend> = {
            let mut st = self.state();
            st.runs
                .iter_mut()
                .filter(|(_, r)| r.dirty)
                .map(|(key, r)| {
                    r.dirty = false;
                    RunAppend {
                        ns: key.namespace.clone(),
                        run_id: key.run_id.clone(),
                        chunks: std::mem::take(&mut r.pending),
                        head: r.head.clone(),
                    }
                })
                .collect()
        };
        if !batch.is_empty() {
            let hub = self.clone();
            let written = tokio::task::spawn_blocking(move || {
                let r = hub.store.output().append(&batch);
                (r, batch)
            })
            .await;
            match written {
                Ok((Ok(()), batch)) => self.publish(batch),
                Ok((Err(e), batch)) => {
                    tracing::warn!(error = %e, runs = batch.len(), "live output could not be stored; its chunks are lost");
                    // Their offsets were never sent to anyone: reload the heads from the store.
                    let mut st = self.state();
                    for a in &batch {
                        st.runs.remove(&RunKey::new(&a.ns, &a.run_id));
                    }
                }
                Err(e) => tracing::error!(error = %e, "live output flush panicked"),
            }
        }
        self.forget_idle();
        self.flushes.send_modify(|n| *n += 1);
    }

    fn publish(&self, batch: Vec<RunAppend>) {
        let mut st = self.state();
        for a in batch {
            let key = RunKey::new(a.ns, a.run_id);
            let Some(tx) = st.channels.get(&key) else {
                continue;
            };
            if tx.receiver_count() == 0 {
                st.channels.remove(&key);
                continue;
            }
            for c in a.chunks {
                let _ = tx.send(Arc::new(c));
            }
        }
    }

    fn forget_idle(&self) {
        let mut st = self.state();
        if st.runs.len() > CACHED_RUNS {
            st.runs.retain(|_, r| r.dirty || !r.pending.is_empty());
        }
        if st.channels.len() > CACHED_RUNS {
            st.channels.retain(|_, tx| tx.receiver_count() > 0);
        }
    }

    /// Flushes every [`OutputSettings::flush_interval_ms`] (sooner when woken) until
    /// `shutdown`, then once more.
    pub async fn run_flusher(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let every = Duration::from_millis(self.settings.flush_interval_ms.max(1));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
            self.flush().await;
        }
        self.flush().await;
        tracing::debug!("live output flusher stopped");
    }
}

/// Numbers `body` as the run's next chunk, in its current attempt.
fn push(run: &mut RunOut, now: Millis, body: ChunkBody) {
    let offset = run.head.next_offset.max(1);
    run.head.next_offset = offset + 1;
    run.pending.push(OutputChunk {
        offset,
        step: run.head.step.clone(),
        attempt: run.head.attempt,
        at_ms: now,
        body,
    });
    run.dirty = true;
}

/// Writes a drop marker for the current attempt when `due` and chunks were dropped
/// since the last one.
fn mark_drops(run: &mut RunOut, now: Millis, due: bool) {
    if !due || run.head.dropped_chunks <= run.head.marked_chunks {
        return;
    }
    let (chunks, bytes) = (run.head.dropped_chunks, run.head.dropped_bytes);
    push(run, now, ChunkBody::Dropped { chunks, bytes });
    run.head.marked_chunks = chunks;
    run.head.marked_ms = now.max(1);
}

#[cfg(test)]
mod tests;
