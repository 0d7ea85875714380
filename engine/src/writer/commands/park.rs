//! A step attempt parked for a provider's rate limit.

use super::*;

/// The lease `claims` names gives its step back until rate-limit `key` resets at
/// `until_ms`: no attempt is used up, and the step is scheduled again then.
#[derive(Debug)]
pub struct ParkRateLimited {
    pub claims: TokenClaims,
    pub identity: String,
    pub checkpoint: Vec<u8>,
    pub key: String,
    pub until_ms: Millis,
}

impl Apply for ParkRateLimited {
    type Output = ();
    const NAME: &'static str = "park_rate_limited";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let Self {
            claims,
            identity,
            checkpoint,
            key,
            until_ms,
        } = self;
        cx.with_run(&claims.run_key(), |run, out| {
            Ok(run.park_rate_limited(&claims, &identity, checkpoint, key, until_ms, out)?)
        })
    }
}
