//! One queue's ready tasks in dispatch order: by priority (1 first), then
//! resumptions (a step of a run already under way) before first steps, then across
//! fairness keys by weighted round robin (deficit round robin where every task
//! costs one), and within a key by sequence number (queue order). A task whose
//! concurrency key is full is passed over, and its key loses its turn.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::TaskRef;

/// A class of tasks: a priority, and whether they are first steps.
type Class = (u8, bool);

/// The ready tasks of one queue.
#[derive(Default)]
pub(super) struct Ready {
    tasks: BTreeMap<u64, TaskRef>,
    classes: BTreeMap<Class, Drr>,
}

/// Round robin across the fairness keys of one class.
#[derive(Default)]
struct Drr {
    keys: HashMap<String, KeyQueue>,
    /// Keys with tasks, in turn order; the front one is being served.
    ring: VecDeque<String>,
}

#[derive(Default)]
struct KeyQueue {
    /// Task sequences by concurrency key.
    by_limit: BTreeMap<String, BTreeSet<u64>>,
    /// Tasks the key may still take in its current turn.
    credit: u32,
    /// The weight of its latest task.
    weight: u32,
}

fn class(t: &TaskRef) -> Class {
    (t.flow.priority, !t.flow.resumption)
}

impl Ready {
    pub(super) fn len(&self) -> usize {
        self.tasks.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Every ready task, in sequence order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &TaskRef> {
        self.tasks.values()
    }

    pub(super) fn insert(&mut self, task: TaskRef) {
        let seq = task.task_seq;
        if self.tasks.contains_key(&seq) {
            return;
        }
        let drr = self.classes.entry(class(&task)).or_default();
        let key = task.flow.fairness_key.clone();
        let q = drr.keys.entry(key.clone()).or_insert_with(|| {
            drr.ring.push_back(key);
            KeyQueue::default()
        });
        q.weight = task.flow.weight;
        q.by_limit
            .entry(task.flow.limit_key.clone())
            .or_default()
            .insert(seq);
        self.tasks.insert(seq, task);
    }

    pub(super) fn remove(&mut self, seq: u64) -> Option<TaskRef> {
        let task = self.tasks.remove(&seq)?;
        let c = class(&task);
        let Some(drr) = self.classes.get_mut(&c) else {
            return Some(task);
        };
        let key = &task.flow.fairness_key;
        if let Some(q) = drr.keys.get_mut(key) {
            if let Some(set) = q.by_limit.get_mut(&task.flow.limit_key) {
                set.remove(&seq);
                if set.is_empty() {
                    q.by_limit.remove(&task.flow.limit_key);
                }
            }
            if q.by_limit.is_empty() {
                drr.keys.remove(key);
                drr.ring.retain(|k| k != key);
            }
        }
        if drr.keys.is_empty() {
            self.classes.remove(&c);
        }
        Some(task)
    }

    /// The next task to dispatch, removed: none when every ready task's concurrency
    /// key is full (`full`). `weight` gives a key's weight over its tasks' own.
    pub(super) fn take(
        &mut self,
        full: &dyn Fn(&str) -> bool,
        weight: &dyn Fn(&str, u32) -> u32,
    ) -> Option<TaskRef> {
        let seq = self.classes.values_mut().find_map(|drr| drr.next(full, weight))?;
        self.remove(seq)
    }

    /// Whether some ready task could be taken now.
    pub(super) fn any_takeable(&self, full: &dyn Fn(&str) -> bool) -> bool {
        self.classes.values().any(|drr| {
            drr.keys
                .values()
                .any(|q| q.by_limit.keys().any(|k| k.is_empty() || !full(k)))
        })
    }

    /// Ready tasks per concurrency key (the empty key for those with none).
    pub(super) fn per_limit_key(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for t in self.tasks.values() {
            *out.entry(t.flow.limit_key.clone()).or_default() += 1;
        }
        out
    }
}

impl Drr {
    /// The sequence of the next task of this class, charging its key's turn; the
    /// task stays until [`Ready::remove`].
    fn next(&mut self, full: &dyn Fn(&str) -> bool, weight: &dyn Fn(&str, u32) -> u32) -> Option<u64> {
        for _ in 0..self.ring.len() {
            let key = self.ring.front()?.clone();
            let q = self.keys.get_mut(&key)?;
            let pick = q
                .by_limit
                .iter()
                .filter(|(limit, _)| limit.is_empty() || !full(limit))
                .filter_map(|(_, set)| set.first().copied())
                .min();
            let Some(seq) = pick else {
                // Every task of the key waits for a concurrency slot: it loses its turn.
                q.credit = 0;
                self.ring.rotate_left(1);
                continue;
            };
            if q.credit == 0 {
                q.credit = weight(&key, q.weight).max(1);
            }
            q.credit -= 1;
            let last = q.by_limit.values().map(BTreeSet::len).sum::<usize>() == 1;
            if q.credit == 0 && !last {
                self.ring.rotate_left(1);
            }
            return Some(seq);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::{TaskFlow, TaskRef};
    use super::*;

    fn task(seq: u64, priority: u8, key: &str, resumption: bool) -> TaskRef {
        TaskRef {
            namespace: "default".into(),
            queue: "q".into(),
            task_seq: seq,
            run_id: format!("r{seq}"),
            flow: TaskFlow {
                priority,
                fairness_key: key.into(),
                weight: 1,
                limit_key: key.into(),
                resumption,
            },
        }
    }

    fn drain(r: &mut Ready, full: &dyn Fn(&str) -> bool) -> Vec<u64> {
        std::iter::from_fn(|| r.take(full, &|_, w| w).map(|t| t.task_seq)).collect()
    }

    #[test]
    fn priority_then_resumptions_then_sequence() {
        let mut r = Ready::default();
        r.insert(task(1, 3, "", false));
        r.insert(task(2, 3, "", true));
        r.insert(task(3, 1, "", false));
        r.insert(task(4, 5, "", true));
        r.insert(task(5, 3, "", false));
        assert_eq!(drain(&mut r, &|_| false), [3, 2, 1, 5, 4]);
        assert!(r.is_empty());
    }

    #[test]
    fn keys_take_turns_by_weight() {
        let mut r = Ready::default();
        for seq in 1..=6 {
            r.insert(task(seq, 3, "a", false));
        }
        for seq in 7..=9 {
            let mut t = task(seq, 3, "b", false);
            t.flow.weight = 2;
            r.insert(t);
        }
        assert_eq!(drain(&mut r, &|_| false), [1, 7, 8, 2, 9, 3, 4, 5, 6]);
    }

    #[test]
    fn a_full_key_is_passed_over_and_its_tasks_stay() {
        let mut r = Ready::default();
        r.insert(task(1, 3, "a", false));
        r.insert(task(2, 3, "a", false));
        r.insert(task(3, 3, "b", false));
        assert!(r.any_takeable(&|k| k == "a"));
        assert_eq!(drain(&mut r, &|k| k == "a"), [3]);
        assert!(!r.any_takeable(&|k| k == "a"));
        assert_eq!(r.len(), 2);
        assert_eq!(r.per_limit_key(), BTreeMap::from([("a".to_string(), 2)]));
        assert_eq!(drain(&mut r, &|_| false), [1, 2]);
    }

    #[test]
    fn a_removed_task_leaves_every_index() {
        let mut r = Ready::default();
        r.insert(task(1, 3, "a", false));
        r.insert(task(2, 2, "b", true));
        assert_eq!(r.remove(2).map(|t| t.task_seq), Some(2));
        assert_eq!(r.remove(2), None);
        assert_eq!(r.classes.len(), 1);
        assert_eq!(drain(&mut r, &|_| false), [1]);
        assert!(r.classes.is_empty());
    }
}
