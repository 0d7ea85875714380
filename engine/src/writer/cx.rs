//! The transaction context a command applies through: it loads runs, hands out
//! sequence numbers, and saves transitions (state, events, effects) into the open
//! write transaction. A command may load and save several runs; they commit
//! together with the rest of the batch.
//!
//! A run's close has three hooks, all in the transaction that closes it: [`Cx::save`]
//! arms its result deliveries; [`Cx::closed`] tells what started it (its schedule,
//! its trigger key: `commands::settle`); [`Cx::family`] tells its parent and
//! children (`commands::children::settle`).

use railyard_model::checkpoint::{self as digest, CheckpointDigest};
use railyard_model::run::DeliveryTarget;
use railyard_store::CheckpointAt;

use super::*;

/// One command's view of the open transaction.
pub struct Cx<'a, 't> {
    pub(super) tx: &'a mut (dyn WriteTx + 't),
    pub(super) next_seq: &'a mut u64,
    pub(super) after: &'a mut Vec<After>,
    pub(super) now: Millis,
    pub(super) metrics: &'a Metrics,
    pub(super) matching: &'a Matching,
    pub(super) leases: &'a LeaseDeadlines,
    /// The loaded definitions, for the runs a schedule starts.
    pub(super) workflows: &'a WorkflowRegistry,
    /// Runs that closed in this command: whatever started them (a schedule, a
    /// trigger's concurrency key) hears of it before the command ends
    /// (`commands::settle`).
    pub(super) closed: &'a mut Vec<ClosedRun>,
    /// Open runs per namespace and start buckets ([`StartLimits`]).
    pub(super) limits: &'a mut StartLimits,
    /// Runs of a tree that closed in this command: their parents and children hear
    /// of it before the command ends (`commands::children::settle`).
    pub(super) family: &'a mut Vec<FamilyClose>,
    /// The delivery policy (for the `Delivery*` transitions).
    pub(super) delivery: &'a crate::delivery::DeliveryHook,
    /// Bytes of finished steps' checkpoints a run keeps (0: none).
    pub(super) kept_checkpoint_bytes: u64,
}

/// A run that has closed, not yet told to what started it.
#[derive(Debug, Clone)]
pub(crate) struct ClosedRun {
    pub ns: String,
    /// Empty: not started by a schedule.
    pub schedule_id: String,
    pub run_id: String,
    pub status: RunStatus,
    pub failure: String,
}

/// A run of a tree (a spawned child, or a run that spawned some) that closed in
/// this command, not yet settled with its family.
#[derive(Debug, Clone)]
pub(crate) struct FamilyClose {
    pub ns: String,
    pub run_id: String,
}

/// A transition of one run, decided but not yet written: see [`Cx::save`].
pub(crate) struct Transition {
    pub run: RunState,
    /// Whether the run was open before (false for a new run).
    pub was_open: bool,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
    /// The step attempt in flight before the transition (see [`Attempt::of`]): if
    /// the transition ends it, its span is recorded after the commit.
    pub attempt_before: Option<Attempt>,
}

/// A step attempt in flight: its lease, its step and attempt number.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    lease: Lease,
    step: usize,
    attempt: u32,
}

impl Attempt {
    /// The attempt in flight in `run`, if any, when step-attempt spans are recorded.
    pub(crate) fn of(run: &RunState) -> Option<Self> {
        match &run.phase {
            Phase::Started(lease) if crate::trace::enabled() => Some(Self {
                lease: lease.clone(),
                step: run.current_step,
                attempt: run.steps.get(run.current_step).map_or(0, |s| s.attempt),
            }),
            _ => None,
        }
    }
}

impl Transition {
    /// A transition of `run` collected in `out`.
    pub(crate) fn new(run: RunState, was_open: bool, out: Out) -> Self {
        Self {
            run,
            was_open,
            events: out.events,
            effects: out.effects,
            attempt_before: None,
        }
    }

    /// The same, where `before` was in flight before it.
    pub(crate) fn after(mut self, before: Option<Attempt>) -> Self {
        self.attempt_before = before;
        self
    }

