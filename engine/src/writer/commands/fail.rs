//! A step attempt failed.

use super::*;

/// The failure of the step attempt `claims` names. Answers whether it will retry.
#[derive(Debug)]
pub struct Fail {
    pub claims: TokenClaims,
    pub identity: String,
    pub failure: StepFailure,
}

impl Apply for Fail {
    type Output = bool;
    const NAME: &'static str = "fail";

    fn apply(self, cx: &mut Cx) -> Result<bool, CommandError> {
        let Self {
            claims,
            identity,
            failure,
        } = self;
        cx.with_run(&claims.run_key(), |run, out| {
            Ok(run.fail(&claims, &identity, failure, out)?)
        })
    }
}
