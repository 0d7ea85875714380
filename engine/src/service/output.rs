//! Live output: a worker appending to its step attempt's output
//! ([`append`], under the task token), and watchers following a run's output from
//! an offset ([`watch`]). The hub that numbers, bounds and stores chunks is
//! `engine::output`.

use railyard_model::Rejection;
use railyard_model::RunKey;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use railyard_model::output::{ChunkBody, OutputChunk};
use railyard_model::token::TokenClaims;

use super::{Caller, Core, runs};
use crate::error::ApiError;
use crate::output::{AppendError, Appended};

/// Most chunks in one append.
pub const MAX_APPEND_CHUNKS: usize = 1024;
/// Most text bytes in one append.
pub const MAX_APPEND_BYTES: usize = 1 << 20;
/// Chunks read from storage at a time while a watcher catches up.
const READ_CHUNK: usize = 256;
/// Longest a watch waits, at the run's close, for the hub to store what was appended.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Messages queued for one watcher's connection (a chunk is at most 1 MiB, most are
/// far smaller); past it the watcher's live channel backs up and it lags.
const WATCH_BUFFER: usize = 64;
/// Watchers of one run at once.
pub const MAX_WATCHERS_PER_RUN: usize = 64;
/// Watchers of one API key at once.
pub const MAX_WATCHERS_PER_KEY: usize = 128;
/// Watchers on this server at once (each a connection's buffers, most of a MiB
/// when it never reads).
pub const MAX_WATCHERS: usize = 1024;

/// The watchers in flight, counted per run, per key and in all.
#[derive(Debug, Default)]
pub struct WatchSlots {
    counts: std::sync::Mutex<WatchCounts>,
}

#[derive(Debug, Default)]
struct WatchCounts {
    total: usize,
    per_run: std::collections::HashMap<RunKey, usize>,
    per_key: std::collections::HashMap<String, usize>,
}

/// A watcher's place; freed when dropped (the watch ended, or its stream did).
#[derive(Debug)]
pub struct WatchSlot {
    slots: Arc<WatchSlots>,
    run: RunKey,
    key: Option<String>,
}

impl WatchSlots {
    /// A place for a watcher of `run` by `key` (`None`: no API key), or
    /// `RESOURCE_EXHAUSTED` naming the limit reached.
    pub fn take(self: &Arc<Self>, run: &RunKey, key: Option<&str>) -> Result<WatchSlot, ApiError> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let full = |what: String| Err(ApiError::Rejected(Rejection::ResourceExhausted(what)));
        if c.total >= MAX_WATCHERS {
            return full(format!(
                "this server has {MAX_WATCHERS} output watchers, its limit; try again later"
            ));
        }
        if c.per_run.get(run).copied().unwrap_or(0) >= MAX_WATCHERS_PER_RUN {
            return full(format!(
                "run {} has {MAX_WATCHERS_PER_RUN} output watchers, the limit for one run",
                run.run_id
            ));
        }
        if let Some(k) = key
            && c.per_key.get(k).copied().unwrap_or(0) >= MAX_WATCHERS_PER_KEY
        {
            return full(format!(
                "API key {k} has {MAX_WATCHERS_PER_KEY} output watchers, the limit for one key"
            ));
        }
        c.total += 1;
        *c.per_run.entry(run.clone()).or_default() += 1;
        if let Some(k) = key {
            *c.per_key.entry(k.to_string()).or_default() += 1;
        }
        Ok(WatchSlot {
            slots: self.clone(),
            run: run.clone(),
            key: key.map(str::to_string),
        })
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut c = self.slots.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_run.get_mut(&self.run) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_run.remove(&self.run);
            }
        }
        if let Some(k) = &self.key
            && let Some(n) = c.per_key.get_mut(k)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_key.remove(k);
            }
        }
    }
}

/// Appends a worker's chunks to the attempt its token leases (the caller was
/// resolved by `tasks::lease_holder`). Answered before they are written.
pub fn append(core: &Core, claims: &TokenClaims, chunks: Vec<ChunkBody>) -> Result<Appended, ApiError> {
    if chunks.len() > MAX_APPEND_CHUNKS {
        return Err(ApiError::field(
            "chunks",
            format!(
                "{} chunks, more than the limit of {MAX_APPEND_CHUNKS}",
                chunks.len()
            ),
        ));
    }
    let bytes: u64 = chunks.iter().map(|c| c.weight() - 16).sum();
    if bytes > MAX_APPEND_BYTES as u64 {
        return Err(ApiError::field(
            "chunks",
            format!("{bytes} bytes of text, more than the limit of {MAX_APPEND_BYTES}"),
        ));
    }
    for (i, c) in chunks.iter().enumerate() {
        if matches!(c, ChunkBody::SegmentStart | ChunkBody::Dropped { .. }) {
            return Err(ApiError::field(
                &format!("chunks[{i}].kind"),
                format!("{} chunks are written by the server, not sent", c.kind()),
            ));
        }
    }
    core.output.append(claims, chunks).map_err(|e| match e {
        AppendError::Stale { .. } | AppendError::NotLeased { .. } => {
            ApiError::Rejected(Rejection::FailedPrecondition(e.to_string()))
        }
        AppendError::Storage(e) => e.into(),
    })
}

/// What a watcher is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputEvent {
    /// The next chunk, in offset order.
    Chunk(OutputChunk),
    /// The watcher fell behind the live channel; it goes on from storage at
    /// `next_offset`.
    Lagged { next_offset: u64 },
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// At this offset (0 or 1: the start).
    Offset(u64),
    /// This many chunks before the end of what is stored (a tail).
    End(u64),
}