    /// The attempt in flight before that this transition ended, as a span to record.
    fn ended_attempt(&self, now: Millis) -> Option<crate::trace::EndedAttempt> {
        let before = self.attempt_before.as_ref()?;
        if matches!(&self.run.phase, Phase::Started(l) if l.seq == before.lease.seq)
            && self.run.status.is_open()
        {
            return None;
        }
        let ended_by = self
            .events
            .iter()
            .rev()
            .map(|e| e.kind.type_name())
            .find(|t| crate::trace::ends_attempt(t))
            .unwrap_or_default();
        let run = &self.run;
        Some(crate::trace::EndedAttempt {
            ns: run.namespace.clone(),
            run_id: run.run_id.clone(),
            workflow_id: run.workflow_id.clone(),
            trace: run.trace,
            lease: before.lease.clone(),
            step_id: run
                .definition
                .steps
                .get(before.step)
                .map(|s| s.id.clone())
                .unwrap_or_default(),
            attempt: before.attempt,
            ended_by,
            ended_ms: now,
        })
    }
}

/// How long a checkpoint's tail of appended segments, and its run of compacted
/// segments, may grow before they are merged ([`Cx::append_checkpoint`]).
pub(crate) const CHECKPOINT_TAIL: u32 = 32;

/// Segments this long on average are never merged: they are at most one a page of
/// checkpoint (2,048 at the 8 MiB limit), and merging them would write every byte
/// again, once per merge, for no fewer pages ([`Cx::append_checkpoint`]).
pub(crate) const MERGE_SEGMENTS_BELOW: u64 = 4096;

/// The refusal for a run that does not exist.
pub(crate) fn not_found(key: &RunKey) -> Rejection {
    let RunKey { namespace, run_id } = key;
    Rejection::NotFound(format!("run {run_id:?} not found in namespace {namespace:?}"))
}

impl Cx<'_, '_> {
    /// The run's current state in this transaction.
    pub(crate) fn load(&self, key: &RunKey) -> Result<Option<RunState>, StorageError> {
        self.tx.run(key)
    }

    /// The definition a new run of `workflow_id` in `ns` starts with: the server's
    /// (a file, a built-in), else the one registered in `ns`, as this transaction
    /// sees it.
    pub(crate) fn definition(
        &self,
        ns: &str,
        workflow_id: &str,
    ) -> Result<Option<Arc<WorkflowDef>>, StorageError> {
        if let Some(def) = self.workflows.get(workflow_id) {
            return Ok(Some(def.clone()));
        }
        Ok(self
            .tx
            .registered_workflow(ns, workflow_id)?
            .map(|w| w.definition))
    }

    /// The transaction's clock reading.
    pub(crate) fn now(&self) -> Millis {
        self.now
    }

    /// The shared sequence counter, for an [`Out`]. A refused command may leave
    /// numbers unused: they only need to be unique.
    pub(crate) fn seq(&mut self) -> &mut u64 {
        self.next_seq
    }

