//! A webhook delivery: deduplicate by delivery id, apply the concurrency key's
//! mode, start (or queue) the run, and remember the delivery, all in one
//! transaction, so an answered delivery is durable and a repeated one finds it.

use super::*;
use railyard_model::trigger::{HookDelivery, Mode, RecentDelivery};

/// A delivery, rendered and checked by the service layer.
#[derive(Debug)]
pub struct DeliverHook {
    pub trigger_id: String,
    /// Empty: not deduplicated.
    pub delivery_id: String,
    /// Empty: no concurrency key (the delivery starts at once).
    pub key: String,
    pub mode: Mode,
    pub workflow_id: String,
    /// The start, as the service layer's start made it.
    pub start: StartCommand,
}

/// The answer to a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub run_id: String,
    /// The delivery id was seen before: this is the run it answered then.
    pub duplicate: bool,
    /// The run waits for its key's open run to close (serial mode).
    pub queued: bool,
    /// The run this one replaced (cancelled), in replace mode.
    pub replaced: Option<String>,
}

impl Apply for DeliverHook {
    type Output = Delivered;
    const NAME: &'static str = "deliver_hook";

    fn apply(self, cx: &mut Cx) -> Result<Delivered, CommandError> {
        let ns = self.start.params.namespace.clone();
        let trigger = self.trigger_id.as_str();
        if !self.delivery_id.is_empty()
            && let Some(d) = cx.tx.hook_delivery(&ns, trigger, &self.delivery_id)?
        {
            return Ok(Delivered {
                run_id: d.run_id,
                duplicate: true,
                queued: false,
                replaced: None,
            });
        }
        // Every check first.
        if let Some(earlier) = self.start.check(cx)? {
            return Ok(Delivered {
                run_id: earlier.run_id,
                duplicate: true,
                queued: false,
                replaced: None,
            });
        }
        let keyed = !self.key.is_empty() && self.mode != Mode::Parallel;
        let holder = if keyed {
            match cx.tx.trigger_key(&ns, trigger, &self.key)? {
                Some(r) => cx
                    .load(&RunKey::new(&ns, &r))?
                    .filter(|run| run.status.is_open())
                    .map(|_| r),
                None => None,
            }
        } else {
            None
        };
        if self.mode == Mode::Serial
            && holder.is_some()
            && cx
                .tx
                .queued_starts(&ns, trigger, &self.key, MAX_QUEUED_PER_KEY)?
                .len()
                >= MAX_QUEUED_PER_KEY
        {
            return Err(Rejection::ResourceExhausted(format!(
                "{MAX_QUEUED_PER_KEY} deliveries already wait on this concurrency key"
            ))
            .into());
        }
        let run_id = self.start.params.run_id.clone();
        let mut out = Delivered {
            run_id: run_id.clone(),
            duplicate: false,
            queued: false,
            replaced: None,
        };
        match (self.mode, holder) {
            (Mode::Serial, Some(_)) => {
                let p = self.start.params;
                let q = QueuedStart {
                    run_id: p.run_id,
                    workflow_id: self.workflow_id,
                    goal: p.goal,
                    context: p.context,
                    task_queue: p.task_queue,
                    callback_url: p.callback_url,
                    identity: p.identity,
                    received_ms: cx.now(),
                    attributes: p.attributes,
                    trace: p.trace,
                };
                cx.tx.push_queued_start(&ns, trigger, &self.key, &q)?;
                out.queued = true;
            }
            (mode, holder) => {
                if let (Mode::Replace, Some(old)) = (mode, holder) {
                    // Let go of the key first, so the old run's close (at once
                    // when no step is leased) hands nothing on.
                    cx.tx.set_key_holder(&RunKey::new(&ns, &old), None)?;
                    let who = self.start.params.identity.clone();
                    let reason = format!("trigger {trigger}: replaced by run {run_id}");
                    let _ = cx
                        .with_run(&RunKey::new(&ns, &old), |run, o| Ok(run.cancel(&who, reason, o)?))
                        .refused()?;
                    out.replaced = Some(old);
                }
                self.start.create(cx)?;
                if keyed {
                    hold(cx, &ns, trigger, &self.key, &run_id)?;
                }
            }
        }
        if let Some(mut t) = cx.tx.trigger(&ns, trigger)? {
            t.record_delivery(RecentDelivery {
                received_ms: cx.now(),
                delivery_id: self.delivery_id.clone(),
                run_id: run_id.clone(),
                outcome: match (&out.replaced, out.queued) {
                    (Some(old), _) => format!("replaced {old}"),
                    (None, true) => "queued".into(),
                    (None, false) => "started".into(),
                },
            });
            cx.tx.save_trigger(&t)?;
        }
        if !self.delivery_id.is_empty() {
            let d = HookDelivery {
                run_id: run_id.clone(),
                received_ms: cx.now(),
            };
            cx.tx.put_hook_delivery(&ns, trigger, &self.delivery_id, &d)?;
        }
        Ok(out)
    }
}
