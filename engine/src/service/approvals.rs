//! Approvals: `ApproveStep` / `RejectStep` answer the result a `requireConfirmation`
//! step holds. Operations of the `client` role; recorded in history with the
//! caller's identity.

use super::{Caller, Core};
use crate::error::ApiError;
use crate::writer::AnswerApproval;
use railyard_model::approval::MAX_FEEDBACK_BYTES;
use railyard_model::limits::{check_len, check_name};

/// An approval or rejection as a client sends it.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub run_id: String,
    /// The step meant (empty: whichever awaits approval); a step that does not
    /// await approval is `INVALID_ARGUMENT`.
    pub step_id: String,
    /// The approval's note, or the rejection's feedback (required for a rejection).
    pub text: String,
}

/// Approves the held result: the step completes with it, as an accepted completion
/// would (the next step is scheduled, or parked while the run is paused; or the run
/// completes).
pub async fn approve(core: &Core, caller: &Caller, a: Answer) -> Result<(), ApiError> {
    answer(core, caller, a, true).await
}

/// Rejects the held result: the step re-opens on the same transcript under the same
/// attempt, and its next worker reads the feedback as a user message.
pub async fn reject(core: &Core, caller: &Caller, a: Answer) -> Result<(), ApiError> {
    if a.text.trim().is_empty() {
        return Err(ApiError::field(
            "feedback",
            "must not be empty: it is what the agent reads to revise its result",
        ));
    }
    answer(core, caller, a, false).await
}

async fn answer(core: &Core, caller: &Caller, a: Answer, approve: bool) -> Result<(), ApiError> {
    check_name("run_id", &a.run_id)?;
    if !a.step_id.is_empty() {
        check_name("step_id", &a.step_id)?;
    }
    check_len(
        if approve { "note" } else { "feedback" },
        &a.text,
        MAX_FEEDBACK_BYTES,
    )?;
    let run_id = a.run_id.clone();
    core.writer
        .call(AnswerApproval {
            ns: caller.namespace.clone(),
            run_id: a.run_id,
            step_id: a.step_id,
            identity: caller.identity.clone(),
            approve,
            text: a.text,
        })
        .await?;
    let identity = &caller.identity;
    if approve {
        tracing::info!(%run_id, %identity, "step result approved");
    } else {
        tracing::info!(%run_id, %identity, "step result rejected");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::caller::{Operation, permits};
    use railyard_model::auth::Role;

    #[test]
    fn clients_and_admins_answer_approvals_and_workers_may_not() {
        for op in [Operation::ApproveStep, Operation::RejectStep] {
            assert!(permits(Role::Client, op));
            assert!(permits(Role::Admin, op));
            assert!(
                !permits(Role::Worker, op),
                "a worker must not approve its own result"
            );
        }
    }
}
