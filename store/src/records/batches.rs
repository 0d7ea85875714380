//! Rows of the batch tables: `batches` (a batch's header, by namespace and batch id)
//! and `batch_items` (one matched run and its outcome, by batch and index).

use serde::{Deserialize, Serialize};

use super::{Record, corrupt, decode_record, encode_record, v1};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::batch::{Batch, BatchAction, BatchItem, BatchState, Outcome};

#[derive(Debug, Serialize, Deserialize)]
struct BatchRecord {
    #[serde(default = "v1")]
    v: u32,
    namespace: String,
    batch_id: String,
    /// `cancel`, `terminate`, `reset`, `rerun`, `signal`.
    action: String,
    #[serde(default)]
    to_step: Option<String>,
    #[serde(default)]
    signal_name: String,
    #[serde(default)]
    signal_payload_json: String,
    #[serde(default)]
    query: String,
    #[serde(default)]
    reason: String,
    rate: u32,
    #[serde(default)]
    identity: String,
    #[serde(default)]
    created_ms: Millis,
    #[serde(default)]
    closed_ms: Option<Millis>,
    /// `running`, `completed`, `stopped`.
    state: String,
    #[serde(default)]
    stopped_by: String,
    #[serde(default)]
    stop_reason: String,
    total: u64,
    #[serde(default)]
    next: u64,
    #[serde(default)]
    succeeded: u64,
    #[serde(default)]
    skipped: u64,
    #[serde(default)]
    failed: u64,
}

