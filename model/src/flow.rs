//! Flow control: a run's priority, fairness key and weight, its concurrency key,
//! and a namespace's rules on keys (a concurrency limit, a weight), with the
//! checks every input passes. `docs/flow-control.md` says how dispatch uses them.

use std::collections::BTreeMap;

use crate::Rejection;
use crate::error::echo;

/// The first priority: dispatched before every other.
pub const HIGHEST_PRIORITY: u32 = 1;
/// The last priority.
pub const LOWEST_PRIORITY: u32 = 5;
/// A run's priority when none is given (Temporal's convention).
pub const DEFAULT_PRIORITY: u8 = 3;
/// Longest fairness or concurrency key, in bytes.
pub const MAX_KEY_BYTES: usize = 64;
/// Largest fairness weight.
pub const MAX_WEIGHT: u32 = 1000;
/// Largest concurrency limit of a rule.
pub const MAX_CONCURRENCY: u32 = 1_000_000;
/// Most rules a namespace keeps.
pub const MAX_RULES: usize = 1000;
/// The key of the rule every key without a more specific one follows.
pub const ANY_KEY: &str = "*";

/// How a run is dispatched among others on its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// 1 (first) to 5 (last).
    pub priority: u8,
    /// The key its steps share fairly with other keys (empty: the one unkeyed flow).
    pub fairness_key: String,
    /// Its key's share, from 1; a namespace rule on the key overrides it.
    pub weight: u32,
    /// The key its concurrency limit counts under (empty: its fairness key).
    pub concurrency_key: String,
}

impl Default for Flow {
    fn default() -> Self {
        Self {
            priority: DEFAULT_PRIORITY,
            fairness_key: String::new(),
            weight: 1,
            concurrency_key: String::new(),
        }
    }
}

impl Flow {
    /// A flow from a request's fields, where 0 means "the default" (a priority of 3,
    /// a weight of 1); each bad field is refused by name.
    pub fn from_request(
        priority: u32,
        fairness_key: &str,
        weight: u32,
        concurrency_key: &str,
    ) -> Result<Self, Rejection> {
        let priority = match priority {
            0 => DEFAULT_PRIORITY,
            p @ HIGHEST_PRIORITY..=LOWEST_PRIORITY => p as u8,
            p => {
                return Err(Rejection::field(
                    "priority",
                    format!("is {p}; it must be from {HIGHEST_PRIORITY} (first) to {LOWEST_PRIORITY} (last)"),
                ));
            }
        };
        check_key("fairness_key", fairness_key, false)?;
        check_key("concurrency_key", concurrency_key, false)?;
        let weight = if weight == 0 {
            1
        } else {
            check_weight("fairness_weight", weight)?
        };
        Ok(Self {
            priority,
            fairness_key: fairness_key.into(),
            weight,
            concurrency_key: concurrency_key.into(),
        })
    }

    /// The key its concurrency limit counts under (empty: none, no limit applies).
    pub fn limit_key(&self) -> &str {
        if self.concurrency_key.is_empty() {
            &self.fairness_key
        } else {
            &self.concurrency_key
        }
    }
}

/// Refuses a weight outside 1 to [`MAX_WEIGHT`].
pub fn check_weight(field: &str, weight: u32) -> Result<u32, Rejection> {
    if !(1..=MAX_WEIGHT).contains(&weight) {
        return Err(Rejection::field(
            field,
            format!("is {weight}; a weight must be from 1 to {MAX_WEIGHT}"),
        ));
    }
    Ok(weight)
}

/// Refuses a key longer than [`MAX_KEY_BYTES`] or with control characters; a rule's
/// key (`rule`) may also be `*`, or end in `*` to cover every key it starts.
pub fn check_key(field: &str, key: &str, rule: bool) -> Result<(), Rejection> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Rejection::field(
            field,
            format!(
                "{} is {} bytes, more than the limit of {MAX_KEY_BYTES}",
                echo(key),
                key.len()
            ),
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(Rejection::field(
            field,
            format!("{} has a control character", echo(key)),
        ));
    }
    if rule && key.is_empty() {
        return Err(Rejection::field(field, "must not be empty (`*` is every key)"));
    }
    if key.trim_end_matches('*').contains('*') {
        return Err(Rejection::field(
            field,
            format!("{}: `*` may only end a key", echo(key)),
        ));
    }
    if !rule && key.ends_with('*') {
        return Err(Rejection::field(
            field,
            format!("{}: a run's key may not end in `*`", echo(key)),
        ));
    }
    Ok(())
}

/// Largest rate of a rule, in requests per minute.
pub const MAX_REQUESTS_PER_MINUTE: u64 = 1_000_000;
/// Largest rate of a rule, in tokens per minute.
pub const MAX_TOKENS_PER_MINUTE: u64 = 10_000_000_000;

