//! Forget delivery ids past the retention window, a bounded batch at a time.

use super::*;

/// Forget at most `max` delivery ids received before `before`.
#[derive(Debug)]
pub struct PurgeHookDeliveries {
    pub before: Millis,
    pub max: usize,
}

impl Apply for PurgeHookDeliveries {
    type Output = usize;
    const NAME: &'static str = "purge_hook_deliveries";

    fn apply(self, cx: &mut Cx) -> Result<usize, CommandError> {
        Ok(cx.tx.purge_hook_deliveries(self.before, self.max)?)
    }
}
