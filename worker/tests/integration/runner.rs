//! `Worker::run` against an in-process fake of the `Tasks` gRPC service.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use railyard_proto::v1::history_server::{History, HistoryServer};
use railyard_proto::v1::tasks_server::{Tasks, TasksServer};
use railyard_proto::v1::*;
use railyard_worker::events::{EventKind, EventSink, WorkerEvent};
use railyard_worker::output::OutputSink;
use railyard_worker::provider::{
    Block, BoxFuture, ModelRequest, ModelTurn, Provider, ProviderError, ScriptSource, StopReason,
};
use railyard_worker::{ProviderConfig, Worker, WorkerConfig};
use serde_json::json;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

/// What the heartbeat handler answers.
#[derive(Clone, Copy, PartialEq)]
enum BeatMode {
    Fine,
    Cancel,
    Lost,
}

#[derive(Default)]
struct Recorded {
    polls: usize,
    beats: Vec<HeartbeatStepTaskRequest>,
    completed: Vec<CompleteStepTaskRequest>,
    failed: Vec<FailStepTaskRequest>,
}

struct FakeTasks {
    queue: Mutex<VecDeque<StepTask>>,
    /// Handed back, one per completion asking for it, as the run's next step (eager
    /// dispatch). Never polled.
    eager: Mutex<VecDeque<StepTask>>,
    /// When set, a completion is answered only once this is notified.
    hold_completion: Option<Arc<Notify>>,
    /// When set, the first completion is taken but its answer is lost (as when the
    /// server dies after the commit), and a repeat is refused as for a spent lease.
    lose_completion_answer: bool,
    mode: BeatMode,
    rec: Arc<Mutex<Recorded>>,
    changed: Arc<Notify>,
}

#[tonic::async_trait]
impl Tasks for FakeTasks {
    async fn poll_step_task(
        &self,
        req: Request<PollStepTaskRequest>,
    ) -> Result<Response<PollStepTaskResponse>, Status> {
        self.rec.lock().unwrap().polls += 1;
        let task = self.queue.lock().unwrap().pop_front();
        if task.is_none() {
            // A short long-poll keeps the test quick.
            let wait =
                Duration::from_millis(req.get_ref().wait_timeout_ms.into()).min(Duration::from_millis(50));
            tokio::time::sleep(wait).await;
        }
        Ok(Response::new(PollStepTaskResponse { task }))
    }

    async fn heartbeat_step_task(
        &self,
        req: Request<HeartbeatStepTaskRequest>,
    ) -> Result<Response<HeartbeatStepTaskResponse>, Status> {
        self.rec.lock().unwrap().beats.push(req.into_inner());
        self.changed.notify_waiters();
        match self.mode {
            BeatMode::Fine => Ok(Response::new(HeartbeatStepTaskResponse::default())),
            BeatMode::Cancel => Ok(Response::new(HeartbeatStepTaskResponse {
                cancel_requested: true,
                signals: vec![],
                ..Default::default()
            })),
            BeatMode::Lost => Err(Status::failed_precondition("stale lease")),
        }
    }

    async fn complete_step_task(
        &self,
        req: Request<CompleteStepTaskRequest>,
    ) -> Result<Response<CompleteStepTaskResponse>, Status> {
        let take_next = req.get_ref().take_next;
        let earlier = {
            let mut rec = self.rec.lock().unwrap();
            rec.completed.push(req.into_inner());
            rec.completed.len() - 1
        };
        self.changed.notify_waiters();
        if self.lose_completion_answer {
            return Err(if earlier == 0 {
                Status::unavailable("connection reset: the server went away after its commit")
            } else {
                Status::failed_precondition("step s of run run-1 is not leased (lease 1 is spent)")
            });
        }
        if let Some(hold) = &self.hold_completion {
            hold.notified().await;
        }
        let next_task = if take_next {
            self.eager.lock().unwrap().pop_front()
        } else {
            None
        };
        Ok(Response::new(CompleteStepTaskResponse {
            next_task,
            held_for_approval: false,
        }))
    }

    async fn fail_step_task(
        &self,
        req: Request<FailStepTaskRequest>,
    ) -> Result<Response<FailStepTaskResponse>, Status> {
        let will_retry = !req.get_ref().non_retryable;
        self.rec.lock().unwrap().failed.push(req.into_inner());
        self.changed.notify_waiters();
        Ok(Response::new(FailStepTaskResponse { will_retry }))
    }

