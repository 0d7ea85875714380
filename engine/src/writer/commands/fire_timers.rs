//! Fire every due timer row and every due lease deadline.

use super::*;

/// Most timers fired in one transaction.
const MAX_TIMERS: usize = 512;

/// Fire what is due now; answers how many fired.
#[derive(Debug, Default)]
pub struct FireTimers;

impl Apply for FireTimers {
    type Output = usize;
    const NAME: &'static str = "fire_timers";

    fn apply(self, cx: &mut Cx) -> Result<usize, CommandError> {
        let now = cx.now();
        let due = cx.tx.due_timers(now, MAX_TIMERS)?;
        for (key, _) in &due {
            cx.tx.remove_timer(*key)?;
        }
        let mut fired = due.len();
        for (key, timer) in due {
            let timer = match timer {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, "dropping an unreadable timer");
                    continue;
                }
            };
            match timer {
                // A timer whose attempt has moved on does nothing.
                Timer::Backoff {
                    namespace,
                    run_id,
                    step_index,
                    attempt,
                } => {
                    let _ = cx
                        .with_run(&RunKey::new(namespace, run_id), |run, out| {
                            run.backoff_timer(step_index, attempt, out);
                            Ok(())
                        })
                        .refused()?;
                }
                Timer::ScheduleFire {
                    namespace,
                    schedule_id,
                } => super::schedule::fire(cx, key, &namespace, &schedule_id)?,
                Timer::WaitTimeout {
                    namespace,
                    run_id,
                    wait_id,
                } => {
                    let _ = cx
                        .with_run(&RunKey::new(namespace, run_id), |run, out| {
                            run.wait_timer(wait_id, out);
                            Ok(())
                        })
                        .refused()?;
                }
                Timer::Delivery {
                    namespace,
                    run_id,
                    target,
                    attempt,
                } => super::delivery::fire(cx, &RunKey::new(namespace, run_id), &target, attempt)?,
            }
        }
        let due = cx.leases.due(now, MAX_TIMERS.saturating_sub(fired));
        fired += due.len();
        for d in due {
            let checked = cx
                .with_run(&d.run, |run, out| {
                    run.lease_timer(d.lease, out);
                    Ok(())
                })
                .refused()?;
            if checked.is_err() {
                // The run is gone: forget its deadline.
                cx.after.push(After::Lease {
                    run: d.run,
                    deadline: None,
                });
            }
        }
        if fired > 0 {
            cx.after.push(After::WakeTimers);
        }
        Ok(fired)
    }
}
