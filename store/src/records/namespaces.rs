//! Rows of the `namespaces` table. The first layouts stored `{}` for `default`; it
//! reads as a namespace with no description, created at 0. Rows written before
//! retention and limits read with their defaults (`railyard_model::namespace`).

use serde::{Deserialize, Serialize};

use super::{Record, decode_record, encode_record, v1};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::flow::KeyRule;
use railyard_model::namespace::{Namespace, NamespaceLimits};
use railyard_model::principles::{Layer, Mode};

#[derive(Debug, Serialize, Deserialize)]
struct NamespaceRecord {
    #[serde(default = "v1")]
    v: u32,
    #[serde(default)]
    description: String,
    #[serde(default)]
    created_ms: Millis,
    #[serde(default)]
    updated_ms: Millis,
    /// Absent in rows from before retention: the default.
    #[serde(default)]
    retention_ms: Option<Millis>,
    #[serde(default)]
    max_open_runs: Option<u64>,
    #[serde(default)]
    max_starts_per_second: Option<u64>,
    #[serde(default)]
    max_pending_signals: Option<u64>,
    /// Notification subscriptions (absent in older rows: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    subscriptions: Vec<super::deliveries::SubscriptionRecord>,
    /// Its principles (absent in older rows, and when it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principles: Option<PrinciplesRecord>,
    /// Declared search attributes, name → type (absent in older rows: none).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    attributes: std::collections::BTreeMap<String, String>,
    /// Flow-control rules by key pattern (absent in older rows: none).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    key_rules: std::collections::BTreeMap<String, KeyRuleRecord>,
}

/// A rule on a key: a concurrency limit, a fairness weight, or both.
#[derive(Debug, Serialize, Deserialize)]
struct KeyRuleRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weight: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requests_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tokens_per_minute: Option<u64>,
}

/// A namespace's principles: text and `extend` or `replace`.
#[derive(Debug, Serialize, Deserialize)]
struct PrinciplesRecord {
    #[serde(default)]
    text: String,
    #[serde(default)]
    mode: String,
}

impl Record for NamespaceRecord {
    const WHAT: &'static str = "namespace";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a namespace's row (`namespaces`, by name).
pub fn encode_namespace(ns: &Namespace) -> Result<Vec<u8>, StorageError> {
    encode_record(&NamespaceRecord {
        v: NamespaceRecord::VERSION,
        description: ns.description.clone(),
        created_ms: ns.created_ms,
        updated_ms: ns.updated_ms,
        retention_ms: Some(ns.retention_ms),
        max_open_runs: Some(ns.limits.max_open_runs),
        max_starts_per_second: Some(ns.limits.max_starts_per_second),
        max_pending_signals: Some(ns.limits.max_pending_signals),
        subscriptions: ns
            .subscriptions
            .iter()
            .map(super::deliveries::SubscriptionRecord::from_model)
            .collect(),
        principles: ns.principles.as_ref().map(|p| PrinciplesRecord {
            text: p.text.clone(),
            mode: p.mode.name().into(),
        }),
        attributes: super::attributes::declarations_to_record(&ns.attributes),
        key_rules: ns
            .key_rules
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    KeyRuleRecord {
                        concurrency: r.concurrency,
                        weight: r.weight,
                        requests_per_minute: r.requests_per_minute,
                        tokens_per_minute: r.tokens_per_minute,
                    },
                )
            })
            .collect(),
    })
}

/// Decodes the row of namespace `name` (the name is the key, not in the row).
pub fn decode_namespace(name: &str, bytes: &[u8]) -> Result<Namespace, StorageError> {
    let r: NamespaceRecord = decode_record(bytes)?;
    let defaults = Namespace::default();
    let limits = NamespaceLimits::default();
    Ok(Namespace {
        name: name.to_string(),
        description: r.description,
        created_ms: r.created_ms,
        updated_ms: r.updated_ms,
        retention_ms: r.retention_ms.unwrap_or(defaults.retention_ms),
        limits: NamespaceLimits {
            max_open_runs: r.max_open_runs.unwrap_or(limits.max_open_runs),
            max_starts_per_second: r.max_starts_per_second.unwrap_or(limits.max_starts_per_second),
            max_pending_signals: r.max_pending_signals.unwrap_or(limits.max_pending_signals),
        },
        subscriptions: r
            .subscriptions
            .into_iter()
            .map(super::deliveries::SubscriptionRecord::into_model)
            .collect(),
        principles: r.principles.map(|p| Layer {
            text: p.text,
            mode: if p.mode == "replace" {
                Mode::Replace
            } else {
                Mode::Extend
            },
        }),
        attributes: super::attributes::declarations_from_record(r.attributes)?,
        key_rules: r
            .key_rules
            .into_iter()
            .map(|(k, r)| {
                (
                    k,
                    KeyRule {
                        concurrency: r.concurrency,
                        weight: r.weight,
                        requests_per_minute: r.requests_per_minute,
                        tokens_per_minute: r.tokens_per_minute,
                    },
                )
            })
            .collect(),
    })
}