    async fn describe_task_queue(
        &self,
        _: Request<DescribeTaskQueueRequest>,
    ) -> Result<Response<DescribeTaskQueueResponse>, Status> {
        Ok(Response::new(DescribeTaskQueueResponse::default()))
    }

    async fn spawn_child_runs(
        &self,
        _: Request<railyard_proto::v1::SpawnChildRunsRequest>,
    ) -> Result<Response<railyard_proto::v1::SpawnChildRunsResponse>, Status> {
        Err(Status::unimplemented("this fake starts no child runs"))
    }

    async fn report_issue(
        &self,
        _: Request<railyard_proto::v1::ReportIssueRequest>,
    ) -> Result<Response<railyard_proto::v1::ReportIssueResponse>, Status> {
        Err(Status::unimplemented("this fake records no issues"))
    }

    async fn upsert_search_attributes(
        &self,
        _: Request<railyard_proto::v1::UpsertSearchAttributesRequest>,
    ) -> Result<Response<railyard_proto::v1::UpsertSearchAttributesResponse>, Status> {
        Err(Status::unimplemented("this fake sets no search attributes"))
    }

    async fn append_step_output(
        &self,
        req: Request<railyard_proto::v1::AppendStepOutputRequest>,
    ) -> Result<Response<railyard_proto::v1::AppendStepOutputResponse>, Status> {
        let accepted = req.into_inner().chunks.len() as u32;
        Ok(Response::new(railyard_proto::v1::AppendStepOutputResponse {
            accepted,
            dropped: 0,
        }))
    }
}

/// `DescribeRun` of run-1 as the recorded completions left it: step `s`, completed by
/// attempt 1 with the first completion's notes once there was one. The rest of the
/// service is not used by the worker.
struct FakeHistory {
    rec: Arc<Mutex<Recorded>>,
}

fn unused<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not used by the worker"))
}

#[tonic::async_trait]
impl History for FakeHistory {
    async fn describe_run(
        &self,
        req: Request<DescribeRunRequest>,
    ) -> Result<Response<DescribeRunResponse>, Status> {
        let req = req.into_inner();
        if (req.namespace.as_str(), req.run_id.as_str()) != ("default", "run-1") {
            return Err(Status::not_found(format!("no run {}", req.run_id)));
        }
        let first = self.rec.lock().unwrap().completed.first().cloned();
        let step = StepSummary {
            step_id: "s".into(),
            state: if first.is_some() { "COMPLETED" } else { "STARTED" }.into(),
            attempt: 1,
            notes: first.map(|c| c.notes).unwrap_or_default(),
            ..Default::default()
        };
        Ok(Response::new(DescribeRunResponse {
            run: Some(RunInfo {
                namespace: "default".into(),
                run_id: "run-1".into(),
                steps: vec![step],
                ..Default::default()
            }),
            definition_json: String::new(),
        }))
    }
    async fn start_run(&self, _: Request<StartRunRequest>) -> Result<Response<StartRunResponse>, Status> {
        unused()
    }
    async fn get_history(
        &self,
        _: Request<GetHistoryRequest>,
    ) -> Result<Response<GetHistoryResponse>, Status> {
        unused()
    }
    type WatchRunStream = std::pin::Pin<
        Box<dyn tonic::codegen::tokio_stream::Stream<Item = Result<HistoryEvent, Status>> + Send>,
    >;
    async fn watch_run(&self, _: Request<WatchRunRequest>) -> Result<Response<Self::WatchRunStream>, Status> {
        unused()
    }
    async fn list_runs(&self, _: Request<ListRunsRequest>) -> Result<Response<ListRunsResponse>, Status> {
        unused()
    }
    async fn count_runs(
        &self,
        _: Request<railyard_proto::v1::CountRunsRequest>,
    ) -> Result<Response<railyard_proto::v1::CountRunsResponse>, Status> {
        unused()
    }
    type WatchOutputStream = std::pin::Pin<
        Box<
            dyn tonic::codegen::tokio_stream::Stream<
                    Item = Result<railyard_proto::v1::WatchOutputResponse, Status>,
                > + Send,
        >,
    >;
    async fn watch_output(
        &self,
        _: Request<railyard_proto::v1::WatchOutputRequest>,
    ) -> Result<Response<Self::WatchOutputStream>, Status> {
        unused()
    }
    async fn signal_run(&self, _: Request<SignalRunRequest>) -> Result<Response<SignalRunResponse>, Status> {
        unused()
    }
    async fn cancel_run(&self, _: Request<CancelRunRequest>) -> Result<Response<CancelRunResponse>, Status> {
        unused()
    }
    async fn terminate_run(
        &self,
        _: Request<TerminateRunRequest>,
    ) -> Result<Response<TerminateRunResponse>, Status> {
        unused()
    }
    async fn list_workflows(
        &self,
        _: Request<ListWorkflowsRequest>,
    ) -> Result<Response<ListWorkflowsResponse>, Status> {
        unused()
    }
    async fn register_workflow(
        &self,
        _: Request<RegisterWorkflowRequest>,
    ) -> Result<Response<RegisterWorkflowResponse>, Status> {
        unused()
    }
    async fn get_session_tree(
        &self,
        _: Request<GetSessionTreeRequest>,
    ) -> Result<Response<GetSessionTreeResponse>, Status> {
        unused()
    }
    async fn pause_run(
        &self,
        _: Request<railyard_proto::v1::PauseRunRequest>,
    ) -> Result<Response<railyard_proto::v1::PauseRunResponse>, Status> {
        unused()
    }
    async fn unpause_run(
        &self,
        _: Request<railyard_proto::v1::UnpauseRunRequest>,
    ) -> Result<Response<railyard_proto::v1::UnpauseRunResponse>, Status> {
        unused()
    }

