//! Batch commands (one file each: create, advance, stop) and what they share. A
//! batch's header and items are its own tables; each item's action is applied with
//! the run's own command (stop, signal, reset) in the transaction that records the
//! item's outcome, so an item is acted on at most once whatever crashes: before the
//! commit neither exists, after it both do. The spec is `docs/batches.md`.

use super::*;
use railyard_model::batch::{Batch, BatchAction, BatchItem, Outcome};
use railyard_model::run::{ResetKind, ResetRequest};

mod advance;
mod create;
mod purge;
mod stop;

pub use self::advance::*;
pub use self::create::*;
pub use self::purge::*;
pub use self::stop::*;

/// The refusal for a batch that does not exist.
pub(crate) fn not_found(ns: &str, id: &str) -> Rejection {
    Rejection::NotFound(format!("batch {id:?} not found in namespace {ns:?}"))
}

/// Applies the batch's action to one run and names what became of it: the action's
/// events and a `BatchApplied` naming the batch, or nothing when skipped or refused.
/// `new_run_id` names the run a reset or rerun starts.
fn act(cx: &mut Cx, b: &Batch, index: u64, run_id: &str, new_run_id: &str) -> Result<Outcome, StorageError> {
    let ns = &b.namespace;
    let Some(run) = cx.load(&RunKey::new(ns, run_id))? else {
        return Ok(Outcome::Skipped {
            reason: "the run no longer exists (purged by retention)".into(),
        });
    };
    if b.action.needs_open() && !run.status.is_open() {
        return Ok(Outcome::Skipped {
            reason: format!(
                "the run was already {} when the batch reached it",
                run.status.name()
            ),
        });
    }
    let identity = b.identity.clone();
    let answer = match &b.action {
        BatchAction::Cancel | BatchAction::Terminate => StopRun {
            how: if b.action == BatchAction::Cancel {
                Stop::Cancel
            } else {
                Stop::Terminate
            },
            ns: ns.clone(),
            run_id: run_id.to_string(),
            identity: identity.clone(),
            reason: reason(b),
        }
        .apply(cx)
        .refused()?
        .map(|()| String::new()),
        BatchAction::Signal { name, payload_json } => Signal {
            ns: ns.clone(),
            run_id: run_id.to_string(),
            identity: identity.clone(),
            name: name.clone(),
            payload: payload_json.clone(),
            request_id: format!("batch:{}", b.batch_id),
        }
        .apply(cx)
        .refused()?
        .map(|()| String::new()),
        BatchAction::Reset { .. } | BatchAction::Rerun => {
            let (kind, to_step) = match &b.action {
                BatchAction::Reset { to_step } => (ResetKind::Reset, to_step.clone()),
                _ => (ResetKind::Rerun, None),
            };
            ResetRun {
                from_run_id: run_id.to_string(),
                request: ResetRequest {
                    kind,
                    to_step,
                    goal: None,
                    context: Default::default(),
                    reason: reason(b),
                },
                start: StartParams {
                    namespace: ns.clone(),
                    run_id: new_run_id.to_string(),
                    request_id: format!("batch:{}:{index}", b.batch_id),
                    identity: identity.clone(),
                    ..Default::default()
                },
            }
            .apply(cx)
            .refused()?
            .map(|done| done.run_id)
        }
    };
    let new_run_id = match answer {
        Ok(id) => id,
        Err(e) => {
            return Ok(Outcome::Failed {
                reason: e.to_string(),
            });
        }
    };
    let (batch_id, action) = (b.batch_id.as_str(), b.action.name());
    let noted = cx
        .with_run(&RunKey::new(ns, run_id), |run, out| {
            run.note_batch(&identity, batch_id, action, out);
            Ok(())
        })
        .refused()?;
    if let Err(e) = noted {
        // The run was just loaded in this transaction: not reached.
        tracing::error!(batch_id, run_id, error = %e, "cannot record the batch on the run");
    }
    Ok(Outcome::Done { new_run_id })
}

/// The reason the action records: the batch's, or one naming the batch.
fn reason(b: &Batch) -> String {
    if b.reason.is_empty() {
        format!("batch {}", b.batch_id)
    } else {
        b.reason.clone()
    }
}

/// Reads item `index` of a batch.
fn item(cx: &Cx, b: &Batch, index: u64) -> Result<Option<BatchItem>, StorageError> {
    Ok(cx
        .tx
        .batch_items(&b.namespace, &b.batch_id, index, 1)?
        .into_iter()
        .find(|(i, _)| *i == index)
        .map(|(_, item)| item))
}
