//! Matching: the in-memory ready list of each task queue and the long polls parked
//! on it. Rebuilt from the `tasks` table at start; the table is the truth, and a
//! task handed out here is only leased once the writer commits the lease.
//!
//! Two ways a parked poll gets work: a ready task ([`Dispatch::Task`]), which the
//! poll then leases through the writer; or, when the writer schedules a step while
//! a poll is parked, the writer claims the poll ([`Matching::claim`]) and leases the
//! step to it in the same transaction ([`Dispatch::Leased`]), saving a commit
//! (Temporal calls this sync match).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use railyard_model::run::{Lease, RunState};

use crate::metrics::state::QueueGauge;
use railyard_model::Millis;

/// A granted lease, with what the worker needs to run the step.
#[derive(Debug)]
pub struct Grant {
    pub run: RunState,
    pub lease: Lease,
    pub checkpoint: Vec<u8>,
    /// The checkpoint's stored digest (none when there is no checkpoint): the base a
    /// worker's first appending heartbeat names.
    pub checkpoint_digest: Option<railyard_model::checkpoint::CheckpointDigest>,
}

/// What a parked poll receives.
#[derive(Debug)]
pub enum Dispatch {
    /// A ready task for the poll to lease.
    Task(TaskRef),
    /// A task already leased to the poll, committed.
    Leased(Box<Grant>),
}

/// A parked long poll.
#[derive(Debug)]
pub struct Waiter {
    pub identity: String,
    /// When the poll gives up.
    pub deadline: Instant,
    tx: oneshot::Sender<Dispatch>,
}

impl Waiter {
    /// Hands the poll its leased task; false if the poll is gone.
    pub fn hand(self, grant: Box<Grant>) -> bool {
        self.tx.send(Dispatch::Leased(grant)).is_ok()
    }
}

/// A poll is claimed for a direct hand-off only with this much wait left, so it is
/// still waiting when the commit completes.
const CLAIM_MARGIN: Duration = Duration::from_secs(2);

/// A ready task: enough to find its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub namespace: String,
    pub queue: String,
    pub task_seq: u64,
    pub run_id: String,
}

#[derive(Default)]
struct Queue {
    /// Ready tasks by sequence number. Sequence numbers only grow, so this is
    /// queue order, and a task that stops being ready leaves in O(log n).
    ready: BTreeMap<u64, TaskRef>,
    parked: VecDeque<Waiter>,
    /// Poller identity → last poll time; at most [`MAX_POLLERS_PER_QUEUE`].
    pollers: HashMap<String, Millis>,
    dispatched: u64,
    /// The last poll on the queue: an empty queue unused for [`QUEUE_TTL_MS`] is
    /// forgotten.
    last_used: Millis,
}

impl Queue {
    /// Nothing ready and no poll waiting: the queue can be forgotten.
    fn is_idle(&self) -> bool {
        self.ready.is_empty() && self.parked.iter().all(|w| w.tx.is_closed())
    }

    /// Records a poll by `identity`, dropping the longest-unseen poller if the
    /// queue already has [`MAX_POLLERS_PER_QUEUE`].
    fn saw(&mut self, identity: &str, now: Millis) {
        self.last_used = self.last_used.max(now);
        if !self.pollers.contains_key(identity)
            && self.pollers.len() >= MAX_POLLERS_PER_QUEUE
            && let Some(oldest) = self
                .pollers
                .iter()
                .min_by_key(|(id, seen)| (**seen, (*id).clone()))
                .map(|(id, _)| id.clone())
        {
            self.pollers.remove(&oldest);
        }
        self.pollers.insert(identity.to_string(), now);
    }
}

/// Figures of one queue, for `DescribeTaskQueue`.
#[derive(Debug, Clone, Default)]
pub struct QueueStats {
    pub backlog: usize,
    pub pollers: Vec<(String, Millis)>,
    pub dispatched: u64,
}

/// Every queue of every namespace.
///
/// Queue names and poller identities come from clients, so neither stays in memory
/// for good: a queue with nothing ready and no poll waiting is forgotten after
/// [`QUEUE_TTL_MS`] without polls (at once when there are more than [`MAX_QUEUES`]),
/// and a poller after [`POLLER_TTL_MS`] without polls, with at most
/// [`MAX_POLLERS_PER_QUEUE`] per queue. Forgetting a queue forgets its dispatch count;
/// its metrics series go with it.
#[derive(Default)]
pub struct Matching {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    queues: HashMap<(String, String), Queue>,
    /// When idle queues and pollers were last swept out.
    last_sweep: Millis,
}

