//! Keeping a leased step's lease: the agent's per-turn heartbeats and a background
//! timer for long model calls and tool runs share one [`LeaseKeeper`]. It also ships
//! the step's live output ([`crate::output`]) in batches on a call of its own
//! (`AppendStepOutput`, `lease/output.rs`), never on the heartbeat's path.

mod output;

use std::sync::Mutex;
use std::time::Duration;

use railyard_proto::v1::{
    AcquireCapacityRequest, CoordinatorNote, ReportRateLimitedRequest, Signal, StepTask, StuckReport,
    TokenUsage,
};
use railyard_sdk::{CheckpointSync, ClientError, Completion, StepWorker};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::agent::{HeartbeatOutcome, Lease, LeaseError, SpawnError};
use crate::provider::BoxFuture;
use crate::report::{Reported, send_completion};

/// What the background heartbeats learned that must interrupt the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseStatus {
    Held,
    CancelRequested,
    Lost(String),
    /// The step ended the lease to wait for child runs.
    Waiting,
    /// The server failed the step itself (its token budget); nothing more is reported.
    FailedByServer(String),
}

struct KeeperState {
    /// The last checkpoint sent, for failing the step back from outside the agent.
    last_checkpoint: Vec<u8>,
    /// Highest signal event id received (signals are redelivered until acked).
    seen_signal_id: u64,
    /// Highest signal event id handed to the agent; what the server is told is acked.
    delivered_signal_id: u64,
    /// Signals received by background heartbeats, waiting for the agent's next turn.
    pending: Vec<Signal>,
    last_beat: Instant,
    /// The attempt's latest cumulative usage and its model, sent with every beat.
    usage: Option<(TokenUsage, String)>,
    /// Usage reported since the last beat that got through.
    usage_unsent: bool,
    /// Stuck reports waiting for a beat.
    stuck: Vec<StuckReport>,
}

/// The lease of one step.
pub(crate) struct LeaseKeeper {
    worker: StepWorker,
    token: String,
    state: Mutex<KeeperState>,
    status: watch::Sender<LeaseStatus>,
    /// Set: the keeper reports the agent's completion itself ([`Lease::complete`]),
    /// asking for the next step while this is false (the worker is not stopping).
    stopping: Option<watch::Receiver<bool>>,
    /// The answer of the completion reported, for the runner to finish with.
    reported: Mutex<Option<Reported>>,
    /// What the server acknowledged of the checkpoint, so a beat sends only what it
    /// gained (held across the beat: one checkpoint in flight at a time).
    sync: tokio::sync::Mutex<CheckpointSync>,
    /// Live output waiting to be shipped.
    output: output::OutputQueue,
    /// The fleet's rate-limit key: capacity is asked under it (none: always go).
    rate_limit_key: Option<String>,
}

impl LeaseKeeper {
    pub(crate) fn new(worker: StepWorker, task: &StepTask) -> Self {
        // The agent hands the signals that came with the task to the model at its first
        // turn, so they count as delivered: the first heartbeat acknowledges them.
        let queued = task.signals.iter().map(|s| s.event_id).max().unwrap_or(0);
        Self {
            worker,
            token: task.task_token.clone(),
            state: Mutex::new(KeeperState {
                last_checkpoint: task.checkpoint.clone(),
                seen_signal_id: queued,
                delivered_signal_id: queued,
                pending: Vec::new(),
                last_beat: Instant::now(),
                usage: None,
                usage_unsent: false,
                stuck: Vec::new(),
            }),
            status: watch::channel(LeaseStatus::Held).0,
            stopping: None,
            reported: Mutex::new(None),
            sync: tokio::sync::Mutex::new(CheckpointSync::from_task(task)),
            output: output::OutputQueue::default(),
            rate_limit_key: None,
        }
    }

