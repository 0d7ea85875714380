//! A step's approval options (`"approval"` in a definition, beside
//! `requireConfirmation`): how long a held result waits for a person and what
//! happens when nobody answers. Errors are `JSON path: problem`, like every
//! definition error.

use serde::{Deserialize, Serialize};

/// `"approval": {"timeoutSeconds": 3600, "onTimeout": "reject", "feedback": "..."}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalOptions {
    /// Longest a held result waits for an answer; none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// What a wait that times out does.
    #[serde(default)]
    pub on_timeout: ApprovalTimeoutPolicy,
    /// The feedback of a rejection by timeout (`onTimeout: "reject"`; empty: a default
    /// text saying nobody answered).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub feedback: String,
}

/// What ends an approval wait that timed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ApprovalTimeoutPolicy {
    /// The step fails (not retried) and with it the run.
    #[default]
    Fail,
    /// The held result is approved (recorded as approved by `server`).
    Approve,
    /// The held result is rejected with the step's `feedback`: the step re-opens.
    Reject,
}

impl ApprovalTimeoutPolicy {
    /// The definition's name: `fail`, `approve`, `reject`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }

    /// Reads a stored name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "" | "fail" => Some(Self::Fail),
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }
}

/// Longest approval timeout a step may set: 30 days.
pub const MAX_APPROVAL_TIMEOUT_SECONDS: u32 = 30 * 86400;
/// Longest timeout `feedback` in a definition, and longest note or feedback of an
/// `ApproveStep` / `RejectStep`, in bytes.
pub const MAX_FEEDBACK_BYTES: usize = 16 * 1024;

/// The feedback of a rejection by timeout when the step names none.
pub const DEFAULT_TIMEOUT_FEEDBACK: &str = "Nobody approved your result in time. Check it once more, improve it where you can, and complete the step again.";

/// Checks a step's `approval` options at `path` (`steps[i].approval`);
/// `require_confirmation` is the step's flag, without which they mean nothing.
pub(crate) fn check_approval(
    path: &str,
    approval: &ApprovalOptions,
    require_confirmation: bool,
) -> Result<(), String> {
    if !require_confirmation {
        return Err(format!(
            "{path}: only a step with \"requireConfirmation\": true waits for approval; set it or remove \"approval\""
        ));
    }
    if let Some(t) = approval.timeout_seconds
        && !(1..=MAX_APPROVAL_TIMEOUT_SECONDS).contains(&t)
    {
        return Err(format!(
            "{path}.timeoutSeconds: must be between 1 and {MAX_APPROVAL_TIMEOUT_SECONDS}, got {t}"
        ));
    }
    if !approval.feedback.is_empty() && approval.on_timeout != ApprovalTimeoutPolicy::Reject {
        return Err(format!(
            "{path}.feedback: only used when onTimeout is \"reject\" (it is {:?})",
            approval.on_timeout.name()
        ));
    }
    if approval.feedback.len() > MAX_FEEDBACK_BYTES {
        return Err(format!(
            "{path}.feedback: is {} bytes, more than the limit of {MAX_FEEDBACK_BYTES}",
            approval.feedback.len()
        ));
    }
    if approval.on_timeout != ApprovalTimeoutPolicy::Fail && approval.timeout_seconds.is_none() {
        return Err(format!(
            "{path}.onTimeout: {:?} needs timeoutSeconds",
            approval.on_timeout.name()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::workflow::parse_definition;

    fn parse(step: &str) -> Result<crate::workflow::WorkflowDef, String> {
        parse_definition(&format!(
            r#"{{"id":"wf","version":"1","name":"W","steps":[{{"id":"a","title":"A","prompt":"p"{step}}}]}}"#
        ))
    }

    #[test]
    fn approval_options_are_checked_at_load_naming_the_json_path() {
        let ok = parse(
            r#","requireConfirmation":true,"approval":{"timeoutSeconds":60,"onTimeout":"reject","feedback":"f"}"#,
        );
        assert!(ok.is_ok(), "{ok:?}");
        let cases = [
            (
                r#","approval":{"timeoutSeconds":60}"#,
                "steps[0].approval: only a step with",
            ),
            (
                r#","requireConfirmation":true,"approval":{"timeoutSeconds":0}"#,
                "steps[0].approval.timeoutSeconds: must be between 1 and 2592000, got 0",
            ),
            (
                r#","requireConfirmation":true,"approval":{"timeoutSeconds":60,"onTimeout":"later"}"#,
                "steps[0].approval.onTimeout: unknown variant `later`",
            ),
            (
                r#","requireConfirmation":true,"approval":{"onTimeout":"approve"}"#,
                "steps[0].approval.onTimeout: \"approve\" needs timeoutSeconds",
            ),
            (
                r#","requireConfirmation":true,"approval":{"timeoutSeconds":5,"feedback":"x"}"#,
                "steps[0].approval.feedback: only used when onTimeout is \"reject\"",
            ),
            (
                r#","requireConfirmation":true,"approval":{"timeoutSeconds":5,"bogus":1}"#,
                "steps[0].approval.bogus",
            ),
        ];
        for (step, expected) in cases {
            let e = parse(step).unwrap_err();
            assert!(e.starts_with(expected) || e.contains(expected), "{step}: {e}");
        }
        let long = "x".repeat(super::MAX_FEEDBACK_BYTES + 1);
        let e = parse(&format!(
            r#","requireConfirmation":true,"approval":{{"timeoutSeconds":5,"onTimeout":"reject","feedback":"{long}"}}"#
        ))
        .unwrap_err();
        assert!(e.starts_with("steps[0].approval.feedback: is 16385 bytes"), "{e}");
    }
}