/// Pollers not seen for this long drop out of `DescribeTaskQueue`.
pub const POLLER_TTL_MS: Millis = 5 * 60 * 1000;
/// Most pollers remembered per queue; past it the longest-unseen one is dropped.
pub const MAX_POLLERS_PER_QUEUE: usize = 256;
/// An idle queue (nothing ready, no poll waiting) unpolled for this long is forgotten.
pub const QUEUE_TTL_MS: Millis = 5 * 60 * 1000;
/// Past this many queues, idle ones are forgotten at once.
pub const MAX_QUEUES: usize = 10_000;
/// How often idle queues and pollers are swept out (by the poll that finds it due).
const SWEEP_EVERY_MS: Millis = 60 * 1000;
/// How often, at most, when there are more than [`MAX_QUEUES`].
const CROWDED_SWEEP_EVERY_MS: Millis = 1000;

impl Inner {
    /// Forgets idle queues and stale pollers, if a sweep is due.
    fn sweep(&mut self, now: Millis) {
        let crowded = self.queues.len() > MAX_QUEUES;
        let every = if crowded {
            CROWDED_SWEEP_EVERY_MS
        } else {
            SWEEP_EVERY_MS
        };
        if now - self.last_sweep < every {
            return;
        }
        self.last_sweep = now;
        let ttl = if crowded { 0 } else { QUEUE_TTL_MS };
        self.queues.retain(|_, q| {
            q.pollers.retain(|_, seen| now - *seen < POLLER_TTL_MS);
            q.parked.retain(|w| !w.tx.is_closed());
            !(q.is_idle() && now - q.last_used >= ttl)
        });
    }
}

impl Matching {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with_queue<T>(&self, ns: &str, queue: &str, f: impl FnOnce(&mut Queue) -> T) -> T {
        let mut inner = self.lock();
        let q = inner
            .queues
            .entry((ns.to_string(), queue.to_string()))
            .or_default();
        f(q)
    }

    /// How many queues are remembered.
    #[cfg(test)]
    pub fn queue_count(&self) -> usize {
        self.lock().queues.len()
    }

    /// Offers a task: to the oldest parked poll still waiting, else to the ready list.
    pub fn push(&self, task: TaskRef) {
        let (ns, queue) = (task.namespace.clone(), task.queue.clone());
        self.with_queue(&ns, &queue, |q| {
            let mut task = task;
            while let Some(waiter) = q.parked.pop_front() {
                match waiter.tx.send(Dispatch::Task(task)) {
                    Ok(()) => {
                        q.dispatched += 1;
                        return;
                    }
                    Err(Dispatch::Task(back)) => task = back,
                    Err(Dispatch::Leased(_)) => return,
                }
            }
            q.ready.insert(task.task_seq, task);
        })
    }

    /// Drops a task that is no longer ready (its run was canceled or terminated
    /// while it waited), so the backlog counts only live tasks.
    pub fn remove(&self, ns: &str, queue: &str, task_seq: u64) {
        self.with_queue(ns, queue, |q| {
            q.ready.remove(&task_seq);
        })
    }

    /// Takes the next ready task, or parks the caller and returns the receiver on
    /// which a task will arrive.
    pub fn take_or_park(
        &self,
        ns: &str,
        queue: &str,
        identity: &str,
        now: Millis,
        deadline: Instant,
    ) -> Result<TaskRef, oneshot::Receiver<Dispatch>> {
        self.lock().sweep(now);
        self.with_queue(ns, queue, |q| {
            q.saw(identity, now);
            if let Some((_, task)) = q.ready.pop_first() {
                q.dispatched += 1;
                return Ok(task);
            }
            let (tx, rx) = oneshot::channel();
            q.parked.retain(|w| !w.tx.is_closed());
            q.parked.push_back(Waiter {
                identity: identity.to_string(),
                deadline,
                tx,
            });
            Err(rx)
        })
    }

    /// Takes the ready task of one run, if it has one on this queue. A linear scan of
    /// the queue's ready list: run-specific polls (the MCP gateway resuming a run)
    /// are rare and their queues short.
    pub fn take_run(
        &self,
        ns: &str,
        queue: &str,
        run_id: &str,
        identity: &str,
        now: Millis,
    ) -> Option<TaskRef> {
        self.with_queue(ns, queue, |q| {
            q.pollers.insert(identity.to_string(), now);
            let seq = q.ready.values().find(|t| t.run_id == run_id)?.task_seq;
            q.dispatched += 1;
            q.ready.remove(&seq)
        })
    }