    async fn redeliver_result(
        &self,
        _: Request<railyard_proto::v1::RedeliverResultRequest>,
    ) -> Result<Response<railyard_proto::v1::RedeliverResultResponse>, Status> {
        unused()
    }

    async fn reset_run(
        &self,
        _: Request<railyard_proto::v1::ResetRunRequest>,
    ) -> Result<Response<railyard_proto::v1::ResetRunResponse>, Status> {
        unused()
    }

    async fn rerun_run(
        &self,
        _: Request<railyard_proto::v1::RerunRunRequest>,
    ) -> Result<Response<railyard_proto::v1::ResetRunResponse>, Status> {
        unused()
    }

    async fn approve_step(
        &self,
        _: Request<railyard_proto::v1::ApproveStepRequest>,
    ) -> Result<Response<railyard_proto::v1::ApproveStepResponse>, Status> {
        unused()
    }

    async fn reject_step(
        &self,
        _: Request<railyard_proto::v1::RejectStepRequest>,
    ) -> Result<Response<railyard_proto::v1::RejectStepResponse>, Status> {
        unused()
    }

    async fn get_step_checkpoint(
        &self,
        _: Request<GetStepCheckpointRequest>,
    ) -> Result<Response<GetStepCheckpointResponse>, Status> {
        unused()
    }
}

struct Harness {
    addr: SocketAddr,
    rec: Arc<Mutex<Recorded>>,
    changed: Arc<Notify>,
}

impl Harness {
    /// Waits (bounded) until `cond` holds over what the server recorded.
    async fn until(&self, what: &str, cond: impl Fn(&Recorded) -> bool) {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                if cond(&self.rec.lock().unwrap()) {
                    return;
                }
                // Polls do not notify; re-check now and then as well.
                let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(30), wait).await.is_err() {
            panic!("timed out waiting for: {what}");
        }
    }
}

async fn serve_on(
    incoming: tonic::transport::server::TcpIncoming,
    tasks: Vec<StepTask>,
    mode: BeatMode,
) -> Harness {
    serve_fake(incoming, tasks, Vec::new(), None, mode).await
}

async fn serve_fake(
    incoming: tonic::transport::server::TcpIncoming,
    tasks: Vec<StepTask>,
    eager: Vec<StepTask>,
    hold_completion: Option<Arc<Notify>>,
    mode: BeatMode,
) -> Harness {
    serve_fake_with(incoming, tasks, eager, hold_completion, mode, false).await
}

async fn serve_fake_with(
    incoming: tonic::transport::server::TcpIncoming,
    tasks: Vec<StepTask>,
    eager: Vec<StepTask>,
    hold_completion: Option<Arc<Notify>>,
    mode: BeatMode,
    lose_completion_answer: bool,
) -> Harness {
    let addr = incoming.local_addr().unwrap();
    let rec = Arc::new(Mutex::new(Recorded::default()));
    let changed = Arc::new(Notify::new());
    let fake = FakeTasks {
        queue: Mutex::new(tasks.into()),
        eager: Mutex::new(eager.into()),
        hold_completion,
        lose_completion_answer,
        mode,
        rec: rec.clone(),
        changed: changed.clone(),
    };
    let history = FakeHistory { rec: rec.clone() };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TasksServer::new(fake))
            .add_service(HistoryServer::new(history))
            .serve_with_incoming(incoming),
    );
    Harness { addr, rec, changed }
}