impl Record for BatchRecord {
    const WHAT: &'static str = "batch";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a batch's header row.
pub fn encode_batch(b: &Batch) -> Result<Vec<u8>, StorageError> {
    let (to_step, signal_name, signal_payload_json) = match &b.action {
        BatchAction::Reset { to_step } => (to_step.clone(), String::new(), String::new()),
        BatchAction::Signal { name, payload_json } => (None, name.clone(), payload_json.clone()),
        _ => (None, String::new(), String::new()),
    };
    encode_record(&BatchRecord {
        v: BatchRecord::VERSION,
        namespace: b.namespace.clone(),
        batch_id: b.batch_id.clone(),
        action: b.action.name().to_string(),
        to_step,
        signal_name,
        signal_payload_json,
        query: b.query.clone(),
        reason: b.reason.clone(),
        rate: b.rate,
        identity: b.identity.clone(),
        created_ms: b.created_ms,
        closed_ms: b.closed_ms,
        state: b.state.name().to_string(),
        stopped_by: b.stopped_by.clone(),
        stop_reason: b.stop_reason.clone(),
        total: b.total,
        next: b.next,
        succeeded: b.succeeded,
        skipped: b.skipped,
        failed: b.failed,
    })
}

/// Decodes a batch's header row.
pub fn decode_batch(bytes: &[u8]) -> Result<Batch, StorageError> {
    let r: BatchRecord = decode_record(bytes)?;
    let what = BatchRecord::WHAT;
    let action = match r.action.as_str() {
        "cancel" => BatchAction::Cancel,
        "terminate" => BatchAction::Terminate,
        "reset" => BatchAction::Reset { to_step: r.to_step },
        "rerun" => BatchAction::Rerun,
        "signal" => BatchAction::Signal {
            name: r.signal_name,
            payload_json: r.signal_payload_json,
        },
        other => return Err(corrupt(what, format!("unknown action {other:?}"))),
    };
    let state = match r.state.as_str() {
        "running" => BatchState::Running,
        "completed" => BatchState::Completed,
        "stopped" => BatchState::Stopped,
        other => return Err(corrupt(what, format!("unknown state {other:?}"))),
    };
    Ok(Batch {
        namespace: r.namespace,
        batch_id: r.batch_id,
        action,
        query: r.query,
        reason: r.reason,
        rate: r.rate,
        identity: r.identity,
        created_ms: r.created_ms,
        closed_ms: r.closed_ms,
        state,
        stopped_by: r.stopped_by,
        stop_reason: r.stop_reason,
        total: r.total,
        next: r.next,
        succeeded: r.succeeded,
        skipped: r.skipped,
        failed: r.failed,
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct BatchItemRecord {
    #[serde(default = "v1")]
    v: u32,
    run_id: String,
    /// Empty until reached; then `done`, `skipped`, `failed`.
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    new_run_id: String,
    #[serde(default)]
    at_ms: Option<Millis>,
}

impl Record for BatchItemRecord {
    const WHAT: &'static str = "batch item";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes one run of a batch.
pub fn encode_batch_item(item: &BatchItem) -> Result<Vec<u8>, StorageError> {
    let (outcome, reason, new_run_id) = match &item.outcome {
        None => (String::new(), String::new(), String::new()),
        Some(Outcome::Done { new_run_id }) => ("done".into(), String::new(), new_run_id.clone()),
        Some(o @ (Outcome::Skipped { reason } | Outcome::Failed { reason })) => {
            (o.name().to_string(), reason.clone(), String::new())
        }
    };
    encode_record(&BatchItemRecord {
        v: BatchItemRecord::VERSION,
        run_id: item.run_id.clone(),
        outcome,
        reason,
        new_run_id,
        at_ms: item.at_ms,
    })
}

/// Decodes one run of a batch.
pub fn decode_batch_item(bytes: &[u8]) -> Result<BatchItem, StorageError> {
    let r: BatchItemRecord = decode_record(bytes)?;
    let outcome = match r.outcome.as_str() {
        "" => None,
        "done" => Some(Outcome::Done {
            new_run_id: r.new_run_id,
        }),
        "skipped" => Some(Outcome::Skipped { reason: r.reason }),
        "failed" => Some(Outcome::Failed { reason: r.reason }),
        other => {
            return Err(corrupt(
                BatchItemRecord::WHAT,
                format!("unknown outcome {other:?}"),
            ));
        }
    };
    Ok(BatchItem {
        run_id: r.run_id,
        outcome,
        at_ms: r.at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_and_its_items_round_trip_and_their_rows_are_pinned() {
        let b = Batch {
            namespace: "default".into(),
            batch_id: "b1".into(),
            action: BatchAction::Signal {
                name: "go".into(),
                payload_json: r#"{"a":1}"#.into(),
            },
            query: r#"Status = "RUNNING""#.into(),
            reason: "why".into(),
            rate: 5,
            identity: "me".into(),
            created_ms: 10,
            closed_ms: None,
            state: BatchState::Running,
            stopped_by: String::new(),
            stop_reason: String::new(),
            total: 3,
            next: 1,
            succeeded: 1,
            skipped: 0,
            failed: 0,
        };
        let row = encode_batch(&b).unwrap();
        assert_eq!(
            String::from_utf8(row.clone()).unwrap(),
            r#"{"v":1,"namespace":"default","batch_id":"b1","action":"signal","to_step":null,"signal_name":"go","signal_payload_json":"{\"a\":1}","query":"Status = \"RUNNING\"","reason":"why","rate":5,"identity":"me","created_ms":10,"closed_ms":null,"state":"running","stopped_by":"","stop_reason":"","total":3,"next":1,"succeeded":1,"skipped":0,"failed":0}"#
        );
        assert_eq!(decode_batch(&row).unwrap(), b);
        for item in [
            BatchItem {
                run_id: "r1".into(),
                outcome: None,
                at_ms: None,
            },
            BatchItem {
                run_id: "r2".into(),
                outcome: Some(Outcome::Done {
                    new_run_id: "n".into(),
                }),
                at_ms: Some(4),
            },
            BatchItem {
                run_id: "r3".into(),
                outcome: Some(Outcome::Failed { reason: "no".into() }),
                at_ms: Some(5),
            },
        ] {
            assert_eq!(
                decode_batch_item(&encode_batch_item(&item).unwrap()).unwrap(),
                item
            );
        }
        let newer = br#"{"v":2,"namespace":"d","batch_id":"b","action":"cancel","rate":1,"state":"running","total":1}"#;
        assert!(decode_batch(newer).is_err(), "a newer layout is refused");
    }
}
