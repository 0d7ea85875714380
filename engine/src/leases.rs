//! Lease deadlines, in memory: each follows from its run's state row, so the writer
//! updates them after every commit and [`LeaseDeadlines`] is rebuilt from the open
//! runs at start. That spares every lease a timer row; the timer loop
//! (`engine::timers`) waits for the earliest.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use railyard_model::{Millis, RunKey};

/// The deadline of every lease in flight: one entry per open run with a step leased.
#[derive(Default)]
pub struct LeaseDeadlines {
    inner: Mutex<Deadlines>,
}

#[derive(Default)]
struct Deadlines {
    by_run: HashMap<RunKey, (Millis, u64)>,
    by_due: BTreeSet<(Millis, RunKey, u64)>,
}

/// A lease whose deadline has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueLease {
    pub run: RunKey,
    pub lease: u64,
}

impl LeaseDeadlines {
    fn lock(&self) -> MutexGuard<'_, Deadlines> {
        // The sets stay consistent even if a holder panicked: every update is a
        // remove then an insert.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets (or with `None`, clears) the run's lease deadline as `(due, lease)`.
    /// Returns true when this made the earliest deadline earlier.
    pub fn set(&self, key: RunKey, deadline: Option<(Millis, u64)>) -> bool {
        let mut d = self.lock();
        if d.by_run.get(&key) == deadline.as_ref() {
            return false;
        }
        if let Some((due, lease)) = d.by_run.remove(&key) {
            d.by_due.remove(&(due, key.clone(), lease));
        }
        let Some((due, lease)) = deadline else {
            return false;
        };
        let earliest = d.by_due.first().is_none_or(|(first, _, _)| due < *first);
        d.by_due.insert((due, key.clone(), lease));
        d.by_run.insert(key, (due, lease));
        earliest
    }

    /// The earliest deadline.
    pub fn next_due(&self) -> Option<Millis> {
        self.lock().by_due.first().map(|(due, _, _)| *due)
    }

    /// At most `max` leases due at `now`, earliest first. They stay until the
    /// writer sets the runs' new deadlines after its commit.
    pub fn due(&self, now: Millis, max: usize) -> Vec<DueLease> {
        self.lock()
            .by_due
            .iter()
            .take_while(|(due, _, _)| *due <= now)
            .take(max)
            .map(|(_, run, lease)| DueLease {
                run: run.clone(),
                lease: *lease,
            })
            .collect()
    }

    /// How many leases are watched in each namespace.
    pub fn count_by_namespace(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for run in self.lock().by_run.keys() {
            *counts.entry(run.namespace.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// How many leases are watched.
    pub fn len(&self) -> usize {
        self.lock().by_run.len()
    }

    /// True when no lease is watched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_deadline_per_run_earliest_first() {
        let d = LeaseDeadlines::default();
        assert!(d.set(RunKey::new("ns", "a"), Some((500, 1))));
        assert!(
            !d.set(RunKey::new("ns", "b"), Some((900, 1))),
            "not earlier than a's"
        );
        assert!(
            d.set(RunKey::new("ns", "b"), Some((100, 2))),
            "b's new lease replaces its old one"
        );
        assert_eq!(d.len(), 2);
        assert_eq!(d.next_due(), Some(100));
        let due: Vec<_> = d
            .due(500, 10)
            .into_iter()
            .map(|l| (l.run.run_id, l.lease))
            .collect();
        assert_eq!(due, [("b".to_string(), 2), ("a".to_string(), 1)]);
        assert_eq!(d.due(500, 1).len(), 1);
        d.set(RunKey::new("ns", "b"), None);
        assert_eq!(d.next_due(), Some(500));
        d.set(RunKey::new("ns", "a"), None);
        assert!(d.is_empty() && d.next_due().is_none());
    }
}
