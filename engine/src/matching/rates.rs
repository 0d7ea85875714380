//! Rate limits the fleet shares: a token bucket per (namespace, key) for requests
//! and one for tokens, each holding a minute's worth and refilled continuously, in
//! memory on the leader only (a restart starts every bucket full). A provider's
//! 429 with a reset time empties the key's buckets until then, when they are full
//! again (the provider's own limit has reset).

use std::collections::HashMap;

use railyard_model::Millis;
use railyard_model::flow::KeyRule;

/// Most keys with buckets; past it the buckets unused longest are dropped (a
/// dropped bucket starts full again).
pub(super) const MAX_BUCKETS: usize = 100_000;
/// The longest a key may be held empty by a report, from now.
pub const MAX_RESET_MS: Millis = 24 * 60 * 60 * 1000;

const MINUTE_MS: f64 = 60_000.0;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    requests: f64,
    tokens: f64,
    at: Millis,
    /// Held empty until then (a provider's reset).
    until: Millis,
}

/// What a capacity request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    /// Go: the request and its tokens were taken from the key's buckets.
    Go,
    /// Wait until then, and ask again.
    WaitUntil(Millis),
}

#[derive(Default)]
pub(super) struct Rates {
    buckets: HashMap<(String, String), Bucket>,
}

impl Rates {
    /// Takes one request and `tokens` from the key's buckets under `rule`, or says
    /// when there will be enough. A request for more tokens than a minute's worth is
    /// served once the bucket is full.
    pub(super) fn acquire(
        &mut self,
        ns: &str,
        key: &str,
        rule: &KeyRule,
        tokens: u64,
        now: Millis,
    ) -> Capacity {
        let (rpm, tpm) = (rule.requests_per_minute, rule.tokens_per_minute);
        if rpm.is_none() && tpm.is_none() {
            return Capacity::Go;
        }
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&(ns.to_string(), key.to_string()))
        {
            self.evict();
        }
        let b = self
            .buckets
            .entry((ns.to_string(), key.to_string()))
            .or_insert(Bucket {
                requests: rpm.unwrap_or(0) as f64,
                tokens: tpm.unwrap_or(0) as f64,
                at: now,
                until: 0,
            });
        if now < b.until {
            return Capacity::WaitUntil(b.until);
        }
        if b.until > 0 {
            // The provider's limit has reset: its whole minute is there again.
            *b = Bucket {
                requests: rpm.unwrap_or(0) as f64,
                tokens: tpm.unwrap_or(0) as f64,
                at: now,
                until: 0,
            };
        }
        let elapsed = (now - b.at).max(0) as f64;
        b.at = now;
        let mut wait: Millis = 0;
        if let Some(rpm) = rpm {
            let cap = rpm as f64;
            b.requests = (b.requests + elapsed * cap / MINUTE_MS).min(cap);
            if b.requests < 1.0 {
                wait = wait.max(((1.0 - b.requests) * MINUTE_MS / cap).ceil() as Millis);
            }
        }
        if let Some(tpm) = tpm {
            let cap = tpm as f64;
            b.tokens = (b.tokens + elapsed * cap / MINUTE_MS).min(cap);
            let need = (tokens as f64).min(cap);
            if b.tokens < need {
                wait = wait.max(((need - b.tokens) * MINUTE_MS / cap).ceil() as Millis);
            }
        }
        if wait > 0 {
            return Capacity::WaitUntil(now + wait);
        }
        if rpm.is_some() {
            b.requests -= 1.0;
        }
        if let Some(tpm) = tpm {
            b.tokens -= (tokens as f64).min(tpm as f64);
        }
        Capacity::Go
    }

    /// A provider said the key is out until `until`: its buckets stay empty until
    /// then, and are full from then on.
    pub(super) fn exhausted(&mut self, ns: &str, key: &str, until: Millis, now: Millis) {
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&(ns.to_string(), key.to_string()))
        {
            self.evict();
        }
        let b = self
            .buckets
            .entry((ns.to_string(), key.to_string()))
            .or_insert(Bucket {
                requests: 0.0,
                tokens: 0.0,
                at: now,
                until: 0,
            });
        b.requests = 0.0;
        b.tokens = 0.0;
        b.at = now;
        b.until = b.until.max(until);
    }

    fn evict(&mut self) {
        let mut ages: Vec<Millis> = self.buckets.values().map(|b| b.at.max(b.until)).collect();
        ages.sort_unstable();
        let cut = ages[ages.len() / 2];
        self.buckets.retain(|_, b| b.at.max(b.until) > cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(rpm: Option<u64>, tpm: Option<u64>) -> KeyRule {
        KeyRule {
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
            ..KeyRule::default()
        }
    }

    #[test]
    fn a_bucket_holds_a_minutes_worth_and_refills() {
        let mut r = Rates::default();
        let two = rule(Some(2), None);
        assert_eq!(r.acquire("ns", "k", &two, 0, 0), Capacity::Go);
        assert_eq!(r.acquire("ns", "k", &two, 0, 0), Capacity::Go);
        assert_eq!(r.acquire("ns", "k", &two, 0, 0), Capacity::WaitUntil(30_000));
        assert_eq!(r.acquire("ns", "k", &two, 0, 30_000), Capacity::Go);
        // Another key and another namespace have buckets of their own.
        assert_eq!(r.acquire("ns", "other", &two, 0, 30_000), Capacity::Go);
        assert_eq!(r.acquire("ns2", "k", &two, 0, 30_000), Capacity::Go);
    }

    #[test]
    fn tokens_are_counted_and_a_reset_empties_the_key_until_then() {
        let mut r = Rates::default();
        let tpm = rule(None, Some(600));
        assert_eq!(r.acquire("ns", "k", &tpm, 500, 0), Capacity::Go);
        assert_eq!(r.acquire("ns", "k", &tpm, 200, 0), Capacity::WaitUntil(10_000));
        r.exhausted("ns", "k", 20_000, 1_000);
        assert_eq!(r.acquire("ns", "k", &tpm, 1, 15_000), Capacity::WaitUntil(20_000));
        // After the reset the bucket is full again.
        assert_eq!(r.acquire("ns", "k", &tpm, 600, 20_000), Capacity::Go);
        assert_eq!(
            r.acquire("ns", "k", &tpm, 100, 20_000),
            Capacity::WaitUntil(30_000)
        );
        // More than a minute's worth is served once full.
        assert_eq!(r.acquire("ns", "k", &tpm, 10_000, 90_000), Capacity::Go);
        assert_eq!(r.acquire("ns", "k", &rule(None, None), 1, 90_000), Capacity::Go);
    }
}
