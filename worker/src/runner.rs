//! The worker process: one poll loop per queue, N step slots, lease keeping, reporting,
//! reconnection and graceful shutdown.
//!
//! Completing a step asks for the run's next step as well (eager dispatch): when it goes
//! to the same queue the server leases it to this worker in the same commit, and it runs
//! at once in the slot the finished step held, without a poll.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use railyard_proto::v1::StepTask;
use railyard_sdk::{Client, ClientError, Completion, Failure, RetryPolicy, StepWorker};
use tokio::sync::{Semaphore, watch};
use tracing::{Instrument, debug, error, info, warn};

use crate::WorkerError;
use crate::agent::{Agent, AgentOptions, LeaseError, Outcome};
use crate::config::WorkerConfig;
use crate::events::{EventKind, EventSink, StepRef, WorkerEvent};
use crate::lease::{LeaseKeeper, LeaseStatus, heartbeat_interval};
use crate::mcp::McpHub;
use crate::provider::{self, Provider};
use crate::report::{Reported, send_completion, with_retries};

/// How long one long poll waits for a task.
const POLL_WAIT: Duration = Duration::from_secs(10);
/// After shutdown, how long an in-flight poll may still bring a task back (which is
/// then failed back at once rather than dropped to time out).
const SHUTDOWN_POLL_DRAIN: Duration = Duration::from_secs(3);
/// Pauses between polls while the server is unreachable: from 0.5 s up to 30 s, with
/// jitter, so workers that lost a restarting server together do not all come back in
/// the same instant.
const RECONNECT: RetryPolicy = RetryPolicy {
    max_attempts: u32::MAX,
    initial_backoff: Duration::from_millis(500),
    max_backoff: Duration::from_secs(30),
};
/// Time allowed for failing steps back once the grace period is over.
const REPORT_GRACE: Duration = Duration::from_secs(20);

/// A worker with optional hooks.
pub struct Worker {
    config: WorkerConfig,
    provider: Option<Arc<dyn Provider>>,
    events: Option<EventSink>,
}

impl Worker {
    /// A worker for `config`; the provider is built from `config.provider` at start.
    pub fn new(config: WorkerConfig) -> Self {
        Self {
            config,
            provider: None,
            events: None,
        }
    }

    /// Uses `provider` instead of building one from the config.
    pub fn with_provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Sends progress events (step leased, tool calls, model text, results) to `sink`.
    pub fn with_events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    /// Polls and runs steps until `shutdown` resolves; then stops polling, gives running
    /// steps `shutdown_grace` to finish, and fails the rest back as `worker_shutdown`
    /// (retryable, with their checkpoint) so another worker takes them at once.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), WorkerError> {
        let config = self.config;
        let provider = match self.provider {
            Some(p) => p,
            None => provider::from_config(&config.provider)?,
        };
        create_private_dir(&config.workspace).map_err(|source| WorkerError::Workspace {
            path: config.workspace.clone(),
            source,
        })?;
        let opts = railyard_sdk::ConnectOptions {
            api_key: config.api_key.clone(),
            tls: config.tls.clone(),
            ..Default::default()
        };
        let client = Client::connect_with(&config.server_url, opts).await?;
        // The credentials are in the configuration now; commands must not find them,
        // nor anything else of the environment `bash` does not pass on.
        let key = config.api_key.as_ref().map(|k| k.expose()).unwrap_or_default();
        let protection = crate::secrets::protect_process(&config.bash_env, &[key]);
        // What a command orphans (setsid) stays in this process's tree, to be ended.
        let subreaper = crate::tools::reaper::adopt_orphans();
        let mut options = AgentOptions {
            price: config.prices.get(provider.model()).copied(),
            prices: config.prices.clone(),
            ..AgentOptions::default()
        };
        let models = Arc::new(provider::Models::new(provider.clone(), config.providers.clone()));
        options
            .tool_limits
            .web_allow_networks
            .extend(config.web_fetch_allow_networks.iter().copied());
        for name in &config.bash_env {
            if !options.tool_limits.bash_env.contains(name) {
                options.tool_limits.bash_env.push(name.clone());
            }
        }
        info!(non_dumpable = protection.non_dumpable, wiped = ?protection.wiped,
            wiped_args = protection.wiped_args, subreaper, bash_env = ?options.tool_limits.bash_env,
            "worker environment protected");
        info!(identity = %config.identity, server = %config.server_url, namespace = %config.namespace,
            queues = ?config.queues, slots = config.slots, provider = %config.provider.describe(),
            workspace = %config.workspace.display(), "worker started");