    /// Claims the oldest parked poll with enough wait left, for a direct hand-off.
    /// Only when nothing is ready: ready tasks go first.
    pub fn claim(&self, ns: &str, queue: &str) -> Option<Waiter> {
        let soon = Instant::now() + CLAIM_MARGIN;
        self.with_queue(ns, queue, |q| {
            if !q.ready.is_empty() {
                return None;
            }
            q.parked.retain(|w| !w.tx.is_closed());
            let at = q.parked.iter().position(|w| w.deadline > soon)?;
            let waiter = q.parked.remove(at)?;
            q.dispatched += 1;
            Some(waiter)
        })
    }

    /// Returns a claimed poll that was not used (its transaction failed).
    pub fn unclaim(&self, ns: &str, queue: &str, waiter: Waiter) {
        self.with_queue(ns, queue, |q| {
            q.dispatched = q.dispatched.saturating_sub(1);
            q.parked.push_front(waiter);
        })
    }

    /// Backlog and live parked polls of every queue seen since start, in order.
    pub fn queue_gauges(&self) -> Vec<QueueGauge> {
        let inner = self.lock();
        let mut gauges: Vec<QueueGauge> = inner
            .queues
            .iter()
            .map(|((ns, queue), q)| QueueGauge {
                namespace: ns.clone(),
                queue: queue.clone(),
                backlog: q.ready.len(),
                parked: q.parked.iter().filter(|w| !w.tx.is_closed()).count(),
            })
            .collect();
        drop(inner);
        gauges.sort_by(|a, b| (&a.namespace, &a.queue).cmp(&(&b.namespace, &b.queue)));
        gauges
    }

