//! Cancel or terminate a run from outside.

use super::*;

/// How a run is stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Cancel,
    Terminate,
}

/// Stop a run: cancel (asks the worker to stop, or closes at once when no step is
/// leased) or terminate (closes at once).
#[derive(Debug)]
pub struct StopRun {
    pub how: Stop,
    pub ns: String,
    pub run_id: String,
    pub identity: String,
    pub reason: String,
}

impl Apply for StopRun {
    type Output = ();
    const NAME: &'static str = "stop";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let Self {
            how,
            ns,
            run_id,
            identity,
            reason,
        } = self;
        cx.with_run(&RunKey::new(&ns, &run_id), |run, out| {
            Ok(match how {
                Stop::Cancel => run.cancel(&identity, reason, out),
                Stop::Terminate => run.terminate(&identity, reason, out),
            }?)
        })
    }
}
