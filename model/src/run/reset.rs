//! Reset and rerun: a new run made from an old run's state.
//!
//! A **reset** starts a new run of the old run's pinned definition at step `S`, with
//! the steps before `S` carried over as they completed in the old run (notes,
//! artifacts, results, context updates and usage: one `StepCarried` event each); the
//! old run, if still open, is terminated in the same commit. A **rerun** is a new run
//! from the first step with the old run's (or edited) inputs, carrying nothing and
//! leaving the old run's course alone. Both link the runs both ways: the new run
//! records `RunResetFrom` and names the old in `reset_from`, the old records
//! `RunResetTo` and names the newest in `reset_to`.
//!
//! Carried usage is not new spending: a carried step keeps its usage in its step
//! record (marked `carried`), and the new run's own `usage`, which budgets count,
//! starts at zero. [`RunState::carried_usage`] sums what was carried.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::echo;
use crate::error::Rejection;

/// Which of the two a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetKind {
    /// Start at a step, carrying the ones before it; terminate the old run if open.
    Reset,
    /// Start from the first step; the old run is left as it is.
    Rerun,
}

impl ResetKind {
    /// `reset` or `rerun`, as events and the API name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Reset => "reset",
            Self::Rerun => "rerun",
        }
    }
}

/// What a reset or rerun asks for, as checked by the caller (sizes, names).
#[derive(Debug, Clone)]
pub struct ResetRequest {
    /// A reset or a rerun.
    pub kind: ResetKind,
    /// The step to start at (reset only; `None`: the first step that failed).
    pub to_step: Option<String>,
    /// A new goal (`None`: the old run's).
    pub goal: Option<String>,
    /// Context entries that replace or add to the old run's starting context.
    pub context: BTreeMap<String, String>,
    /// Why, recorded in both runs' history.
    pub reason: String,
}

/// A step carried over from the old run, as it completed there.
#[derive(Debug, Clone, PartialEq)]
pub struct CarriedStep {
    /// The step's id.
    pub step_id: String,
    /// The attempt that completed it.
    pub attempt: u32,
    /// What it reported it did.
    pub notes: String,
    /// What it produced.
    pub artifacts: Vec<String>,
    /// The context entries it set.
    pub context_updates: BTreeMap<String, String>,
    /// Its structured result, as compact JSON (empty: none).
    pub result: String,
    /// The model its usage is from.
    pub model: String,
    /// The tokens it used.
    pub usage: Usage,
}

/// A checked reset or rerun: everything the new run starts with.
#[derive(Debug, Clone)]
pub struct ResetPlan {
    /// A reset or a rerun.
    pub kind: ResetKind,
    /// The run it is made from.
    pub from_run_id: String,
    /// The index of the step the new run starts at.
    pub start_index: usize,
    /// The id of the step it starts at.
    pub step_id: String,
    /// Its goal.
    pub goal: String,
    /// The new run's starting context (before the carried steps' updates).
    pub context: BTreeMap<String, String>,
    /// The steps before the start, carried over as they completed.
    pub carried: Vec<CarriedStep>,
    /// Why, recorded in both runs' history.
    pub reason: String,
}

