//! The writer's own follow-up: a lease whose caller was gone when it committed.

use super::*;

/// End lease `lease` of the run at once and offer the attempt again.
#[derive(Debug)]
pub struct Undelivered {
    pub ns: String,
    pub run_id: String,
    pub lease: u64,
}

impl Apply for Undelivered {
    type Output = ();
    const NAME: &'static str = "undelivered";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        cx.with_run(&self.ns, &self.run_id, |run, out| {
            run.undelivered(self.lease, out);
            Ok(())
        })
    }
}
