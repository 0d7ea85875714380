//! Matching: the in-memory ready list of each task queue and the long polls parked
//! on it. Rebuilt from the `tasks` table at start; the table is the truth, and a
//! task handed out here is only leased once the writer commits the lease.
//!
//! Two ways a parked poll gets work: a ready task ([`Dispatch::Task`]), which the
//! poll then leases through the writer; or, when the writer schedules a step while
//! a poll is parked, the writer claims the poll ([`Matching::claim`]) and leases the
//! step to it in the same transaction ([`Dispatch::Leased`]), saving a commit
//! (Temporal calls this sync match).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use railyard_model::RunKey;
use railyard_model::flow::KeyRules;
use railyard_model::run::{Lease, RunState};
use railyard_store::{Snapshot, StorageError};

use crate::metrics::state::QueueGauge;
use railyard_model::Millis;

mod holders;
mod rates;
mod ready;

pub use rates::{Capacity, MAX_RESET_MS};

use holders::Holders;
pub use holders::KeyLoad;
use ready::Ready;

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

/// A ready task: enough to find its run, and where it goes in dispatch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub namespace: String,
    pub queue: String,
    pub task_seq: u64,
    pub run_id: String,
    pub flow: TaskFlow,
}

/// What orders a ready task among others (`ready.rs`), from its run's flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFlow {
    /// 1 (first) to 5.
    pub priority: u8,
    pub fairness_key: String,
    pub weight: u32,
    /// The key its concurrency limit counts under (empty: none).
    pub limit_key: String,
    /// A step of a run already under way (it has had a lease before).
    pub resumption: bool,
}

impl Default for TaskFlow {
    fn default() -> Self {
        Self::of_flow(&railyard_model::flow::Flow::default(), false)
    }
}

impl TaskFlow {
    /// The flow of `run`'s ready task.
    pub fn of(run: &RunState) -> Self {
        Self::of_flow(&run.flow, run.lease_counter > 0)
    }

    fn of_flow(f: &railyard_model::flow::Flow, resumption: bool) -> Self {
        Self {
            priority: f.priority,
            fairness_key: f.fairness_key.clone(),
            weight: f.weight,
            limit_key: f.limit_key().to_string(),
            resumption,
        }
    }
}

impl TaskRef {
    /// `run`'s task `task_seq` on `queue`.
    pub fn of(run: &RunState, queue: String, task_seq: u64) -> Self {
        Self {
            namespace: run.namespace.clone(),
            queue,
            task_seq,
            run_id: run.run_id.clone(),
            flow: TaskFlow::of(run),
        }
    }

    fn run_key(&self) -> RunKey {
        RunKey::new(&self.namespace, &self.run_id)
    }
}

#[derive(Default)]
struct Queue {
    /// Ready tasks in dispatch order (`ready.rs`); a task that stops being ready
    /// leaves in O(log n).
    ready: Ready,
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

    /// The next task in dispatch order whose key has a slot, its slot reserved.
    fn take(&mut self, ns: &str, holders: &mut Holders) -> Option<TaskRef> {
        let task = self
            .ready
            .take(&|k| holders.full(ns, k), &|k, w| holders.weight(ns, k, w))?;
        holders.reserve(task.run_key(), &task.flow.limit_key);
        self.dispatched += 1;
        Some(task)
    }

    /// Hands takeable tasks to parked polls, oldest poll first.
    fn pump(&mut self, ns: &str, holders: &mut Holders) {
        while !self.ready.is_empty() {
            self.parked.retain(|w| !w.tx.is_closed());
            if self.parked.is_empty() {
                return;
            }
            let Some(task) = self.take(ns, holders) else {
                return;
            };
            let mut task = task;
            loop {
                let Some(waiter) = self.parked.pop_front() else {
                    // Every poll went away meanwhile: the task is ready again.
                    holders.release(&task.run_key());
                    self.dispatched = self.dispatched.saturating_sub(1);
                    self.ready.insert(task);
                    return;
                };
                match waiter.tx.send(Dispatch::Task(task)) {
                    Ok(()) => break,
                    Err(Dispatch::Task(back)) => task = back,
                    Err(Dispatch::Leased(_)) => break,
                }
            }
        }
    }
}

