//! A run's search attributes changing (`crate::attributes`): at its start, with a
//! step's completion, or mid-step under the step's lease. Each change that changes
//! something is one `SearchAttributesChanged` event; mid-step ones are bounded per
//! attempt, like reported issues, so that a model cannot grow a history without
//! bound.

use super::{EventKind, Out, RunState};
use crate::attributes::{self, AttributeValue};
use crate::error::Rejection;
use crate::token::TokenClaims;

/// Most mid-step attribute changes recorded per step attempt.
pub const MAX_UPDATES_PER_ATTEMPT: u32 = 20;

impl RunState {
    /// Sets (or, for `None`, unsets) attributes already read by the namespace's
    /// declarations; records one event when anything changed, naming `step_id`
    /// (empty: none). Answers how many attributes changed; a refused set (the run
    /// would hold too many) changes nothing.
    pub fn set_attributes(
        &mut self,
        set: Vec<(String, Option<AttributeValue>)>,
        step_id: &str,
        identity: &str,
        out: &mut Out,
    ) -> Result<usize, Rejection> {
        if set.is_empty() {
            return Ok(0);
        }
        let changes = attributes::apply(&mut self.attributes, set, "attributes")?;
        let n = changes.len();
        if n > 0 {
            self.push(
                out,
                identity,
                EventKind::SearchAttributesChanged {
                    step_id: step_id.to_string(),
                    changes,
                },
            );
        }
        Ok(n)
    }

    /// [`Self::set_attributes`] by the step attempt `claims` names, mid-step
    /// (`Tasks.UpsertSearchAttributes`): refused unless its lease is current, and
    /// past [`MAX_UPDATES_PER_ATTEMPT`] changes of this attempt.
    pub fn upsert_attributes(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        set: Vec<(String, Option<AttributeValue>)>,
        out: &mut Out,
    ) -> Result<usize, Rejection> {
        self.check_lease(claims)?;
        let step_id = self.step_id();
        let rec = &self.steps[self.current_step];
        if rec.attempt_attribute_updates >= MAX_UPDATES_PER_ATTEMPT {
            return Err(Rejection::ResourceExhausted(format!(
                "step {step_id} changed its run's search attributes {MAX_UPDATES_PER_ATTEMPT} times in this attempt, the limit; set them with complete_step"
            )));
        }
        let n = self.set_attributes(set, &step_id, identity, out)?;
        if n > 0 {
            self.steps[self.current_step].attempt_attribute_updates += 1;
        }
        Ok(n)
    }
}
