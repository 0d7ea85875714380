//! Rows of the `namespaces` table. The first layouts stored `{}` for `default`; it
//! reads as a namespace with no description, created at 0.

use serde::{Deserialize, Serialize};

use super::{Record, decode_record, encode_record, v1};
use crate::clock::Millis;
use crate::error::StorageError;
use crate::namespace::Namespace;

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
    /// Notification subscriptions (absent in older rows: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    subscriptions: Vec<super::deliveries::SubscriptionRecord>,
}

impl Record for NamespaceRecord {
    const WHAT: &'static str = "namespace";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

pub(crate) fn encode_namespace(ns: &Namespace) -> Result<Vec<u8>, StorageError> {
    encode_record(&NamespaceRecord {
        v: NamespaceRecord::VERSION,
        description: ns.description.clone(),
        created_ms: ns.created_ms,
        updated_ms: ns.updated_ms,
        subscriptions: ns
            .subscriptions
            .iter()
            .map(super::deliveries::SubscriptionRecord::from_model)
            .collect(),
    })
}

pub(crate) fn decode_namespace(name: &str, bytes: &[u8]) -> Result<Namespace, StorageError> {
    let r: NamespaceRecord = decode_record(bytes)?;
    Ok(Namespace {
        name: name.to_string(),
        description: r.description,
        created_ms: r.created_ms,
        updated_ms: r.updated_ms,
        subscriptions: r
            .subscriptions
            .into_iter()
            .map(super::deliveries::SubscriptionRecord::into_model)
            .collect(),
    })
}