    /// Loads a run, applies `f`, and saves the result when `f` accepted it; `f`'s
    /// refusal (or a run not found) is the command's.
    pub(crate) fn with_run<T>(
        &mut self,
        key: &RunKey,
        f: impl FnOnce(&mut RunState, &mut Out) -> Result<T, Rejection>,
    ) -> Result<T, CommandError> {
        let Some(mut run) = self.load(key)? else {
            return Err(not_found(key).into());
        };
        let was_open = run.status.is_open();
        let before = Attempt::of(&run);
        let mut out = Out::new(self.now, self.next_seq);
        match f(&mut run, &mut out) {
            Ok(v) => {
                let t = Transition::new(run, was_open, out).after(before);
                self.save(t)?;
                Ok(v)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Plans the delivery of a run that this transition closes: its callback URL and
    /// each subscription of its namespace that matches its workflow and outcome.
    fn arm_deliveries(&mut self, t: &mut Transition) -> Result<(), StorageError> {
        let run = &t.run;
        let mut targets = Vec::new();
        if !run.callback_url.is_empty() {
            targets.push((DeliveryTarget::Callback, run.callback_url.clone()));
        }
        if let Some(ns) = self.tx.namespace(&run.namespace)? {
            for s in ns.subscriptions {
                if s.matches(&run.workflow_id, run.status) {
                    targets.push((DeliveryTarget::Subscription(s.id), s.url));
                }
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        let mut out = Out {
            now: self.now,
            next_seq: self.next_seq,
            events: std::mem::take(&mut t.events),
            effects: std::mem::take(&mut t.effects),
        };
        t.run.arm_deliveries(targets, &mut out);
        t.events = out.events;
        t.effects = out.effects;
        Ok(())
    }

    /// Writes an accepted transition: if it left a step ready and a poll is parked
    /// on its queue, first leases the step to that poll (sync match); then the
    /// events, the state row and the effects.
    pub(crate) fn save(&mut self, mut t: Transition) -> Result<(), StorageError> {
        if t.was_open && !t.run.status.is_open() {
            self.arm_deliveries(&mut t)?;
        }
        let handoff = {
            let mut out = Out {
                now: self.now,
                next_seq: self.next_seq,
                events: t.events,
                effects: t.effects,
            };
            let handoff = Self::sync_match(self.matching, &mut t.run, &mut out);
            t.events = out.events;
            t.effects = out.effects;
            handoff
        };
        let ended = t.ended_attempt(self.now);
        let written = self.write(&t.run, t.was_open, &t.events, t.effects);
        if let (Ok(()), Some(ended)) = (&written, ended) {
            self.after.push(After::AttemptEnded(Box::new(ended)));
        }
        let Some((waiter, lease)) = handoff else {
            return written;
        };
        // The claimed poll must go back to matching if this transition fails here;
        // once queued in `after`, the batch's failure path gives it back.
        match written.and_then(|()| self.handed_checkpoint(&t.run)) {
            Ok((checkpoint, checkpoint_digest)) => {
                self.after.push(After::HandOff(
                    waiter,
                    Box::new(Grant {
                        run: t.run,
                        lease,
                        checkpoint,
                        checkpoint_digest,
                    }),
                ));
                Ok(())
            }
            Err(e) => {
                let queue = t.run.current_queue().unwrap_or_default();
                self.matching
                    .unclaim(&t.run.namespace, &queue, waiter, &t.run.run_id);
                Err(e)
            }
        }
    }

    /// If the transition left a step ready and a poll is parked on its queue, leases
    /// the step to that poll in this same transaction.
    fn sync_match(matching: &Matching, run: &mut RunState, out: &mut Out) -> Option<(Waiter, Lease)> {
        let Phase::Scheduled { queue, task_seq } = &run.phase else {
            return None;
        };
        let (queue, task_seq) = (queue.clone(), *task_seq);
        let waiter = matching.claim(&TaskRef::of(run, queue.clone(), task_seq))?;
        match run.lease(task_seq, &waiter.identity, out) {
            Ok(lease) => Some((waiter, lease)),
            Err(_) => {
                matching.unclaim(&run.namespace, &queue, waiter, &run.run_id);
                None
            }
        }
    }

    /// Where the checkpoint of the run's step in flight is ([`CheckpointAt`]).
    pub(crate) fn checkpoint_at(&self, run: &RunState) -> Result<CheckpointAt, StorageError> {
        self.tx
            .checkpoint_in_flight_at(&RunKey::new(&run.namespace, &run.run_id), run.current_step)
    }

    /// The checkpoint of the run's step in flight (empty when none).
    pub(crate) fn checkpoint(&self, run: &RunState) -> Result<Vec<u8>, StorageError> {
        let at = self.checkpoint_at(run)?;
        self.tx.checkpoint(&RunKey::new(&run.namespace, &run.run_id), at)
    }

    /// The checkpoint a lease hands the worker, with its digest (none when empty).
    pub(crate) fn handed_checkpoint(
        &self,
        run: &RunState,
    ) -> Result<(Vec<u8>, Option<CheckpointDigest>), StorageError> {
        let bytes = self.checkpoint(run)?;
        if bytes.is_empty() {
            return Ok((bytes, None));
        }
        let at = self.checkpoint_at(run)?;
        let (_, d) = self.checkpoint_base(&RunKey::new(&run.namespace, &run.run_id), at)?;
        Ok((bytes, Some(d)))
    }

    /// The stored checkpoint's length and digest, the base an appending heartbeat
    /// must name ((0, the empty digest) when there is none). A checkpoint an older
    /// release wrote has no stored digest: it is derived from its bytes.
    pub(crate) fn checkpoint_base(
        &self,
        key: &RunKey,
        at: CheckpointAt,
    ) -> Result<(u64, CheckpointDigest), StorageError> {
        Ok(match self.tx.checkpoint_head(key, at)? {
            None => (0, digest::EMPTY_DIGEST),
            Some(CheckpointHead {
                len, digest: Some(d), ..
            }) => (len, d),
            Some(CheckpointHead {
                len, digest: None, ..
            }) => (len, digest::full(&self.tx.checkpoint(key, at)?)),
        })
    }

    /// Appends to a run's checkpoint as a segment (a backend may store it as several),
    /// compacting small segments in this same write: while the segments average less
    /// than [`MERGE_SEGMENTS_BELOW`] bytes, the append that would make the tail (the
    /// segments appended since the last compaction) [`CHECKPOINT_TAIL`] long merges
    /// it into one compacted segment instead, and when that would make
    /// [`CHECKPOINT_TAIL`] compacted segments, the checkpoint is rewritten whole. So a
    /// checkpoint is fewer than `2 * CHECKPOINT_TAIL` segments or segments of about a
    /// page or more (a resume reads a bounded number of rows: about 2,000 at the
    /// 8 MiB limit). An agent's turns (kilobytes each) are written once; small
    /// appends about twice (their append, their tail's merge), plus once per whole
    /// rewrite (every ~1,000 appends).
    fn append_checkpoint(
        &mut self,
        key: &RunKey,
        at: CheckpointAt,
        bytes: &[u8],
    ) -> Result<(), StorageError> {
        let (ns, run_id) = (key.namespace.as_str(), key.run_id.as_str());
        let head = self.tx.checkpoint_head(key, at)?;
        let (_, base) = self.checkpoint_base(key, at)?;
        let after = digest::extend(&base, bytes);
        let Some(head) = head else {
            return self.tx.append_checkpoint(key, at, bytes, &after);
        };
        let merged = head.merged.clamp(1, head.segments.max(1));
        let small = head.len < u64::from(head.segments) * MERGE_SEGMENTS_BELOW;
        if head.segments + 1 - merged < CHECKPOINT_TAIL || !small {
            return self.tx.append_checkpoint(key, at, bytes, &after);
        }
        if merged + 1 < CHECKPOINT_TAIL {
            tracing::debug!(ns, run_id, segments = head.segments, "checkpoint tail merged");
            return self.tx.merge_checkpoint_tail(key, at, merged + 1, bytes, &after);
        }
        let mut whole = self.tx.checkpoint(key, at)?;
        whole.extend_from_slice(bytes);
        tracing::debug!(
            ns,
            run_id,
            bytes = whole.len(),
            segments = head.segments,
            "checkpoint rewritten whole"
        );
        self.tx.set_checkpoint(key, at, Some((&whole, &after)))
    }

    /// Step `step`'s checkpoint is final: it stays where it is, as the step's
    /// transcript, and the oldest steps' are dropped while the run's kept ones
    /// together pass [`Cx::kept_checkpoint_bytes`] (all of them when it is 0). No
    /// checkpoint bytes are read or copied: the heads say the lengths. A checkpoint
    /// an older release was writing (by run, not step) is dropped, as it did.
    fn end_checkpoint(&mut self, run: &RunState, step: usize) -> Result<(), StorageError> {
        let key = run.key();
        if self.tx.checkpoint_head(&key, CheckpointAt::Run)?.is_some() {
            return self.tx.set_checkpoint(&key, CheckpointAt::Run, None);
        }
        if step >= run.definition.steps.len() {
            return Ok(());
        }
        let cap = self.kept_checkpoint_bytes;
        if cap == 0 {
            return self.tx.set_checkpoint(&key, CheckpointAt::step(step), None);
        }
        let steps = u32::try_from(run.definition.steps.len()).unwrap_or(u32::MAX);
        let heads = self.tx.step_checkpoint_heads(&key, steps)?;
        let mut total: u64 = heads.iter().map(|(_, h)| h.len).sum();
        for (dropped, head) in heads {
            if total <= cap {
                break;
            }
            self.tx.set_checkpoint(&key, CheckpointAt::Step(dropped), None)?;
            total -= head.len;
            tracing::debug!(
                ns = key.namespace.as_str(),
                run_id = key.run_id.as_str(),
                step = dropped,
                bytes = head.len,
                "kept checkpoint dropped"
            );
        }
        Ok(())
    }

    /// Writes a transition: its events, the state row and its effects.
    fn write(
        &mut self,
        run: &RunState,
        was_open: bool,
        events: &[Event],
        effects: Vec<Effect>,
    ) -> Result<(), StorageError> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        let key = run.key();
        // A task enqueued and leased in the same transition (eager dispatch) never
        // becomes a row.
        let leased_at_once = |seq: u64| {
            let removed = effects
                .iter()
                .any(|e| matches!(e, Effect::RemoveTask { task_seq, .. } if *task_seq == seq));
            let enqueued = effects
                .iter()
                .any(|e| matches!(e, Effect::EnqueueTask { task_seq, .. } if *task_seq == seq));
            removed && enqueued
        };
        let skip: Vec<u64> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::RemoveTask { task_seq, .. } if leased_at_once(*task_seq) => Some(*task_seq),
                _ => None,
            })
            .collect();
        self.tx.save_run(run, events)?;
        if run.status.is_open() != was_open {
            self.tx.set_open(&key, !was_open)?;
            self.limits.moved(ns, !was_open);
            if was_open {
                self.tx.index_closed(ns, run.close_ms.unwrap_or(self.now), id)?;
            }
        }
        if was_open && !run.status.is_open() {
            self.closed.push(ClosedRun {
                ns: ns.into(),
                schedule_id: run.schedule_id.clone(),
                run_id: id.into(),
                status: run.status,
                failure: run.failure.clone(),
            });
        }
        if was_open && !run.status.is_open() && (!run.parent_step_id.is_empty() || run.children_started > 0) {
            self.family.push(FamilyClose {
                ns: ns.into(),
                run_id: id.into(),
            });
        }
        self.after.push(After::Lease {
            run: key.clone(),
            deadline: run.lease_deadline(),
        });
        if !run.flow.limit_key().is_empty() {
            self.after.push(After::Holds {
                run: key.clone(),
                key: run.flow.limit_key().to_string(),
                leased: run.lease_deadline().is_some(),
            });
        }
        for effect in effects {
            match effect {
                Effect::EnqueueTask { task_seq, .. } | Effect::RemoveTask { task_seq, .. }
                    if skip.contains(&task_seq) => {}
                Effect::EnqueueTask { queue, task_seq } => {
                    self.tx.insert_task(ns, &queue, task_seq, id)?;
                    self.after.push(After::Enqueue(TaskRef::of(run, queue, task_seq)));
                }
                Effect::RemoveTask { queue, task_seq } => {
                    self.tx.remove_task(ns, &queue, task_seq)?;
                    self.after.push(After::Dequeue {
                        ns: ns.into(),
                        queue,
                        task_seq,
                    });
                }
                Effect::Timer { due_ms, timer } => {
                    *self.next_seq += 1;
                    self.tx.insert_timer((due_ms, *self.next_seq), &timer)?;
                    self.after.push(After::WakeTimers);
                }
                Effect::SaveCheckpoint(bytes) => {
                    let at = self.checkpoint_at(run)?;
                    self.tx
                        .set_checkpoint(&key, at, Some((&bytes, &digest::full(&bytes))))?
                }
                Effect::AppendCheckpoint(bytes) => {
                    let at = self.checkpoint_at(run)?;
                    self.append_checkpoint(&key, at, &bytes)?
                }
                Effect::EndCheckpoint { step } => self.end_checkpoint(run, step)?,
            }
        }
        if !events.is_empty() {
            self.after.push(After::Notify {
                run: key,
                last_event_id: run.last_event_id,
            });
        }
        Ok(())
    }
}