        let (stop_tx, stop_rx) = watch::channel(false);
        let (force_tx, force_rx) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(config.slots));
        let mcp = Arc::new(McpHub::new(config.mcp.clone(), config.bash_env.clone()));
        let shared = Arc::new(Shared {
            agent: Agent::new(provider)
                .with_options(options)
                .with_events(self.events.clone())
                .with_mcp(mcp.clone())
                .with_models(models),
            events: self.events,
            slots: slots.clone(),
            stop: stop_rx,
            force: force_rx,
            config,
        });
        let pollers: Vec<_> = shared
            .config
            .queues
            .iter()
            .map(|queue| {
                let worker = StepWorker::new(
                    client.clone(),
                    &shared.config.namespace,
                    queue,
                    &shared.config.identity,
                );
                tokio::spawn(poll_loop(shared.clone(), worker))
            })
            .collect();

        shutdown.await;
        let all = u32::try_from(shared.config.slots).unwrap_or(u32::MAX);
        info!(grace = ?shared.config.shutdown_grace, "shutdown requested: polling stops, running steps may finish");
        stop_tx.send_replace(true);
        for poller in pollers {
            let _ = poller.await;
        }
        // Counted once the pollers are gone: a parked poll holds a slot too.
        let running = shared.config.slots - slots.available_permits();
        if running > 0 {
            info!(running, "polling stopped; waiting for running steps");
        }
        // Every running step holds a slot, so holding all slots means all steps are done.
        if tokio::time::timeout(shared.config.shutdown_grace, slots.acquire_many(all))
            .await
            .is_err()
        {
            let running = shared.config.slots - slots.available_permits();
            warn!(
                running,
                "shutdown grace period over: failing running steps back to the server"
            );
            force_tx.send_replace(true);
            if tokio::time::timeout(REPORT_GRACE, slots.acquire_many(all))
                .await
                .is_err()
            {
                error!(
                    "some steps could not be failed back in time; they will be retried after their lease expires"
                );
            }
        }
        mcp.shutdown();
        info!("worker stopped");
        Ok(())
    }
}

struct Shared {
    config: WorkerConfig,
    agent: Agent,
    events: Option<EventSink>,
    slots: Arc<Semaphore>,
    /// Set when polling must stop.
    stop: watch::Receiver<bool>,
    /// Set when the grace period is over and running steps must be failed back.
    force: watch::Receiver<bool>,
}

impl Shared {
    fn emit(&self, step: &StepRef, kind: EventKind) {
        if let Some(sink) = &self.events {
            sink(WorkerEvent {
                step: step.clone(),
                kind,
            });
        }
    }
}

/// Resolves once `stop` is set and `extra` has passed since.
async fn stopped_for(mut stop: watch::Receiver<bool>, extra: Duration) {
    if stop.wait_for(|s| *s).await.is_ok() {
        tokio::time::sleep(extra).await;
    } else {
        std::future::pending::<()>().await;
    }
}

