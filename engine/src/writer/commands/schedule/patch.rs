//! Pause, unpause, trigger now, backfill: applied in that order (trigger and
//! backfill first, then pause or unpause), all or nothing.

use super::*;
use railyard_model::schedule::Overlap;

/// What to do to a schedule, checked by the service layer.
#[derive(Debug, Default)]
pub struct PatchSchedule {
    pub ns: String,
    pub schedule_id: String,
    pub pause: bool,
    pub unpause: bool,
    pub note: String,
    /// Trigger now, under this policy (`None` inside: the schedule's).
    pub trigger: Option<Option<Overlap>>,
    /// Inclusive (start, end) ranges and their policy (`None`: BUFFER_ALL).
    pub backfill: Vec<(Millis, Millis, Option<Overlap>)>,
    /// Empty: none. A patch repeating a recent request id changes nothing.
    pub request_id: String,
}

/// The answer to a patch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patched {
    /// The run a trigger started at once.
    pub triggered_run_id: Option<String>,
    /// Fire times a backfill took.
    pub backfilled: usize,
}

impl Apply for PatchSchedule {
    type Output = Patched;
    const NAME: &'static str = "patch_schedule";

    fn apply(self, cx: &mut Cx) -> Result<Patched, CommandError> {
        let Some(mut s) = cx.tx.schedule(&self.ns, &self.schedule_id)? else {
            return Err(not_found(&self.ns, &self.schedule_id).into());
        };
        if s.request_ids.contains(&self.request_id) && !self.request_id.is_empty() {
            return Ok(Patched::default());
        }
        let now = cx.now();
        let before = s.counters;
        let mut effects = Vec::new();
        let mut patched = Patched::default();
        // The inputs work on the loaded copy: a refusal drops it unwritten.
        if let Some(overlap) = self.trigger {
            match s.trigger(overlap, now, &mut effects) {
                Ok(run_id) => patched.triggered_run_id = run_id,
                Err(e) => return Err(Rejection::FailedPrecondition(format!("trigger: {e}")).into()),
            }
        }
        if !self.backfill.is_empty() {
            match s.backfill(&self.backfill, now, &mut effects) {
                Ok(n) => patched.backfilled = n,
                Err(e) => return Err(Rejection::InvalidArgument(e.to_string()).into()),
            }
        }
        if self.pause {
            s.pause(&self.note, now, &mut effects);
        } else if self.unpause {
            s.unpause(&self.note, now, &mut effects);
        }
        s.seen_request(&self.request_id);
        commit(cx, &mut s, before, effects)?;
        tracing::info!(
            schedule_id = %s.id, pause = self.pause, unpause = self.unpause,
            triggered = ?patched.triggered_run_id, backfilled = patched.backfilled,
            "schedule patched"
        );
        Ok(patched)
    }
}
