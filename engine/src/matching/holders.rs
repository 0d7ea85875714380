//! Concurrency limits: how many runs of each key hold a slot, and each
//! namespace's rules. A run holds a slot of its key from the moment matching hands
//! its task out (or the writer claims a poll for it) until its lease ends; a take
//! whose lease is refused gives the slot back. Rebuilt from the leased runs at
//! start, so a restart never forgets a slot in use.

use std::collections::HashMap;

use railyard_model::RunKey;
use railyard_model::flow::{KeyRules, rule_for};

/// A key's figures, for `run describe` and `queue describe`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLoad {
    /// Runs of the key holding a slot.
    pub running: u32,
    /// The limit of the rule it follows (none: no limit).
    pub limit: Option<u32>,
    /// That rule's key pattern (empty: none).
    pub rule: String,
}

#[derive(Default)]
pub(super) struct Holders {
    rules: HashMap<String, KeyRules>,
    /// Runs handed out whose lease is not committed yet, with their key.
    pending: HashMap<RunKey, String>,
    /// Runs with a committed lease, with their key.
    leased: HashMap<RunKey, String>,
    /// Runs per (namespace, key) in `pending` or `leased`.
    counts: HashMap<(String, String), u32>,
}

impl Holders {
    pub(super) fn set_rules(&mut self, ns: &str, rules: KeyRules) {
        if rules.is_empty() {
            self.rules.remove(ns);
        } else {
            self.rules.insert(ns.to_string(), rules);
        }
    }

    fn holds(&self, run: &RunKey) -> bool {
        self.pending.contains_key(run) || self.leased.contains_key(run)
    }

    fn add(&mut self, run: &RunKey, key: &str) {
        if !self.holds(run) {
            *self
                .counts
                .entry((run.namespace.clone(), key.to_string()))
                .or_default() += 1;
        }
    }

    fn drop_if_free(&mut self, run: &RunKey, key: &str) -> bool {
        if self.holds(run) {
            return false;
        }
        let k = (run.namespace.clone(), key.to_string());
        if let Some(n) = self.counts.get_mut(&k) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.counts.remove(&k);
            }
        }
        true
    }

    /// The run's task was handed out: it holds a slot until its lease is committed
    /// or the take is given back.
    pub(super) fn reserve(&mut self, run: RunKey, key: &str) {
        if key.is_empty() {
            return;
        }
        self.add(&run, key);
        self.pending.insert(run, key.to_string());
    }

    /// A take whose lease was not committed: its slot is free again (unless the run
    /// is leased). True if a slot was freed.
    pub(super) fn release(&mut self, run: &RunKey) -> bool {
        match self.pending.remove(run) {
            Some(key) => self.drop_if_free(run, &key),
            None => false,
        }
    }

    /// What a commit left of the run: leased or not. True if a slot was freed.
    pub(super) fn set_leased(&mut self, run: RunKey, key: &str, leased: bool) -> bool {
        if key.is_empty() {
            return false;
        }
        if leased {
            self.add(&run, key);
            self.pending.remove(&run);
            self.leased.insert(run, key.to_string());
            false
        } else if self.leased.remove(&run).is_some() {
            self.drop_if_free(&run, key)
        } else {
            false
        }
    }

    /// The key's figures in `ns`.
    pub(super) fn load(&self, ns: &str, key: &str) -> KeyLoad {
        let running = self
            .counts
            .get(&(ns.to_string(), key.to_string()))
            .copied()
            .unwrap_or(0);
        let rule = self.rules.get(ns).and_then(|rules| rule_for(rules, key));
        KeyLoad {
            running,
            limit: rule.and_then(|(_, r)| r.concurrency),
            rule: rule.map(|(k, _)| k.to_string()).unwrap_or_default(),
        }
    }

    /// Whether the key has no slot free in `ns`.
    pub(super) fn full(&self, ns: &str, key: &str) -> bool {
        if key.is_empty() {
            return false;
        }
        let Some(rules) = self.rules.get(ns) else {
            return false;
        };
        match rule_for(rules, key).and_then(|(_, r)| r.concurrency) {
            Some(limit) => {
                let n = self
                    .counts
                    .get(&(ns.to_string(), key.to_string()))
                    .copied()
                    .unwrap_or(0);
                n >= limit
            }
            None => false,
        }
    }

    /// The rule `key` follows in `ns`, if any.
    pub(super) fn rule(&self, ns: &str, key: &str) -> Option<railyard_model::flow::KeyRule> {
        self.rules
            .get(ns)
            .and_then(|rules| rule_for(rules, key))
            .map(|(_, r)| *r)
    }

    /// A key's weight by the namespace's rules, else `own`.
    pub(super) fn weight(&self, ns: &str, key: &str, own: u32) -> u32 {
        self.rules
            .get(ns)
            .and_then(|rules| rule_for(rules, key))
            .and_then(|(_, r)| r.weight)
            .unwrap_or(own)
    }

    /// Running runs per key of `ns`.
    pub(super) fn running(&self, ns: &str) -> Vec<(String, u32)> {
        let mut v: Vec<_> = self
            .counts
            .iter()
            .filter(|((n, _), _)| n == ns)
            .map(|((_, k), c)| (k.clone(), *c))
            .collect();
        v.sort();
        v
    }
}
