//! Issues an agent reports without ending its step (`report_issue`): recorded in
//! history as `IssueReported`, counted per step (all attempts) and per run, the first
//! [`MAX_KEPT_ISSUES`] of a run kept in its state for `run describe` and the result
//! delivery. At most [`MAX_RECORDED_ISSUES`] per attempt are recorded, like refusals
//! of a result: later ones are answered "not recorded" and change nothing, so a model
//! that keeps reporting cannot grow a history without bound.

use super::{EventKind, Out, Refusal, RunState};
use crate::Millis;
use crate::error::Rejection;
use crate::token::TokenClaims;

/// Most issues recorded per step attempt.
pub const MAX_RECORDED_ISSUES: u32 = 10;
/// Most issues a run's state keeps whole (the count goes on).
pub const MAX_KEPT_ISSUES: usize = 20;
/// Most bytes of an issue's summary.
pub const MAX_ISSUE_SUMMARY_BYTES: usize = 256;
/// Most bytes of an issue's details.
pub const MAX_ISSUE_DETAILS_BYTES: usize = 4096;

/// How bad an issue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Severity {
    /// For information.
    Info,
    /// Something may be wrong (the default).
    #[default]
    Warning,
    /// Something is wrong.
    Error,
    /// Something is badly wrong.
    Critical,
}

impl Severity {
    /// Every severity, least first.
    pub const ALL: [Severity; 4] = [Self::Info, Self::Warning, Self::Error, Self::Critical];

    /// Its name in the API, history and deliveries.
    pub fn name(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
        }
    }

    /// The severity a name stands for.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One reported issue, as a run keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Issue {
    /// The step the agent worked on.
    pub step_id: String,
    /// Its attempt.
    pub attempt: u32,
    /// How bad the agent judged it.
    pub severity: Severity,
    /// One line on it.
    pub summary: String,
    /// Its details (may be empty).
    pub details: String,
    /// When it was reported.
    pub time_ms: Millis,
}

/// An issue as a worker reports it, checked by [`IssueReport::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueReport {
    /// How bad the agent judged it.
    pub severity: Severity,
    /// One line on it.
    pub summary: String,
    /// Its details (may be empty).
    pub details: String,
}

impl IssueReport {
    /// Checks a report's fields: a known severity, a summary of 1 to 256 bytes,
    /// details of at most 4096, errors naming the field.
    pub fn check(severity: &str, summary: String, details: String) -> Result<Self, Rejection> {
        let severity = Severity::parse(severity).ok_or_else(|| {
            Rejection::field(
                "severity",
                format!(
                    "must be one of info, warning, error or critical, got {}",
                    crate::echo(severity)
                ),
            )
        })?;
        if summary.trim().is_empty() {
            return Err(Rejection::field("summary", "must not be empty"));
        }
        if summary.len() > MAX_ISSUE_SUMMARY_BYTES {
            return Err(Rejection::field(
                "summary",
                format!(
                    "{} bytes, more than the limit of {MAX_ISSUE_SUMMARY_BYTES}",
                    summary.len()
                ),
            ));
        }
        if details.len() > MAX_ISSUE_DETAILS_BYTES {
            return Err(Rejection::field(
                "details",
                format!(
                    "{} bytes, more than the limit of {MAX_ISSUE_DETAILS_BYTES}",
                    details.len()
                ),
            ));
        }
        Ok(Self {
            severity,
            summary,
            details,
        })
    }
}

impl RunState {
    /// Records an issue the agent of the step in flight reported (`IssueReported`);
    /// the step goes on. Returns `false`, recording nothing, once
    /// [`MAX_RECORDED_ISSUES`] were recorded for this attempt.
    pub fn report_issue(
        &mut self,
        claims: &TokenClaims,
        identity: &str,
        report: IssueReport,
        out: &mut Out,
    ) -> Result<bool, Refusal> {
        self.check_lease(claims)?;
        let (step_id, attempt) = (self.step_id(), self.attempt());
        let rec = &mut self.steps[self.current_step];
        if rec.attempt_issues >= MAX_RECORDED_ISSUES {
            return Ok(false);
        }
        rec.attempt_issues += 1;
        rec.issues += 1;
        if self.issues.len() < MAX_KEPT_ISSUES {
            self.issues.push(Issue {
                step_id: step_id.clone(),
                attempt,
                severity: report.severity,
                summary: report.summary.clone(),
                details: report.details.clone(),
                time_ms: out.now,
            });
        }
        self.push(
            out,
            identity,
            EventKind::IssueReported {
                step_id,
                attempt,
                severity: report.severity,
                summary: report.summary,
                details: report.details,
            },
        );
        Ok(true)
    }

    /// Issues reported over all the run's steps and attempts.
    pub fn issue_count(&self) -> u32 {
        self.steps.iter().map(|s| s.issues).sum()
    }
}
