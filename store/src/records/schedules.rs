//! Rows of the `schedules` table: one record per schedule, holding what it is
//! (spec, action, policies) and where it stands (cursor, open runs, buffer, recent
//! actions and misses, counters, its timer's key).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Record, StatusRecord, corrupt, decode_record, encode_record, v1};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::schedule::state::{
    Action, ActionRecord as ActionModel, Counters, MissReason, MissedRecord, Pending, Policies, Schedule,
};
use railyard_model::schedule::{Origin, Overlap, ScheduleSpec, SpecDoc};

#[derive(Debug, Serialize, Deserialize)]
struct ScheduleRecord {
    #[serde(default = "v1")]
    v: u32,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    schedule_id: String,
    spec: SpecRecord,
    action: ActionRecord,
    policies: PoliciesRecord,
    #[serde(default)]
    memo: String,
    #[serde(default)]
    paused: bool,
    #[serde(default)]
    note: String,
    #[serde(default)]
    remaining: Option<u64>,
    #[serde(default)]
    cursor_ms: Millis,
    #[serde(default)]
    running: Vec<String>,
    #[serde(default)]
    buffer: Vec<BufferedRecord>,
    #[serde(default)]
    recent_actions: Vec<RecentActionRecord>,
    #[serde(default)]
    recent_missed: Vec<MissedFireRecord>,
    #[serde(default)]
    counters: CountersRecord,
    #[serde(default)]
    create_ms: Millis,
    #[serde(default)]
    update_ms: Millis,
    #[serde(default)]
    request_ids: Vec<String>,
    /// The key of the schedule's row in `timers` (due ms, seq).
    #[serde(default)]
    timer: Option<(Millis, u64)>,
}

