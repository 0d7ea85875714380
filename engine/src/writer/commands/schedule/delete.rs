//! Delete a schedule and its timer. Runs it started go on; their close finds no
//! schedule to tell.

use super::*;

/// Delete a schedule.
#[derive(Debug)]
pub struct DeleteSchedule {
    pub ns: String,
    pub schedule_id: String,
}

impl Apply for DeleteSchedule {
    type Output = ();
    const NAME: &'static str = "delete_schedule";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let Some(s) = cx.tx.schedule(&self.ns, &self.schedule_id)? else {
            return Err(not_found(&self.ns, &self.schedule_id).into());
        };
        if let Some(key) = s.timer {
            cx.tx.remove_timer(key)?;
        }
        cx.tx.delete_schedule(&self.ns, &self.schedule_id)?;
        cx.metrics.forget_schedule(&self.ns, &self.schedule_id);
        tracing::info!(schedule_id = %s.id, open_runs = s.running.len(), "schedule deleted");
        Ok(())
    }
}
