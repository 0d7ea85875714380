//! `Tasks.ReportIssue`: an agent reports a problem it found without ending its step
//! (the worker's `report_issue` tool, and the MCP gateway's).

use railyard_model::run::IssueReport;
use railyard_model::token::TokenClaims;

use super::Core;
use super::caller::Caller;
use crate::error::ApiError;
use crate::writer::{IssueRecorded, ReportIssue};

/// Checks the report's fields (naming them) and records it under the lease `claims`
/// names. Answers whether it was recorded (at most 10 per attempt).
pub async fn report_issue(
    core: &Core,
    caller: &Caller,
    claims: TokenClaims,
    severity: &str,
    summary: String,
    details: String,
) -> Result<IssueRecorded, ApiError> {
    let report = IssueReport::check(severity, summary, details)?;
    let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
    let severity = report.severity.name();
    let answer = core
        .writer
        .call(ReportIssue {
            claims,
            identity: caller.identity.clone(),
            report,
        })
        .await?;
    tracing::info!(%run_id, %step, attempt, severity, recorded = answer.recorded, "issue reported");
    Ok(answer)
}
