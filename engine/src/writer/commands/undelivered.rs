//! The writer's own follow-up: a lease whose caller was gone when it committed.

use super::*;

/// End the lease handed out at once and offer the attempt again.
#[derive(Debug)]
pub struct Undelivered(pub Handed);

impl Apply for Undelivered {
    type Output = ();
    const NAME: &'static str = "undelivered";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        cx.with_run(&self.0.run, |run, out| {
            run.undelivered(self.0.lease, out);
            Ok(())
        })
    }
}
