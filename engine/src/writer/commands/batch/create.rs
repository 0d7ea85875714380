//! Start a batch: its header and one item per matched run, in one commit; refused
//! past the namespace's bound on running batches.

use super::*;
use railyard_model::batch::{BatchState, MAX_BATCH_RUNS, MAX_RUNNING_BATCHES};

/// A new batch (its counts zero, running) over `run_ids`, the runs its query
/// matched, in the order they are to be acted on.
#[derive(Debug)]
pub struct CreateBatch {
    pub batch: Batch,
    pub run_ids: Vec<String>,
}

/// The answer to a [`CreateBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchCreated {
    pub batch: Batch,
    /// False when a batch of this id, action and query existed: nothing was done.
    pub created: bool,
}

impl Apply for CreateBatch {
    type Output = BatchCreated;
    const NAME: &'static str = "create_batch";

    fn apply(self, cx: &mut Cx) -> Result<BatchCreated, CommandError> {
        let Self { mut batch, run_ids } = self;
        let (ns, id) = (batch.namespace.clone(), batch.batch_id.clone());
        if let Some(existing) = cx.tx.batch(&ns, &id)? {
            if existing.action == batch.action && existing.query == batch.query {
                return Ok(BatchCreated {
                    batch: existing,
                    created: false,
                });
            }
            return Err(Rejection::AlreadyExists(format!(
                "batch {id:?} already exists in namespace {ns:?} with another action or query"
            ))
            .into());
        }
        if run_ids.len() > MAX_BATCH_RUNS {
            return Err(Rejection::field(
                "query",
                format!(
                    "matches {} runs, more than the {MAX_BATCH_RUNS} a batch may act on; narrow it",
                    run_ids.len()
                ),
            )
            .into());
        }
        let running = cx
            .tx
            .running_batches()?
            .into_iter()
            .filter(|(n, _)| *n == ns)
            .count();
        if running >= MAX_RUNNING_BATCHES {
            return Err(Rejection::ResourceExhausted(format!(
                "namespace {ns:?} has {running} batches running, the most it may; wait for one to \
                 finish or stop one"
            ))
            .into());
        }
        batch.total = run_ids.len() as u64;
        batch.next = 0;
        (batch.succeeded, batch.skipped, batch.failed) = (0, 0, 0);
        batch.created_ms = cx.now();
        (batch.state, batch.closed_ms) = if run_ids.is_empty() {
            (BatchState::Completed, Some(cx.now()))
        } else {
            (BatchState::Running, None)
        };
        for (i, run_id) in run_ids.into_iter().enumerate() {
            let item = BatchItem {
                run_id,
                outcome: None,
                at_ms: None,
            };
            cx.tx.put_batch_item(&ns, &id, i as u64, &item)?;
        }
        cx.tx.save_batch(&batch)?;
        Ok(BatchCreated { batch, created: true })
    }
}
