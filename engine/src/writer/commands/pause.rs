//! Pause or unpause a run and its open spawned descendants, in one commit.

use super::*;

/// Most runs one pause touches: a tree within the limits has far fewer.
const MAX_TREE: usize = 10_000;

/// Pauses (or unpauses) `run_id` and every open run it spawned, recursively.
#[derive(Debug)]
pub struct PauseRun {
    pub ns: String,
    pub run_id: String,
    pub identity: String,
    pub reason: String,
    /// `false`: unpause.
    pub pause: bool,
}

impl Apply for PauseRun {
    /// Whether the named run changed (it was not already so).
    type Output = bool;
    const NAME: &'static str = "pause_run";

    fn apply(self, cx: &mut Cx) -> Result<bool, CommandError> {
        let Self {
            ns,
            run_id,
            identity,
            reason,
            pause,
        } = self;
        let apply = |run: &mut RunState, out: &mut Out| -> Result<bool, Rejection> {
            Ok(if pause {
                run.pause(&identity, reason.clone(), out)?
            } else {
                run.unpause(&identity, out)?
            })
        };
        let changed = cx.with_run(&RunKey::new(&ns, &run_id), apply)?;
        let mut queue: Vec<String> = vec![run_id];
        let mut seen = 0;
        while let Some(parent) = queue.pop() {
            seen += 1;
            if seen > MAX_TREE {
                tracing::warn!(%parent, "pause stopped at {MAX_TREE} runs of one tree");
                break;
            }
            for child in cx.tx.children(&ns, &parent)? {
                let Some(run) = cx.load(&RunKey::new(&ns, &child))? else {
                    continue;
                };
                if !run.status.is_open() || run.parent_step_id.is_empty() {
                    continue;
                }
                let _ = cx.with_run(&RunKey::new(&ns, &child), apply).refused()?;
                queue.push(child);
            }
        }
        Ok(changed)
    }
}
