//! A schedule's timer came: take its due times. Called by `FireTimers` for each
//! due `ScheduleFire` row, so the due schedules of one moment (10,000 at a minute
//! boundary) fire in a few large transactions, each fire with its runs.

use super::*;
use railyard_store::backend::TimerKey;

/// Fires schedule `schedule_id`, whose timer row `key` came due (and is already
/// removed). A row the schedule no longer keeps (replaced, or the schedule gone) is
/// stale and does nothing.
pub(crate) fn fire(cx: &mut Cx, key: TimerKey, ns: &str, schedule_id: &str) -> Result<(), StorageError> {
    let Some(mut s) = cx.tx.schedule(ns, schedule_id)? else {
        return Ok(());
    };
    if s.timer != Some(key) {
        tracing::debug!(schedule_id, "stale schedule timer");
        return Ok(());
    }
    s.timer = None;
    let before = s.counters;
    let mut effects = Vec::new();
    s.due(cx.now(), &mut effects);
    commit(cx, &mut s, before, effects)
}
