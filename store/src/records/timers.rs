//! Rows of the `timers` table.

use serde::{Deserialize, Serialize};

use super::{Record, decode_record, encode_record, v1};
use crate::error::StorageError;
use railyard_model::run::Timer;

#[derive(Debug, Serialize, Deserialize)]
struct TimerRecord {
    #[serde(default = "v1")]
    v: u32,
    timer: TimerKindRecord,
}

impl Record for TimerRecord {
    const WHAT: &'static str = "timer";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum TimerKindRecord {
    /// A retry backoff ended: schedule the next attempt.
    #[serde(rename = "backoff")]
    Backoff {
        #[serde(default)]
        namespace: String,
        #[serde(default)]
        run_id: String,
        #[serde(default)]
        step_index: usize,
        #[serde(default)]
        attempt: u32,
    },
    /// A schedule's next fire time came.
    #[serde(rename = "schedule_fire")]
    ScheduleFire {
        #[serde(default)]
        namespace: String,
        #[serde(default)]
        schedule_id: String,
    },
    /// A waiting step's wait timed out.
    #[serde(rename = "wait_timeout")]
    WaitTimeout {
        #[serde(default)]
        namespace: String,
        #[serde(default)]
        run_id: String,
        #[serde(default)]
        wait_id: u64,
    },
    /// An attempt of a run's result delivery (see `model::delivery`).
    #[serde(rename = "delivery")]
    Delivery {
        #[serde(default)]
        namespace: String,
        #[serde(default)]
        run_id: String,
        #[serde(default)]
        target: String,
        #[serde(default)]
        attempt: u32,
    },
}

/// Encodes a durable timer's row (`timers`, by due time and sequence number).
pub fn encode_timer(timer: &Timer) -> Result<Vec<u8>, StorageError> {
    let timer = match timer {
        Timer::Backoff {
            namespace,
            run_id,
            step_index,
            attempt,
        } => TimerKindRecord::Backoff {
            namespace: namespace.clone(),
            run_id: run_id.clone(),
            step_index: *step_index,
            attempt: *attempt,
        },
        Timer::ScheduleFire {
            namespace,
            schedule_id,
        } => TimerKindRecord::ScheduleFire {
            namespace: namespace.clone(),
            schedule_id: schedule_id.clone(),
        },
        Timer::WaitTimeout {
            namespace,
            run_id,
            wait_id,
        } => TimerKindRecord::WaitTimeout {
            namespace: namespace.clone(),
            run_id: run_id.clone(),
            wait_id: *wait_id,
        },

        Timer::Delivery {
            namespace,
            run_id,
            target,
            attempt,
        } => TimerKindRecord::Delivery {
            namespace: namespace.clone(),
            run_id: run_id.clone(),
            target: target.clone(),
            attempt: *attempt,
        },
    };
    encode_record(&TimerRecord {
        v: TimerRecord::VERSION,
        timer,
    })
}

/// Decodes a durable timer's row.
pub fn decode_timer(bytes: &[u8]) -> Result<Timer, StorageError> {
    let r: TimerRecord = decode_record(bytes)?;
    Ok(match r.timer {
        TimerKindRecord::Backoff {
            namespace,
            run_id,
            step_index,
            attempt,
        } => Timer::Backoff {
            namespace,
            run_id,
            step_index,
            attempt,
        },
        TimerKindRecord::ScheduleFire {
            namespace,
            schedule_id,
        } => Timer::ScheduleFire {
            namespace,
            schedule_id,
        },
        TimerKindRecord::WaitTimeout {
            namespace,
            run_id,
            wait_id,
        } => Timer::WaitTimeout {
            namespace,
            run_id,
            wait_id,
        },

        TimerKindRecord::Delivery {
            namespace,
            run_id,
            target,
            attempt,
        } => Timer::Delivery {
            namespace,
            run_id,
            target,
            attempt,
        },
    })
}
