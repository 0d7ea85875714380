//! Result delivery in the writer: starting an attempt when its timer fires ([`fire`]),
//! recording an attempt's outcome ([`RecordDelivery`]), a new round on request
//! ([`Redeliver`]), and the namespace subscriptions that choose targets
//! ([`Subscribe`], [`Unsubscribe`]). The HTTP call itself is never made here: a
//! started attempt goes, after commit, to `engine::sender`. Targets are armed as a
//! run closes, by `Cx::save` (one of a close's three hooks: see `cx.rs`).

use super::*;
use crate::delivery::Job;
use railyard_model::run::AttemptOutcome;
use railyard_model::run::delivery::payload;

mod subscriptions;

pub use self::subscriptions::*;

/// A delivery timer fired: start the attempt (handing it to the sender after
/// commit) or end the one in flight as lost. A stale timer writes nothing.
pub(crate) fn fire(cx: &mut Cx, key: &RunKey, target: &str, attempt: u32) -> Result<(), StorageError> {
    let Some(mut run) = cx.load(key)? else {
        return Ok(());
    };
    let policy = cx.delivery.policy;
    let mut out = Out::new(cx.now, cx.next_seq);
    let started = run.delivery_timer_fired(target, attempt, &policy, &mut out);
    if out.events.is_empty() && out.effects.is_empty() {
        return Ok(());
    }
    let job = match started {
        None => None,
        Some(a) => match cx.delivery.take_slot(&key.namespace, &a.url) {
            Some(slot) => Some(Job {
                body: payload::body(&run, &a),
                attempt: a,
                slot,
            }),
            None => {
                // Every slot this call could use is taken (its target's, its
                // namespace's or the sender's): the attempt is not started (the run
                // is not saved) and its timer tries again soon, so waiting uses up
                // no attempt.
                let due = cx.now.saturating_add(
                    i64::try_from(crate::delivery::SLOT_RETRY.as_millis()).unwrap_or(i64::MAX),
                );
                *cx.next_seq += 1;
                cx.tx.insert_timer(
                    (due, *cx.next_seq),
                    &railyard_model::run::Timer::Delivery {
                        namespace: key.namespace.clone(),
                        run_id: key.run_id.clone(),
                        target: target.to_string(),
                        attempt,
                    },
                )?;
                cx.after.push(After::WakeTimers);
                tracing::debug!(
                    run_id = key.run_id.as_str(),
                    target,
                    attempt,
                    "no free delivery slot; the attempt waits"
                );
                return Ok(());
            }
        },
    };
    if let Some(job) = &job {
        tracing::info!(
            run_id = key.run_id.as_str(),
            target,
            attempt = job.attempt.attempt,
            "delivery attempt started"
        );
    }
    let was_open = run.status.is_open();
    let t = Transition::new(run, was_open, out);
    cx.save(t)?;
    if let Some(job) = job {
        cx.after.push(After::Deliver(Box::new(job)));
    }
    Ok(())
}

/// The outcome of one delivery attempt, from the sender. Answers whether it was
/// recorded (false: that attempt's deadline had already counted it).
#[derive(Debug)]
pub struct RecordDelivery {
    pub ns: String,
    pub run_id: String,
    pub target: String,
    pub attempt: u32,
    pub outcome: AttemptOutcome,
}

impl Apply for RecordDelivery {
    type Output = bool;
    const NAME: &'static str = "record_delivery";

    fn apply(self, cx: &mut Cx) -> Result<bool, CommandError> {
        let Some(mut run) = cx.load(&RunKey::new(&self.ns, &self.run_id))? else {
            return Ok(false);
        };
        let policy = cx.delivery.policy;
        let mut out = Out::new(cx.now, cx.next_seq);
        if !run.delivery_outcome(&self.target, self.attempt, self.outcome, &policy, &mut out) {
            return Ok(false);
        }
        let was_open = run.status.is_open();
        let t = Transition::new(run, was_open, out);
        cx.save(t)?;
        Ok(true)
    }
}

/// A new round for a closed run's failed deliveries (all, or the one `target` names).
#[derive(Debug)]
pub struct Redeliver {
    pub ns: String,
    pub run_id: String,
    pub target: String,
}

impl Apply for Redeliver {
    type Output = Vec<String>;
    const NAME: &'static str = "redeliver";

    fn apply(self, cx: &mut Cx) -> Result<Vec<String>, CommandError> {
        cx.with_run(&RunKey::new(&self.ns, &self.run_id), |run, out| {
            run.redeliver(&self.target, out)
        })
    }
}
