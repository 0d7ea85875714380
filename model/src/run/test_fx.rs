//! The fixture the waiting-step and approval tests share: a two-step run driven
//! transition by transition, with its own event numbering and clock.

use super::*;
use crate::workflow::parse_definition;

/// A run `run_id` of two steps, `a` and `b`; `a_options` is spliced into step a's
/// JSON object (e.g. `,"wait":{...}`).
pub(super) fn two_steps(a_options: &str) -> Arc<WorkflowDef> {
    Arc::new(
        parse_definition(&format!(
            r#"{{"id":"wf","version":"1","name":"W","steps":[
              {{"id":"a","title":"A","prompt":"p"{a_options}}},
              {{"id":"b","title":"B","prompt":"p"}}]}}"#
        ))
        .unwrap(),
    )
}

/// A run under test, the next event number and the clock.
pub(super) struct Fx {
    pub run: RunState,
    pub seq: u64,
    pub now: Millis,
}

impl Fx {
    /// Starts run `run_id` in namespace `default` of [`two_steps`]`(a_options)` at 1,000 ms.
    pub fn new(run_id: &str, a_options: &str) -> Self {
        let mut seq = 0;
        let mut out = Out::new(1_000, &mut seq);
        let params = StartParams {
            namespace: "default".into(),
            run_id: run_id.into(),
            ..Default::default()
        };
        let run = RunState::start(params, two_steps(a_options), &mut out);
        Self { run, seq, now: 1_000 }
    }

    /// Runs one transition at `now`; its answer, events and effects.
    pub fn step<T>(&mut self, f: impl FnOnce(&mut RunState, &mut Out) -> T) -> (T, Vec<Event>, Vec<Effect>) {
        let mut out = Out::new(self.now, &mut self.seq);
        let r = f(&mut self.run, &mut out);
        (r, out.events, out.effects)
    }

    /// Leases the scheduled step to `w1`; the claims of its token.
    pub fn lease(&mut self) -> TokenClaims {
        let Phase::Scheduled { task_seq, .. } = self.run.phase else {
            panic!("not scheduled: {:?}", self.run.phase);
        };
        let (lease, _, _) = self.step(|r, o| r.lease(task_seq, "w1", o));
        TokenClaims {
            namespace: "default".into(),
            run_id: self.run.run_id.clone(),
            step: self.run.step_id(),
            attempt: self.run.attempt(),
            lease: lease.unwrap().seq,
            kid: "k".into(),
        }
    }
}

/// The type names of `events`, in order.
pub(super) fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}
