//! Terminate one run if it is open and start another, in one commit, for a
//! client. (A schedule's TERMINATE_OTHER does the same inside its own fire command,
//! `schedule::commit`.)

use super::*;

/// Terminates `terminate_run_id` (same namespace as the new run) if it is open,
/// and starts `start`. Either both happen or neither: if the start is refused, the
/// other run is left as it was.
#[derive(Debug)]
pub struct StartReplacing {
    pub terminate_run_id: String,
    pub identity: String,
    pub reason: String,
    pub start: StartCommand,
}

/// The answer to a [`StartReplacing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub started: Started,
    /// Whether the other run was open and is now terminated.
    pub terminated: bool,
}

impl Apply for StartReplacing {
    type Output = Replaced;
    const NAME: &'static str = "start_replacing";

    fn apply(self, cx: &mut Cx) -> Result<Replaced, CommandError> {
        // Every check first: nothing is written unless both parts are accepted. The
        // run replaced closes in this commit, so it leaves room under the namespace's
        // open-runs limit for the one replacing it.
        let ns = self.start.params.namespace.clone();
        let freeing = match cx.load(&RunKey::new(&ns, &self.terminate_run_id))? {
            Some(run) if run.status.is_open() => 1,
            _ => 0,
        };
        // The request was applied before, termination included.
        if let Some(earlier) = self.start.check_freeing(cx, freeing)? {
            return Ok(Replaced {
                started: earlier,
                terminated: false,
            });
        }
        let old = match cx.load(&RunKey::new(&ns, &self.terminate_run_id))? {
            Some(mut run) if run.status.is_open() => {
                let before = Attempt::of(&run);
                let mut out = Out::new(cx.now(), cx.seq());
                if let Err(e) = run.terminate(&self.identity, self.reason, &mut out) {
                    return Err(Rejection::from(e).into());
                }
                Some(Transition::new(run, true, out).after(before))
            }
            _ => None,
        };
        let terminated = old.is_some();
        if let Some(old) = old {
            cx.save(old)?;
        }
        let started = self.start.create(cx)?;
        Ok(Replaced { started, terminated })
    }
}
