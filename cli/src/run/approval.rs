//! `railyard run approve` / `run reject`: answer the result a `requireConfirmation`
//! step holds, and how a held proposal is shown by `run describe`.

use clap::Args;
use railyard_proto::v1::{ApproveStepRequest, RejectStepRequest, WaitInfo};
use serde_json::json;

use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output::{self, truncate};

/// Flags of `run approve`.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The run whose held result to approve.
    pub run_id: String,
    /// The step awaiting approval (default: whichever does).
    #[arg(long, value_name = "STEP")]
    pub step: Option<String>,
    /// A note recorded with the approval.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
}

/// Flags of `run reject`.
#[derive(Debug, Args)]
pub(crate) struct RejectArgs {
    /// The run whose held result to reject.
    pub run_id: String,
    /// The step awaiting approval (default: whichever does).
    #[arg(long, value_name = "STEP")]
    pub step: Option<String>,
    /// What the agent reads to revise its result (the step re-opens on its transcript).
    #[arg(long, value_name = "TEXT")]
    pub feedback: String,
}

/// `railyard run approve`.
pub(crate) async fn approve(global: &GlobalOpts, a: ApproveArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    client
        .approve_step(ApproveStepRequest {
            namespace: global.namespace.clone(),
            run_id: a.run_id.clone(),
            step_id: a.step.clone().unwrap_or_default(),
            note: a.note.unwrap_or_default(),
            identity: cli_identity(),
        })
        .await?;
    if global.output.is_json() {
        output::json(&json!({ "run_id": a.run_id, "step_id": a.step, "approved": true }))?;
    } else {
        output::line(format!(
            "approved the held result of run {}; the run moves on",
            a.run_id
        ))?;
    }
    Ok(())
}

/// `railyard run reject`.
pub(crate) async fn reject(global: &GlobalOpts, a: RejectArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    client
        .reject_step(RejectStepRequest {
            namespace: global.namespace.clone(),
            run_id: a.run_id.clone(),
            step_id: a.step.clone().unwrap_or_default(),
            feedback: a.feedback,
            identity: cli_identity(),
        })
        .await?;
    if global.output.is_json() {
        output::json(&json!({ "run_id": a.run_id, "step_id": a.step, "rejected": true }))?;
    } else {
        output::line(format!(
            "rejected the held result of run {}; its step re-opens with your feedback",
            a.run_id
        ))?;
    }
    Ok(())
}

/// The proposal a wait for approval holds, as `run describe` lines (none for other waits).
pub(crate) fn proposal_lines(w: &WaitInfo) -> Vec<(&'static str, String)> {
    if w.on != "approval" {
        return Vec::new();
    }
    let mut lines = vec![
        ("proposed by", w.proposed_by.clone()),
        ("proposed notes", truncate(&w.proposed_notes, 400)),
        ("proposed files", w.proposed_artifacts.join(", ")),
    ];
    if !w.proposed_result_json.is_empty() {
        lines.push(("proposed result", truncate(&w.proposed_result_json, 400)));
    }
    lines.push((
        "answer with",
        "railyard run approve RUN [--note TEXT] | railyard run reject RUN --feedback TEXT".into(),
    ));
    lines
}