async fn serve(tasks: Vec<StepTask>, mode: BeatMode) -> Harness {
    serve_on(local_port(), tasks, mode).await
}

fn local_port() -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap()
}

fn config(addr: SocketAddr, workspace: PathBuf, script: serde_json::Value) -> WorkerConfig {
    WorkerConfig {
        tls: Default::default(),
        server_url: format!("http://{addr}"),
        api_key: None,
        namespace: "default".into(),
        queues: vec!["default".into()],
        slots: 2,
        workspace,
        identity: "test-worker".into(),
        provider: ProviderConfig::Scripted {
            script: ScriptSource::Inline(serde_json::from_value(script).unwrap()),
        },
        shutdown_grace: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(50),
        bash_env: Vec::new(),
        prices: Default::default(),
        mcp: Default::default(),
        web_fetch_allow_networks: Vec::new(),
        rate_limit_key: None,
        providers: Vec::new(),
    }
}

fn step(token: &str) -> StepTask {
    StepTask {
        task_token: token.into(),
        ..crate::common::task("s", "write a file")
    }
}

fn event_sink() -> (EventSink, Arc<Mutex<Vec<WorkerEvent>>>) {
    let events: Arc<Mutex<Vec<WorkerEvent>>> = Arc::default();
    let store = events.clone();
    (Arc::new(move |e| store.lock().unwrap().push(e)), events)
}

/// The same step task for another run (the shape of a step handed over by eager dispatch).
fn step_of_run(token: &str, run_id: &str) -> StepTask {
    StepTask {
        run_id: run_id.into(),
        ..step(token)
    }
}

/// A model that never answers: the step is always "in a long model call".
struct Stuck;

impl Provider for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    fn complete<'a>(
        &'a self,
        _: &'a ModelRequest,
        _: &'a dyn OutputSink,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(std::future::pending())
    }
}

/// A model that answers with `complete_step` only once `go` is notified.
struct Gated {
    go: Arc<Notify>,
}

impl Provider for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn complete<'a>(
        &'a self,
        _: &'a ModelRequest,
        _: &'a dyn OutputSink,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            self.go.notified().await;
            Ok(ModelTurn {
                blocks: vec![Block::ToolUse {
                    id: "call-1".into(),
                    name: "complete_step".into(),
                    input: json!({"notes": "done after the gate"}),
                }],
                stop_reason: StopReason::ToolUse,
                usage: Default::default(),
            })
        })
    }
}

const WRITE_AND_COMPLETE: &str = r#"{"steps": {"s": [
    {"tool_calls": [{"name": "write_file", "input": {"path": "out.txt", "content": "{{goal}}"}}]},
    {"tool_calls": [{"name": "complete_step", "input": {"notes": "wrote out.txt", "artifacts": ["out.txt"]}}]}
]}}"#;

#[tokio::test]
async fn runs_a_leased_step_to_completion() {
    let h = serve(vec![step("t1")], BeatMode::Fine).await;
    let ws = tempfile::tempdir().unwrap();
    let script: serde_json::Value = serde_json::from_str(WRITE_AND_COMPLETE).unwrap();
    let (sink, events) = event_sink();
    let worker = Worker::new(config(h.addr, ws.path().to_path_buf(), script)).with_events(sink);
    let done = h.until("completion", |r| !r.completed.is_empty());
    worker.run(done).await.unwrap();

    let rec = h.rec.lock().unwrap();
    assert_eq!(rec.completed.len(), 1);
    assert_eq!(rec.completed[0].task_token, "t1");
    assert_eq!(rec.completed[0].notes, "wrote out.txt");
    assert_eq!(rec.completed[0].identity, "test-worker");
    assert!(rec.failed.is_empty());
    // The per-turn heartbeat carried the transcript.
    assert!(rec.beats.iter().any(|b| !b.checkpoint.is_empty()));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("run-1/out.txt")).unwrap(),
        "a haiku about rust"
    );
    let kinds: Vec<_> = events.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
    assert!(
        matches!(kinds.first(), Some(EventKind::StepLeased { .. })),
        "{kinds:?}"
    );
    assert!(matches!(kinds.last(), Some(EventKind::StepCompleted { notes, .. }) if notes == "wrote out.txt"));
}