/// Plans a reset or rerun of `old`, whose history (from its `RunStarted`, in order)
/// is `history`: which step the new run starts at, what it carries and its inputs.
/// Refused with a message naming the field when the step is unknown or a step
/// before it did not complete.
pub fn plan(old: &RunState, history: &[Event], req: ResetRequest) -> Result<ResetPlan, Rejection> {
    let (start_goal, start_context) = history
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::RunStarted { goal, context, .. } => Some((goal.clone(), context.clone())),
            _ => None,
        })
        .unwrap_or_else(|| (old.goal.clone(), old.context.clone()));
    let steps = &old.definition.steps;
    let start_index = match (req.kind, &req.to_step) {
        (ResetKind::Rerun, _) => 0,
        (ResetKind::Reset, Some(id)) => steps.iter().position(|s| &s.id == id).ok_or_else(|| {
            Rejection::field(
                "to_step",
                format!(
                    "run {:?} (workflow {:?}) has no step {}; its steps: {}",
                    old.run_id,
                    old.workflow_id,
                    echo(id),
                    steps.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
        })?,
        (ResetKind::Reset, None) => default_step(old)?,
    };
    if let Some(i) = (0..start_index).find(|&i| old.steps[i].state != "COMPLETED") {
        return Err(Rejection::FailedPrecondition(format!(
            "to_step: step {:?} comes before {:?} and did not complete in run {:?} ({}); reset to it or an earlier step",
            steps[i].id, steps[start_index].id, old.run_id, old.steps[i].state
        )));
    }
    let carried = (0..start_index)
        .map(|i| {
            let rec = &old.steps[i];
            CarriedStep {
                step_id: steps[i].id.clone(),
                attempt: rec.attempt,
                notes: rec.notes.clone(),
                artifacts: rec.artifacts.clone(),
                context_updates: context_updates(history, &steps[i].id),
                result: rec.result.clone(),
                model: rec.model.clone(),
                usage: rec.usage,
            }
        })
        .collect();
    let mut context = start_context;
    context.extend(req.context);
    Ok(ResetPlan {
        kind: req.kind,
        from_run_id: old.run_id.clone(),
        start_index,
        step_id: steps[start_index].id.clone(),
        goal: req.goal.unwrap_or(start_goal),
        context,
        carried,
        reason: req.reason,
    })
}

/// The step a reset starts at when none is named: the first that failed, else the
/// step a closed run stopped at (terminated, canceled, timed out), else none.
fn default_step(old: &RunState) -> Result<usize, Rejection> {
    if let Some(i) = old.steps.iter().position(|s| s.state == "FAILED") {
        return Ok(i);
    }
    if !old.status.is_open() && old.status != RunStatus::Completed && old.current_step < old.steps.len() {
        return Ok(old.current_step);
    }
    Err(Rejection::field(
        "to_step",
        format!(
            "run {:?} ({}) has no failed step to reset to; name one",
            old.run_id,
            old.status.name()
        ),
    ))
}

/// The context updates of the step's completion (or carrying) that stands: the last
/// one recorded for it. A step that was carried into `history`'s run carries its
/// updates on.
fn context_updates(history: &[Event], step: &str) -> BTreeMap<String, String> {
    history
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EventKind::StepCompleted {
                step_id,
                context_updates,
                ..
            }
            | EventKind::StepCarried {
                step_id,
                context_updates,
                ..
            } if step_id == step => Some(context_updates.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

impl RunState {
    /// A run made by a reset or rerun: `RunStarted` (with the plan's goal and
    /// context), `RunResetFrom`, one `StepCarried` per carried step, then the start
    /// step scheduled. `p`'s goal and context are replaced by the plan's.
    pub fn start_reset(
        mut p: StartParams,
        definition: Arc<WorkflowDef>,
        plan: ResetPlan,
        out: &mut Out,
    ) -> Self {
        p.goal = plan.goal;
        p.context = plan.context;
        let identity = p.identity.clone();
        let mut run = Self::started(p, definition, out);
        run.reset_from = plan.from_run_id.clone();
        run.push(
            out,
            &identity,
            EventKind::RunResetFrom {
                from_run_id: plan.from_run_id,
                step_id: plan.step_id,
                kind: plan.kind.name().into(),
                reason: plan.reason,
            },
        );
        for (i, c) in plan.carried.into_iter().enumerate() {
            run.context.extend(c.context_updates.clone());
            let rec = &mut run.steps[i];
            rec.state = "COMPLETED".into();
            rec.attempt = c.attempt;
            rec.notes = c.notes.clone();
            rec.artifacts = c.artifacts.clone();
            rec.result = c.result.clone();
            rec.model = c.model.clone();
            rec.usage = c.usage;
            rec.carried = true;
            run.push(
                out,
                "server",
                EventKind::StepCarried {
                    step_id: c.step_id,
                    attempt: c.attempt,
                    notes: c.notes,
                    artifacts: c.artifacts,
                    context_updates: c.context_updates,
                    result: c.result,
                    model: c.model,
                    usage: c.usage,
                },
            );
        }
        run.schedule(plan.start_index, 1, out);
        run
    }

    /// Records on the old run that `to_run_id` was reset or rerun from it
    /// (`RunResetTo`), and, for a reset of an open run, terminates it with `reason`.
    /// Open or closed, the old run takes the link.
    pub fn reset_to(
        &mut self,
        identity: &str,
        to_run_id: &str,
        plan: &ResetPlan,
        out: &mut Out,
    ) -> Result<(), Refusal> {
        self.reset_to = to_run_id.to_string();
        self.push(
            out,
            identity,
            EventKind::RunResetTo {
                to_run_id: to_run_id.to_string(),
                step_id: plan.step_id.clone(),
                kind: plan.kind.name().into(),
                reason: plan.reason.clone(),
            },
        );
        if plan.kind == ResetKind::Reset && self.status.is_open() {
            let reason = if plan.reason.is_empty() {
                format!("reset to run {to_run_id:?} at step {:?}", plan.step_id)
            } else {
                plan.reason.clone()
            };
            self.terminate(identity, reason, out)?;
        }
        Ok(())
    }

    /// The usage of the steps carried over from the run this one was reset from
    /// (not counted in [`RunState::usage`], nor by any budget).
    pub fn carried_usage(&self) -> Usage {
        let mut u = Usage::default();
        for s in self.steps.iter().filter(|s| s.carried) {
            u.add(&s.usage);
        }
        u
    }
}
