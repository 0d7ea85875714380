//! The issues a run keeps (`RunState::issues`, from `report_issue`), as records.

use railyard_model::Millis;
use railyard_model::run::Issue;
use serde::{Deserialize, Serialize};

use super::events::SeverityRecord;

/// One issue a run keeps whole.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct IssueRecord {
    #[serde(default)]
    step_id: String,
    #[serde(default)]
    attempt: u32,
    severity: SeverityRecord,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    details: String,
    #[serde(default)]
    time_ms: Millis,
}

impl IssueRecord {
    pub(super) fn from_model(i: &Issue) -> Self {
        Self {
            step_id: i.step_id.clone(),
            attempt: i.attempt,
            severity: SeverityRecord::from_model(i.severity),
            summary: i.summary.clone(),
            details: i.details.clone(),
            time_ms: i.time_ms,
        }
    }

    pub(super) fn into_model(self) -> Issue {
        Issue {
            step_id: self.step_id,
            attempt: self.attempt,
            severity: self.severity.to_model(),
            summary: self.summary,
            details: self.details,
            time_ms: self.time_ms,
        }
    }
}
