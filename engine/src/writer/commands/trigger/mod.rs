//! Trigger commands (one file each: create, update, delete, the sync of the
//! configuration's triggers, a webhook delivery, the purge of old delivery ids)
//! and the hook a run's close takes ([`run_closed`]): a run holding a serial
//! key hands it to the next waiting start in the transaction that closes it.

use super::*;
use railyard_model::trigger::{KeyHolder, QueuedStart, Source, Trigger};

mod create;
mod delete;
mod deliver;
mod poll;
mod purge;
mod sync;
mod update;

pub use self::create::*;
pub use self::delete::*;
pub use self::deliver::*;
pub use self::poll::*;
pub use self::purge::*;
pub use self::sync::*;
pub use self::update::*;

/// Most starts waiting on one concurrency key; past it a delivery is refused
/// (`RESOURCE_EXHAUSTED`, answered `429`).
pub const MAX_QUEUED_PER_KEY: usize = 1000;
/// Waiting starts skipped (they could not start) in one close before the rest
/// wait for the next.
const MAX_SKIPPED: usize = 64;

/// The refusal for a trigger that does not exist.
pub(crate) fn not_found(ns: &str, id: &str) -> Rejection {
    Rejection::NotFound(format!("trigger {id:?} not found in namespace {ns:?}"))
}

/// The refusal to change a trigger the configuration defines.
fn read_only(t: &Trigger) -> Rejection {
    Rejection::FailedPrecondition(format!(
        "trigger {:?} is defined in the server's configuration; change it there (the API cannot)",
        t.id
    ))
}

/// The poll state a saved trigger starts with: `old`'s when it polls the same
/// source (its cursor and counters go on), else a fresh one whose `new` items are
/// those created from now on, polled at once.
fn poll_state_of(
    t: &Trigger,
    old: Option<&Trigger>,
    now: Millis,
) -> railyard_model::trigger::poll::PollState {
    match old {
        Some(o) if t.poll.is_some() && o.poll == t.poll => o.poll_state.clone(),
        _ if t.poll.is_some() => railyard_model::trigger::poll::PollState {
            baseline_ms: now,
            ..Default::default()
        },
        _ => Default::default(),
    }
}

/// Makes `run_id` the holder of its key.
fn hold(cx: &mut Cx, ns: &str, trigger: &str, key: &str, run_id: &str) -> Result<(), StorageError> {
    cx.tx.set_trigger_key(ns, trigger, key, Some(run_id))?;
    let holder = KeyHolder {
        trigger_id: trigger.to_string(),
        key: key.to_string(),
    };
    cx.tx.set_key_holder(&RunKey::new(ns, run_id), Some(&holder))
}

/// A waiting start as a start command (`None`: its workflow is no longer loaded or
/// registered).
fn start_of(cx: &Cx, ns: &str, q: QueuedStart) -> Result<Option<StartCommand>, StorageError> {
    let Some(definition) = cx.definition(ns, &q.workflow_id)? else {
        return Ok(None);
    };
    Ok(Some(StartCommand {
        params: StartParams {
            namespace: ns.to_string(),
            run_id: q.run_id,
            goal: q.goal,
            context: q.context,
            callback_url: q.callback_url,
            task_queue: q.task_queue,
            identity: q.identity,
            trace: q.trace,
            attributes: q.attributes,
            ..StartParams::default()
        },
        definition,
    }))
}

/// A run has closed: if it held a concurrency key, the key's next waiting start
/// starts now, in this transaction (or the key is free when none waits).
pub(crate) fn run_closed(cx: &mut Cx, c: &ClosedRun) -> Result<(), StorageError> {
    let Some(h) = cx.tx.key_holder(&RunKey::new(&c.ns, &c.run_id))? else {
        return Ok(());
    };
    cx.tx.set_key_holder(&RunKey::new(&c.ns, &c.run_id), None)?;
    let (ns, trigger, key) = (c.ns.as_str(), h.trigger_id.as_str(), h.key.as_str());
    if cx.tx.trigger_key(ns, trigger, key)?.as_deref() != Some(c.run_id.as_str()) {
        return Ok(());
    }
    for _ in 0..MAX_SKIPPED {
        let Some((seq, q)) = cx.tx.queued_starts(ns, trigger, key, 1)?.into_iter().next() else {
            break;
        };
        cx.tx.remove_queued_start(ns, trigger, key, seq)?;
        let run_id = q.run_id.clone();
        let Some(start) = start_of(cx, ns, q)? else {
            tracing::warn!(trigger_id = trigger, %run_id, "queued start dropped: its workflow is neither loaded nor registered");
            continue;
        };
        match start.check(cx).refused()? {
            Ok(None) => {
                start.create(cx)?;
                hold(cx, ns, trigger, key, &run_id)?;
                tracing::info!(trigger_id = trigger, %run_id, after = %c.run_id, "queued delivery started");
                return Ok(());
            }
            Ok(Some(_)) => {}
            Err(e) => {
                tracing::warn!(trigger_id = trigger, %run_id, error = %e, "queued start refused; dropped")
            }
        }
    }
    cx.tx.set_trigger_key(ns, trigger, key, None)
}
