//! The sender's slots: at most `max_concurrent` HTTP calls at once, at most
//! `max_per_target` to one target (origin: scheme, host and port) and at most
//! `max_per_namespace` for one namespace's runs. The writer takes a [`Slot`] before it
//! starts an attempt and hands it to the sender with the job; the slot is free again
//! when the call ends (or the job is dropped). An attempt that finds no slot is not
//! started, so waiting never uses up an attempt, and a target that hangs holds its
//! share of the slots only: other targets keep being delivered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The limits, resolved (each at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLimits {
    pub total: usize,
    pub per_target: usize,
    pub per_namespace: usize,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_target: HashMap<String, usize>,
    per_namespace: HashMap<String, usize>,
}

/// The slots in use, shared by the writer (which takes them) and the sender's
/// calls (which free them).
#[derive(Debug)]
pub struct Slots {
    limits: SlotLimits,
    counts: Mutex<Counts>,
}

/// A slot in use; freed when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    namespace: String,
    target: String,
}

impl Slots {
    pub fn new(limits: SlotLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::default(),
        })
    }

    /// A slot for a call to `target` (an origin) for a run of `namespace`, if every
    /// limit has room.
    pub fn try_take(self: &Arc<Self>, namespace: &str, target: &str) -> Option<Slot> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let t = c.per_target.get(target).copied().unwrap_or(0);
        let n = c.per_namespace.get(namespace).copied().unwrap_or(0);
        if c.total >= self.limits.total || t >= self.limits.per_target || n >= self.limits.per_namespace {
            return None;
        }
        c.total += 1;
        *c.per_target.entry(target.to_string()).or_default() += 1;
        *c.per_namespace.entry(namespace.to_string()).or_default() += 1;
        Some(Slot {
            slots: self.clone(),
            namespace: namespace.to_string(),
            target: target.to_string(),
        })
    }

    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = self.slots.counts.lock().unwrap_or_else(|p| p.into_inner());
        let c = &mut *guard;
        c.total = c.total.saturating_sub(1);
        for (map, key) in [
            (&mut c.per_target, &self.target),
            (&mut c.per_namespace, &self.namespace),
        ] {
            if let Some(v) = map.get_mut(key) {
                *v = v.saturating_sub(1);
                if *v == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

/// The origin a URL names (scheme, host, port), the unit of `max_per_target`.
pub fn origin(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => u.origin().ascii_serialization(),
        Err(_) => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_holds_and_a_dropped_slot_frees_its_place() {
        let slots = Slots::new(SlotLimits {
            total: 3,
            per_target: 1,
            per_namespace: 2,
        });
        let a = slots.try_take("ns1", "http://a").expect("free");
        assert!(slots.try_take("ns1", "http://a").is_none(), "one per target");
        let b = slots.try_take("ns1", "http://b").expect("another target");
        assert!(slots.try_take("ns1", "http://c").is_none(), "two per namespace");
        let c = slots.try_take("ns2", "http://c").expect("another namespace");
        assert!(slots.try_take("ns3", "http://d").is_none(), "three in all");
        assert_eq!(slots.in_use(), 3);
        drop(a);
        assert!(slots.try_take("ns1", "http://a").is_some());
        drop((b, c));
        assert_eq!(slots.in_use(), 0);
        assert_eq!(origin("HTTP://Example.com:80/x?y"), "http://example.com");
    }
}
