//! Rows of the trigger tables: the trigger itself (`triggers`), the deliveries
//! remembered for deduplication (`hook_deliveries`), each concurrency key's open
//! run (`trigger_keys`), the starts waiting on a key (`trigger_queue`), and the
//! key each such run holds (`trigger_runs`). Secrets are stored only as the
//! `$ENV_NAME` that names them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Record, corrupt, decode_record, encode_record, v1};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::trace::TraceContext;
use railyard_model::trigger::{HookDelivery, KeyHolder, Mode, QueuedStart, Source, Trigger};

#[derive(Debug, Serialize, Deserialize)]
struct TriggerRecord {
    #[serde(default = "v1")]
    v: u32,
    namespace: String,
    trigger_id: String,
    workflow_id: String,
    #[serde(default)]
    task_queue: String,
    #[serde(default)]
    goal: String,
    #[serde(default)]
    context: BTreeMap<String, String>,
    /// Search attributes (absent in older rows: none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    attributes: BTreeMap<String, String>,
    #[serde(default)]
    callback_url: String,
    /// `$ENV_NAME`, never the secret.
    #[serde(default)]
    signature_secret: String,
    #[serde(default)]
    signature_header: String,
    /// `$ENV_NAME`, never the token.
    #[serde(default)]
    bearer_token: String,
    #[serde(default)]
    dedup_header: String,
    #[serde(default)]
    concurrency_key: String,
    /// `parallel`, `serial` or `replace`.
    #[serde(default)]
    mode: String,
    #[serde(default)]
    description: String,
    /// `api` or `config`.
    #[serde(default)]
    source: String,
    #[serde(default)]
    created_ms: Millis,
    #[serde(default)]
    updated_ms: Millis,
}

