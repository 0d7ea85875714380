//! Child runs: a step starts children under its task token (and may end its lease
//! to wait for them) in one transaction; when runs of a tree close, their parents
//! hear of it and their children get their parent-close policy, in the same
//! transaction as the close.

use super::start::StartCommand;
use super::*;
use railyard_model::run::{ChildOutcome, ChildStarted, ParentClosePolicy, StartParams};

/// The server's bounds on a tree of runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildLimits {
    /// Deepest child: a root is depth 0, its children 1, ...
    pub max_depth: u32,
    /// Most children one run may start, over its whole life.
    pub max_children: u32,
}

impl Default for ChildLimits {
    fn default() -> Self {
        Self {
            max_depth: 3,
            max_children: 10,
        }
    }
}

/// A child run to start, its id chosen and its fields checked by the caller.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub run_id: String,
    pub definition: Arc<WorkflowDef>,
    pub goal: String,
    pub context: BTreeMap<String, String>,
    pub parent_close_policy: ParentClosePolicy,
}

/// Starts `children` under the lease `claims` names; with `wait`, ends that lease
/// with the step waiting for the new children and `wait.await_run_ids` (earlier
/// children of the same run). All of it or nothing, in one commit, so no child is
/// ever left without its waiting parent.
#[derive(Debug)]
pub struct SpawnChildren {
    pub claims: TokenClaims,
    pub identity: String,
    pub children: Vec<ChildSpec>,
    pub wait: Option<WaitFor>,
    pub limits: ChildLimits,
}

/// What the step waits for, and its transcript so far.
#[derive(Debug, Default)]
pub struct WaitFor {
    pub checkpoint: Vec<u8>,
    pub await_run_ids: Vec<String>,
}

/// The answer: the new children's run ids, in the order asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawned {
    pub child_run_ids: Vec<String>,
}

impl Apply for SpawnChildren {
    type Output = Spawned;
    const NAME: &'static str = "spawn_children";

    fn apply(self, cx: &mut Cx) -> Result<Spawned, CommandError> {
        let Self {
            claims,
            identity,
            mut children,
            mut wait,
            limits,
        } = self;
        let ns = claims.namespace.clone();
        let parent_key = claims.run_key();
        let Some(mut parent) = cx.load(&parent_key)? else {
            return Err(super::super::cx::not_found(&parent_key).into());
        };
        // Every check before the first write.
        if let Err(r) = parent.check_lease(&claims) {
            return Err(Rejection::from(r).into());
        }
        let answer: Vec<String> = children.iter().map(|c| c.run_id.clone()).collect();
        if already_started(cx, &ns, &parent.run_id, &answer)? {
            // A repeated spawn (its run ids derived from the same request id): the
            // children are there; only a wait is left to do.
            children.clear();
            match &mut wait {
                None => return Ok(Spawned { child_run_ids: answer }),
                Some(w) => {
                    w.await_run_ids.splice(0..0, answer.iter().cloned());
                }
            }
        }
        if !children.is_empty() {
            let depth = parent.depth + 1;
            if depth > limits.max_depth {
                return Err(Rejection::ResourceExhausted(format!(
                    "spawn_agent refused: a child of run {:?} would be at depth {depth}, past this server's limit of {} (a root run is depth 0)",
                    parent.run_id, limits.max_depth
                )).into());
            }
            let total = parent.children_started as usize + children.len();
            if total > limits.max_children as usize {
                return Err(Rejection::ResourceExhausted(format!(
                    "spawn_agent refused: run {:?} has started {} child runs; {} more would pass this server's limit of {} per run",
                    parent.run_id,
                    parent.children_started,
                    children.len(),
                    limits.max_children
                )).into());
            }
        }
        let mut done = Vec::new();
        if let Some(w) = &wait {
            for id in &w.await_run_ids {
                match cx.load(&RunKey::new(&ns, id))? {
                    Some(child)
                        if child.parent_run_id == parent.run_id && !child.parent_step_id.is_empty() =>
                    {
                        done.extend(ChildOutcome::of(&child));
                    }
                    _ => {
                        return Err(Rejection::field(
                            "await_run_ids",
                            format!(
                                "{} is not a child run started by run {:?}",
                                railyard_model::echo(id),
                                parent.run_id
                            ),
                        )
                        .into());
                    }
                }
            }
        }
        let step_id = parent.definition.steps[parent.current_step].id.clone();
        // Children join the parent's trace, under the span of the attempt that starts them.
        let trace = parent
            .trace
            .child_of(TraceContext::attempt_span_id(&ns, &parent.run_id, claims.lease));
        let before = Attempt::of(&parent);
        let starts: Vec<StartCommand> = children
            .iter()
            .map(|c| StartCommand {
                params: StartParams {
                    namespace: ns.clone(),
                    run_id: c.run_id.clone(),
                    goal: c.goal.clone(),
                    context: c.context.clone(),
                    parent_run_id: parent.run_id.clone(),
                    // Children run on their own workflow's queues.
                    identity: identity.clone(),
                    parent_step_id: step_id.clone(),
                    depth: parent.depth + 1,
                    parent_close_policy: c.parent_close_policy,
                    trace: Some(trace),
                    // A child is dispatched as its parent is: same priority and keys.
                    flow: parent.flow.clone(),
                    ..Default::default()
                },
                definition: c.definition.clone(),
            })
            .collect();
        for s in &starts {
            // Child starts carry no request id, so none matches an earlier start.
            s.check(cx)?;
        }
        let mut out = Out::new(cx.now(), cx.seq());
        let started: Vec<ChildStarted> = children
            .iter()
            .map(|c| ChildStarted {
                run_id: c.run_id.clone(),
                workflow_id: c.definition.id.clone(),
                parent_close_policy: c.parent_close_policy,
            })
            .collect();
        let mut awaited: Vec<String> = children.iter().map(|c| c.run_id.clone()).collect();
        let accepted = parent
            .children_started(&claims, &identity, &started, &mut out)
            .and_then(|()| match wait {
                Some(w) => {
                    awaited.extend(w.await_run_ids);
                    parent.suspend_on_children(&claims, &identity, w.checkpoint, awaited, done, &mut out)
                }
                None => Ok(()),
            });
        if let Err(r) = accepted {
            return Err(Rejection::from(r).into());
        }
        let t = Transition::new(parent, true, out).after(before);
        for s in starts {
            s.create(cx)?;
        }
        cx.save(t)?;
        Ok(Spawned { child_run_ids: answer })
    }
}