/// The workspace root and each run's directory are the worker user's only (they
/// were once created 0755, so every local user could read a run's files).
#[cfg(unix)]
#[tokio::test]
async fn workspaces_are_created_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let h = serve(vec![step("t1")], BeatMode::Fine).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("work/nested");
    let script: serde_json::Value = serde_json::from_str(WRITE_AND_COMPLETE).unwrap();
    let worker = Worker::new(config(h.addr, root.clone(), script));
    worker
        .run(h.until("completion", |r| !r.completed.is_empty()))
        .await
        .unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&root), 0o700, "workspace root");
    assert_eq!(mode(&root.join("run-1")), 0o700, "run workspace");
    assert!(root.join("run-1/out.txt").is_file());
}

#[tokio::test]
async fn shutdown_fails_running_steps_back_as_retryable() {
    let h = serve(vec![step("t1")], BeatMode::Fine).await;
    let ws = tempfile::tempdir().unwrap();
    let worker =
        Worker::new(config(h.addr, ws.path().to_path_buf(), json!({}))).with_provider(Arc::new(Stuck));
    // Shut down once the step is running and keeping its lease.
    let running = h.until("a background heartbeat", |r| !r.beats.is_empty());
    worker.run(running).await.unwrap();

    let rec = h.rec.lock().unwrap();
    assert!(rec.completed.is_empty());
    assert_eq!(rec.failed.len(), 1);
    assert_eq!(rec.failed[0].error_type, "worker_shutdown");
    assert!(!rec.failed[0].non_retryable);
    // Background heartbeats never replace the stored checkpoint.
    assert!(rec.beats.iter().all(|b| b.checkpoint.is_empty()));
}

#[tokio::test]
async fn lost_lease_drops_the_step_without_reporting() {
    let h = serve(vec![step("t1")], BeatMode::Lost).await;
    let ws = tempfile::tempdir().unwrap();
    let (sink, events) = event_sink();
    let worker = Worker::new(config(h.addr, ws.path().to_path_buf(), json!({})))
        .with_provider(Arc::new(Stuck))
        .with_events(sink.clone());
    let events2 = events.clone();
    let lost = async move {
        loop {
            if events2
                .lock()
                .unwrap()
                .iter()
                .any(|e| matches!(e.kind, EventKind::LeaseLost { .. }))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), worker.run(lost))
        .await
        .unwrap()
        .unwrap();
    let rec = h.rec.lock().unwrap();
    assert!(
        rec.completed.is_empty() && rec.failed.is_empty(),
        "nothing is reported for a lost lease"
    );
    assert_eq!(rec.beats.len(), 1, "the keeper stops after the lease is lost");
}

#[tokio::test]
async fn cancel_seen_by_background_heartbeat_fails_as_canceled() {
    let h = serve(vec![step("t1")], BeatMode::Cancel).await;
    let ws = tempfile::tempdir().unwrap();
    let worker =
        Worker::new(config(h.addr, ws.path().to_path_buf(), json!({}))).with_provider(Arc::new(Stuck));
    let reported = h.until("the cancel report", |r| !r.failed.is_empty());
    worker.run(reported).await.unwrap();
    let rec = h.rec.lock().unwrap();
    assert_eq!(rec.failed[0].error_type, "canceled");
    assert!(rec.failed[0].non_retryable);
}

