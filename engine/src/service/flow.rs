//! Flow control at the service layer: a namespace's rules on keys
//! (`Admin.SetKeyRule`, `ListKeyRules`, `RemoveKeyRule`, an admin key of the
//! namespace). The spec is `docs/flow-control.md`.

use railyard_model::flow::{
    KeyRule, KeyRules, MAX_CONCURRENCY, MAX_REQUESTS_PER_MINUTE, MAX_TOKENS_PER_MINUTE, MAX_WEIGHT, check_key,
};
use railyard_model::token::TokenClaims;

use super::Core;
use super::caller::{self, Credentials};
use super::namespaces::admin;
use crate::error::ApiError;
use crate::matching::{Capacity, KeyLoad, MAX_RESET_MS};
use crate::writer::ChangeKeyRule;

/// A rule as a request gives it: 0 leaves a figure unset.
#[derive(Debug, Clone, Default)]
pub struct RuleRequest {
    pub key: String,
    pub concurrency: i64,
    pub weight: i64,
    pub requests_per_minute: i64,
    pub tokens_per_minute: i64,
}

fn figure(field: &str, value: i64, max: u64) -> Result<Option<u64>, ApiError> {
    match value {
        0 => Ok(None),
        v if v < 0 || v as u64 > max => Err(ApiError::field(
            field,
            format!("is {v}; it must be from 1 to {max} (0: unset)"),
        )),
        v => Ok(Some(v as u64)),
    }
}

fn small(field: &str, value: i64, max: u32) -> Result<Option<u32>, ApiError> {
    Ok(figure(field, value, max.into())?.and_then(|v| u32::try_from(v).ok()))
}

/// Sets the rule on `r.key` in namespace `ns`, replacing the key's rule if it has
/// one. Answers the namespace's rules.
pub async fn set(
    core: &Core,
    credentials: &Credentials,
    ns: &str,
    r: RuleRequest,
) -> Result<KeyRules, ApiError> {
    let ns = caller::namespace_name(ns);
    let principal = admin(core, credentials, ns)?;
    check_key("key", &r.key, true)?;
    let rule = KeyRule {
        concurrency: small("concurrency", r.concurrency, MAX_CONCURRENCY)?,
        weight: small("weight", r.weight, MAX_WEIGHT)?,
        requests_per_minute: figure(
            "requests_per_minute",
            r.requests_per_minute,
            MAX_REQUESTS_PER_MINUTE,
        )?,
        tokens_per_minute: figure("tokens_per_minute", r.tokens_per_minute, MAX_TOKENS_PER_MINUTE)?,
    };
    rule.check()?;
    let rules = core
        .writer
        .call(ChangeKeyRule {
            namespace: ns.to_string(),
            key: r.key.clone(),
            rule: Some(rule),
        })
        .await?;
    tracing::info!(namespace = %ns, key = %r.key, concurrency = ?rule.concurrency, weight = ?rule.weight, by = ?principal, "key rule set");
    Ok(rules)
}

/// Removes the rule on `key` from namespace `ns` (`NOT_FOUND` if it has none).
pub async fn remove(
    core: &Core,
    credentials: &Credentials,
    ns: &str,
    key: &str,
) -> Result<KeyRules, ApiError> {
    let ns = caller::namespace_name(ns);
    let principal = admin(core, credentials, ns)?;
    check_key("key", key, true)?;
    let rules = core
        .writer
        .call(ChangeKeyRule {
            namespace: ns.to_string(),
            key: key.to_string(),
            rule: None,
        })
        .await?;
    tracing::info!(namespace = %ns, %key, by = ?principal, "key rule removed");
    Ok(rules)
}

/// The rules of namespace `ns`.
pub fn list(core: &Core, credentials: &Credentials, ns: &str) -> Result<KeyRules, ApiError> {
    let ns = caller::namespace_name(ns);
    admin(core, credentials, ns)?;
    Ok(core.store.namespace(ns)?.map(|n| n.key_rules).unwrap_or_default())
}

/// How many runs of `key` hold a slot in `ns` now.
pub fn load(core: &Core, ns: &str, key: &str) -> KeyLoad {
    core.matching.key_load(caller::namespace_name(ns), key)
}

/// Most tokens one capacity request may name.
pub const MAX_CAPACITY_TOKENS: u64 = 10_000_000;

/// A leased step's worker asks for one model call and `tokens` under rate-limit key
/// `key` (its provider key's name, for example) of the lease's namespace: go, or
/// wait until a time. The worker holds a lease (`claims`, checked by the caller).
pub fn acquire(core: &Core, claims: &TokenClaims, key: &str, tokens: u64) -> Result<Capacity, ApiError> {
    check_key("key", key, false)?;
    if key.is_empty() {
        return Err(ApiError::field("key", "must not be empty"));
    }
    if tokens > MAX_CAPACITY_TOKENS {
        return Err(ApiError::field(
            "tokens",
            format!("is {tokens}, more than {MAX_CAPACITY_TOKENS}"),
        ));
    }
    Ok(core
        .matching
        .acquire_capacity(&claims.namespace, key, tokens, core.clock.now_ms()))
}

/// A provider refused a call under `key` until `reset_ms` (its 429 with a reset
/// time): the key waits until then for every worker of the fleet. A reset in the past
/// changes nothing; one more than a day ahead is refused.
pub fn rate_limited(core: &Core, claims: &TokenClaims, key: &str, reset_ms: i64) -> Result<(), ApiError> {
    check_key("key", key, false)?;
    if key.is_empty() {
        return Err(ApiError::field("key", "must not be empty"));
    }
    let now = core.clock.now_ms();
    if reset_ms > now + MAX_RESET_MS {
        return Err(ApiError::field("reset_time_unix_ms", "is more than a day ahead"));
    }
    if reset_ms > now {
        tracing::info!(namespace = %claims.namespace, %key, wait_ms = reset_ms - now, "rate limit reported");
        core.matching.rate_limited(&claims.namespace, key, reset_ms, now);
    }
    Ok(())
}