impl Record for ScheduleRecord {
    const WHAT: &'static str = "schedule";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// The spec as the user wrote it (its own record, so that the user-facing
/// document may change without changing what is stored).
#[derive(Debug, Serialize, Deserialize)]
struct SpecRecord {
    #[serde(default)]
    cron: Vec<String>,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    start_time: Option<String>,
    #[serde(default)]
    end_time: Option<String>,
    #[serde(default)]
    jitter_seconds: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ActionRecord {
    #[serde(default)]
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
    /// Its runs' priority (absent in older rows, and for the default: 0, meaning 3).
    #[serde(default, skip_serializing_if = "is_zero")]
    priority: u32,
    /// Its runs' fairness key (absent in older rows: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    fairness_key: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum OverlapRecord {
    #[serde(rename = "SKIP")]
    Skip,
    #[serde(rename = "BUFFER_ONE")]
    BufferOne,
    #[serde(rename = "BUFFER_ALL")]
    BufferAll,
    #[serde(rename = "CANCEL_OTHER")]
    CancelOther,
    #[serde(rename = "TERMINATE_OTHER")]
    TerminateOther,
    #[serde(rename = "ALLOW_ALL")]
    AllowAll,
}

impl From<Overlap> for OverlapRecord {
    fn from(o: Overlap) -> Self {
        match o {
            Overlap::Skip => Self::Skip,
            Overlap::BufferOne => Self::BufferOne,
            Overlap::BufferAll => Self::BufferAll,
            Overlap::CancelOther => Self::CancelOther,
            Overlap::TerminateOther => Self::TerminateOther,
            Overlap::AllowAll => Self::AllowAll,
        }
    }
}

impl From<OverlapRecord> for Overlap {
    fn from(o: OverlapRecord) -> Self {
        match o {
            OverlapRecord::Skip => Self::Skip,
            OverlapRecord::BufferOne => Self::BufferOne,
            OverlapRecord::BufferAll => Self::BufferAll,
            OverlapRecord::CancelOther => Self::CancelOther,
            OverlapRecord::TerminateOther => Self::TerminateOther,
            OverlapRecord::AllowAll => Self::AllowAll,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum OriginRecord {
    #[serde(rename = "schedule")]
    Schedule,
    #[serde(rename = "trigger")]
    Trigger,
    #[serde(rename = "backfill")]
    Backfill,
}

impl From<Origin> for OriginRecord {
    fn from(o: Origin) -> Self {
        match o {
            Origin::Schedule => Self::Schedule,
            Origin::Trigger => Self::Trigger,
            Origin::Backfill => Self::Backfill,
        }
    }
}

impl From<OriginRecord> for Origin {
    fn from(o: OriginRecord) -> Self {
        match o {
            OriginRecord::Schedule => Self::Schedule,
            OriginRecord::Trigger => Self::Trigger,
            OriginRecord::Backfill => Self::Backfill,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum ReasonRecord {
    #[serde(rename = "skipped_overlap")]
    SkippedOverlap,
    #[serde(rename = "missed_catchup_window")]
    MissedCatchupWindow,
    #[serde(rename = "buffer_overflow")]
    BufferOverflow,
    #[serde(rename = "start_failed")]
    StartFailed,
}

impl From<MissReason> for ReasonRecord {
    fn from(r: MissReason) -> Self {
        match r {
            MissReason::SkippedOverlap => Self::SkippedOverlap,
            MissReason::MissedCatchupWindow => Self::MissedCatchupWindow,
            MissReason::BufferOverflow => Self::BufferOverflow,
            MissReason::StartFailed => Self::StartFailed,
        }
    }
}

impl From<ReasonRecord> for MissReason {
    fn from(r: ReasonRecord) -> Self {
        match r {
            ReasonRecord::SkippedOverlap => Self::SkippedOverlap,
            ReasonRecord::MissedCatchupWindow => Self::MissedCatchupWindow,
            ReasonRecord::BufferOverflow => Self::BufferOverflow,
            ReasonRecord::StartFailed => Self::StartFailed,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct PoliciesRecord {
    overlap: OverlapRecord,
    #[serde(default)]
    catchup_window_ms: Millis,
    #[serde(default)]
    pause_on_failure: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct BufferedRecord {
    #[serde(default)]
    due_ms: Millis,
    #[serde(default)]
    overlap: Option<OverlapRecord>,
    origin: OriginRecord,
}

#[derive(Debug, Serialize, Deserialize)]
struct RecentActionRecord {
    #[serde(default)]
    due_ms: Millis,
    #[serde(default)]
    actual_ms: Millis,
    #[serde(default)]
    run_id: String,
    status: StatusRecord,
    origin: OriginRecord,
}

#[derive(Debug, Serialize, Deserialize)]
struct MissedFireRecord {
    #[serde(default)]
    due_ms: Millis,
    reason: ReasonRecord,
    #[serde(default)]
    recorded_ms: Millis,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CountersRecord {
    #[serde(default)]
    taken: u64,
    #[serde(default)]
    skipped_overlap: u64,
    #[serde(default)]
    missed_catchup_window: u64,
    #[serde(default)]
    buffer_overflow: u64,
    #[serde(default)]
    start_failed: u64,
}

/// Encodes a schedule's row (`schedules`, by namespace and schedule id).
pub fn encode_schedule(s: &Schedule) -> Result<Vec<u8>, StorageError> {
    let doc = s.spec.doc();
    let record = ScheduleRecord {
        v: ScheduleRecord::VERSION,
        namespace: s.namespace.clone(),
        schedule_id: s.id.clone(),
        spec: SpecRecord {
            cron: doc.cron.clone(),
            interval: doc.interval.clone(),
            time_zone: doc.time_zone.clone(),
            start_time: doc.start_time.clone(),
            end_time: doc.end_time.clone(),
            jitter_seconds: doc.jitter_seconds,
        },
        action: ActionRecord {
            workflow_id: s.action.workflow_id.clone(),
            task_queue: s.action.task_queue.clone(),
            goal: s.action.goal.clone(),
            context: s.action.context.clone(),
            attributes: s.action.attributes.clone(),
            priority: s.action.priority,
            fairness_key: s.action.fairness_key.clone(),
        },
        policies: PoliciesRecord {
            overlap: s.policies.overlap.into(),
            catchup_window_ms: s.policies.catchup_window_ms,
            pause_on_failure: s.policies.pause_on_failure,
        },
        memo: s.memo.clone(),
        paused: s.paused,
        note: s.note.clone(),
        remaining: s.remaining,
        cursor_ms: s.cursor,
        running: s.running.clone(),
        buffer: s
            .buffer
            .iter()
            .map(|p| BufferedRecord {
                due_ms: p.due,
                overlap: p.overlap.map(Into::into),
                origin: p.origin.into(),
            })
            .collect(),
        recent_actions: s
            .recent_actions
            .iter()
            .map(|a| RecentActionRecord {
                due_ms: a.due,
                actual_ms: a.actual,
                run_id: a.run_id.clone(),
                status: a.status.into(),
                origin: a.origin.into(),
            })
            .collect(),
        recent_missed: s
            .recent_missed
            .iter()
            .map(|m| MissedFireRecord {
                due_ms: m.due,
                reason: m.reason.into(),
                recorded_ms: m.recorded,
            })
            .collect(),
        counters: CountersRecord {
            taken: s.counters.taken,
            skipped_overlap: s.counters.skipped_overlap,
            missed_catchup_window: s.counters.missed_catchup_window,
            buffer_overflow: s.counters.buffer_overflow,
            start_failed: s.counters.start_failed,
        },
        create_ms: s.create_ms,
        update_ms: s.update_ms,
        request_ids: s.request_ids.iter().cloned().collect(),
        timer: s.timer,
    };
    encode_record(&record)
}

/// Decodes a schedule's row.
pub fn decode_schedule(bytes: &[u8]) -> Result<Schedule, StorageError> {
    let r: ScheduleRecord = decode_record(bytes)?;
    let doc = SpecDoc {
        cron: r.spec.cron,
        interval: r.spec.interval,
        time_zone: r.spec.time_zone,
        start_time: r.spec.start_time,
        end_time: r.spec.end_time,
        remaining_actions: None,
        jitter_seconds: r.spec.jitter_seconds,
    };
    let spec = ScheduleSpec::new(doc)
        .map_err(|e| corrupt("schedule", format!("schedule {:?}: spec: {e}", r.schedule_id)))?;
    Ok(Schedule {
        namespace: r.namespace,
        id: r.schedule_id,
        spec,
        action: Action {
            workflow_id: r.action.workflow_id,
            task_queue: r.action.task_queue,
            goal: r.action.goal,
            context: r.action.context,
            attributes: r.action.attributes,
            priority: r.action.priority,
            fairness_key: r.action.fairness_key,
        },
        policies: Policies {
            overlap: r.policies.overlap.into(),
            catchup_window_ms: r.policies.catchup_window_ms,
            pause_on_failure: r.policies.pause_on_failure,
        },
        memo: r.memo,
        paused: r.paused,
        note: r.note,
        remaining: r.remaining,
        cursor: r.cursor_ms,
        running: r.running,
        buffer: r
            .buffer
            .into_iter()
            .map(|b| Pending {
                due: b.due_ms,
                overlap: b.overlap.map(Into::into),
                origin: b.origin.into(),
            })
            .collect(),
        recent_actions: r
            .recent_actions
            .into_iter()
            .map(|a| ActionModel {
                due: a.due_ms,
                actual: a.actual_ms,
                run_id: a.run_id,
                status: a.status.into(),
                origin: a.origin.into(),
            })
            .collect(),
        recent_missed: r
            .recent_missed
            .into_iter()
            .map(|m| MissedRecord {
                due: m.due_ms,
                reason: m.reason.into(),
                recorded: m.recorded_ms,
            })
            .collect(),
        counters: Counters {
            taken: r.counters.taken,
            skipped_overlap: r.counters.skipped_overlap,
            missed_catchup_window: r.counters.missed_catchup_window,
            buffer_overflow: r.counters.buffer_overflow,
            start_failed: r.counters.start_failed,
        },
        create_ms: r.create_ms,
        update_ms: r.update_ms,
        request_ids: r.request_ids.into_iter().collect(),
        timer: r.timer,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use railyard_model::run::RunStatus;
    use railyard_model::schedule::state::{Effect, NewSchedule};

    fn schedule() -> Schedule {
        let mut out: Vec<Effect> = Vec::new();
        let mut s = Schedule::create(
            NewSchedule {
                namespace: "ns".into(),
                id: "nightly".into(),
                spec: ScheduleSpec::new(SpecDoc {
                    cron: vec!["0 9 * * MON-FRI".into()],
                    time_zone: Some("Europe/Berlin".into()),
                    end_time: Some("2027-01-01T00:00:00Z".into()),
                    jitter_seconds: Some(30),
                    ..SpecDoc::default()
                })
                .unwrap(),
                action: Action {
                    attributes: Default::default(),
                    workflow_id: "report".into(),
                    task_queue: "q".into(),
                    goal: "for {{scheduledTime}}".into(),
                    context: BTreeMap::from([("k".into(), "v".into())]),
                    priority: 2,
                    fairness_key: "tenant:a".into(),
                },
                policies: Policies {
                    overlap: Overlap::CancelOther,
                    catchup_window_ms: 60_000,
                    pause_on_failure: true,
                },
                memo: "m".into(),
                paused: true,
                note: "n".into(),
                remaining: Some(7),
            },
            1_000,
            &mut out,
        );
        s.running = vec!["nightly-a".into()];
        s.buffer = VecDeque::from([Pending {
            due: 5,
            overlap: Some(Overlap::BufferAll),
            origin: Origin::Backfill,
        }]);
        s.recent_actions.push_back(ActionModel {
            due: 1,
            actual: 2,
            run_id: "nightly-a".into(),
            status: RunStatus::Failed,
            origin: Origin::Trigger,
        });
        s.recent_missed.push_back(MissedRecord {
            due: 3,
            reason: MissReason::BufferOverflow,
            recorded: 4,
        });
        s.counters.skipped_overlap = 9;
        s.request_ids.push_back("r1".into());
        s.timer = Some((10, 11));
        s
    }

    #[test]
    fn a_schedule_round_trips() {
        let s = schedule();
        assert_eq!(decode_schedule(&encode_schedule(&s).unwrap()).unwrap(), s);
    }

    #[test]
    fn a_minimal_older_row_is_read_with_defaults_and_a_bad_spec_is_corrupt() {
        let row = br#"{"namespace":"ns","schedule_id":"s","spec":{"interval":"every 1m"},
            "action":{"workflow_id":"w"},"policies":{"overlap":"SKIP"},"someday":1}"#;
        let s = decode_schedule(row).unwrap();
        assert_eq!(s.id, "s");
        assert_eq!(s.spec.next_after(0), Some(60_000));
        assert!(s.running.is_empty() && s.timer.is_none() && s.remaining.is_none());
        let bad = br#"{"schedule_id":"s","spec":{"cron":["99 * * * *"]},
            "action":{},"policies":{"overlap":"SKIP"}}"#;
        let e = decode_schedule(bad).unwrap_err().to_string();
        assert!(
            e.contains("corrupt schedule record") && e.contains("cron[0]"),
            "{e}"
        );
        let newer = br#"{"v":2,"spec":{},"action":{},"policies":{"overlap":"SKIP"}}"#;
        assert!(decode_schedule(newer).unwrap_err().to_string().contains("newer"));
    }
}
