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
use railyard_model::trigger::poll::{Events, PollSource, PollState, SourceKind};
use railyard_model::trigger::{HookDelivery, KeyHolder, Mode, QueuedStart, RecentDelivery, Source, Trigger};

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
    /// The latest accepted deliveries, oldest first (absent in older rows: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    recent: Vec<RecentDeliveryRecord>,
    /// A polled source (v2; absent: a webhook trigger, written as v1 so that an
    /// older server still reads it, and refuses a polled one rather than take it
    /// for a webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    poll: Option<PollRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    poll_state: Option<PollStateRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RecentDeliveryRecord {
    received_ms: Millis,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    delivery_id: String,
    run_id: String,
    outcome: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct PollRecord {
    /// `github-issues`, `github-pulls` or `gitlab-merge-requests`.
    kind: String,
    repo: String,
    #[serde(default)]
    base_url: String,
    /// `$ENV_NAME`, never the token.
    #[serde(default)]
    token: String,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    author: String,
    /// `new`, `labeled`, `updated`.
    #[serde(default)]
    events: Vec<String>,
    every_ms: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct PollStateRecord {
    since: String,
    etag: String,
    etag_url: String,
    baseline_ms: Millis,
    last_poll_ms: Millis,
    next_poll_ms: Millis,
    last_error: String,
    last_error_ms: Millis,
    errors: u32,
    polls: u64,
    items_seen: u64,
    runs_started: u64,
}

impl Record for TriggerRecord {
    const WHAT: &'static str = "trigger";
    const VERSION: u32 = 2;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a trigger's row (`triggers`, by namespace and trigger id).
pub fn encode_trigger(t: &Trigger) -> Result<Vec<u8>, StorageError> {
    let st = &t.poll_state;
    encode_record(&TriggerRecord {
        v: if t.poll.is_some() {
            TriggerRecord::VERSION
        } else {
            1
        },
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
        recent: t
            .recent
            .iter()
            .map(|d| RecentDeliveryRecord {
                received_ms: d.received_ms,
                delivery_id: d.delivery_id.clone(),
                run_id: d.run_id.clone(),
                outcome: d.outcome.clone(),
            })
            .collect(),
        poll: t.poll.as_ref().map(|p| PollRecord {
            kind: p.kind.name().to_string(),
            repo: p.repo.clone(),
            base_url: p.base_url.clone(),
            token: p.token.clone(),
            labels: p.labels.clone(),
            state: p.state.clone(),
            author: p.author.clone(),
            events: p.events.names(),
            every_ms: p.every_ms,
        }),
        poll_state: t.poll.as_ref().map(|_| PollStateRecord {
            since: st.since.clone(),
            etag: st.etag.clone(),
            etag_url: st.etag_url.clone(),
            baseline_ms: st.baseline_ms,
            last_poll_ms: st.last_poll_ms,
            next_poll_ms: st.next_poll_ms,
            last_error: st.last_error.clone(),
            last_error_ms: st.last_error_ms,
            errors: st.errors,
            polls: st.polls,
            items_seen: st.items_seen,
            runs_started: st.runs_started,
        }),
    })
}

fn decode_poll(p: PollRecord) -> Result<PollSource, StorageError> {
    let bad = |what: String| corrupt(TriggerRecord::WHAT, what);
    Ok(PollSource {
        kind: SourceKind::parse(&p.kind).ok_or_else(|| bad(format!("unknown poll kind {:?}", p.kind)))?,
        repo: p.repo,
        base_url: p.base_url,
        token: p.token,
        labels: p.labels,
        state: p.state,
        author: p.author,
        events: Events::parse(&p.events).map_err(bad)?,
        every_ms: p.every_ms,
    })
}

fn decode_poll_state(s: PollStateRecord) -> PollState {
    PollState {
        since: s.since,
        etag: s.etag,
        etag_url: s.etag_url,
        baseline_ms: s.baseline_ms,
        last_poll_ms: s.last_poll_ms,
        next_poll_ms: s.next_poll_ms,
        last_error: s.last_error,
        last_error_ms: s.last_error_ms,
        errors: s.errors,
        polls: s.polls,
        items_seen: s.items_seen,
        runs_started: s.runs_started,
    }
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
        poll: r.poll.map(decode_poll).transpose()?,
        poll_state: r.poll_state.map(decode_poll_state).unwrap_or_default(),
        created_ms: r.created_ms,
        updated_ms: r.updated_ms,
        recent: r
            .recent
            .into_iter()
            .map(|d| RecentDelivery {
                received_ms: d.received_ms,
                delivery_id: d.delivery_id,
                run_id: d.run_id,
                outcome: d.outcome,
            })
            .collect(),
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
            recent: vec![RecentDelivery {
                received_ms: 7,
                delivery_id: "d1".into(),
                run_id: "r1".into(),
                outcome: "started".into(),
            }],
            ..Trigger::default()
        };
        let bytes = encode_trigger(&t).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains("\"$GH_SECRET\""));
        assert!(String::from_utf8_lossy(&bytes).contains(
            r#""recent":[{"received_ms":7,"delivery_id":"d1","run_id":"r1","outcome":"started"}]"#
        ));
        assert_eq!(decode_trigger(&bytes).unwrap(), t);
        // An old row without the optional fields reads with defaults.
        let old = br#"{"v":1,"namespace":"n","trigger_id":"t","workflow_id":"w"}"#;
        let t = decode_trigger(old).unwrap();
        assert_eq!((t.mode, t.source), (Mode::Parallel, Source::Api));
        assert!(decode_trigger(br#"{"v":3,"namespace":"n","trigger_id":"t","workflow_id":"w"}"#).is_err());
    }

    #[test]
    fn a_polled_trigger_round_trips_as_v2_and_a_webhook_one_stays_v1() {
        let webhook = Trigger {
            namespace: "n".into(),
            id: "t".into(),
            workflow_id: "w".into(),
            ..Trigger::default()
        };
        let bytes = encode_trigger(&webhook).unwrap();
        assert!(String::from_utf8_lossy(&bytes).starts_with("{\"v\":1,"));
        let polled = Trigger {
            poll: Some(PollSource {
                kind: SourceKind::GitlabMergeRequests,
                repo: "g/p".into(),
                token: "$GL_TOKEN".into(),
                labels: vec!["agent".into()],
                events: Events::parse(&["labeled".into(), "updated".into()]).unwrap(),
                every_ms: 5_000,
                ..PollSource::default()
            }),
            poll_state: PollState {
                since: "2026-01-01T00:00:00Z".into(),
                etag: "\"abc\"".into(),
                errors: 2,
                runs_started: 4,
                ..PollState::default()
            },
            ..webhook
        };
        let bytes = encode_trigger(&polled).unwrap();
        assert!(String::from_utf8_lossy(&bytes).starts_with("{\"v\":2,"));
        assert_eq!(decode_trigger(&bytes).unwrap(), polled);
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