/// Figures of one queue, for `DescribeTaskQueue`.
#[derive(Debug, Clone, Default)]
pub struct QueueStats {
    pub backlog: usize,
    pub pollers: Vec<(String, Millis)>,
    pub dispatched: u64,
    /// Per concurrency key with tasks ready here or runs holding a slot in the
    /// namespace: (key, ready here, its load).
    pub keys: Vec<(String, usize, KeyLoad)>,
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
    holders: Holders,
    rates: rates::Rates,
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

    fn queue(&mut self, ns: &str, queue: &str) -> (&mut Queue, &mut Holders) {
        let q = self
            .queues
            .entry((ns.to_string(), queue.to_string()))
            .or_default();
        (q, &mut self.holders)
    }

    /// Hands out what a freed slot or a changed rule lets through, on every queue
    /// of `ns` with a poll parked.
    fn pump_namespace(&mut self, ns: &str) {
        let Inner { queues, holders, .. } = self;
        for ((n, _), q) in queues.iter_mut() {
            if n == ns && !q.parked.is_empty() {
                q.pump(ns, holders);
            }
        }
    }
}

impl Matching {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many queues are remembered.
    #[cfg(test)]
    pub fn queue_count(&self) -> usize {
        self.lock().queues.len()
    }

    /// Offers a task: it joins the ready list in its place, and the oldest parked
    /// polls still waiting get what may be taken.
    pub fn push(&self, task: TaskRef) {
        let ns = task.namespace.clone();
        let mut inner = self.lock();
        let (q, holders) = inner.queue(&ns, &task.queue.clone());
        q.ready.insert(task);
        q.pump(&ns, holders);
    }

    /// Drops a task that is no longer ready (its run was canceled or terminated
    /// while it waited), so the backlog counts only live tasks.
    pub fn remove(&self, ns: &str, queue: &str, task_seq: u64) {
        let mut inner = self.lock();
        inner.queue(ns, queue).0.ready.remove(task_seq);
    }

