//! The webhook deliveries a trigger refused (a bad signature, a body that is not
//! JSON, a template the payload does not fill, a start the server refused, ...) and
//! the duplicates it answered with an earlier run, shown beside its recent deliveries
//! (`TriggerInfo.recent_refusals`, the web console's triggers page).
//!
//! They are kept **in memory, per node, never on disk**: a refusal starts no run and
//! commits nothing, and whoever sends deliveries (unauthenticated, before the
//! signature is checked) must not be able to make the server write. Memory is
//! bounded: the last [`KEPT_PER_TRIGGER`] of each trigger that exists (a delivery to
//! no trigger is not remembered), reasons cut to [`MAX_REASON_BYTES`], at most
//! [`MAX_TRIGGERS`] triggers (one more evicts another's). A restart forgets them;
//! on PostgreSQL the leader receives every delivery (a follower forwards it) and
//! answers every read, so they are the leader's since it took the lease.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use railyard_model::Millis;

/// Refusals kept per trigger, as many as its recent deliveries.
pub const KEPT_PER_TRIGGER: usize = 20;
/// Triggers with refusals remembered at once.
pub const MAX_TRIGGERS: usize = 10_000;
/// The longest reason kept.
pub const MAX_REASON_BYTES: usize = 512;

/// One refused (or duplicate) delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub received_ms: Millis,
    /// The delivery id header's value, cut (empty: none was sent).
    pub delivery_id: String,
    /// What it was: `unauthorized`, `unsupported media type`, `bad request`,
    /// `unprocessable`, `refused` (the start was refused), or `duplicate`.
    pub kind: &'static str,
    /// The answer's words (for a duplicate, the run it was answered with).
    pub reason: String,
}

/// The refusals of every trigger, by (namespace, trigger id).
#[derive(Default)]
pub struct HookRefusals {
    kept: Mutex<HashMap<(String, String), VecDeque<Refusal>>>,
}

impl HookRefusals {
    /// Remembers a refusal of trigger `trigger_id` (which exists), dropping its
    /// oldest past [`KEPT_PER_TRIGGER`].
    pub fn record(&self, ns: &str, trigger_id: &str, mut refusal: Refusal) {
        refusal.reason = railyard_model::text::cut(&refusal.reason, MAX_REASON_BYTES, "…");
        refusal.delivery_id = railyard_model::text::prefix(&refusal.delivery_id, 128).to_string();
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ns.to_string(), trigger_id.to_string());
        if !kept.contains_key(&key) && kept.len() >= MAX_TRIGGERS {
            let evicted = kept.keys().next().cloned();
            if let Some(evicted) = evicted {
                kept.remove(&evicted);
            }
        }
        let list = kept.entry(key).or_default();
        if list.len() >= KEPT_PER_TRIGGER {
            list.pop_front();
        }
        list.push_back(refusal);
    }

    /// The trigger's refusals, oldest first.
    pub fn of(&self, ns: &str, trigger_id: &str) -> Vec<Refusal> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(&(ns.to_string(), trigger_id.to_string()))
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets a deleted trigger's.
    pub fn forget(&self, ns: &str, trigger_id: &str) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.remove(&(ns.to_string(), trigger_id.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(n: i64, reason: &str) -> Refusal {
        Refusal {
            received_ms: n,
            delivery_id: format!("d{n}"),
            kind: "bad request",
            reason: reason.into(),
        }
    }

    #[test]
    fn the_last_of_each_trigger_are_kept_cut_and_bounded() {
        let r = HookRefusals::default();
        for n in 0..30 {
            r.record("ns", "t", refusal(n, &"x".repeat(2000)));
        }
        let kept = r.of("ns", "t");
        assert_eq!(kept.len(), KEPT_PER_TRIGGER);
        assert_eq!(kept[0].received_ms, 10, "oldest dropped first");
        assert!(kept[0].reason.len() <= MAX_REASON_BYTES + 3);
        assert!(r.of("ns", "other").is_empty());
        for n in 0..MAX_TRIGGERS + 5 {
            r.record("ns", &format!("t{n}"), refusal(0, "r"));
        }
        assert_eq!(r.kept.lock().unwrap().len(), MAX_TRIGGERS);
        r.forget("ns", &format!("t{}", MAX_TRIGGERS + 4));
        assert!(r.of("ns", &format!("t{}", MAX_TRIGGERS + 4)).is_empty());
    }
}
