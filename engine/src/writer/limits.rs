//! Per-namespace limits on starts, kept by the writer thread: open runs counted in
//! memory (loaded from `open_runs` at start, moved by every commit that opens or
//! closes a run), and a token bucket of starts per namespace. Every start passes
//! [`StartCommand::check`](super::StartCommand) or a schedule's fire, and both
//! ask [`StartLimits::check`] in the transaction that would start the run.

use std::collections::{BTreeMap, HashMap};

use railyard_model::Millis;
use railyard_model::Rejection;
use railyard_model::namespace::Namespace;

/// Open runs per namespace and the starts buckets. Only the writer thread has it.
#[derive(Debug, Default)]
pub(crate) struct StartLimits {
    /// Open runs per namespace as of the last commit.
    open: HashMap<String, u64>,
    /// What the batch being applied changed, until it commits or fails.
    delta: HashMap<String, i64>,
    buckets: HashMap<String, Bucket>,
}

/// Tokens in thousandths: `rate` per second refill `rate` thousandths a ms.
#[derive(Debug)]
struct Bucket {
    milli_tokens: u64,
    at_ms: Millis,
}

impl StartLimits {
    /// Counts as storage has them at start.
    pub(crate) fn new(open: BTreeMap<String, u64>) -> Self {
        Self {
            open: open.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Open runs of `ns`, this batch's changes included.
    pub(crate) fn open_runs(&self, ns: &str) -> u64 {
        let base = self.open.get(ns).copied().unwrap_or(0) as i64;
        (base + self.delta.get(ns).copied().unwrap_or(0)).max(0) as u64
    }

    /// A run of `ns` opened (`true`) or closed in the batch being applied.
    pub(crate) fn moved(&mut self, ns: &str, opened: bool) {
        *self.delta.entry(ns.to_string()).or_insert(0) += if opened { 1 } else { -1 };
    }

    /// The batch committed: its changes count from now on.
    pub(crate) fn commit(&mut self) {
        for (ns, d) in self.delta.drain() {
            let n = self.open.entry(ns).or_insert(0);
            *n = (*n as i64 + d).max(0) as u64;
        }
    }

    /// The batch failed: nothing of it happened.
    pub(crate) fn rollback(&mut self) {
        self.delta.clear();
    }

    /// Forgets a deleted namespace (it holds no runs), so names that come and go
    /// leave nothing behind.
    pub(crate) fn forget(&mut self, ns: &str) {
        self.open.remove(ns);
        self.delta.remove(ns);
        self.buckets.remove(ns);
    }

    /// Whether `ns` may start one more run now; takes a token from its bucket when
    /// it may. Refused: `RESOURCE_EXHAUSTED` naming the limit and the namespace.
    pub(crate) fn check(&mut self, ns: &Namespace, now: Millis) -> Result<(), Rejection> {
        self.check_freeing(ns, now, 0)
    }

    /// [`Self::check`] for a start whose commit also closes `freeing` open runs of
    /// `ns` (a replace terminates the run it replaces): those count as closed.
    pub(crate) fn check_freeing(
        &mut self,
        ns: &Namespace,
        now: Millis,
        freeing: u64,
    ) -> Result<(), Rejection> {
        let limits = &ns.limits;
        let open = self.open_runs(&ns.name).saturating_sub(freeing);
        if limits.max_open_runs > 0 && open >= limits.max_open_runs {
            return Err(Rejection::ResourceExhausted(format!(
                "namespace {:?} has {open} open runs, its limit (max open runs {}); \
                 a run can start once another closes",
                ns.name, limits.max_open_runs
            )));
        }
        let rate = limits.max_starts_per_second;
        if rate == 0 {
            self.buckets.remove(&ns.name);
            return Ok(());
        }
        let full = rate.saturating_mul(1000);
        let bucket = self.buckets.entry(ns.name.clone()).or_insert(Bucket {
            milli_tokens: full,
            at_ms: now,
        });
        let elapsed = (now - bucket.at_ms).max(0) as u64;
        bucket.milli_tokens = bucket
            .milli_tokens
            .saturating_add(elapsed.saturating_mul(rate))
            .min(full);
        bucket.at_ms = bucket.at_ms.max(now);
        if bucket.milli_tokens >= 1000 {
            bucket.milli_tokens -= 1000;
            return Ok(());
        }
        let wait_ms = (1000 - bucket.milli_tokens).div_ceil(rate);
        Err(Rejection::ResourceExhausted(format!(
            "namespace {:?} is starting runs faster than its limit (max starts per second {rate}); \
             retry in {wait_ms} ms",
            ns.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_model::namespace::NamespaceLimits;

    fn ns(max_open_runs: u64, max_starts_per_second: u64) -> Namespace {
        Namespace {
            principles: None,
            name: "team".into(),
            limits: NamespaceLimits {
                max_open_runs,
                max_starts_per_second,
                max_pending_signals: 0,
            },
            ..Namespace::default()
        }
    }

    #[test]
    fn open_runs_count_what_committed_and_a_failed_batch_leaves_nothing() {
        let mut l = StartLimits::new([("team".to_string(), 1)].into());
        l.moved("team", true);
        assert_eq!(l.open_runs("team"), 2);
        let err = l.check(&ns(2, 0), 0).unwrap_err().to_string();
        assert!(
            err.contains("max open runs 2") && err.contains("\"team\""),
            "{err}"
        );
        l.rollback();
        assert_eq!(l.open_runs("team"), 1);
        l.check(&ns(2, 0), 0).unwrap();
        l.moved("team", true);
        l.moved("team", false);
        l.moved("team", false);
        l.commit();
        assert_eq!(l.open_runs("team"), 0);
        assert_eq!(l.open_runs("other"), 0);
    }

    #[test]
    fn the_bucket_holds_one_second_and_refills_with_the_clock() {
        let mut l = StartLimits::default();
        let team = ns(0, 4);
        for _ in 0..4 {
            l.check(&team, 1_000).unwrap();
        }
        let err = l.check(&team, 1_000).unwrap_err().to_string();
        assert!(
            err.contains("max starts per second 4") && err.contains("retry in 250 ms"),
            "{err}"
        );
        assert!(l.check(&team, 1_249).is_err());
        l.check(&team, 1_250).unwrap();
        // A long pause fills it to one second's worth, no more.
        for _ in 0..4 {
            l.check(&team, 60_000).unwrap();
        }
        assert!(l.check(&team, 60_000).is_err());
        // A clock that steps back refills nothing and breaks nothing.
        assert!(l.check(&team, 10).is_err());
    }
}
