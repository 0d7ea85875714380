//! Reset and rerun: a new run from an old run's state ([`railyard_model::run::reset`]),
//! for a client of the run's namespace.

use std::collections::BTreeMap;

use super::{Caller, Core, runs};
use crate::error::ApiError;
pub use crate::writer::ResetDone;
use crate::writer::ResetRun;
use railyard_model::limits::{self, check_context, check_len, check_name};
use railyard_model::run::{ResetKind, ResetRequest, StartParams};

/// A reset (`to_step`, the old run terminated if open) or a rerun (from the first
/// step, the old run left as it is) of `run_id`.
#[derive(Debug, Clone)]
pub struct Reset {
    pub kind: ResetKind,
    pub run_id: String,
    /// The step to start at (reset only; empty: the first step that failed).
    pub to_step: String,
    pub reason: String,
    /// Empty: the old run's goal.
    pub goal: String,
    /// Entries replacing or adding to the old run's starting context.
    pub context: BTreeMap<String, String>,
    /// The new run's id (empty: the server makes one, a UUIDv7).
    pub new_run_id: String,
    /// Empty: none. A request repeating an earlier one's request id does nothing
    /// and answers that run's id.
    pub request_id: String,
}

/// Resets or reruns a run; answers the new run.
pub async fn reset(core: &Core, caller: &Caller, r: Reset) -> Result<ResetDone, ApiError> {
    check_name("run_id", &r.run_id)?;
    if r.kind == ResetKind::Rerun && !r.to_step.is_empty() {
        return Err(ApiError::field(
            "to_step",
            "a rerun starts from the first step; reset to start at another",
        ));
    }
    if !r.to_step.is_empty() {
        check_name("to_step", &r.to_step)?;
    }
    check_len("reason", &r.reason, limits::MESSAGE)?;
    check_len("goal", &r.goal, limits::GOAL)?;
    check_context("context", &r.context)?;
    check_len("request_id", &r.request_id, limits::REQUEST_ID)?;
    limits::check_storable("request_id", &r.request_id)?;
    let new_run_id = if r.new_run_id.is_empty() {
        uuid::Uuid::now_v7().to_string()
    } else {
        check_name("new_run_id", &r.new_run_id)?;
        r.new_run_id
    };
    // Not found (in the caller's namespace) and a key's queues, before the writer.
    runs::describe(core, caller, &r.run_id)?;
    let cmd = ResetRun {
        from_run_id: r.run_id.clone(),
        request: ResetRequest {
            kind: r.kind,
            to_step: (!r.to_step.is_empty()).then_some(r.to_step),
            goal: (!r.goal.is_empty()).then_some(r.goal),
            context: r.context,
            reason: r.reason,
        },
        start: StartParams {
            namespace: caller.namespace.clone(),
            run_id: new_run_id,
            request_id: r.request_id,
            identity: caller.identity.clone(),
            ..Default::default()
        },
    };
    let done = core.writer.call(cmd).await?;
    tracing::info!(
        from_run_id = %r.run_id,
        run_id = %done.run_id,
        kind = r.kind.name(),
        step_id = %done.step_id,
        carried = done.carried,
        terminated = done.terminated,
        started = done.started,
        "run reset"
    );
    Ok(done)
}
