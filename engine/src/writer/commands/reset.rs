//! Reset or rerun a run: a new run from an old one's state and the old run's link
//! (and, for a reset of an open run, its termination), in one commit.

use super::*;
use railyard_model::run::reset;
use railyard_model::run::{ResetKind, ResetRequest};

/// A reset or rerun of `from_run_id` as the run `start` names (its namespace, id,
/// request id, identity; the rest is taken from the old run).
#[derive(Debug)]
pub struct ResetRun {
    pub from_run_id: String,
    pub request: ResetRequest,
    pub start: StartParams,
}

/// The answer to a [`ResetRun`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetDone {
    pub run_id: String,
    /// False when the request id matched an earlier start: nothing was done.
    pub started: bool,
    /// The step the new run starts at (empty when `started` is false).
    pub step_id: String,
    /// Steps carried over.
    pub carried: usize,
    /// Whether the old run was open and is now terminated.
    pub terminated: bool,
}

impl Apply for ResetRun {
    type Output = ResetDone;
    const NAME: &'static str = "reset";

    fn apply(self, cx: &mut Cx) -> Result<ResetDone, CommandError> {
        let Self {
            from_run_id,
            request,
            mut start,
        } = self;
        let ns = start.namespace.clone();
        // A repeat of an applied request answers its run before anything else: the
        // old run has moved on since (terminated, linked), and need not allow it again.
        if !start.request_id.is_empty()
            && let Some(run_id) = cx.tx.idempotency(&ns, &format!("start:{}", start.request_id))?
        {
            return Ok(ResetDone {
                run_id,
                started: false,
                step_id: String::new(),
                carried: 0,
                terminated: false,
            });
        }
        let old_key = RunKey::new(&ns, &from_run_id);
        let Some(mut old) = cx.load(&old_key)? else {
            return Err(super::super::cx::not_found(&old_key).into());
        };
        // A reset of a run already reset into a run that is still open answers that
        // run: concurrent resets (each with its own request id) make one live run.
        if request.kind == ResetKind::Reset && !old.reset_to.is_empty() {
            let live = cx.load(&RunKey::new(&ns, &old.reset_to))?;
            if let Some(live) = live.filter(|r| r.status.is_open()) {
                return Ok(ResetDone {
                    run_id: live.run_id,
                    started: false,
                    step_id: String::new(),
                    carried: 0,
                    terminated: false,
                });
            }
        }
        let history = cx.tx.history(&old_key, 1, old.last_event_id as usize)?;
        let plan = reset::plan(&old, &history, request)?;
        // Checked as the new run will hold it, carried updates included;
        // `start_reset` records the plan's own goal and starting context.
        start.goal = plan.goal.clone();
        start.context = plan.context.clone();
        for c in &plan.carried {
            start.context.extend(c.context_updates.clone());
        }
        // The old run's search attributes, as Temporal's reset keeps them: each one
        // the namespace still declares with the same type (a removed or retyped
        // declaration could not be set, so it is left behind).
        let declared = cx.tx.namespace(&ns)?.map(|n| n.attributes).unwrap_or_default();
        for (name, v) in &old.attributes {
            if declared.get(name) == Some(&v.value_type()) {
                start.attributes.entry(name.clone()).or_insert_with(|| v.text());
            }
        }
        start.callback_url = old.callback_url.clone();
        start.task_queue = old.task_queue.clone();
        start.budget = old.budget;
        start.flow = old.flow.clone();
        let identity = start.identity.clone();
        let new_id = start.run_id.clone();
        let closing = plan.kind == ResetKind::Reset && old.status.is_open();
        let cmd = StartCommand {
            params: start,
            definition: old.definition.clone(),
        };
        // Every check first: the old run is changed only if the new one starts.
        if let Some(earlier) = cmd.check_freeing(cx, u64::from(closing))? {
            return Ok(ResetDone {
                run_id: earlier.run_id,
                started: false,
                step_id: String::new(),
                carried: 0,
                terminated: false,
            });
        }
        let was_open = old.status.is_open();
        let before = Attempt::of(&old);
        let mut out = Out::new(cx.now(), cx.seq());
        if let Err(e) = old.reset_to(&identity, &new_id, &plan, &mut out) {
            return Err(Rejection::from(e).into());
        }
        let terminated = was_open && !old.status.is_open();
        let t = Transition::new(old, was_open, out).after(before);
        cx.save(t)?;
        let (step_id, carried) = (plan.step_id.clone(), plan.carried.len());
        let started = cmd.create_with(cx, move |p, d, out| RunState::start_reset(p, d, plan, out))?;
        Ok(ResetDone {
            run_id: started.run_id,
            started: true,
            step_id,
            carried,
            terminated,
        })
    }
}
