//! Start a new run.

use super::*;

/// A new run to start.
#[derive(Debug)]
pub struct StartCommand {
    pub params: StartParams,
    pub definition: Arc<WorkflowDef>,
}

impl StartCommand {
    fn idempotency_key(&self) -> String {
        format!("start:{}", self.params.request_id)
    }

    /// Every check of a start, before anything is written: `Some` when the request
    /// id matched an earlier start (the answer, and nothing to do), an error when
    /// the start is refused. The namespace's limits (open runs, starts per second)
    /// are checked last, here for every start a client or another run asks for and
    /// in `schedule::start` for a schedule's fires.
    pub(super) fn check(&self, cx: &mut Cx) -> Result<Option<Started>, CommandError> {
        self.check_freeing(cx, 0)
    }

    /// [`Self::check`] for a start that closes `freeing` open runs of its namespace
    /// in the same commit (a replace): the open-runs limit counts them as closed.
    pub(super) fn check_freeing(&self, cx: &mut Cx, freeing: u64) -> Result<Option<Started>, CommandError> {
        let p = &self.params;
        let ns = p.namespace.as_str();
        if !p.request_id.is_empty()
            && let Some(run_id) = cx.tx.idempotency(ns, &self.idempotency_key())?
        {
            return Ok(Some(Started {
                run_id,
                started: false,
            }));
        }
        // Checked again here: the namespace may have been deleted since the request
        // was resolved.
        let Some(namespace) = cx.tx.namespace(ns)? else {
            return Err(Rejection::NotFound(format!("namespace {ns:?} does not exist")).into());
        };
        if let Some(existing) = cx.load(&RunKey::new(ns, &p.run_id))? {
            let msg = if existing.status.is_open() {
                format!("run {:?} is already running", p.run_id)
            } else {
                format!(
                    "run {:?} already exists ({}); run ids are unique within a namespace",
                    p.run_id,
                    existing.status.name()
                )
            };
            return Err(Rejection::AlreadyExists(msg).into());
        }
        if let Err(e) =
            railyard_model::attributes::parse_set(&namespace.attributes, &p.attributes, "attributes")
        {
            return Err(e.into());
        }
        if let Err(e) =
            railyard_model::run::size::check_start(&p.run_id, &self.definition, &p.goal, &p.context)
        {
            return Err(Rejection::from(e).into());
        }
        let parent = &p.parent_run_id;
        if !parent.is_empty() && cx.load(&RunKey::new(ns, parent))?.is_none() {
            return Err(Rejection::field("parent_run_id", format!("run {parent:?} not found")).into());
        }
        // Last, so that a token of the starts bucket is taken only by a start that
        // will happen.
        if let Err(e) = cx.limits.check_freeing(&namespace, cx.now(), freeing) {
            return Err(e.into());
        }
        Ok(None)
    }

    /// Writes the new run, once [`Self::check`] let it through.
    pub(super) fn create(self, cx: &mut Cx) -> Result<Started, StorageError> {
        self.create_with(cx, RunState::start)
    }

    /// [`Self::create`], the run made by `make` (a reset's [`RunState::start_reset`]).
    pub(super) fn create_with(
        self,
        cx: &mut Cx,
        make: impl FnOnce(StartParams, Arc<WorkflowDef>, &mut Out) -> RunState,
    ) -> Result<Started, StorageError> {
        let idem_key = self.idempotency_key();
        let namespace = cx.tx.namespace(&self.params.namespace)?;
        // Checked by `check` in this transaction: the declarations have not changed.
        let attributes = namespace
            .as_ref()
            .and_then(|n| {
                railyard_model::attributes::parse_set(&n.attributes, &self.params.attributes, "attributes")
                    .ok()
            })
            .unwrap_or_default();
        let ns_principles = namespace.and_then(|n| n.principles);
        let principles = cx
            .workflows
            .principles_for(ns_principles.as_ref(), &self.definition);
        let identity = self.params.identity.clone();
        let mut out = Out::new(cx.now(), cx.seq());
        let mut run = make(self.params, self.definition, &mut out);
        // Pinned: a run keeps what it started with, whatever the file or the
        // definition say later (invariant 14).
        run.principles = principles;
        // Within the bound by the check: a new run holds no attribute yet.
        if let Err(e) = run.set_attributes(attributes, "", &identity, &mut out) {
            tracing::warn!(error = %e, "search attributes of a new run not set");
        }
        let t = Transition::new(run, false, out);
        let (ns, id) = (t.run.namespace.clone(), t.run.run_id.clone());
        cx.tx.index_run(&ns, t.run.start_ms, &id, &t.run.parent_run_id)?;
        if !t.run.request_id.is_empty() {
            cx.tx.insert_idempotency(&ns, &idem_key, &id)?;
        }
        cx.save(t)?;
        cx.metrics
            .runs_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Started {
            run_id: id,
            started: true,
        })
    }
}

impl Apply for StartCommand {
    type Output = Started;
    const NAME: &'static str = "start";

    fn apply(self, cx: &mut Cx) -> Result<Started, CommandError> {
        match self.check(cx)? {
            Some(earlier) => Ok(earlier),
            None => Ok(self.create(cx)?),
        }
    }
}
