//! Schedule commands (one file each: create, update, delete, patch, and the fire
//! the timer loop asks for) and what they share: applying a schedule's effects in
//! the open transaction, keeping its one timer row, and telling a schedule that a
//! run it started has closed ([`run_closed`]).
//!
//! Why a fire is exactly-once: the fire's run, the schedule's new cursor and its
//! next timer row are written in one transaction. Before the commit nothing of it
//! exists (a crash re-fires the same due times from the old cursor); after it, the
//! cursor is past them. A run id is the schedule id and the due time, so even a
//! due time taken twice (a backfill over a fired time) finds its run and counts it
//! as taken.

use std::collections::VecDeque;

use super::*;
use railyard_model::schedule::state::{Effect as Do, StartFire};
use railyard_model::schedule::{Fire, Schedule};

mod create;
mod delete;
mod fire;
mod patch;
mod update;

pub use self::create::*;
pub use self::delete::*;

pub use self::patch::*;
pub use self::update::*;
// The fire the timer loop asks for, by this name (`delivery` has a `fire` too).
pub(crate) use fire::fire;

/// The identity a schedule's events carry.
fn identity(s: &Schedule) -> String {
    format!("schedule:{}", s.id)
}

/// The refusal for a schedule that does not exist.
pub(crate) fn not_found(ns: &str, id: &str) -> Rejection {
    Rejection::NotFound(format!("schedule {id:?} not found in namespace {ns:?}"))
}

/// Applies a schedule's effects (and those they lead to) in the open transaction,
/// then writes the schedule and counts what it did in the metrics.
pub(crate) fn commit(
    cx: &mut Cx,
    s: &mut Schedule,
    before: railyard_model::schedule::state::Counters,
    effects: Vec<Do>,
) -> Result<(), StorageError> {
    let mut queue: VecDeque<Do> = effects.into();
    while let Some(effect) = queue.pop_front() {
        match effect {
            Do::Start(f) => queue.extend(start(cx, s, f)?),
            Do::RequestCancel { run_id } => {
                let reason = format!("schedule {}: CANCEL_OTHER, a newer fire is due", s.id);
                let who = identity(s);
                // A run that closed meanwhile refuses; that is fine.
                let _ = cx
                    .with_run(&RunKey::new(&s.namespace, &run_id), |run, out| {
                        Ok(run.cancel(&who, reason, out)?)
                    })
                    .refused()?;
            }
            Do::TerminateAndStart { terminate, start: f } => {
                let who = identity(s);
                for run_id in terminate {
                    let reason = format!("schedule {}: TERMINATE_OTHER, {} is due", s.id, f.run_id);
                    let _ = cx
                        .with_run(&RunKey::new(&s.namespace, &run_id), |run, out| {
                            Ok(run.terminate(&who, reason, out)?)
                        })
                        .refused()?;
                }
                queue.extend(start(cx, s, f)?);
            }
            Do::ArmTimer(at) => arm(cx, s, at)?,
        }
    }
    cx.tx.save_schedule(s)?;
    cx.metrics
        .record_schedule(&s.namespace, &s.id, &before, &s.counters);
    Ok(())
}

/// Starts a fire's run; answers the effects that follow (when the start is
/// refused, or its run exists and is closed).
fn start(cx: &mut Cx, s: &mut Schedule, f: StartFire) -> Result<Vec<Do>, StorageError> {
    let mut more = Vec::new();
    let now = cx.now();
    if let Some(existing) = cx.load(&RunKey::new(&s.namespace, &f.run_id))? {
        // Started before (a backfill over a fired time, a trigger in the same
        // millisecond): the fire is taken, never doubled.
        tracing::info!(schedule_id = %s.id, run_id = %f.run_id, "fire's run exists already; counted as taken");
        if !existing.status.is_open() {
            s.run_closed(&f.run_id, existing.status, &existing.failure, now, &mut more);
        }
        return Ok(more);
    }
    let Some(definition) = cx.definition(&s.namespace, &s.action.workflow_id)? else {
        tracing::warn!(
            schedule_id = %s.id, workflow = %s.action.workflow_id,
            "fire not started: the workflow is neither loaded nor registered"
        );
        s.start_failed(&f.run_id, f.due, now, &mut more);
        return Ok(more);
    };
    let fire = match Fire::new(&s.id, f.due) {
        Ok(fire) => fire,
        Err(e) => {
            tracing::error!(schedule_id = %s.id, error = %e, "fire not started");
            s.start_failed(&f.run_id, f.due, now, &mut more);
            return Ok(more);
        }
    };
    let params = StartParams {
        namespace: s.namespace.clone(),
        run_id: f.run_id.clone(),
        goal: fire.render(&s.action.goal),
        context: s
            .action
            .context
            .iter()
            .map(|(k, v)| (k.clone(), fire.render(v)))
            .collect(),
        task_queue: s.action.task_queue.clone(),
        schedule_id: s.id.clone(),
        identity: identity(s),
        attributes: s.action.attributes.clone(),
        // Checked when the schedule was written; a row that fails now starts with the defaults.
        flow: railyard_model::flow::Flow::from_request(s.action.priority, &s.action.fairness_key, 0, "")
            .unwrap_or_default(),
        ..StartParams::default()
    };
    // The namespace's start limits hold for fires as for any start.
    let limited = match cx.tx.namespace(&s.namespace)? {
        Some(ns) => cx.limits.check(&ns, now).err(),
        None => Some(Rejection::NotFound(format!(
            "namespace {:?} does not exist",
            s.namespace
        ))),
    };
    if let Some(e) = limited {
        tracing::warn!(schedule_id = %s.id, run_id = %f.run_id, error = %e, "fire not started");
        s.start_failed(&f.run_id, f.due, now, &mut more);
        return Ok(more);
    }
    StartCommand { params, definition }.create(cx)?;
    tracing::info!(
        schedule_id = %s.id, run_id = %f.run_id, due = f.due, origin = f.origin.name(),
        "schedule started a run"
    );
    Ok(more)
}

/// Keeps the schedule's one timer row at `at` (none when `None`).
fn arm(cx: &mut Cx, s: &mut Schedule, at: Option<Millis>) -> Result<(), StorageError> {
    if let Some(key) = s.timer {
        if Some(key.0) == at {
            return Ok(());
        }
        cx.tx.remove_timer(key)?;
        s.timer = None;
    }
    if let Some(at) = at {
        *cx.next_seq += 1;
        let key = (at, *cx.next_seq);
        cx.tx.insert_timer(
            key,
            &Timer::ScheduleFire {
                namespace: s.namespace.clone(),
                schedule_id: s.id.clone(),
            },
        )?;
        s.timer = Some(key);
        cx.after.push(After::WakeTimers);
    }
    Ok(())
}

/// Tells a schedule that a run it started has closed, in the same transaction.
/// What a schedule does then (a buffered start) cannot close another run at once.
pub(crate) fn run_closed(cx: &mut Cx, c: &ClosedRun) -> Result<(), StorageError> {
    let Some(mut s) = cx.tx.schedule(&c.ns, &c.schedule_id)? else {
        return Ok(()); // deleted: its runs go on alone
    };
    let before = s.counters;
    let was_paused = s.paused;
    let mut effects = Vec::new();
    s.run_closed(&c.run_id, c.status, &c.failure, cx.now(), &mut effects);
    if s.paused && !was_paused {
        tracing::warn!(schedule_id = %s.id, run_id = %c.run_id, note = %s.note, "schedule paused on failure");
    }
    commit(cx, &mut s, before, effects)
}