    /// Reports the agent's completion from inside its loop ([`Lease::complete`]), so a
    /// refused result goes back to the model; asks for the next step unless `stopping`.
    pub(crate) fn reporting_completions(mut self, stopping: watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    /// Asks capacity under `key` before each model call, and reports 429s under it.
    pub(crate) fn with_rate_limit_key(mut self, key: Option<String>) -> Self {
        self.rate_limit_key = key;
        self
    }

    /// The answer of the completion reported for the agent, if it reported one.
    pub(crate) fn take_reported(&self) -> Option<Reported> {
        self.reported.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, KeeperState> {
        // A panic elsewhere while holding the lock leaves plain data; keep going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes of the lease's status.
    pub(crate) fn subscribe(&self) -> watch::Receiver<LeaseStatus> {
        self.status.subscribe()
    }

    pub(crate) fn last_checkpoint(&self) -> Vec<u8> {
        self.state().last_checkpoint.clone()
    }

    async fn beat(
        &self,
        checkpoint: Vec<u8>,
        notes: Vec<CoordinatorNote>,
        deliver: bool,
    ) -> Result<HeartbeatOutcome, LeaseError> {
        let (acked, usage, stuck) = {
            let mut s = self.state();
            if !checkpoint.is_empty() {
                s.last_checkpoint = checkpoint.clone();
            }
            s.last_beat = Instant::now();
            s.usage_unsent = false;
            (
                s.delivered_signal_id,
                s.usage.clone(),
                std::mem::take(&mut s.stuck),
            )
        };
        let mut beat = self
            .worker
            .heartbeat(&self.token)
            .notes(notes)
            .ack_signals(acked)
            .stuck(stuck.clone());
        if let Some((usage, model)) = usage {
            beat = beat.usage(usage, model);
        }
        let sent = if checkpoint.is_empty() {
            beat.send().await
        } else {
            let mut sync = self.sync.lock().await;
            beat.checkpoint(&checkpoint).sync(&mut sync).send().await
        };
        if sent.is_err() {
            // Not delivered: the next beat carries them again.
            let mut s = self.state();
            s.usage_unsent = s.usage.is_some();
            let later = std::mem::replace(&mut s.stuck, stuck);
            s.stuck.extend(later);
        }
        match sent {
            Ok(resp) if !resp.budget_exceeded.is_empty() => {
                let message = resp.budget_exceeded;
                self.status
                    .send_replace(LeaseStatus::FailedByServer(message.clone()));
                Ok(HeartbeatOutcome {
                    budget_exceeded: Some(message),
                    ..Default::default()
                })
            }
            Ok(resp) => {
                let mut s = self.state();
                for signal in resp.signals {
                    // Unacked signals come again with every heartbeat; take each once.
                    if signal.event_id == 0 || signal.event_id > s.seen_signal_id {
                        s.seen_signal_id = s.seen_signal_id.max(signal.event_id);
                        s.pending.push(signal);
                    }
                }
                let signals = if deliver {
                    std::mem::take(&mut s.pending)
                } else {
                    Vec::new()
                };
                if let Some(max) = signals.iter().map(|sig| sig.event_id).max() {
                    s.delivered_signal_id = s.delivered_signal_id.max(max);
                }
                drop(s);
                if resp.cancel_requested {
                    self.status.send_replace(LeaseStatus::CancelRequested);
                }
                Ok(HeartbeatOutcome {
                    cancel_requested: resp.cancel_requested,
                    signals,
                    pause_requested: resp.pause_requested,
                    budget_exceeded: None,
                })
            }
            Err(
                e @ (ClientError::FailedPrecondition(_)
                | ClientError::NotFound(_)
                | ClientError::PermissionDenied(_)
                | ClientError::Unauthenticated(_)),
            ) => {
                let message = e.to_string();
                self.status.send_replace(LeaseStatus::Lost(message.clone()));
                Err(LeaseError::Lost(message))
            }
            Err(e) => Err(LeaseError::Failed(e.to_string())),
        }
    }

    /// Sends the usage reported since the last beat, if any, with one more beat: called
    /// before the step's result is reported, so the last turn's tokens are recorded.
    pub(crate) async fn flush_usage(&self) -> Result<(), LeaseError> {
        if !self.state().usage_unsent {
            return Ok(());
        }
        self.beat(Vec::new(), Vec::new(), false).await.map(|_| ())
    }

    /// Heartbeats whenever `interval` passes without one, until the lease ends. Runs
    /// beside the agent so a long model call or tool run does not let the lease lapse.
    pub(crate) async fn keep_alive(&self, interval: Duration) {
        loop {
            let due = self.state().last_beat + interval;
            tokio::time::sleep_until(due).await;
            if *self.status.borrow() != LeaseStatus::Held {
                return;
            }
            if self.state().last_beat + interval > Instant::now() {
                continue; // the agent heartbeated meanwhile
            }
            match self.beat(Vec::new(), Vec::new(), false).await {
                Ok(_) => debug!("background heartbeat"),
                Err(LeaseError::Lost(_)) => return,
                Err(LeaseError::Failed(e)) => warn!(error = %e, "background heartbeat failed; will retry"),
            }
            if *self.status.borrow() != LeaseStatus::Held {
                return;
            }
        }
    }
}

impl Lease for LeaseKeeper {
    fn heartbeat(
        &self,
        checkpoint: Vec<u8>,
        notes: Vec<CoordinatorNote>,
    ) -> BoxFuture<'_, Result<HeartbeatOutcome, LeaseError>> {
        Box::pin(self.beat(checkpoint, notes, true))
    }

    fn acquire_capacity(&self, tokens: u64) -> BoxFuture<'_, Result<Option<i64>, LeaseError>> {
        Box::pin(async move {
            let Some(key) = &self.rate_limit_key else {
                return Ok(None);
            };
            let req = AcquireCapacityRequest {
                task_token: self.token.clone(),
                identity: self.worker.identity().to_string(),
                key: key.clone(),
                tokens,
            };
            match self.worker.client().acquire_capacity(req).await {
                Ok(a) if a.go => Ok(None),
                Ok(a) => Ok(Some(a.retry_at_unix_ms)),
                Err(
                    e @ (ClientError::NotFound(_)
                    | ClientError::PermissionDenied(_)
                    | ClientError::FailedPrecondition(_)),
                ) => Err(LeaseError::Lost(e.to_string())),
                Err(e) => Err(LeaseError::Failed(e.to_string())),
            }
        })
    }

    fn report_rate_limited(&self, reset_unix_ms: i64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Some(key) = &self.rate_limit_key else {
                return;
            };
            let req = ReportRateLimitedRequest {
                task_token: self.token.clone(),
                identity: self.worker.identity().to_string(),
                key: key.clone(),
                reset_time_unix_ms: reset_unix_ms,
            };
            if let Err(e) = self.worker.client().report_rate_limited(req).await {
                warn!(error = %e, %key, "the rate limit could not be reported");
            }
        })
    }

    fn settle(&self, notes: Vec<CoordinatorNote>) -> BoxFuture<'_, Result<(), LeaseError>> {
        // Signals that arrive now stay pending (unacknowledged) for the next step.
        Box::pin(async move { self.beat(Vec::new(), notes, false).await.map(|_| ()) })
    }

    fn spawn(
        &self,
        children: Vec<railyard_proto::v1::ChildRunSpec>,
        wait: bool,
        await_run_ids: Vec<String>,
        checkpoint: Vec<u8>,
    ) -> BoxFuture<'_, Result<Vec<String>, SpawnError>> {
        Box::pin(async move {
            if wait && !checkpoint.is_empty() {
                self.state().last_checkpoint = checkpoint.clone();
            }
            match self
                .worker
                .spawn_children(&self.token, children, wait, await_run_ids, checkpoint)
                .await
            {
                Ok(ids) => {
                    if wait {
                        self.status.send_replace(LeaseStatus::Waiting);
                    }
                    Ok(ids)
                }
                // The lease itself is gone (stale, or the run moved on or closed): the
                // server's only FAILED_PRECONDITION answers here.
                Err(
                    e @ (ClientError::FailedPrecondition(_)
                    | ClientError::PermissionDenied(_)
                    | ClientError::Unauthenticated(_)),
                ) => Err(SpawnError::Lost(e.to_string())),
                // A limit, an unknown workflow, a bad field, a network failure: the
                // model reads it and decides.
                Err(e) => Err(SpawnError::Refused(e.to_string())),
            }
        })
    }

    fn set_search_attributes(
        &self,
        attributes: std::collections::HashMap<String, String>,
    ) -> BoxFuture<'_, Result<u32, String>> {
        Box::pin(async move {
            self.worker
                .upsert_search_attributes(&self.token, attributes)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn report_issue(
        &self,
        severity: String,
        summary: String,
        details: String,
    ) -> BoxFuture<'_, Result<(bool, u32), String>> {
        Box::pin(async move {
            self.worker
                .report_issue(&self.token, severity, summary, details)
                .await
                .map(|r| (r.recorded, r.step_issues))
                .map_err(|e| e.to_string())
        })
    }

    fn complete(&self, completion: &Completion, checkpoint: Vec<u8>) -> BoxFuture<'_, Result<(), String>> {
        let completion = completion.clone();
        Box::pin(async move {
            if !checkpoint.is_empty() {
                self.state().last_checkpoint = checkpoint.clone();
            }
            let Some(stopping) = &self.stopping else {
                return Ok(());
            };
            // The last turn's tokens reach the server before the result does: after the
            // completion the lease is gone and they could not. A lease lost here, or a
            // step the server failed on those tokens (its budget), is left for the runner
            // to see; nothing is sent.
            if let Err(LeaseError::Lost(_)) = self.flush_usage().await {
                return Ok(());
            }
            if matches!(*self.status.borrow(), LeaseStatus::FailedByServer(_)) {
                return Ok(());
            }
            // The step's last output reaches watchers before its run moves on.
            self.flush_output().await;
            let take_next = !*stopping.borrow();
            let sent = send_completion(&self.worker, &self.token, &completion, checkpoint, take_next).await;
            match sent {
                // Nothing completed: the model can fix its input and call again.
                Err(ClientError::InvalidArgument(why)) => Err(why),
                other => {
                    *self.reported.lock().unwrap_or_else(|p| p.into_inner()) = Some(other);
                    Ok(())
                }
            }
        })
    }

    fn report_usage(&self, usage: TokenUsage, model: &str) {
        let mut s = self.state();
        s.usage = Some((usage, model.to_string()));
        s.usage_unsent = true;
    }

    fn report_stuck(&self, report: StuckReport) {
        self.state().stuck.push(report);
    }

    fn output(&self, chunk: crate::output::OutputChunk) {
        self.output.push(chunk);
    }
}

/// The background heartbeat period: the configured one, or a third of the step's
/// heartbeat timeout when that is shorter.
pub(crate) fn heartbeat_interval(configured: Duration, heartbeat_timeout_ms: u32) -> Duration {
    let mut interval = configured;
    if heartbeat_timeout_ms > 0 {
        interval = interval.min(Duration::from_millis(heartbeat_timeout_ms.into()) / 3);
    }
    interval.max(Duration::from_millis(50))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_rules() {
        let ten = Duration::from_secs(10);
        assert_eq!(heartbeat_interval(ten, 0), ten);
        assert_eq!(heartbeat_interval(ten, 9_000), Duration::from_secs(3));
        assert_eq!(heartbeat_interval(ten, 60_000), ten);
        assert_eq!(heartbeat_interval(ten, 30), Duration::from_millis(50));
    }
}