#[tokio::test]
async fn keeps_polling_until_the_server_comes_up() {
    // Reserve a port, start the worker against it with nothing listening, then serve.
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    drop(incoming);
    let ws = tempfile::tempdir().unwrap();
    let script: serde_json::Value = serde_json::from_str(WRITE_AND_COMPLETE).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(
        Worker::new(config(addr, ws.path().to_path_buf(), script)).run(async move {
            let _ = stop_rx.await;
        }),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let incoming = tonic::transport::server::TcpIncoming::bind(addr).unwrap();
    let h = serve_on(incoming, vec![step("t1")], BeatMode::Fine).await;
    h.until("completion after reconnecting", |r| r.completed.len() == 1)
        .await;
    let _ = stop_tx.send(());
    worker.await.unwrap().unwrap();
    assert_eq!(
        h.rec.lock().unwrap().completed.len(),
        1,
        "the step ran exactly once"
    );
}

#[tokio::test]
async fn eager_next_step_runs_in_the_same_slot_without_a_poll() {
    // run-2's step is never in the poll queue: the only way to it is the completion's answer.
    let h = serve_fake(
        local_port(),
        vec![step("t1")],
        vec![step_of_run("t2", "run-2")],
        None,
        BeatMode::Fine,
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let script: serde_json::Value = serde_json::from_str(WRITE_AND_COMPLETE).unwrap();
    let (sink, events) = event_sink();
    let mut cfg = config(h.addr, ws.path().to_path_buf(), script);
    cfg.slots = 1;
    let worker = Worker::new(cfg).with_events(sink);
    let done = h.until("both completions", |r| r.completed.len() == 2);
    worker.run(done).await.unwrap();

    let rec = h.rec.lock().unwrap();
    let tokens: Vec<&str> = rec.completed.iter().map(|c| c.task_token.as_str()).collect();
    assert_eq!(tokens, ["t1", "t2"]);
    assert!(
        rec.completed.iter().all(|c| c.take_next),
        "completions ask for the next step"
    );
    assert!(rec.failed.is_empty());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("run-2/out.txt")).unwrap(),
        "a haiku about rust"
    );
    // The handed-over step is announced like a polled one.
    let leased: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::StepLeased { .. }))
        .map(|e| e.step.run_id.clone())
        .collect();
    assert_eq!(leased, ["run-1", "run-2"]);
}

