//! A poll of a polled trigger, committed: each item with an event not seen before
//! starts one run (as a webhook delivery does: the same keys and modes), its event
//! keys are remembered, and the trigger's cursor and status move on, all in one
//! transaction. A poll cut short before its commit (a crash) is repeated from the
//! old cursor and finds what it started: nothing starts twice.

use super::*;
use railyard_model::trigger::HookDelivery;
use railyard_model::trigger::poll::{EventKey, MAX_ERROR, PollState};

/// One item a poll found that passed the filters, with its event keys.
#[derive(Debug)]
pub struct PolledItem {
    /// The item's number, for messages.
    pub item: String,
    /// Its events the trigger counts (none: it starts nothing).
    pub keys: Vec<EventKey>,
    /// Its start as a delivery, or why its templates did not render.
    pub start: Result<DeliverHook, String>,
}

/// What one poll found, and the trigger's state after it.
#[derive(Debug)]
pub struct RecordPoll {
    pub ns: String,
    pub trigger_id: String,
    /// The trigger's `updated_ms` when it was polled: a trigger changed (or
    /// replaced) since then takes nothing of this poll.
    pub definition_ms: Millis,
    pub items: Vec<PolledItem>,
    /// The cursor and status the poller made; the runs started are added here.
    pub state: PollState,
}

/// What a committed poll did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollRecorded {
    /// Run ids started (or queued on their key).
    pub started: Vec<String>,
    /// Items whose events had all been seen.
    pub seen_before: usize,
    /// Items that could not start (their templates, or a refused start).
    pub failed: usize,
}

impl Apply for RecordPoll {
    type Output = PollRecorded;
    const NAME: &'static str = "record_poll";

    fn apply(self, cx: &mut Cx) -> Result<PollRecorded, CommandError> {
        let (ns, id) = (self.ns.as_str(), self.trigger_id.as_str());
        let Some(mut t) = cx.tx.trigger(ns, id)? else {
            return Err(not_found(ns, id).into());
        };
        if t.poll.is_none() || t.updated_ms != self.definition_ms {
            return Err(Rejection::FailedPrecondition(format!(
                "trigger {id:?} changed while it was polled; the poll is dropped"
            ))
            .into());
        }
        let now = cx.now();
        let mut out = PollRecorded::default();
        let mut state = self.state;
        for it in self.items {
            let mut unseen = false;
            for k in &it.keys {
                if cx.tx.hook_delivery(ns, id, &k.key)?.is_none() {
                    unseen = true;
                }
            }
            if !unseen {
                out.seen_before += usize::from(!it.keys.is_empty());
                continue;
            }
            let note = |state: &mut PollState, e: String| {
                let msg = format!("item {}: {e}", it.item);
                tracing::warn!(trigger_id = id, namespace = ns, error = %msg, "polled item not started");
                state.last_error = railyard_model::text::prefix(&msg, MAX_ERROR).to_string();
                state.last_error_ms = now;
            };
            let hook = match it.start {
                Ok(h) => h,
                Err(e) => {
                    note(&mut state, e);
                    out.failed += 1;
                    continue;
                }
            };
            let delivered = match hook.apply(cx).refused()? {
                Ok(d) => d,
                Err(e) => {
                    note(&mut state, e.to_string());
                    out.failed += 1;
                    continue;
                }
            };
            for k in &it.keys {
                // `new` and `labeled` are one per item, kept while the trigger is;
                // an `updated` key is forgotten with the webhook ids.
                let d = HookDelivery {
                    run_id: delivered.run_id.clone(),
                    received_ms: if k.kept { Millis::MAX } else { now },
                };
                cx.tx.put_hook_delivery(ns, id, &k.key, &d)?;
            }
            if !delivered.duplicate {
                tracing::info!(trigger_id = id, namespace = ns, item = %it.item, run_id = %delivered.run_id, queued = delivered.queued, "polled item started a run");
                out.started.push(delivered.run_id);
            }
        }
        state.runs_started += out.started.len() as u64;
        t.poll_state = state;
        cx.tx.save_trigger(&t)?;
        Ok(out)
    }
}
