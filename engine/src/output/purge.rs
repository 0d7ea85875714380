//! Purging live output past its retention: part of each retention sweep
//! (`engine::retention`). A run's output goes once the run is closed (or gone) and
//! both its close and its last output write are older than
//! [`super::OutputSettings::retention_ms`]. Candidates come from the output store's
//! index by last write, never from a scan of the runs.

use railyard_model::Millis;
use railyard_model::RunKey;
use railyard_store::output::QuietRun;
use railyard_store::{StorageError, Store};

/// Index entries read at a time.
const CHUNK: usize = 256;

/// Removes the output of every run past retention at `now`; answers how many runs'.
pub fn sweep(store: &Store, now: Millis, retention_ms: Millis) -> Result<usize, StorageError> {
    if retention_ms <= 0 {
        return Ok(0);
    }
    let up_to = now.saturating_sub(retention_ms);
    let output = store.output();
    let mut after: Option<QuietRun> = None;
    let mut purged = 0;
    loop {
        let quiet = output.quiet_runs(up_to, after.as_ref(), CHUNK)?;
        let snap = store.snapshot()?;
        let mut gone = Vec::new();
        for q in &quiet {
            let key = RunKey::new(&q.ns, &q.run_id);
            let due = match snap.run(&key)? {
                None => true,
                Some(run) => !run.status.is_open() && run.close_ms.is_some_and(|c| c <= up_to),
            };
            if due {
                gone.push(key);
            }
        }
        if !gone.is_empty() {
            output.purge(&gone)?;
            purged += gone.len();
        }
        if quiet.len() < CHUNK {
            return Ok(purged);
        }
        after = quiet.last().cloned();
    }
}
