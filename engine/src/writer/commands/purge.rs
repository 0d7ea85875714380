//! Purge closed runs past their namespace's retention: each run whole (state,
//! history, checkpoint, index entries, idempotency keys) in the command's one
//! commit, so a crash leaves every run either all there or all gone. The purge
//! loop (`crate::retention`) finds the candidates through the close-time index and
//! sends a bounded number per command; this command checks each again.

use std::collections::HashMap;

use super::*;

/// A closed run the purge loop found in the close-time index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeCandidate {
    pub ns: String,
    pub close_ms: Millis,
    pub run_id: String,
}

/// Purge these runs, those that may go.
#[derive(Debug)]
pub struct PurgeRuns {
    pub candidates: Vec<PurgeCandidate>,
}

/// What a [`PurgeRuns`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Purged {
    /// Each run purged.
    pub purged: Vec<RunKey>,
    /// Candidates kept: not yet past retention, or still needed ([`may_purge`]).
    pub kept: usize,
}

/// Whether a closed run past its retention may be purged, or another stored thing
/// still needs it. Today: never an open run; not a child whose parent is open (the
/// parent may still read its outcome); not a parent with an open child (its
/// session tree is still live). Whatever later keeps a closed run (a result
/// delivery still to be made, a wait on it) adds its condition here.
///
/// Asked twice: by the purge loop on its snapshot (so a run that must stay costs
/// the writer nothing) and by [`PurgeRuns`] in the transaction that purges.
pub fn may_purge(tx: &dyn Snapshot, run: &RunState) -> Result<bool, StorageError> {
    if run.status.is_open() {
        return Ok(false);
    }
    let ns = run.namespace.as_str();
    if !run.parent_run_id.is_empty()
        && tx
            .run(&RunKey::new(ns, &run.parent_run_id))?
            .is_some_and(|p| p.status.is_open())
    {
        return Ok(false);
    }
    for child in tx.children(ns, &run.run_id)? {
        if tx
            .run(&RunKey::new(ns, &child))?
            .is_some_and(|c| c.status.is_open())
        {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Apply for PurgeRuns {
    type Output = Purged;
    const NAME: &'static str = "purge_runs";

    fn apply(self, cx: &mut Cx) -> Result<Purged, CommandError> {
        let mut retention: HashMap<String, Option<Millis>> = HashMap::new();
        let mut done = Purged::default();
        for c in self.candidates {
            let keep_for = match retention.get(&c.ns) {
                Some(r) => *r,
                None => {
                    let r = cx.tx.namespace(&c.ns)?.map(|n| n.retention_ms).filter(|r| *r > 0);
                    retention.insert(c.ns.clone(), r);
                    r
                }
            };
            let Some(run) = cx.load(&RunKey::new(&c.ns, &c.run_id))? else {
                // The index outlived its run: drop the entry.
                cx.tx.unindex_closed(&c.ns, c.close_ms, &c.run_id)?;
                continue;
            };
            let close_ms = run.close_ms.unwrap_or(c.close_ms);
            let due = keep_for.is_some_and(|r| close_ms.saturating_add(r) <= cx.now());
            if !due || !may_purge(&*cx.tx, &run)? {
                done.kept += 1;
                continue;
            }
            cx.tx.purge_run(&run)?;
            done.purged.push(RunKey::new(c.ns, c.run_id));
        }
        Ok(done)
    }
}
