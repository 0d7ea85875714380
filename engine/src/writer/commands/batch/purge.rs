//! Purge finished batches past the batch retention: each batch's items a slice at
//! a time, then its header, so one commit deletes a bounded number of rows however
//! large the batch. The retention purge (`crate::retention`) names the
//! candidates from a snapshot; this command checks each again.

use super::*;

/// Purge these batches (namespace, batch id), those finished at least
/// `retention_ms` ago, deleting at most `max_items` items in all.
#[derive(Debug)]
pub struct PurgeBatches {
    pub candidates: Vec<(String, String)>,
    pub retention_ms: Millis,
    pub max_items: usize,
}

/// What a [`PurgeBatches`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PurgedBatches {
    /// (namespace, batch id) of each batch now gone whole.
    pub purged: Vec<(String, String)>,
    /// Items deleted.
    pub items: usize,
    /// Candidates dealt with, from the first: gone now, or not to be purged. The
    /// next candidate, if any, still has rows (the item budget ran out).
    pub processed: usize,
}

/// Whether a batch may be purged at `now`: finished, `retention_ms` or longer ago.
pub fn batch_due(b: &Batch, retention_ms: Millis, now: Millis) -> bool {
    !b.is_running() && retention_ms > 0 && b.closed_ms.is_some_and(|c| c.saturating_add(retention_ms) <= now)
}

impl Apply for PurgeBatches {
    type Output = PurgedBatches;
    const NAME: &'static str = "purge_batches";

    fn apply(self, cx: &mut Cx) -> Result<PurgedBatches, CommandError> {
        let mut done = PurgedBatches::default();
        let mut budget = self.max_items.max(1);
        for (ns, id) in self.candidates {
            let due = cx
                .tx
                .batch(&ns, &id)?
                .is_some_and(|b| batch_due(&b, self.retention_ms, cx.now()));
            if !due {
                done.processed += 1;
                continue;
            }
            if budget == 0 {
                break;
            }
            let (items, gone) = cx.tx.purge_batch(&ns, &id, budget)?;
            budget -= items.min(budget);
            done.items += items;
            if !gone {
                break;
            }
            done.processed += 1;
            done.purged.push((ns, id));
        }
        Ok(done)
    }
}
