//! Applying one command inside the open write transaction.

use super::*;

/// One command's view of the open transaction.
pub(super) struct Cx<'a, 't> {
    pub(super) t: &'a mut Tables<'t>,
    pub(super) next_seq: &'a mut u64,
    pub(super) after: &'a mut Vec<After>,
    pub(super) now: Millis,
    pub(super) metrics: &'a Metrics,
    pub(super) matching: &'a Matching,
    pub(super) leases: &'a LeaseDeadlines,
}

impl Cx<'_, '_> {
    /// Applies one command. `Err` only for storage errors (which abort the batch);
    /// a refused command yields an answer carrying its error.
    pub(super) fn apply(&mut self, cmd: Command) -> Result<Answer, ApiError> {
        Ok(match cmd {
            Command::Start(c, reply) => {
                let r = self.start(c)?;
                answer(reply, r)
            }
            Command::Lease(task, worker, reply) => {
                let r = self.lease(task, &worker)?;
                answer_lease(reply, r, |g| Some(g.handed()))
            }
            Command::Heartbeat {
                claims,
                identity,
                checkpoint,
                notes,
                acked,
                reply,
            } => {
                let r = self.with_run(&claims.namespace.clone(), &claims.run_id.clone(), |run, out| {
                    let signals = run.heartbeat(&claims, &identity, checkpoint, notes, acked, out)?;
                    Ok(HeartbeatReply {
                        cancel_requested: run.cancel_requested,
                        signals,
                    })
                })?;
                answer(reply, r)
            }
            Command::Complete {
                claims,
                identity,
                completion,
                reply,
            } => {
                let r = self.complete(claims, &identity, completion)?;
                if r.is_ok() {
                    self.metrics
                        .steps_completed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                answer_lease(reply, r, |next| next.as_ref().map(Grant::handed))
            }
            Command::Fail {
                claims,
                identity,
                failure,
                reply,
            } => {
                let r = self.with_run(&claims.namespace.clone(), &claims.run_id.clone(), |run, out| {
                    run.fail(&claims, &identity, failure, out)
                })?;
                answer(reply, r)
            }
            Command::Signal {
                ns,
                run_id,
                identity,
                name,
                payload,
                request_id,
                reply,
            } => {
                let key = format!("signal:{request_id}");
                if !request_id.is_empty() && self.t.idempotency.get((ns.as_str(), key.as_str()))?.is_some() {
                    answer(reply, Ok(()))
                } else {
                    let r =
                        self.with_run(&ns, &run_id, |run, out| run.signal(&identity, name, payload, out))?;
                    if r.is_ok() && !request_id.is_empty() {
                        self.t
                            .idempotency
                            .insert((ns.as_str(), key.as_str()), run_id.as_str())?;
                    }
                    answer(reply, r)
                }
            }
            Command::Stop {
                how,
                ns,
                run_id,
                identity,
                reason,
                reply,
            } => {
                let r = self.with_run(&ns, &run_id, |run, out| match how {
                    Stop::Cancel => run.cancel(&identity, reason, out),
                    Stop::Terminate => run.terminate(&identity, reason, out),
                })?;
                answer(reply, r)
            }
            Command::FireTimers(reply) => {
                let r = self.fire_timers()?;
                answer(reply, Ok(r))
            }
            Command::Undelivered { ns, run_id, lease } => {
                let _ = self.with_run(&ns, &run_id, |run, out| {
                    run.undelivered(lease, out);
                    Ok(())
                })?;
                Box::new(|_| None)
            }
        })
    }

    fn load(&self, ns: &str, run_id: &str) -> Result<Option<RunState>, ApiError> {
        self.t
            .runs
            .get((ns, run_id, STATE_SLOT))?
            .map(|v| records::decode_run(v.value(), &self.t.defs, &self.t.definitions))
            .transpose()
    }

    /// Loads a run, applies `f`, and saves the result when `f` accepted it. The outer
    /// `Result` is storage; the inner one is the command's own answer.
    fn with_run<T>(
        &mut self,
        ns: &str,
        run_id: &str,
        f: impl FnOnce(&mut RunState, &mut Out) -> Result<T, ApiError>,
    ) -> Result<Result<T, ApiError>, ApiError> {
        let Some(mut run) = self.load(ns, run_id)? else {
            return Ok(Err(ApiError::NotFound(format!(
                "run {run_id:?} not found in namespace {ns:?}"
            ))));
        };
        let was_open = run.status.is_open();
        let mut out = Out::new(self.now, self.next_seq);
        match f(&mut run, &mut out) {
            Ok(v) => {
                let handoff = Self::sync_match(self.matching, &mut run, &mut out);
                let (events, effects) = (out.events, out.effects);
                self.save(&run, was_open, events, effects)?;
                self.hand_off(run, handoff)?;
                Ok(Ok(v))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// If the transition left a step ready and a poll is parked on its queue, leases
    /// the step to that poll in this same transaction.
    fn sync_match(matching: &Matching, run: &mut RunState, out: &mut Out) -> Option<(Waiter, Lease)> {
        let Phase::Scheduled { queue, task_seq } = &run.phase else {
            return None;
        };
        let (queue, task_seq) = (queue.clone(), *task_seq);
        let waiter = matching.claim(&run.namespace, &queue)?;
        match run.lease(task_seq, &waiter.identity, out) {
            Ok(lease) => Some((waiter, lease)),
            Err(_) => {
                matching.unclaim(&run.namespace, &queue, waiter);
                None
            }
        }
    }

    /// Queues the hand-off of a sync-matched lease for after the commit.
    fn hand_off(&mut self, run: RunState, handoff: Option<(Waiter, Lease)>) -> Result<(), ApiError> {
        let Some((waiter, lease)) = handoff else {
            return Ok(());
        };
        let checkpoint = self.checkpoint(&run)?;
        self.after.push(After::HandOff(
            waiter,
            Box::new(Grant {
                run,
                lease,
                checkpoint,
            }),
        ));
        Ok(())
    }

    /// The checkpoint of the run's step in flight (empty when none).
    fn checkpoint(&self, run: &RunState) -> Result<Vec<u8>, ApiError> {
        let key = (run.namespace.as_str(), run.run_id.as_str(), CHECKPOINT_SLOT);
        Ok(self
            .t
            .runs
            .get(key)?
            .map(|v| v.value().to_vec())
            .unwrap_or_default())
    }

    /// Writes a transition: its events, the state row and its effects. `was_open`:
    /// whether the run was open before it (false for a start).
    fn save(
        &mut self,
        run: &RunState,
        was_open: bool,
        events: Vec<crate::model::Event>,
        effects: Vec<Effect>,
    ) -> Result<(), ApiError> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        // A task enqueued and leased in the same transition (eager dispatch) never
        // becomes a row.
        let leased_at_once: Vec<u64> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::RemoveTask { task_seq, .. } => Some(*task_seq),
                _ => None,
            })
            .filter(|seq| {
                effects
                    .iter()
                    .any(|e| matches!(e, Effect::EnqueueTask { task_seq, .. } if task_seq == seq))
            })
            .collect();
        let effects = effects.into_iter().filter(|e| match e {
            Effect::EnqueueTask { task_seq, .. } | Effect::RemoveTask { task_seq, .. } => {
                !leased_at_once.contains(task_seq)
            }
            _ => true,
        });
        for ev in &events {
            let row = records::encode_event(ev, &self.t.defs)?;
            self.t.runs.insert((ns, id, ev.id), row.as_slice())?;
        }
        let row = records::encode_run(run, &self.t.defs)?;
        self.t.runs.insert((ns, id, STATE_SLOT), row.as_slice())?;
        if run.status.is_open() != was_open {
            if was_open {
                self.t.open_runs.remove((ns, id))?;
            } else {
                self.t.open_runs.insert((ns, id), ())?;
            }
        }
        self.after.push(After::Lease {
            ns: ns.into(),
            run_id: id.into(),
            deadline: run.lease_deadline(),
        });
        for effect in effects {
            match effect {
                Effect::EnqueueTask { queue, task_seq } => {
                    self.t.tasks.insert((ns, queue.as_str(), task_seq), id)?;
                    self.after.push(After::Enqueue(TaskRef {
                        namespace: ns.into(),
                        queue,
                        task_seq,
                        run_id: id.into(),
                    }));
                }
                Effect::RemoveTask { queue, task_seq } => {
                    self.t.tasks.remove((ns, queue.as_str(), task_seq))?;
                    self.after.push(After::Dequeue {
                        ns: ns.into(),
                        queue,
                        task_seq,
                    });
                }
                Effect::Timer { due_ms, timer } => {
                    *self.next_seq += 1;
                    self.t.timers.insert(
                        (due_ms, *self.next_seq),
                        records::encode_timer(&timer)?.as_slice(),
                    )?;
                    self.after.push(After::WakeTimers);
                }
                Effect::SaveCheckpoint(bytes) => {
                    self.t.runs.insert((ns, id, CHECKPOINT_SLOT), bytes.as_slice())?;
                }
                Effect::ClearCheckpoint => {
                    self.t.runs.remove((ns, id, CHECKPOINT_SLOT))?;
                }
            }
        }
        if !events.is_empty() {
            self.after.push(After::Notify {
                ns: ns.into(),
                run_id: id.into(),
                last_event_id: run.last_event_id,
            });
        }
        Ok(())
    }

    fn start(&mut self, c: StartCommand) -> Result<Result<Started, ApiError>, ApiError> {
        let ns = c.params.namespace.clone();
        let idem_key = format!("start:{}", c.params.request_id);
        if !c.params.request_id.is_empty()
            && let Some(existing) = self.t.idempotency.get((ns.as_str(), idem_key.as_str()))?
        {
            return Ok(Ok(Started {
                run_id: existing.value().to_string(),
                started: false,
            }));
        }
        if let Some(existing) = self.load(&ns, &c.params.run_id)? {
            let msg = if existing.status.is_open() {
                format!("run {:?} is already running", c.params.run_id)
            } else {
                format!(
                    "run {:?} already exists ({}); run ids are unique within a namespace",
                    c.params.run_id,
                    existing.status.name()
                )
            };
            return Ok(Err(ApiError::AlreadyExists(msg)));
        }
        let parent = c.params.parent_run_id.clone();
        if !parent.is_empty() && self.load(&ns, &parent)?.is_none() {
            return Ok(Err(ApiError::field(
                "parent_run_id",
                format!("run {parent:?} not found"),
            )));
        }
        let mut out = Out::new(self.now, self.next_seq);
        self.t.defs.store(&c.definition, &mut self.t.definitions)?;
        let mut run = RunState::start(c.params, c.definition, &mut out);
        let handoff = Self::sync_match(self.matching, &mut run, &mut out);
        let (events, effects) = (out.events, out.effects);
        self.save(&run, false, events, effects)?;
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        self.t.by_start.insert((ns, run.start_ms, id), ())?;
        if !run.request_id.is_empty() {
            self.t.idempotency.insert((ns, idem_key.as_str()), id)?;
        }
        if !parent.is_empty() {
            self.t.children.insert((ns, parent.as_str(), id), ())?;
        }
        self.metrics
            .runs_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let run_id = run.run_id.clone();
        self.hand_off(run, handoff)?;
        Ok(Ok(Started {
            run_id,
            started: true,
        }))
    }

    fn complete(
        &mut self,
        claims: TokenClaims,
        identity: &str,
        c: StepCompletion,
    ) -> Result<Result<Option<Grant>, ApiError>, ApiError> {
        let r = self.with_run(&claims.namespace.clone(), &claims.run_id.clone(), |run, out| {
            let queue = run.current_queue();
            run.complete(&claims, identity, c.notes, c.artifacts, c.context, out)?;
            let next_seq = match &run.phase {
                Phase::Scheduled { queue: q, task_seq } if c.take_next && Some(q) == queue.as_ref() => {
                    *task_seq
                }
                _ => return Ok(None),
            };
            let lease = run.lease(next_seq, identity, out)?;
            Ok(Some((run.clone(), lease)))
        })?;
        // A new step starts with no checkpoint.
        Ok(r.map(|next| {
            next.map(|(run, lease)| Grant {
                run,
                lease,
                checkpoint: Vec::new(),
            })
        }))
    }

    fn lease(&mut self, task: TaskRef, worker: &str) -> Result<Result<Grant, ApiError>, ApiError> {
        let r = self.with_run(&task.namespace, &task.run_id, |run, out| {
            let lease = run.lease(task.task_seq, worker, out)?;
            Ok((run.clone(), lease))
        })?;
        let (run, lease) = match r {
            Ok(v) => v,
            Err(e) => {
                // The run moved on (or is gone): drop the row if it is still there.
                self.t
                    .tasks
                    .remove((task.namespace.as_str(), task.queue.as_str(), task.task_seq))?;
                return Ok(Err(e));
            }
        };
        let checkpoint = self.checkpoint(&run)?;
        Ok(Ok(Grant {
            run,
            lease,
            checkpoint,
        }))
    }

    fn fire_timers(&mut self) -> Result<usize, ApiError> {
        let mut due = Vec::new();
        for row in self.t.timers.range(..=(self.now, u64::MAX))?.take(MAX_TIMERS) {
            let row = row?;
            due.push((row.0.value(), row.1.value().to_vec()));
        }
        for (key, _) in &due {
            self.t.timers.remove(*key)?;
        }
        let fired = due.len();
        for (_, bytes) in due {
            let timer = match records::decode_timer(&bytes) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(error = %e, "dropping an unreadable timer");
                    continue;
                }
            };
            // A timer whose attempt has moved on does nothing.
            let Timer::Backoff {
                namespace,
                run_id,
                step_index,
                attempt,
            } = timer;
            let _ = self.with_run(&namespace, &run_id, |run, out| {
                run.backoff_timer(step_index, attempt, out);
                Ok(())
            })?;
        }
        let due = self.leases.due(self.now, MAX_TIMERS.saturating_sub(fired));
        let fired = fired + due.len();
        for d in due {
            let checked = self.with_run(&d.namespace, &d.run_id, |run, out| {
                run.lease_timer(d.lease, out);
                Ok(())
            })?;
            if checked.is_err() {
                // The run is gone: forget its deadline.
                self.after.push(After::Lease {
                    ns: d.namespace,
                    run_id: d.run_id,
                    deadline: None,
                });
            }
        }
        if fired > 0 {
            self.after.push(After::WakeTimers);
        }
        Ok(fired)
    }
}
