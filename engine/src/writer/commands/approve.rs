//! Approve or reject the result a `requireConfirmation` step holds (`ApproveStep` /
//! `RejectStep`). An approval completes the step through the one completion path
//! (next step, or the run completes, its delivery armed, its family told); a
//! rejection re-opens the step under the same attempt. Both in one commit.

use super::*;

/// An answer to the approval run `run_id` waits for.
#[derive(Debug)]
pub struct AnswerApproval {
    pub ns: String,
    pub run_id: String,
    /// The step the caller means (empty: whichever awaits approval).
    pub step_id: String,
    pub identity: String,
    /// `true`: approve (with `text` as its note); `false`: reject (with `text` as the
    /// feedback).
    pub approve: bool,
    pub text: String,
}

impl Apply for AnswerApproval {
    type Output = ();
    const NAME: &'static str = "answer_approval";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let Self {
            ns,
            run_id,
            step_id,
            identity,
            approve,
            text,
        } = self;
        cx.with_run(&RunKey::new(&ns, &run_id), |run, out| {
            if approve {
                run.approve(&identity, &step_id, text, out)?;
                // Checked when the result was held; a backstop, refused before any write.
                run.check_size()?;
            } else {
                run.reject(&identity, &step_id, text, out)?;
            }
            Ok(())
        })?;
        if approve {
            cx.metrics
                .steps_completed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}