/// Whether the children `ids` were started by an earlier spawn of run `parent`: all
/// of them (a spawn commits whole), or none. A run of that id with another parent is
/// refused, naming the request id the ids came from.
fn already_started(cx: &Cx, ns: &str, parent: &str, ids: &[String]) -> Result<bool, CommandError> {
    let Some(first) = ids.first() else {
        return Ok(false);
    };
    let is_child = |id: &str| -> Result<Option<bool>, StorageError> {
        Ok(cx.load(&RunKey::new(ns, id))?.map(|r| r.parent_run_id == parent))
    };
    match is_child(first)? {
        None => Ok(false),
        Some(true) => {
            for id in &ids[1..] {
                if is_child(id)? != Some(true) {
                    return Err(Rejection::field(
                        "request_id",
                        "names a spawn with fewer children than this one: use a new request id",
                    )
                    .into());
                }
            }
            Ok(true)
        }
        Some(false) => Err(Rejection::field("request_id", "names run ids already used by another run").into()),
    }
}

/// Most family closes settled after one command: far above what the limits allow
/// (depth 3, 10 children a run), a bound against a corrupt tree.
const MAX_SETTLED: usize = 100_000;

/// For each run of a tree that closed in this command, in the same transaction:
/// its parent records the child's outcome (and resumes if that was the last one it
/// waited for), and its open spawned children get their parent-close policy.
/// Their closes settle in turn.
pub(crate) fn settle(cx: &mut Cx) -> Result<(), StorageError> {
    let mut settled = 0;
    while !cx.family.is_empty() && settled < MAX_SETTLED {
        let batch = std::mem::take(cx.family);
        settled += batch.len();
        for c in batch {
            let Some(run) = cx.load(&RunKey::new(&c.ns, &c.run_id))? else {
                continue;
            };
            if !run.parent_step_id.is_empty()
                && let Some(outcome) = ChildOutcome::of(&run)
            {
                let _ = cx
                    .with_run(&RunKey::new(&c.ns, &run.parent_run_id), |parent, out| {
                        parent.child_closed(outcome, out);
                        Ok(())
                    })
                    .refused()?;
            }
            if run.children_started == 0 {
                continue;
            }
            for child_id in cx.tx.children(&c.ns, &run.run_id)? {
                let reason = format!("parent run {:?} closed ({})", run.run_id, run.status.name());
                let _ = cx
                    .with_run(&RunKey::new(&c.ns, &child_id), |child, out| {
                        if !child.status.is_open() || child.parent_step_id.is_empty() {
                            return Ok(());
                        }
                        match child.parent_close_policy {
                            ParentClosePolicy::Abandon => Ok(()),
                            ParentClosePolicy::Cancel => Ok(child.cancel("server", reason, out)?),
                            ParentClosePolicy::Terminate => Ok(child.terminate("server", reason, out)?),
                        }
                    })
                    .refused()?;
            }
        }
    }
    Ok(())
}