/// A namespace's rule on a key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyRule {
    /// Most runs with the key that may have a step leased at once (`None`: no limit).
    pub concurrency: Option<u32>,
    /// The key's fairness weight, over each run's own (`None`: the run's).
    pub weight: Option<u32>,
    /// Model calls per minute the fleet may make under the key (`None`: no limit).
    pub requests_per_minute: Option<u64>,
    /// Model tokens per minute the fleet may use under the key (`None`: no limit).
    pub tokens_per_minute: Option<u64>,
}

impl KeyRule {
    /// Refuses a limit of 0 or over [`MAX_CONCURRENCY`], a bad weight, or a rule
    /// that sets nothing.
    pub fn check(&self) -> Result<(), Rejection> {
        if let Some(c) = self.concurrency
            && !(1..=MAX_CONCURRENCY).contains(&c)
        {
            return Err(Rejection::field(
                "concurrency",
                format!("is {c}; a limit must be from 1 to {MAX_CONCURRENCY}"),
            ));
        }
        if let Some(w) = self.weight {
            check_weight("weight", w)?;
        }
        for (field, rate, max) in [
            (
                "requests_per_minute",
                self.requests_per_minute,
                MAX_REQUESTS_PER_MINUTE,
            ),
            ("tokens_per_minute", self.tokens_per_minute, MAX_TOKENS_PER_MINUTE),
        ] {
            if let Some(r) = rate
                && !(1..=max).contains(&r)
            {
                return Err(Rejection::field(
                    field,
                    format!("is {r}; a rate must be from 1 to {max}"),
                ));
            }
        }
        if *self == Self::default() {
            return Err(Rejection::field(
                "concurrency",
                "a rule sets a concurrency limit, a weight or a rate",
            ));
        }
        Ok(())
    }
}

/// A namespace's rules, by key pattern: an exact key, a prefix ending in `*`, or
/// `*` for every key.
pub type KeyRules = BTreeMap<String, KeyRule>;

/// The rule a key follows: its own, else the longest prefix rule that covers it,
/// else `*`'s. An empty key (a run with no key) follows none.
pub fn rule_for<'a>(rules: &'a KeyRules, key: &str) -> Option<(&'a str, &'a KeyRule)> {
    if key.is_empty() {
        return None;
    }
    if let Some((k, r)) = rules.get_key_value(key) {
        return Some((k, r));
    }
    rules
        .iter()
        .filter(|(pattern, _)| {
            pattern
                .strip_suffix('*')
                .is_some_and(|prefix| key.starts_with(prefix))
        })
        .max_by_key(|(pattern, _)| pattern.len())
        .map(|(k, r)| (k.as_str(), r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_default_and_bad_fields_are_named() {
        let f = Flow::from_request(0, "", 0, "").unwrap();
        assert_eq!(f, Flow::default());
        assert_eq!(Flow::from_request(1, "a", 5, "").unwrap().priority, 1);
        let refused = |p, k: &str, w, c: &str| Flow::from_request(p, k, w, c).unwrap_err().to_string();
        assert!(refused(6, "", 0, "").contains("priority"));
        assert!(refused(0, &"k".repeat(10 * 1024), 0, "").contains("fairness_key"));
        assert!(refused(0, "", 1_000_000_000, "").contains("fairness_weight"));
        assert!(refused(0, "", 0, "a*").contains("concurrency_key"));
        assert!(refused(0, "a\n", 0, "").contains("fairness_key"));
    }

    #[test]
    fn the_most_specific_rule_wins() {
        let rule = |c| KeyRule {
            concurrency: Some(c),
            ..KeyRule::default()
        };
        let rules: KeyRules = [
            ("*".to_string(), rule(10)),
            ("customer:*".to_string(), rule(5)),
            ("customer:acme*".to_string(), rule(4)),
            ("customer:acme".to_string(), rule(3)),
        ]
        .into();
        let limit = |k| rule_for(&rules, k).and_then(|(_, r)| r.concurrency);
        assert_eq!(limit("customer:acme"), Some(3));
        assert_eq!(limit("customer:acme2"), Some(4));
        assert_eq!(limit("customer:zed"), Some(5));
        assert_eq!(limit("other"), Some(10));
        assert_eq!(limit(""), None);
    }

    #[test]
    fn rules_are_checked() {
        let bad = |c, w| {
            KeyRule {
                concurrency: c,
                weight: w,
                ..KeyRule::default()
            }
            .check()
            .unwrap_err()
            .to_string()
        };
        assert!(bad(Some(0), None).contains("concurrency"));
        assert!(bad(None, Some(0)).contains("weight"));
        assert!(bad(None, Some(1_000_000_000)).contains("weight"));
        assert!(bad(None, None).contains("concurrency"));
        let rate = KeyRule {
            requests_per_minute: Some(0),
            ..KeyRule::default()
        };
        assert!(
            rate.check()
                .unwrap_err()
                .to_string()
                .contains("requests_per_minute")
        );
        assert!(check_key("key", "", true).is_err());
        assert!(check_key("key", "*", true).is_ok());
        assert!(check_key("key", "a*b", true).is_err());
    }
}