    /// Backlog and pollers of a queue. Asking about a queue does not create it.
    pub fn stats(&self, ns: &str, queue: &str, now: Millis) -> QueueStats {
        let mut inner = self.lock();
        let Some(q) = inner.queues.get_mut(&(ns.to_string(), queue.to_string())) else {
            return QueueStats::default();
        };
        q.pollers.retain(|_, seen| now - *seen < POLLER_TTL_MS);
        let mut pollers: Vec<_> = q.pollers.iter().map(|(k, v)| (k.clone(), *v)).collect();
        pollers.sort();
        QueueStats {
            backlog: q.ready.len(),
            pollers,
            dispatched: q.dispatched,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(seq: u64) -> TaskRef {
        TaskRef {
            namespace: "default".into(),
            queue: "q".into(),
            task_seq: seq,
            run_id: format!("r{seq}"),
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[tokio::test]
    async fn a_parked_poll_is_woken_by_a_new_task() {
        let m = Matching::default();
        let rx = m.take_or_park("default", "q", "w", 0, later()).unwrap_err();
        m.push(task(1));
        assert!(matches!(rx.await.unwrap(), Dispatch::Task(t) if t.task_seq == 1));
        assert_eq!(m.stats("default", "q", 0).backlog, 0);
    }

    #[test]
    fn abandoned_polls_are_skipped_and_tasks_kept_in_order() {
        let m = Matching::default();
        drop(m.take_or_park("default", "q", "w", 0, later()).unwrap_err());
        m.push(task(1));
        m.push(task(2));
        assert_eq!(
            m.take_or_park("default", "q", "w", 0, later()).unwrap().task_seq,
            1
        );
        assert_eq!(
            m.take_or_park("default", "q", "w", 0, later()).unwrap().task_seq,
            2
        );
        assert_eq!(m.stats("default", "q", 0).pollers.len(), 1);
    }

    #[test]
    fn only_polls_with_time_left_are_claimed_and_ready_tasks_go_first() {
        let m = Matching::default();
        let _soon = m
            .take_or_park("default", "q", "hurried", 0, Instant::now())
            .unwrap_err();
        let mut patient = m.take_or_park("default", "q", "patient", 0, later()).unwrap_err();
        let claimed = m.claim("default", "q").unwrap();
        assert_eq!(claimed.identity, "patient");
        assert!(
            m.claim("default", "q").is_none(),
            "the hurried poll has no time for a hand-off"
        );
        m.unclaim("default", "q", claimed);
        m.push(task(1));
        assert!(matches!(patient.try_recv(), Ok(Dispatch::Task(t)) if t.task_seq == 1));
        m.push(task(2));
        assert!(
            m.claim("default", "q").is_none(),
            "a ready task goes before any hand-off"
        );
    }

    #[test]
    fn gauges_count_ready_tasks_and_live_parked_polls() {
        let m = Matching::default();
        m.push(task(1));
        m.push(task(2));
        let _live = m.take_or_park("default", "r", "w", 0, later()).unwrap_err();
        drop(m.take_or_park("default", "r", "gone", 0, later()).unwrap_err());
        let gauge = |queue: &str, backlog, parked| QueueGauge {
            namespace: "default".into(),
            queue: queue.into(),
            backlog,
            parked,
        };
        assert_eq!(m.queue_gauges(), [gauge("q", 2, 0), gauge("r", 0, 1)]);
    }

    #[test]
    fn idle_queues_and_pollers_are_forgotten() {
        let m = Matching::default();
        let t0 = 1_000_000;
        // A million distinct names would each stay for good before.
        for i in 0..100 {
            let _ = m.take_or_park(
                "default",
                &format!("junk-{i}"),
                &format!("w{i}"),
                t0,
                Instant::now(),
            );
        }
        m.push(task(1));
        let _waiting = m.take_or_park("default", "live", "w", t0, later()).unwrap_err();
        assert_eq!(m.queue_count(), 102);
        // Asking about a queue does not create one.
        assert_eq!(m.stats("default", "never-polled", t0).backlog, 0);
        assert_eq!(m.queue_count(), 102);

        let later_ms = t0 + QUEUE_TTL_MS + SWEEP_EVERY_MS;
        let _ = m.take_or_park("default", "fresh", "w", later_ms, Instant::now());
        let mut left: Vec<_> = m.queue_gauges().into_iter().map(|g| g.queue).collect();
        left.sort();
        // The queue with a ready task, the one with a poll waiting, and the new one.
        assert_eq!(left, ["fresh", "live", "q"]);
        assert!(m.stats("default", "q", later_ms).pollers.is_empty());
    }

    #[test]
    fn pollers_per_queue_are_capped() {
        let m = Matching::default();
        for i in 0..(MAX_POLLERS_PER_QUEUE as i64 + 10) {
            m.push(task(i as u64 + 1));
            m.take_or_park("default", "q", &format!("w{i}"), i, later())
                .unwrap();
        }
        let pollers = m.stats("default", "q", 100).pollers;
        assert_eq!(pollers.len(), MAX_POLLERS_PER_QUEUE);
        assert!(pollers.iter().all(|(id, _)| id != "w0"), "the oldest went first");
    }

    #[test]
    fn a_crowd_of_idle_queues_is_swept_without_waiting() {
        let m = Matching::default();
        for i in 0..=MAX_QUEUES {
            let _ = m.take_or_park("default", &format!("q{i}"), "w", 1, Instant::now());
        }
        let _ = m.take_or_park(
            "default",
            "next",
            "w",
            1 + CROWDED_SWEEP_EVERY_MS + SWEEP_EVERY_MS,
            Instant::now(),
        );
        assert!(m.queue_count() <= 2, "{}", m.queue_count());
    }

    #[test]
    fn a_run_specific_take_skips_other_runs_and_leaves_them_ready() {
        let m = Matching::default();
        for seq in 1..=3 {
            m.push(task(seq));
        }
        assert_eq!(
            m.take_run("default", "q", "r2", "gw", 0).map(|t| t.task_seq),
            Some(2)
        );
        assert_eq!(m.take_run("default", "q", "r2", "gw", 0), None);
        assert_eq!(m.take_run("default", "other", "r1", "gw", 0), None);
        let order: Vec<u64> = (0..2)
            .map(|_| m.take_or_park("default", "q", "w", 0, later()).unwrap().task_seq)
            .collect();
        assert_eq!(order, [1, 3]);
    }

    #[test]
    fn a_removed_task_leaves_the_backlog() {
        let m = Matching::default();
        for seq in 1..=3 {
            m.push(task(seq));
        }
        m.remove("default", "q", 2);
        m.remove("default", "q", 9);
        assert_eq!(m.stats("default", "q", 0).backlog, 2);
        let order: Vec<u64> = (0..2)
            .map(|_| m.take_or_park("default", "q", "w", 0, later()).unwrap().task_seq)
            .collect();
        assert_eq!(order, [1, 3]);
    }
}
