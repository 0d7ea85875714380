//! `report_issue`: the agent reports a problem it found (severity, summary, details)
//! and its step goes on. The report goes to the server at once (`Tasks.ReportIssue`,
//! recorded in history as `IssueReported`), not with the next heartbeat, so the tool's
//! answer says whether it was recorded.

use serde_json::Value;

use crate::tools::ToolOutput;

/// An issue as the model gave it, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IssueCall {
    pub severity: String,
    pub summary: String,
    pub details: String,
}

/// The severities the tool takes (the server checks them too).
pub(crate) const SEVERITIES: [&str; 4] = ["info", "warning", "error", "critical"];

/// Reads the tool's input: `severity` (default `warning`), `summary`, optional
/// `details`. Errors are for the model to read.
pub(crate) fn parse(input: &Value) -> Result<IssueCall, String> {
    let field = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_string);
    let severity = field("severity").unwrap_or_else(|| "warning".to_string());
    if !SEVERITIES.contains(&severity.as_str()) {
        return Err(format!(
            "report_issue: severity must be one of {}, got {:?}",
            SEVERITIES.join(", "),
            railyard_model::text::prefix(&severity, 64)
        ));
    }
    let summary = field("summary").unwrap_or_default();
    if summary.trim().is_empty() {
        return Err("report_issue: summary is required: one line saying what is wrong".into());
    }
    Ok(IssueCall {
        severity,
        summary,
        details: field("details").unwrap_or_default(),
    })
}

/// What the model reads after the server answered.
pub(crate) fn answer(result: Result<(bool, u32), String>) -> ToolOutput {
    match result {
        Ok((true, n)) => ToolOutput::ok(format!(
            "issue recorded ({n} reported in this step so far); carry on with the step"
        )),
        Ok((false, _)) => ToolOutput::ok(
            "issue not recorded: this attempt has reported as many issues as it may (10); \
             carry on with the step",
        ),
        Err(e) => ToolOutput::error(format!("report_issue failed: {e}")),
    }
}
