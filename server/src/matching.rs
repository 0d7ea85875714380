//! Matching: the in-memory ready list of each task queue and the long polls parked
//! on it. Rebuilt from the `tasks` table at start; the table is the truth, and a
//! task handed out here is only leased once the writer commits the lease.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::clock::Millis;

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
    ready: VecDeque<TaskRef>,
    parked: VecDeque<oneshot::Sender<TaskRef>>,
    /// Poller identity → last poll time.
    pollers: HashMap<String, Millis>,
    dispatched: u64,
}

/// Figures of one queue, for `DescribeTaskQueue`.
#[derive(Debug, Clone, Default)]
pub struct QueueStats {
    pub backlog: usize,
    pub pollers: Vec<(String, Millis)>,
    pub dispatched: u64,
}

/// Every queue of every namespace.
#[derive(Default)]
pub struct Matching {
    queues: Mutex<HashMap<(String, String), Queue>>,
}

/// Pollers not seen for this long drop out of `DescribeTaskQueue`.
const POLLER_TTL_MS: Millis = 5 * 60 * 1000;

impl Matching {
    fn with_queue<T>(&self, ns: &str, queue: &str, f: impl FnOnce(&mut Queue) -> T) -> T {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let q = queues.entry((ns.to_string(), queue.to_string())).or_default();
        f(q)
    }

    /// Offers a task: to the oldest parked poll still waiting, else to the ready list.
    pub fn push(&self, task: TaskRef) {
        let (ns, queue) = (task.namespace.clone(), task.queue.clone());
        self.with_queue(&ns, &queue, |q| {
            let mut task = task;
            while let Some(waiter) = q.parked.pop_front() {
                match waiter.send(task) {
                    Ok(()) => {
                        q.dispatched += 1;
                        return;
                    }
                    Err(back) => task = back,
                }
            }
            q.ready.push_back(task);
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
    ) -> Result<TaskRef, oneshot::Receiver<TaskRef>> {
        self.with_queue(ns, queue, |q| {
            q.pollers.insert(identity.to_string(), now);
            if let Some(task) = q.ready.pop_front() {
                q.dispatched += 1;
                return Ok(task);
            }
            let (tx, rx) = oneshot::channel();
            q.parked.retain(|w| !w.is_closed());
            q.parked.push_back(tx);
            Err(rx)
        })
    }

    /// Backlog and pollers of a queue.
    pub fn stats(&self, ns: &str, queue: &str, now: Millis) -> QueueStats {
        self.with_queue(ns, queue, |q| {
            q.pollers.retain(|_, seen| now - *seen < POLLER_TTL_MS);
            let mut pollers: Vec<_> = q.pollers.iter().map(|(k, v)| (k.clone(), *v)).collect();
            pollers.sort();
            QueueStats {
                backlog: q.ready.len(),
                pollers,
                dispatched: q.dispatched,
            }
        })
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

    #[tokio::test]
    async fn a_parked_poll_is_woken_by_a_new_task() {
        let m = Matching::default();
        let rx = m.take_or_park("default", "q", "w", 0).unwrap_err();
        m.push(task(1));
        assert_eq!(rx.await.unwrap().task_seq, 1);
        assert_eq!(m.stats("default", "q", 0).backlog, 0);
    }

    #[test]
    fn abandoned_polls_are_skipped_and_tasks_kept_in_order() {
        let m = Matching::default();
        drop(m.take_or_park("default", "q", "w", 0).unwrap_err());
        m.push(task(1));
        m.push(task(2));
        assert_eq!(m.take_or_park("default", "q", "w", 0).unwrap().task_seq, 1);
        assert_eq!(m.take_or_park("default", "q", "w", 0).unwrap().task_seq, 2);
        assert_eq!(m.stats("default", "q", 0).pollers.len(), 1);
    }
}