impl Record for TriggerRecord {
    const WHAT: &'static str = "trigger";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a trigger's row (`triggers`, by namespace and trigger id).
pub fn encode_trigger(t: &Trigger) -> Result<Vec<u8>, StorageError> {
    encode_record(&TriggerRecord {
        v: TriggerRecord::VERSION,
        namespace: t.namespace.clone(),
        trigger_id: t.id.clone(),
        workflow_id: t.workflow_id.clone(),
        task_queue: t.task_queue.clone(),
        goal: t.goal.clone(),
        context: t.context.clone(),
        attributes: t.attributes.clone(),
        callback_url: t.callback_url.clone(),
        signature_secret: t.signature_secret.clone(),
        signature_header: t.signature_header.clone(),
        bearer_token: t.bearer_token.clone(),
        dedup_header: t.dedup_header.clone(),
        concurrency_key: t.concurrency_key.clone(),
        mode: t.mode.name().to_string(),
        description: t.description.clone(),
        source: match t.source {
            Source::Api => "api",
            Source::Config => "config",
        }
        .to_string(),
        created_ms: t.created_ms,
        updated_ms: t.updated_ms,
    })
}

/// Decodes a trigger's row.
pub fn decode_trigger(bytes: &[u8]) -> Result<Trigger, StorageError> {
    let r: TriggerRecord = decode_record(bytes)?;
    let mode = match r.mode.as_str() {
        "" => Mode::Parallel,
        m => Mode::parse(m).ok_or_else(|| corrupt(TriggerRecord::WHAT, format!("unknown mode {m:?}")))?,
    };
    let source = match r.source.as_str() {
        "" | "api" => Source::Api,
        "config" => Source::Config,
        s => return Err(corrupt(TriggerRecord::WHAT, format!("unknown source {s:?}"))),
    };
    Ok(Trigger {
        namespace: r.namespace,
        id: r.trigger_id,
        workflow_id: r.workflow_id,
        task_queue: r.task_queue,
        goal: r.goal,
        context: r.context,
        attributes: r.attributes,
        callback_url: r.callback_url,
        signature_secret: r.signature_secret,
        signature_header: r.signature_header,
        bearer_token: r.bearer_token,
        dedup_header: r.dedup_header,
        concurrency_key: r.concurrency_key,
        mode,
        description: r.description,
        source,
        created_ms: r.created_ms,
        updated_ms: r.updated_ms,
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct HookDeliveryRecord {
    #[serde(default = "v1")]
    v: u32,
    run_id: String,
    #[serde(default)]
    received_ms: Millis,
}

impl Record for HookDeliveryRecord {
    const WHAT: &'static str = "hook delivery";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a remembered webhook delivery (`hook_deliveries`).
pub fn encode_hook_delivery(d: &HookDelivery) -> Result<Vec<u8>, StorageError> {
    encode_record(&HookDeliveryRecord {
        v: HookDeliveryRecord::VERSION,
        run_id: d.run_id.clone(),
        received_ms: d.received_ms,
    })
}

/// Decodes a remembered webhook delivery.
pub fn decode_hook_delivery(bytes: &[u8]) -> Result<HookDelivery, StorageError> {
    let r: HookDeliveryRecord = decode_record(bytes)?;
    Ok(HookDelivery {
        run_id: r.run_id,
        received_ms: r.received_ms,
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct QueuedStartRecord {
    #[serde(default = "v1")]
    v: u32,
    run_id: String,
    workflow_id: String,
    #[serde(default)]
    goal: String,
    #[serde(default)]
    context: BTreeMap<String, String>,
    #[serde(default)]
    task_queue: String,
    #[serde(default)]
    callback_url: String,
    #[serde(default)]
    identity: String,
    #[serde(default)]
    received_ms: Millis,
    /// Search attributes (absent in older rows: none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    attributes: BTreeMap<String, String>,
    /// The webhook request's W3C `traceparent` (absent in older rows, and when it had none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
}

impl Record for QueuedStartRecord {
    const WHAT: &'static str = "queued trigger start";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a start waiting on a concurrency key (`trigger_queue`).
pub fn encode_queued_start(q: &QueuedStart) -> Result<Vec<u8>, StorageError> {
    encode_record(&QueuedStartRecord {
        v: QueuedStartRecord::VERSION,
        run_id: q.run_id.clone(),
        workflow_id: q.workflow_id.clone(),
        goal: q.goal.clone(),
        context: q.context.clone(),
        attributes: q.attributes.clone(),
        task_queue: q.task_queue.clone(),
        callback_url: q.callback_url.clone(),
        identity: q.identity.clone(),
        received_ms: q.received_ms,
        traceparent: q.trace.and_then(|t| t.traceparent()),
    })
}

/// Decodes a start waiting on a concurrency key.
pub fn decode_queued_start(bytes: &[u8]) -> Result<QueuedStart, StorageError> {
    let r: QueuedStartRecord = decode_record(bytes)?;
    Ok(QueuedStart {
        run_id: r.run_id,
        workflow_id: r.workflow_id,
        goal: r.goal,
        context: r.context,
        task_queue: r.task_queue,
        callback_url: r.callback_url,
        identity: r.identity,
        received_ms: r.received_ms,
        attributes: r.attributes,
        trace: r
            .traceparent
            .map(|tp| TraceContext::parse(&tp))
            .transpose()
            .map_err(|e| super::corrupt(QueuedStartRecord::WHAT, e))?,
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct KeyHolderRecord {
    #[serde(default = "v1")]
    v: u32,
    trigger_id: String,
    key: String,
}

impl Record for KeyHolderRecord {
    const WHAT: &'static str = "trigger key holder";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes the concurrency key a run holds (`trigger_runs`).
pub fn encode_key_holder(h: &KeyHolder) -> Result<Vec<u8>, StorageError> {
    encode_record(&KeyHolderRecord {
        v: KeyHolderRecord::VERSION,
        trigger_id: h.trigger_id.clone(),
        key: h.key.clone(),
    })
}

/// Decodes the concurrency key a run holds.
pub fn decode_key_holder(bytes: &[u8]) -> Result<KeyHolder, StorageError> {
    let r: KeyHolderRecord = decode_record(bytes)?;
    Ok(KeyHolder {
        trigger_id: r.trigger_id,
        key: r.key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_round_trips_and_keeps_only_the_secret_reference() {
        let t = Trigger {
            namespace: "default".into(),
            id: "pr".into(),
            workflow_id: "demo".into(),
            goal: "review {{$.pull_request.title}}".into(),
            context: [("repo".to_string(), "{{$.repository.full_name}}".to_string())].into(),
            signature_secret: "$GH_SECRET".into(),
            concurrency_key: "{{$.number}}".into(),
            mode: Mode::Serial,
            source: Source::Config,
            created_ms: 5,
            updated_ms: 6,
            ..Trigger::default()
        };
        let bytes = encode_trigger(&t).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains("\"$GH_SECRET\""));
        assert_eq!(decode_trigger(&bytes).unwrap(), t);
        // An old row without the optional fields reads with defaults.
        let old = br#"{"v":1,"namespace":"n","trigger_id":"t","workflow_id":"w"}"#;
        let t = decode_trigger(old).unwrap();
        assert_eq!((t.mode, t.source), (Mode::Parallel, Source::Api));
        assert!(decode_trigger(br#"{"v":2,"namespace":"n","trigger_id":"t","workflow_id":"w"}"#).is_err());
    }

    #[test]
    fn queued_starts_and_deliveries_round_trip() {
        let q = QueuedStart {
            run_id: "r".into(),
            workflow_id: "w".into(),
            goal: "g".into(),
            received_ms: 9,
            ..QueuedStart::default()
        };
        assert_eq!(decode_queued_start(&encode_queued_start(&q).unwrap()).unwrap(), q);
        let traced = QueuedStart {
            trace: Some(
                TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap(),
            ),
            ..q
        };
        assert_eq!(
            decode_queued_start(&encode_queued_start(&traced).unwrap()).unwrap(),
            traced
        );
        let d = HookDelivery {
            run_id: "r".into(),
            received_ms: 3,
        };
        assert_eq!(
            decode_hook_delivery(&encode_hook_delivery(&d).unwrap()).unwrap(),
            d
        );
        let h = KeyHolder {
            trigger_id: "t".into(),
            key: "k".into(),
        };
        assert_eq!(decode_key_holder(&encode_key_holder(&h).unwrap()).unwrap(), h);
    }
}
