//! Act on a running batch's next items (at most `max`), each applied and recorded
//! in this commit; the batch completes at its last item.

use super::*;

/// Acts on up to `max` items of a batch from where it is; `new_run_ids` name the
/// runs a reset or rerun starts, one per item (items past them get fresh UUIDv7s).
#[derive(Debug)]
pub struct AdvanceBatch {
    pub ns: String,
    pub batch_id: String,
    pub max: u64,
    pub new_run_ids: Vec<String>,
}

impl Apply for AdvanceBatch {
    type Output = Batch;
    const NAME: &'static str = "advance_batch";

    fn apply(self, cx: &mut Cx) -> Result<Batch, CommandError> {
        let Some(mut b) = cx.tx.batch(&self.ns, &self.batch_id)? else {
            return Err(not_found(&self.ns, &self.batch_id).into());
        };
        let mut ids = self.new_run_ids.into_iter();
        let mut n = 0;
        while b.is_running() && n < self.max {
            let index = b.next;
            let outcome = match item(cx, &b, index)? {
                Some(item) if item.outcome.is_none() => {
                    let new_id = ids.next().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
                    let outcome = act(cx, &b, index, &item.run_id, &new_id)?;
                    let done = BatchItem {
                        outcome: Some(outcome.clone()),
                        at_ms: Some(cx.now()),
                        ..item
                    };
                    cx.tx.put_batch_item(&b.namespace, &b.batch_id, index, &done)?;
                    // Runs closed by this item tell what started them, and their
                    // families, before the next item is looked at (as if each were
                    // its own command).
                    while !cx.family.is_empty() || !cx.closed.is_empty() {
                        super::super::children::settle(cx)?;
                        super::super::settle(cx)?;
                    }
                    outcome
                }
                // Recorded already (a header behind its items cannot be written:
                // both move in one commit), or missing: counted, never acted on.
                Some(item) => item.outcome.unwrap_or(Outcome::Skipped {
                    reason: "already recorded".into(),
                }),
                None => Outcome::Skipped {
                    reason: "the batch's item is missing".into(),
                },
            };
            b.record(&outcome, cx.now());
            n += 1;
        }
        cx.tx.save_batch(&b)?;
        Ok(b)
    }
}
