//! Create a schedule.

use super::*;
use railyard_model::schedule::state::NewSchedule;

/// A new schedule, checked by the service layer.
#[derive(Debug)]
pub struct CreateSchedule {
    pub new: NewSchedule,
    /// Empty: none. A create repeating an earlier one's request id changes nothing.
    pub request_id: String,
}

impl Apply for CreateSchedule {
    type Output = ();
    const NAME: &'static str = "create_schedule";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let (ns, id) = (self.new.namespace.clone(), self.new.id.clone());
        if let Some(existing) = cx.tx.schedule(&ns, &id)? {
            if !self.request_id.is_empty() && existing.request_ids.contains(&self.request_id) {
                return Ok(());
            }
            return Err(Rejection::AlreadyExists(format!(
                "schedule {id:?} already exists in namespace {ns:?}"
            ))
            .into());
        }
        let mut effects = Vec::new();
        let mut s = Schedule::create(self.new, cx.now(), &mut effects);
        s.seen_request(&self.request_id);
        commit(cx, &mut s, Default::default(), effects)?;
        tracing::info!(schedule_id = %id, namespace = %ns, next_fire = ?s.next_fire(), "schedule created");
        Ok(())
    }
}