async fn poll_loop(shared: Arc<Shared>, worker: StepWorker) {
    let queue = worker.queue().to_string();
    let mut stop = shared.stop.clone();
    let mut pauses = RECONNECT.delays();
    let mut failures = 0u32;
    loop {
        if *stop.borrow() {
            break;
        }
        // Poll only with a free slot, so a leased step never waits for one.
        let permit = tokio::select! {
            p = shared.slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stop.wait_for(|s| *s) => break,
        };
        let polled = tokio::select! {
            r = worker.poll(POLL_WAIT) => r,
            _ = stopped_for(shared.stop.clone(), SHUTDOWN_POLL_DRAIN) => break,
        };
        match polled {
            Ok(task) => {
                if failures > 0 {
                    info!(queue = %queue, failures, "server reachable again; polling resumed");
                    failures = 0;
                    pauses = RECONNECT.delays();
                }
                let Some(task) = task else { continue };
                let shared = shared.clone();
                let worker = worker.clone();
                tokio::spawn(async move {
                    run_in_slot(&shared, &worker, task).await;
                    drop(permit);
                });
            }
            Err(e) => {
                drop(permit);
                failures += 1;
                let pause = pauses.next().unwrap_or(RECONNECT.max_backoff);
                if !e.is_transient() {
                    error!(queue = %queue, failures, retry_in = ?pause, error = %e, "poll failed");
                } else {
                    warn!(queue = %queue, failures, retry_in = ?pause, error = %e, "server unavailable; will retry");
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        }
    }
    debug!(queue = %queue, "poll loop stopped");
}

/// Runs a polled step in its slot and then, for as long as completing a step hands
/// back the run's next step (eager dispatch), that step too, in the same slot.
async fn run_in_slot(shared: &Shared, worker: &StepWorker, polled: StepTask) {
    let mut next = Some((polled, false));
    while let Some((task, eager)) = next.take() {
        let span = crate::trace::step_span(&task, worker.queue());
        next = run_leased(shared, worker, task, eager)
            .instrument(span)
            .await
            .map(|t| (t, true));
    }
}

enum Interrupted {
    Lease(LeaseStatus),
    Shutdown,
}

/// Runs one leased step (`eager`: handed over by the previous step's completion rather
/// than polled) and reports its result. Returns the run's next step when the completion
/// came back with it, already leased to this worker.
async fn run_leased(shared: &Shared, worker: &StepWorker, task: StepTask, eager: bool) -> Option<StepTask> {
    let step = StepRef {
        run_id: task.run_id.clone(),
        step_id: task.step_id.clone(),
        attempt: task.attempt,
        queue: worker.queue().to_string(),
    };
    let resumed = !task.checkpoint.is_empty();
    info!(title = %task.step_title, resumed, eager, "step leased");
    shared.emit(
        &step,
        EventKind::StepLeased {
            title: task.step_title.clone(),
            step_index: task.step_index,
            step_count: task.step_count,
            resumed,
        },
    );
    if *shared.stop.borrow() {
        // Arrived while shutting down: hand it straight back instead of starting it.
        let failure = shutdown_failure(task.checkpoint.clone());
        report_failure(shared, worker, &task, &step, failure).await;
        return None;
    }
    let dir = match prepare_workspace(&shared.config.workspace, &task.run_id).await {
        Ok(dir) => dir,
        Err(message) => {
            let failure = Failure {
                error_type: "workspace_error".into(),
                message,
                non_retryable: false,
                checkpoint: task.checkpoint.clone(),
            };
            report_failure(shared, worker, &task, &step, failure).await;
            return None;
        }
    };

    let keeper = LeaseKeeper::new(worker.clone(), &task)
        .reporting_completions(shared.stop.clone())
        .with_rate_limit_key(shared.config.rate_limit_key.clone());
    let interval = heartbeat_interval(shared.config.heartbeat_interval, task.heartbeat_timeout_ms);
    let mut status = keeper.subscribe();
    let mut force = shared.force.clone();
    let ended = tokio::select! {
        report = shared.agent.run_step(&task, worker.queue(), &dir, &keeper) => Ok(report),
        _ = keeper.keep_alive(interval) => {
            // keep_alive only returns once the lease is no longer simply held.
            Err(Interrupted::Lease(keeper.subscribe().borrow().clone()))
        }
        _ = keeper.ship_output() => {
            // Returns, like keep_alive, only once the lease is no longer simply held.
            Err(Interrupted::Lease(keeper.subscribe().borrow().clone()))
        }
        s = status.wait_for(|s| *s != LeaseStatus::Held) => {
            Err(Interrupted::Lease(s.map(|s| s.clone()).unwrap_or(LeaseStatus::Held)))
        }
        _ = force.wait_for(|f| *f) => Err(Interrupted::Shutdown),
    };

    match ended {
        Ok(report) => {
            // The step's last output goes before its result (or failure) is reported.
            keeper.flush_output().await;
            if keeper.output_dropped() > 0 {
                warn!(
                    dropped = keeper.output_dropped(),
                    "live output chunks dropped by the worker (queue full or batch lost)"
                );
            }
            info!(
                turns = report.turns,
                refused_tool_calls = report.refused_tool_calls,
                tokens = report.usage.total(),
                cost_usd = report.cost_usd,
                "agent loop ended"
            );
            // The last turn's tokens reach the server before the result does; the
            // server may fail the step on them (its budget), and then that is the end.
            if matches!(report.outcome, Outcome::Completed(_) | Outcome::Failed(_)) {
                match keeper.flush_usage().await {
                    Ok(()) | Err(LeaseError::Failed(_)) => {}
                    Err(LeaseError::Lost(message)) => {
                        lease_lost(shared, &step, message);
                        return None;
                    }
                }
                if let LeaseStatus::FailedByServer(message) = keeper.subscribe().borrow().clone() {
                    failed_by_server(shared, &step, message);
                    return None;
                }
            }
            match report.outcome {
                Outcome::Completed(completion) => {
                    let reported = keeper.take_reported();
                    return report_completion(shared, worker, &task, &step, completion, reported).await;
                }
                Outcome::Failed(failure) => report_failure(shared, worker, &task, &step, failure).await,
                Outcome::Canceled { checkpoint } => {
                    report_canceled(shared, worker, &task, &step, checkpoint).await
                }
                Outcome::LeaseLost(message) => lease_lost(shared, &step, message),
                Outcome::Paused { checkpoint } => {
                    let failure = Failure {
                        error_type: railyard_model::tools::PAUSED_ERROR_TYPE.into(),
                        message: "the run was paused; the step suspended at its turn".into(),
                        non_retryable: false,
                        checkpoint,
                    };
                    report_failure(shared, worker, &task, &step, failure).await
                }
                Outcome::RateLimited {
                    checkpoint,
                    until_unix_ms,
                } => report_parked(shared, worker, &task, &step, checkpoint, until_unix_ms).await,
                Outcome::Waiting { child_run_ids } => {
                    info!(children = ?child_run_ids, "step waits for child runs; slot released");
                }
                Outcome::EndedByServer { message, .. } => failed_by_server(shared, &step, message),
            }
        }
        Err(Interrupted::Lease(LeaseStatus::CancelRequested)) => {
            report_canceled(shared, worker, &task, &step, keeper.last_checkpoint()).await
        }
        Err(Interrupted::Lease(LeaseStatus::Lost(message))) => lease_lost(shared, &step, message),
        Err(Interrupted::Lease(LeaseStatus::Waiting)) => {
            info!("step waits for child runs; slot released");
        }
        Err(Interrupted::Lease(LeaseStatus::FailedByServer(message))) => {
            failed_by_server(shared, &step, message)
        }
        Err(Interrupted::Lease(LeaseStatus::Held)) => {
            lease_lost(shared, &step, "lease keeping stopped unexpectedly".into())
        }
        Err(Interrupted::Shutdown) => {
            let failure = shutdown_failure(keeper.last_checkpoint());
            report_failure(shared, worker, &task, &step, failure).await
        }
    }
    None
}

fn shutdown_failure(checkpoint: Vec<u8>) -> Failure {
    Failure {
        error_type: "worker_shutdown".into(),
        message: "the worker shut down before the step finished".into(),
        non_retryable: false,
        checkpoint,
    }
}

/// The server failed the step on a heartbeat past its token budget: nothing more to report.
fn failed_by_server(shared: &Shared, step: &StepRef, message: String) {
    warn!(error = %message, "the server failed the step: token budget exceeded");
    shared.emit(
        step,
        EventKind::StepFailed {
            error_type: crate::agent::TOKEN_BUDGET_EXCEEDED.into(),
            message,
            will_retry: Some(false),
        },
    );
}

fn lease_lost(shared: &Shared, step: &StepRef, message: String) {
    warn!(error = %message, "lease lost; dropping the step without reporting");
    shared.emit(step, EventKind::LeaseLost { message });
}

/// Creates `dir` (and any missing parents) readable by its owner only (mode 0700), like
/// the server's data directory: a run's files are its goal's, not every local user's.
/// An existing directory keeps its mode.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// `<workspace>/<run_id>/`, created if needed, mode 0700 (an existing one is set to 0700
/// too: it is the worker's own). The run id becomes a directory name, so it must be one
/// plain path component.
async fn prepare_workspace(root: &Path, run_id: &str) -> Result<PathBuf, String> {
    let plain = !run_id.is_empty() && run_id != "." && run_id != ".." && !run_id.contains(['/', '\\', '\0']);
    if !plain {
        return Err(format!(
            "run id {run_id:?} cannot be used as a workspace directory name"
        ));
    }
    let dir = root.join(run_id);
    let made = dir.clone();
    tokio::task::spawn_blocking(move || {
        create_private_dir(&made)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok::<_, std::io::Error>(())
    })
    .await
    .map_err(|e| format!("cannot create the workspace {}: {e}", dir.display()))?
    .map_err(|e| format!("cannot create the workspace {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Reports a completion. While the worker is still taking work it asks for the run's
/// next step in the same call (eager dispatch) and returns it when the server leased it
/// to this worker. Once shutdown has begun it only completes.
///
/// A completion that committed but whose answer was lost (the server restarted after the
/// commit) is refused when repeated. Before calling that a failure the worker reads the
/// run: when this step is completed by this very attempt with these notes, the
/// completion had landed and only its answer was lost (logged at INFO). A next step
/// leased by the lost answer then waits for its lease to expire, like any lost lease.
async fn report_completion(
    shared: &Shared,
    worker: &StepWorker,
    task: &StepTask,
    step: &StepRef,
    c: Completion,
    reported: Option<Reported>,
) -> Option<StepTask> {
    let (notes, artifacts) = (c.notes.clone(), c.artifacts.clone());
    // The agent's lease keeper may have reported it already (so that a refusal went
    // back to the model); else it is sent now.
    let sent = match reported {
        Some(sent) => sent,
        None => {
            let take_next = !*shared.stop.borrow();
            send_completion(worker, &task.task_token, &c, Vec::new(), take_next).await
        }
    };
    match sent {
        Ok(reply) if reply.held_for_approval => {
            // The step's work on this worker is done; a person approves or rejects it.
            info!(artifacts = ?artifacts, "step completed; its result is held for approval");
            shared.emit(step, EventKind::StepCompleted { notes, artifacts });
            None
        }
        Ok(reply) => {
            let next = reply.next_task;
            info!(artifacts = ?artifacts, eager_next = next.is_some(), "step completed");
            shared.emit(step, EventKind::StepCompleted { notes, artifacts });
            next
        }
        Err(e) => {
            match completion_landed(worker, task, &notes).await {
                Ok(true) => {
                    info!(refused = %e, artifacts = ?artifacts,
                        "step completed: the completion had landed before its answer was lost");
                    shared.emit(step, EventKind::StepCompleted { notes, artifacts });
                    return None;
                }
                Ok(false) => {}
                Err(describe) => {
                    warn!(error = %describe, "cannot read the run to see whether the completion landed");
                }
            }
            error!(error = %e, "completion not accepted; the step will be retried after its lease expires");
            shared.emit(
                step,
                EventKind::StepFailed {
                    error_type: "report_failed".into(),
                    message: format!("completion not accepted: {e}"),
                    will_retry: None,
                },
            );
            None
        }
    }
}

/// Whether the run shows this step completed by this attempt with these notes: what a
/// completion whose answer was lost leaves behind.
async fn completion_landed(worker: &StepWorker, task: &StepTask, notes: &str) -> Result<bool, ClientError> {
    let described = worker
        .client()
        .describe_run(&task.namespace, &task.run_id)
        .await?;
    Ok(described.run.is_some_and(|run| {
        let held = run
            .waiting
            .as_ref()
            .is_some_and(|w| w.on == "approval" && w.proposed_notes == notes);
        run.steps.iter().any(|s| {
            s.step_id == task.step_id
                && s.attempt == task.attempt
                && ((s.state == "COMPLETED" && s.notes == notes) || (s.state == "AWAITING_APPROVAL" && held))
        })
    }))
}

async fn report_failure(shared: &Shared, worker: &StepWorker, task: &StepTask, step: &StepRef, f: Failure) {
    let (error_type, message) = (f.error_type.clone(), f.message.clone());
    let sent = with_retries("failure", || worker.fail(&task.task_token, f.clone())).await;
    let will_retry = match &sent {
        Ok(will_retry) => {
            warn!(error_type = %error_type, will_retry, error = %message, "step failed");
            Some(*will_retry)
        }
        Err(e) => {
            error!(error_type = %error_type, error = %e, "failure not accepted by the server");
            None
        }
    };
    shared.emit(
        step,
        EventKind::StepFailed {
            error_type,
            message,
            will_retry,
        },
    );
}

/// Parks the step for a rate limit until `until_unix_ms`; a park the server does
/// not take is reported as a retryable failure, so the step is not lost.
async fn report_parked(
    shared: &Shared,
    worker: &StepWorker,
    task: &StepTask,
    step: &StepRef,
    checkpoint: Vec<u8>,
    until_unix_ms: i64,
) {
    let key = shared.config.rate_limit_key.as_deref().unwrap_or("");
    let parked = with_retries("park", || {
        worker.park_rate_limited(&task.task_token, checkpoint.clone(), key, until_unix_ms)
    })
    .await;
    match parked {
        Ok(()) => info!(until_unix_ms, "step parked for a rate limit; slot released"),
        Err(e) => {
            warn!(error = %e, "the server did not take the park; failing the step back");
            let failure = Failure {
                error_type: "provider_unavailable".into(),
                message: format!("rate limited until {until_unix_ms} ms; the park was refused: {e}"),
                non_retryable: false,
                checkpoint,
            };
            report_failure(shared, worker, task, step, failure).await;
        }
    }
}

async fn report_canceled(
    shared: &Shared,
    worker: &StepWorker,
    task: &StepTask,
    step: &StepRef,
    checkpoint: Vec<u8>,
) {
    let failure = Failure {
        error_type: "canceled".into(),
        message: "cancellation was requested".into(),
        non_retryable: true,
        checkpoint,
    };
    match with_retries("cancellation", || worker.fail(&task.task_token, failure.clone())).await {
        Ok(_) => info!("step canceled"),
        Err(e) => error!(error = %e, "cancellation not accepted by the server"),
    }
    shared.emit(step, EventKind::StepCanceled);
}