#[tokio::test]
async fn eager_next_step_arriving_during_shutdown_is_failed_back() {
    let hold = Arc::new(Notify::new());
    let h = serve_fake(
        local_port(),
        vec![step("t1")],
        vec![step_of_run("t2", "run-2")],
        Some(hold.clone()),
        BeatMode::Fine,
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let script: serde_json::Value = serde_json::from_str(WRITE_AND_COMPLETE).unwrap();
    let (sink, events) = event_sink();
    let worker = Worker::new(config(h.addr, ws.path().to_path_buf(), script)).with_events(sink);
    // Shutdown begins while the completion is in flight; its answer (with the next step)
    // is let go only then. The runtime is single-threaded, so the worker has marked
    // itself stopping before the fake can answer.
    let shutdown = {
        let completed = h.until("the completion", |r| !r.completed.is_empty());
        let hold = hold.clone();
        async move {
            completed.await;
            hold.notify_one();
        }
    };
    worker.run(shutdown).await.unwrap();

    let rec = h.rec.lock().unwrap();
    assert_eq!(rec.completed.len(), 1);
    assert!(rec.completed[0].take_next);
    assert_eq!(rec.failed.len(), 1, "the handed-over step was failed back");
    assert_eq!(rec.failed[0].task_token, "t2");
    assert_eq!(rec.failed[0].error_type, "worker_shutdown");
    assert!(!rec.failed[0].non_retryable);
    assert!(
        !ws.path().join("run-2").exists(),
        "the handed-over step was not started"
    );
    let kinds: Vec<(String, EventKind)> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.step.run_id == "run-2")
        .map(|e| (e.step.run_id.clone(), e.kind.clone()))
        .collect();
    assert!(
        matches!(kinds.first(), Some((_, EventKind::StepLeased { .. }))),
        "{kinds:?}"
    );
    assert!(
        matches!(kinds.last(), Some((_, EventKind::StepFailed { error_type, will_retry: Some(true), .. })) if error_type == "worker_shutdown"),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_step_finishing_after_shutdown_began_does_not_take_the_next_one() {
    let go = Arc::new(Notify::new());
    let h = serve_fake(
        local_port(),
        vec![step("t1")],
        vec![step_of_run("t2", "run-2")],
        None,
        BeatMode::Fine,
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let mut cfg = config(h.addr, ws.path().to_path_buf(), json!({}));
    // Room to finish within the grace period, however slow the machine.
    cfg.shutdown_grace = Duration::from_secs(30);
    let worker = Worker::new(cfg).with_provider(Arc::new(Gated { go: go.clone() }));
    // The model answers only after shutdown has begun.
    let shutdown = {
        let running = h.until("a background heartbeat", |r| !r.beats.is_empty());
        let go = go.clone();
        async move {
            running.await;
            go.notify_one();
        }
    };
    worker.run(shutdown).await.unwrap();

    let rec = h.rec.lock().unwrap();
    assert_eq!(
        rec.completed.len(),
        1,
        "the running step finished within the grace period"
    );
    assert_eq!(rec.completed[0].task_token, "t1");
    assert!(
        !rec.completed[0].take_next,
        "no next step is taken while stopping"
    );
    assert!(rec.failed.is_empty());
}

#[tokio::test]
async fn a_hanging_model_call_ends_as_a_retryable_timed_out_at_the_start_to_close_timeout() {
    let h = serve(
        vec![StepTask {
            start_to_close_timeout_ms: 400,
            ..step("t1")
        }],
        BeatMode::Fine,
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let (sink, events) = event_sink();
    let worker = Worker::new(config(h.addr, ws.path().to_path_buf(), json!({})))
        .with_provider(Arc::new(Stuck))
        .with_events(sink);
    let reported = h.until("the failure report", |r| !r.failed.is_empty());
    worker.run(reported).await.unwrap();

    let rec = h.rec.lock().unwrap();
    assert!(rec.completed.is_empty());
    assert_eq!(rec.failed.len(), 1);
    let f = &rec.failed[0];
    assert_eq!(f.task_token, "t1");
    assert_eq!(f.error_type, "timed_out");
    assert!(
        !f.non_retryable,
        "a start-to-close timeout is retryable by the step's retry policy"
    );
    assert!(f.message.contains("start-to-close timeout"), "{}", f.message);
    // The failure carries the transcript so far (the first user message).
    let cp = railyard_worker::agent::Checkpoint::decode(&f.checkpoint).expect("checkpoint");
    assert_eq!(cp.turns, 0);
    assert!(!cp.messages.is_empty());
    assert!(events.lock().unwrap().iter().any(|e| matches!(
        &e.kind,
        EventKind::StepFailed { error_type, will_retry: Some(true), .. } if error_type == "timed_out"
    )));
}

#[tokio::test]
async fn a_completion_whose_answer_was_lost_is_recognised_as_landed() {
    let h = serve_fake_with(
        local_port(),
        vec![step("t1")],
        Vec::new(),
        None,
        BeatMode::Fine,
        true,
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let script: serde_json::Value = serde_json::from_str(WRITE_AND_COMPLETE).unwrap();
    let (sink, events) = event_sink();
    let worker = Worker::new(config(h.addr, ws.path().to_path_buf(), script)).with_events(sink.clone());
    let events2 = events.clone();
    let ended = async move {
        loop {
            let done = events2.lock().unwrap().iter().any(|e| {
                matches!(
                    e.kind,
                    EventKind::StepCompleted { .. } | EventKind::StepFailed { .. }
                )
            });
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), worker.run(ended))
        .await
        .expect("the worker reports the step")
        .unwrap();

    let rec = h.rec.lock().unwrap();
    assert!(
        rec.completed.len() >= 2,
        "the completion was repeated after the lost answer"
    );
    assert!(rec.failed.is_empty());
    let kinds: Vec<EventKind> = events.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
    assert!(
        matches!(kinds.last(), Some(EventKind::StepCompleted { notes, .. }) if notes == "wrote out.txt"),
        "the step is reported completed, not failed: {kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| matches!(k, EventKind::StepFailed { .. })),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_refused_completion_is_not_taken_for_another_attempts() {
    // The run shows the step completed by attempt 1; this worker ran attempt 2, so its
    // refused completion did not land and is reported as such.
    let attempt2 = StepTask {
        attempt: 2,
        ..step("t1")
    };
    let h = serve_fake_with(
        local_port(),
        vec![attempt2],
        Vec::new(),
        None,
        BeatMode::Fine,
        true,
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let script: serde_json::Value = serde_json::from_str(WRITE_AND_COMPLETE).unwrap();
    let (sink, events) = event_sink();
    let worker = Worker::new(config(h.addr, ws.path().to_path_buf(), script)).with_events(sink);
    let events2 = events.clone();
    let ended = async move {
        loop {
            if events2.lock().unwrap().iter().any(|e| {
                matches!(
                    e.kind,
                    EventKind::StepCompleted { .. } | EventKind::StepFailed { .. }
                )
            }) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), worker.run(ended))
        .await
        .expect("the worker reports the step")
        .unwrap();
    let kinds: Vec<EventKind> = events.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
    assert!(
        matches!(kinds.last(), Some(EventKind::StepFailed { error_type, .. }) if error_type == "report_failed"),
        "{kinds:?}"
    );
}
