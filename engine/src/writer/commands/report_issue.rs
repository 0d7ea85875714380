//! An agent reported an issue without ending its step.

use super::*;
use railyard_model::run::{DeliveryTarget, IssueReport};

/// An issue the agent of the step attempt `claims` names reported.
#[derive(Debug)]
pub struct ReportIssue {
    pub claims: TokenClaims,
    pub identity: String,
    pub report: IssueReport,
}

/// Whether the issue was recorded (false past the per-attempt bound), and the step's
/// issues so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IssueRecorded {
    pub recorded: bool,
    pub step_issues: u32,
}

impl Apply for ReportIssue {
    type Output = IssueRecorded;
    const NAME: &'static str = "report_issue";

    fn apply(self, cx: &mut Cx) -> Result<IssueRecorded, CommandError> {
        let Self {
            claims,
            identity,
            report,
        } = self;
        // Subscriptions that take `issue.reported` are sent each issue the run keeps, at
        // once, by the same durable delivery as a run's result.
        let subscriptions = match cx.tx.namespace(&claims.namespace)? {
            Some(ns) => ns.subscriptions,
            None => Vec::new(),
        };
        cx.with_run(&claims.run_key(), |run, out| {
            let kept = run.issues.len();
            let recorded = run.report_issue(&claims, &identity, report, out)?;
            if run.issues.len() > kept {
                let issue = u32::try_from(run.issues.len()).unwrap_or(u32::MAX);
                let targets = subscriptions
                    .into_iter()
                    .filter(|s| s.matches_issue(&run.workflow_id))
                    .map(|s| {
                        let target = DeliveryTarget::Issue {
                            subscription: s.id,
                            issue,
                        };
                        (target, s.url)
                    })
                    .collect();
                run.arm_deliveries(targets, out);
            }
            let step_issues = run.steps.get(run.current_step).map_or(0, |s| s.issues);
            Ok(IssueRecorded {
                recorded,
                step_issues,
            })
        })
    }
}