    /// Takes the next ready task, or parks the caller and returns the receiver on
    /// which a task will arrive. A task taken holds a slot of its concurrency key
    /// until its lease is committed ([`Self::set_leased`]) or given back
    /// ([`Self::release`]).
    pub fn take_or_park(
        &self,
        ns: &str,
        queue: &str,
        identity: &str,
        now: Millis,
        deadline: Instant,
    ) -> Result<TaskRef, oneshot::Receiver<Dispatch>> {
        let mut inner = self.lock();
        inner.sweep(now);
        let (q, holders) = inner.queue(ns, queue);
        q.saw(identity, now);
        if let Some(task) = q.take(ns, holders) {
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
    }

    /// Takes the ready task of one run, if it has one on this queue and its key has
    /// a slot. A linear scan of the queue's ready list: run-specific polls (the MCP
    /// gateway resuming a run) are rare and their queues short.
    pub fn take_run(
        &self,
        ns: &str,
        queue: &str,
        run_id: &str,
        identity: &str,
        now: Millis,
    ) -> Option<TaskRef> {
        let mut inner = self.lock();
        let (q, holders) = inner.queue(ns, queue);
        q.pollers.insert(identity.to_string(), now);
        let found = q.ready.iter().find(|t| t.run_id == run_id)?;
        if holders.full(ns, &found.flow.limit_key) {
            return None;
        }
        let seq = found.task_seq;
        let task = q.ready.remove(seq)?;
        holders.reserve(task.run_key(), &task.flow.limit_key);
        q.dispatched += 1;
        Some(task)
    }

    /// Claims the oldest parked poll with enough wait left, for a direct hand-off of
    /// `task`. Only when no ready task may be taken (ready tasks go first) and
    /// `task`'s key has a slot, which the claim then holds.
    pub fn claim(&self, task: &TaskRef) -> Option<Waiter> {
        let soon = Instant::now() + CLAIM_MARGIN;
        let ns = &task.namespace;
        let mut inner = self.lock();
        let (q, holders) = inner.queue(ns, &task.queue);
        if q.ready.any_takeable(&|k| holders.full(ns, k)) || holders.full(ns, &task.flow.limit_key) {
            return None;
        }
        q.parked.retain(|w| !w.tx.is_closed());
        let at = q.parked.iter().position(|w| w.deadline > soon)?;
        let waiter = q.parked.remove(at)?;
        q.dispatched += 1;
        holders.reserve(task.run_key(), &task.flow.limit_key);
        Some(waiter)
    }

    /// Returns a claimed poll that was not used (its transaction failed), and the
    /// slot its run held.
    pub fn unclaim(&self, ns: &str, queue: &str, waiter: Waiter, run_id: &str) {
        let mut inner = self.lock();
        let (q, holders) = inner.queue(ns, queue);
        q.dispatched = q.dispatched.saturating_sub(1);
        q.parked.push_front(waiter);
        holders.release(&RunKey::new(ns, run_id));
    }

    /// Gives back the slot of a task taken whose lease was not committed.
    pub fn release(&self, ns: &str, run_id: &str) {
        let mut inner = self.lock();
        if inner.holders.release(&RunKey::new(ns, run_id)) {
            inner.pump_namespace(ns);
        }
    }

    /// What a commit left of a run with concurrency key `key`: leased or not. A
    /// freed slot goes to the next ready task of the key.
    pub fn set_leased(&self, run: RunKey, key: &str, leased: bool) {
        let ns = run.namespace.clone();
        let mut inner = self.lock();
        if inner.holders.set_leased(run, key, leased) {
            inner.pump_namespace(&ns);
        }
    }

    /// A namespace's rules on keys, as committed; what they now let through goes out.
    pub fn set_rules(&self, ns: &str, rules: KeyRules) {
        let mut inner = self.lock();
        inner.holders.set_rules(ns, rules);
        inner.pump_namespace(ns);
    }

    /// Asks for one model call and `tokens` under rate-limit key `key` of `ns`, by
    /// the rule the key follows: go (taken from its buckets), or wait until a time.
    /// A key no rate rule covers always goes.
    pub fn acquire_capacity(&self, ns: &str, key: &str, tokens: u64, now: Millis) -> Capacity {
        let mut inner = self.lock();
        let Some(rule) = inner.holders.rule(ns, key) else {
            return Capacity::Go;
        };
        inner.rates.acquire(ns, key, &rule, tokens, now)
    }

    /// A provider refused a call under `key` until `until`: the key's buckets stay
    /// empty until then.
    pub fn rate_limited(&self, ns: &str, key: &str, until: Millis, now: Millis) {
        self.lock().rates.exhausted(ns, key, until, now);
    }

    /// A concurrency key's figures in a namespace.
    pub fn key_load(&self, ns: &str, key: &str) -> KeyLoad {
        self.lock().holders.load(ns, key)
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

    /// Backlog, pollers and keys of a queue. Asking about a queue does not create it.
    pub fn stats(&self, ns: &str, queue: &str, now: Millis) -> QueueStats {
        let mut inner = self.lock();
        let Inner { queues, holders, .. } = &mut *inner;
        let running = holders.running(ns);
        let Some(q) = queues.get_mut(&(ns.to_string(), queue.to_string())) else {
            return QueueStats::default();
        };
        q.pollers.retain(|_, seen| now - *seen < POLLER_TTL_MS);
        let mut pollers: Vec<_> = q.pollers.iter().map(|(k, v)| (k.clone(), *v)).collect();
        pollers.sort();
        let mut ready = q.ready.per_limit_key();
        ready.remove("");
        for (k, _) in &running {
            ready.entry(k.clone()).or_default();
        }
        let keys = ready
            .into_iter()
            .take(MAX_KEYS_SHOWN)
            .map(|(k, n)| {
                let load = holders.load(ns, &k);
                (k, n, load)
            })
            .collect();
        QueueStats {
            backlog: q.ready.len(),
            pollers,
            dispatched: q.dispatched,
            keys,
        }
    }
}

/// Most keys a queue's description lists.
pub const MAX_KEYS_SHOWN: usize = 100;

/// Offers every ready task of the store to `matching`, in its run's place, after
/// setting every namespace's rules and counting the slots leased runs hold (the
/// tables are the truth: a restart forgets no slot in use). Returns how many
/// tasks were offered.
pub fn rebuild(matching: &Matching, snapshot: &dyn Snapshot) -> Result<usize, StorageError> {
    for ns in snapshot.namespaces()? {
        if let Some(n) = snapshot.namespace(&ns)? {
            matching.lock().holders.set_rules(&ns, n.key_rules);
        }
    }
    let mut flows: HashMap<RunKey, TaskFlow> = HashMap::new();
    snapshot.open_runs(&mut |run| {
        let key = run.key();
        let leased = run.lease_deadline().is_some();
        let flow = TaskFlow::of(&run);
        if leased && !flow.limit_key.is_empty() {
            matching
                .lock()
                .holders
                .set_leased(key.clone(), &flow.limit_key, true);
        }
        flows.insert(key, flow);
    })?;
    let ready = snapshot.ready_tasks()?;
    let n = ready.len();
    for t in ready {
        let key = RunKey::new(&t.namespace, &t.run_id);
        matching.push(TaskRef {
            flow: flows.remove(&key).unwrap_or_default(),
            namespace: t.namespace,
            queue: t.queue,
            task_seq: t.task_seq,
            run_id: t.run_id,
        });
    }
    Ok(n)
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
            flow: TaskFlow::default(),
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
        let claimed = m.claim(&task(9)).unwrap();
        assert_eq!(claimed.identity, "patient");
        assert!(
            m.claim(&task(9)).is_none(),
            "the hurried poll has no time for a hand-off"
        );
        m.unclaim("default", "q", claimed, "r9");
        m.push(task(1));
        assert!(matches!(patient.try_recv(), Ok(Dispatch::Task(t)) if t.task_seq == 1));
        m.push(task(2));
        assert!(
            m.claim(&task(9)).is_none(),
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

    fn keyed(seq: u64, key: &str) -> TaskRef {
        let mut t = task(seq);
        t.flow.fairness_key = key.into();
        t.flow.limit_key = key.into();
        t
    }

    #[test]
    fn a_full_key_waits_for_a_freed_slot_and_a_parked_poll_then_gets_it() {
        let m = Matching::default();
        let rule = railyard_model::flow::KeyRule {
            concurrency: Some(1),
            ..Default::default()
        };
        m.set_rules("default", [("*".to_string(), rule)].into());
        m.push(keyed(1, "a"));
        m.push(keyed(2, "a"));
        let first = m.take_or_park("default", "q", "w", 0, later()).unwrap();
        assert_eq!(first.task_seq, 1);
        let mut parked = m.take_or_park("default", "q", "w", 0, later()).unwrap_err();
        assert_eq!(m.key_load("default", "a").running, 1);
        // The lease commits: still one slot held, nothing else goes out.
        m.set_leased(RunKey::new("default", "r1"), "a", true);
        assert!(parked.try_recv().is_err());
        assert!(m.claim(&keyed(3, "a")).is_none(), "no hand-off past the limit");
        // Another key is not held back.
        m.push(keyed(4, "b"));
        assert!(matches!(parked.try_recv(), Ok(Dispatch::Task(t)) if t.task_seq == 4));
        let mut parked = m.take_or_park("default", "q", "w", 0, later()).unwrap_err();
        // The lease ends: the slot goes to the waiting task at once.
        m.set_leased(RunKey::new("default", "r1"), "a", false);
        assert!(matches!(parked.try_recv(), Ok(Dispatch::Task(t)) if t.task_seq == 2));
        let stats = m.stats("default", "q", 0);
        assert_eq!(stats.keys.len(), 2, "{:?}", stats.keys);
        // A take given back frees its slot.
        m.release("default", "r2");
        assert_eq!(m.key_load("default", "a").running, 0);
    }

    #[test]
    fn a_namespace_rules_weight_gives_its_key_more_turns() {
        let m = Matching::default();
        let rule = railyard_model::flow::KeyRule {
            weight: Some(3),
            ..Default::default()
        };
        m.set_rules("default", [("vip:*".to_string(), rule)].into());
        for seq in 1..=4 {
            m.push(keyed(seq, "plain"));
        }
        for seq in 5..=8 {
            m.push(keyed(seq, "vip:a"));
        }
        let order: Vec<u64> = (0..8)
            .map(|_| m.take_or_park("default", "q", "w", 0, later()).unwrap().task_seq)
            .collect();
        assert_eq!(order, [1, 5, 6, 7, 2, 8, 3, 4]);
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