/// Follows a run's output from `from_offset` (0 or 1: from the start): the stored
/// chunks, then each new one as it is stored; ends once the run is closed and its
/// last chunk sent. Ends early when the receiver is dropped, and with `UNAVAILABLE`
/// when the server shuts down.
pub fn watch(
    core: &Arc<Core>,
    caller: &Caller,
    run_id: &str,
    from: From,
) -> Result<mpsc::Receiver<Result<OutputEvent, ApiError>>, ApiError> {
    runs::describe(core, caller, run_id)?;
    let run = RunKey::new(&caller.namespace, run_id);
    let key = match &caller.principal {
        super::caller::Principal::Key(k) => Some(k.key_id.as_str()),
        _ => None,
    };
    let slot = core.watch_slots.take(&run, key)?;
    let from_offset = match from {
        From::Offset(n) => n,
        From::End(back) => {
            let next = core.store.output().head(&run)?.map_or(1, |h| h.next_offset);
            next.saturating_sub(back)
        }
    };
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let w = Watch {
        core: core.clone(),
        run,
        next: from_offset.max(1),
        tx,
        _slot: slot,
    };
    tokio::spawn(w.run());
    Ok(rx)
}

struct Watch {
    core: Arc<Core>,
    run: RunKey,
    next: u64,
    tx: mpsc::Sender<Result<OutputEvent, ApiError>>,
    /// Held for as long as the watch runs.
    _slot: WatchSlot,
}

/// Why a watch stopped sending.
enum Stop {
    /// The receiver is gone, or an error was sent: end.
    End,
}

impl Watch {
    async fn run(mut self) {
        // Subscribed before the first read, so nothing stored after it is missed.
        let mut changes = self.core.watchers.subscribe(&self.run);
        let mut live = self.core.output.subscribe(&self.run);
        loop {
            if self.catch_up().await.is_err() {
                return;
            }
            if self.closed() {
                // What the worker appended before the close is stored first (bounded:
                // a flusher that stopped, at shutdown, does not hold the watch open).
                tokio::select! {
                    _ = self.core.output.flushed() => {}
                    _ = tokio::time::sleep(FLUSH_WAIT) => {}
                    _ = self.core.shutting_down() => {}
                }
                let _ = self.catch_up().await;
                return;
            }
            // Live until a gap, a lag or the close.
            loop {
                tokio::select! {
                    got = live.recv() => match got {
                        Ok(c) if c.offset < self.next => continue,
                        Ok(c) if c.offset == self.next => {
                            self.next += 1;
                            if self.send(OutputEvent::Chunk((*c).clone())).await.is_err() {
                                return;
                            }
                        }
                        // A chunk past the next: the ones between are stored; read them.
                        Ok(_) => break,
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            // The channel overran while the watcher was busy, maybe while
                            // it read those very chunks from storage: it lagged only if
                            // stored chunks are still to be sent.
                            if self.behind_storage()
                                && self.send(OutputEvent::Lagged { next_offset: self.next }).await.is_err()
                            {
                                return;
                            }
                            break;
                        }
                        Err(broadcast::error::RecvError::Closed) => {
                            live = self.core.output.subscribe(&self.run);
                            break;
                        }
                    },
                    changed = changes.changed() => {
                        if changed.is_err() || self.closed() {
                            break;
                        }
                    }
                    _ = self.tx.closed() => return,
                    _ = self.core.shutting_down() => {
                        self.shutting_down();
                        return;
                    }
                }
            }
        }
    }

    /// Sends `ev`, waiting for room, unless the server shuts down first: a watcher
    /// that stopped reading must not hold the server's shutdown.
    async fn send(&self, ev: OutputEvent) -> Result<(), Stop> {
        tokio::select! {
            sent = self.tx.send(Ok(ev)) => sent.map_err(|_| Stop::End),
            _ = self.core.shutting_down() => {
                self.shutting_down();
                Err(Stop::End)
            }
        }
    }

    /// Tells the watcher why the stream ends, if there is room to.
    fn shutting_down(&self) {
        let _ = self
            .tx
            .try_send(Err(ApiError::Unavailable("the server is shutting down".into())));
    }

    /// Whether chunks from `next` on are stored (an error counts as behind: the
    /// catch-up that follows reports it).
    fn behind_storage(&self) -> bool {
        !matches!(self.core.store.output().head(&self.run),
            Ok(Some(head)) if head.next_offset <= self.next)
    }

    fn closed(&self) -> bool {
        !matches!(self.core.store.run(&self.run), Ok(Some(run)) if run.status.is_open())
    }

    /// Sends every stored chunk from `next` on.
    async fn catch_up(&mut self) -> Result<(), Stop> {
        loop {
            let (store, run, from) = (self.core.store.clone(), self.run.clone(), self.next);
            let read = tokio::task::spawn_blocking(move || store.output().read(&run, from, READ_CHUNK)).await;
            let chunks = match read {
                Ok(Ok(chunks)) => chunks,
                Ok(Err(e)) => {
                    let _ = self.tx.try_send(Err(e.into()));
                    return Err(Stop::End);
                }
                Err(e) => {
                    let _ = self.tx.try_send(Err(ApiError::Internal(e.to_string())));
                    return Err(Stop::End);
                }
            };
            let got = chunks.len();
            for c in chunks {
                self.next = c.offset + 1;
                self.send(OutputEvent::Chunk(c)).await?;
            }
            if got < READ_CHUNK {
                return Ok(());
            }
        }
    }
}
