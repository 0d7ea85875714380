//! Replace a schedule's spec, action and policies; its state stays.

use super::*;
use railyard_model::schedule::state::ScheduleUpdate;

/// The new definition of a schedule, checked by the service layer.
#[derive(Debug)]
pub struct UpdateSchedule {
    pub ns: String,
    pub schedule_id: String,
    pub update: ScheduleUpdate,
}

impl Apply for UpdateSchedule {
    type Output = ();
    const NAME: &'static str = "update_schedule";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let Some(mut s) = cx.tx.schedule(&self.ns, &self.schedule_id)? else {
            return Err(not_found(&self.ns, &self.schedule_id).into());
        };
        let before = s.counters;
        let mut effects = Vec::new();
        s.update(self.update, cx.now(), &mut effects);
        commit(cx, &mut s, before, effects)?;
        tracing::info!(schedule_id = %s.id, next_fire = ?s.next_fire(), "schedule updated");
        Ok(())
    }
}
