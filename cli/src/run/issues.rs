//! The issues a run's agents reported (`report_issue`), as `run describe` and
//! `--output json` show them (its JSON is `client::view::issue_json`).

use railyard_proto::v1::RunInfo;

use crate::client::output::truncate;
use crate::client::timefmt::rfc3339;

/// `issues: N` and one line per issue kept (with its details' first line), or nothing
/// when none was reported.
pub(crate) fn describe_lines(run: &RunInfo) -> Vec<String> {
    if run.issue_count == 0 {
        return Vec::new();
    }
    let mut lines = vec![format!("issues: {}", run.issue_count)];
    for i in &run.issues {
        lines.push(format!(
            "  [{}] step {} attempt {} at {}: {}",
            i.severity,
            i.step_id,
            i.attempt,
            rfc3339(i.time_unix_ms),
            i.summary
        ));
        if !i.details.trim().is_empty() {
            lines.push(format!("      {}", truncate(i.details.trim(), 100)));
        }
    }
    let shown = run.issues.len() as u32;
    if run.issue_count > shown {
        lines.push(format!(
            "  ... {} more recorded in history (run history RUN -o json)",
            run.issue_count - shown
        ));
    }
    lines
}
