//! The SDK's retries against a real gRPC server (in process) that answers by script:
//! transient statuses are retried by the policy, the rest surface at once,
//! `UNAUTHENTICATED` stays distinct from `PERMISSION_DENIED`, and a delete that finds
//! nothing after a retry counts as done. And heartbeats: each sends what it was given;
//! a journaled step's heartbeats append its records, or send them whole.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use railyard_proto::checkpoint::BASE_MISMATCH;
use railyard_proto::v1::tasks_server::{Tasks, TasksServer};
use railyard_proto::v1::triggers_server::{Triggers, TriggersServer};
use railyard_proto::v1::*;
use railyard_sdk::journal::HEADER;
use railyard_sdk::{
    CheckpointSync, Client, ClientError, ConnectOptions, Failure, RecordError, StepError, StepWorker,
};
use tonic::{Code, Request, Response, Status};

/// Answers the calls it implements with the scripted statuses, then with success;
/// counts calls.
#[derive(Clone, Default)]
struct Scripted {
    answers: Arc<Mutex<VecDeque<Status>>>,
    calls: Arc<Mutex<u32>>,
    heartbeats: Arc<Mutex<Vec<HeartbeatStepTaskRequest>>>,
    failures: Arc<Mutex<Vec<FailStepTaskRequest>>>,
}

impl Scripted {
    /// Counts the call and answers the next scripted status, or a default success.
    fn next<T: Default>(&self) -> Result<Response<T>, Status> {
        *self.calls.lock().unwrap() += 1;
        match self.answers.lock().unwrap().pop_front() {
            Some(status) => Err(status),
            None => Ok(Response::new(T::default())),
        }
    }
}

#[tonic::async_trait]
impl Tasks for Scripted {
    async fn poll_step_task(
        &self,
        _: Request<PollStepTaskRequest>,
    ) -> Result<Response<PollStepTaskResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn heartbeat_step_task(
        &self,
        req: Request<HeartbeatStepTaskRequest>,
    ) -> Result<Response<HeartbeatStepTaskResponse>, Status> {
        *self.calls.lock().unwrap() += 1;
        let req = req.into_inner();
        let answer = match self.answers.lock().unwrap().pop_front() {
            Some(status) => Err(status),
            None => Ok(Response::new(HeartbeatStepTaskResponse {
                checkpoint_length: req.checkpoint.len() as u64,
                checkpoint_digest: railyard_proto::checkpoint::full(&req.checkpoint).to_vec(),
                ..Default::default()
            })),
        };
        self.heartbeats.lock().unwrap().push(req);
        answer
    }
    async fn complete_step_task(
        &self,
        _: Request<CompleteStepTaskRequest>,
    ) -> Result<Response<CompleteStepTaskResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn fail_step_task(
        &self,
        req: Request<FailStepTaskRequest>,
    ) -> Result<Response<FailStepTaskResponse>, Status> {
        self.failures.lock().unwrap().push(req.into_inner());
        self.next()
    }
    async fn describe_task_queue(
        &self,
        _: Request<DescribeTaskQueueRequest>,
    ) -> Result<Response<DescribeTaskQueueResponse>, Status> {
        self.next()
    }
    async fn spawn_child_runs(
        &self,
        req: Request<SpawnChildRunsRequest>,
    ) -> Result<Response<SpawnChildRunsResponse>, Status> {
        let children = req.into_inner().children.len();
        self.next().map(|_: Response<SpawnChildRunsResponse>| {
            Response::new(SpawnChildRunsResponse {
                child_run_ids: (0..children).map(|i| format!("child-{i}")).collect(),
            })
        })
    }

    async fn report_issue(
        &self,
        _: Request<railyard_proto::v1::ReportIssueRequest>,
    ) -> Result<Response<railyard_proto::v1::ReportIssueResponse>, Status> {
        self.next()
    }

    async fn upsert_search_attributes(
        &self,
        _: Request<railyard_proto::v1::UpsertSearchAttributesRequest>,
    ) -> Result<Response<railyard_proto::v1::UpsertSearchAttributesResponse>, Status> {
        self.next()
    }

    async fn append_step_output(
        &self,
        _: Request<railyard_proto::v1::AppendStepOutputRequest>,
    ) -> Result<Response<railyard_proto::v1::AppendStepOutputResponse>, Status> {
        self.next()
    }
}

#[tonic::async_trait]
impl Triggers for Scripted {
    async fn create_trigger(
        &self,
        _: Request<CreateTriggerRequest>,
    ) -> Result<Response<CreateTriggerResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn describe_trigger(
        &self,
        _: Request<DescribeTriggerRequest>,
    ) -> Result<Response<DescribeTriggerResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn list_triggers(
        &self,
        _: Request<ListTriggersRequest>,
    ) -> Result<Response<ListTriggersResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn update_trigger(
        &self,
        _: Request<UpdateTriggerRequest>,
    ) -> Result<Response<UpdateTriggerResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
    async fn delete_trigger(
        &self,
        _: Request<DeleteTriggerRequest>,
    ) -> Result<Response<DeleteTriggerResponse>, Status> {
        self.next()
    }
}

async fn serve(answers: Vec<Status>) -> (Client, Scripted) {
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    let fake = Scripted {
        answers: Arc::new(Mutex::new(answers.into())),
        ..Default::default()
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TasksServer::new(fake.clone()))
            .add_service(TriggersServer::new(fake.clone()))
            .serve_with_incoming(incoming),
    );
    let opts = ConnectOptions {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(20),
        ..Default::default()
    };
    let client = Client::connect_with(&format!("http://{addr}"), opts)
        .await
        .unwrap();
    (client, fake)
}

fn calls(fake: &Scripted) -> u32 {
    *fake.calls.lock().unwrap()
}

#[tokio::test]
async fn unavailable_is_retried_until_it_answers() {
    let (client, fake) = serve(vec![
        Status::unavailable("restarting"),
        Status::unavailable("restarting"),
    ])
    .await;
    client.describe_task_queue("default", "q").await.unwrap();
    assert_eq!(calls(&fake), 3);
}

#[tokio::test]
async fn unavailable_gives_up_after_max_attempts() {
    let (client, fake) = serve(vec![Status::unavailable("down"); 10]).await;
    let err = client.describe_task_queue("default", "q").await.unwrap_err();
    assert!(matches!(err, ClientError::Unavailable { .. }), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(calls(&fake), 4);
}

#[tokio::test]
async fn unauthenticated_is_its_own_error_and_never_retried() {
    let (client, fake) = serve(vec![Status::unauthenticated("no credentials")]).await;
    let err = client.describe_task_queue("default", "q").await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Unauthenticated(m) if m == "no credentials"),
        "{err:?}"
    );
    assert_eq!(err.code(), Some(Code::Unauthenticated));
    assert!(!err.is_transient());
    assert_eq!(err.to_string(), "unauthenticated: no credentials");
    assert_eq!(calls(&fake), 1);

    let (client, fake) = serve(vec![Status::permission_denied("bad signature")]).await;
    let err = client.describe_task_queue("default", "q").await.unwrap_err();
    assert!(matches!(&err, ClientError::PermissionDenied(_)), "{err:?}");
    assert_eq!(err.code(), Some(Code::PermissionDenied));
    assert_eq!(calls(&fake), 1);
}

#[tokio::test]
async fn refusals_are_not_retried() {
    let (client, fake) = serve(vec![Status::invalid_argument("task_queue: too long")]).await;
    let err = client.describe_task_queue("default", "q").await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err:?}");
    assert_eq!(calls(&fake), 1);
}

#[tokio::test]
async fn a_spawn_of_child_runs_is_tried_once_even_when_unavailable() {
    // A repeat after a lost answer could start the children twice.
    let (client, fake) = serve(vec![Status::unavailable("restarting")]).await;
    let err = client
        .spawn_child_runs(SpawnChildRunsRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Unavailable { .. }), "{err:?}");
    assert_eq!(calls(&fake), 1);
}

#[tokio::test]
async fn live_output_is_tried_once_never_retried() {
    // A repeat after a lost answer would add the chunks twice.
    let (client, fake) = serve(vec![Status::unavailable("restarting")]).await;
    let err = client
        .append_step_output(railyard_proto::v1::AppendStepOutputRequest::default())
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(calls(&fake), 1);
}

#[tokio::test]
async fn a_delete_that_finds_nothing_after_a_retry_is_done() {
    // The try that met UNAVAILABLE may have deleted it before its answer was lost.
    let (client, fake) = serve(vec![
        Status::unavailable("restarting"),
        Status::not_found("no trigger t"),
    ])
    .await;
    client
        .delete_trigger(DeleteTriggerRequest::default())
        .await
        .unwrap();
    assert_eq!(calls(&fake), 2);

    // Without a retry, NOT_FOUND is the answer.
    let (client, fake) = serve(vec![Status::not_found("no trigger t")]).await;
    let err = client
        .delete_trigger(DeleteTriggerRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::NotFound(_)), "{err:?}");
    assert_eq!(calls(&fake), 1);
}

#[tokio::test]
async fn a_call_without_an_answer_ends_at_its_deadline_and_is_not_repeated() {
    // A server that accepts the connection and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let opts = ConnectOptions {
        request_timeout: Duration::from_millis(200),
        max_attempts: 4,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(20),
        ..Default::default()
    };
    let client = Client::connect_with(&format!("http://{addr}"), opts)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = client.describe_task_queue("default", "q").await.unwrap_err();
    assert!(
        matches!(&err, ClientError::DeadlineExceeded(m) if m.starts_with("no answer within")),
        "{err:?}"
    );
    // DEADLINE_EXCEEDED is not repeated: one deadline, not four.
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    held.abort();
}

#[tokio::test]
async fn a_heartbeat_sends_what_it_was_given() {
    let (client, fake) = serve(vec![Status::unavailable("restarting")]).await;
    let worker = StepWorker::new(client, "default", "q", "w1");
    let usage = TokenUsage {
        input_tokens: 10,
        output_tokens: 2,
        ..Default::default()
    };
    let stuck = StuckReport {
        signal: "repeated_call".into(),
        ..Default::default()
    };
    let note = CoordinatorNote {
        kind: "progress".into(),
        message: "half way".into(),
    };
    let resp = worker
        .heartbeat("token-1")
        .checkpoint(b"turn 1".to_vec())
        .notes(vec![note.clone()])
        .ack_signals(7)
        .usage(usage, "model-x")
        .stuck(vec![stuck.clone()])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.checkpoint_length, 6);
    // Retried while unavailable, like every heartbeat.
    assert_eq!(calls(&fake), 2);
    let sent = fake.heartbeats.lock().unwrap().pop().unwrap();
    let expected = HeartbeatStepTaskRequest {
        task_token: "token-1".into(),
        checkpoint: b"turn 1".to_vec(),
        identity: "w1".into(),
        notes: vec![note],
        acked_signal_event_id: 7,
        usage: Some(usage),
        model: "model-x".into(),
        stuck: vec![stuck],
        checkpoint_append: None,
    };
    assert_eq!(sent, expected);

    // A bare heartbeat only keeps the lease.
    worker.heartbeat("token-1").send().await.unwrap();
    let sent = fake.heartbeats.lock().unwrap().pop().unwrap();
    assert_eq!(
        sent,
        HeartbeatStepTaskRequest {
            task_token: "token-1".into(),
            identity: "w1".into(),
            ..Default::default()
        }
    );
}

#[tokio::test]
async fn a_synced_heartbeat_appends_what_the_checkpoint_gained() {
    let (client, fake) = serve(Vec::new()).await;
    let worker = StepWorker::new(client, "default", "q", "w1");
    let mut sync = CheckpointSync::new();
    let sent = |fake: &Scripted| fake.heartbeats.lock().unwrap().pop().unwrap();

    worker
        .heartbeat("t")
        .checkpoint(&b"ab"[..])
        .sync(&mut sync)
        .send()
        .await
        .unwrap();
    let first = sent(&fake);
    assert_eq!(
        (first.checkpoint.as_slice(), first.checkpoint_append),
        (&b"ab"[..], None)
    );

    // The fake acknowledges only whole checkpoints; the append's answer has no
    // matching digest, so the next checkpoint goes whole again.
    worker
        .heartbeat("t")
        .checkpoint(&b"abcd"[..])
        .sync(&mut sync)
        .send()
        .await
        .unwrap();
    let second = sent(&fake);
    let append = second
        .checkpoint_append
        .expect("an append on the acknowledged base");
    assert!(second.checkpoint.is_empty());
    assert_eq!((append.base_length, append.bytes.as_slice()), (2, &b"cd"[..]));
    assert_eq!(sync.stats.whole, 1);
    assert_eq!(sync.stats.appends, 1);

    // No checkpoint: nothing of it is sent.
    worker.heartbeat("t").sync(&mut sync).send().await.unwrap();
    let third = sent(&fake);
    assert!(third.checkpoint.is_empty() && third.checkpoint_append.is_none());
}

/// A leased task whose checkpoint is `checkpoint`, with its digest.
fn task_with(checkpoint: &str) -> StepTask {
    StepTask {
        task_token: "t".into(),
        checkpoint: checkpoint.as_bytes().to_vec(),
        checkpoint_digest: railyard_proto::checkpoint::full(checkpoint.as_bytes()).to_vec(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_step_replays_its_journal_and_resends_it_whole_when_the_base_is_refused() {
    let refused = Status::failed_precondition(format!("{BASE_MISMATCH}: the stored one differs"));
    let (client, fake) = serve(vec![refused]).await;
    let worker = StepWorker::new(client, "default", "q", "w1");
    let journal = format!("{HEADER}\n{{\"k\":\"run\",\"name\":\"a\",\"seq\":0,\"value\":[1,2]}}\n");
    let mut step = worker.step(task_with(&journal));

    let replayed: Vec<u32> = step
        .run("a", || async { panic!("a journaled call is not called again") })
        .await
        .unwrap();
    assert_eq!(replayed, [1, 2]);
    assert!(
        fake.heartbeats.lock().unwrap().is_empty(),
        "a replay sends nothing"
    );

    let ran: u32 = step.run("a", || async { 3 }).await.unwrap();
    assert_eq!(ran, 3);
    let sent = fake.heartbeats.lock().unwrap().clone();
    let record = "{\"k\":\"run\",\"name\":\"a\",\"seq\":1,\"value\":3}\n";
    // Appended on the task's checkpoint, refused, then sent whole.
    let append = sent[0].checkpoint_append.clone().expect("an append");
    assert_eq!(append.base_length, journal.len() as u64);
    assert_eq!(append.bytes, record.as_bytes());
    assert_eq!(sent[1].checkpoint, format!("{journal}{record}").into_bytes());
    assert_eq!(sent.len(), 2);
    assert_eq!(step.checkpoint_sync().stats.refused, 1);
}

#[tokio::test]
async fn a_step_replaces_a_foreign_checkpoint_and_refuses_what_is_not_json() {
    let (client, fake) = serve(Vec::new()).await;
    let worker = StepWorker::new(client, "default", "q", "w1");
    let mut step = worker.step(task_with("{\"role\":\"user\",\"content\":\"hi\"}\n"));
    assert_eq!(step.state::<u32>().unwrap(), None);

    let nan = step.run("x", || async { f64::NAN }).await.unwrap_err();
    assert!(
        matches!(&nan, StepError::Record(RecordError::NotJson { entry, .. }) if entry == "run \"x\" #0"),
        "{nan}"
    );
    assert!(fake.heartbeats.lock().unwrap().is_empty(), "nothing written");

    step.save_state(&serde_json::json!({"n": 1})).await.unwrap();
    let journal = format!("{HEADER}\n{{\"k\":\"state\",\"value\":{{\"n\":1}}}}\n");
    let sent = fake.heartbeats.lock().unwrap().pop().unwrap();
    assert_eq!(
        sent.checkpoint,
        journal.as_bytes(),
        "the header and the record, whole"
    );
    assert!(sent.checkpoint_append.is_none());
    assert_eq!(
        step.state::<serde_json::Value>().unwrap(),
        Some(serde_json::json!({"n": 1}))
    );
    let wrong = step.state::<String>().unwrap_err();
    assert!(
        matches!(&wrong, StepError::Replay { entry, .. } if entry == "state"),
        "{wrong}"
    );

    step.fail(Failure {
        error_type: "boom".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let failed = fake.failures.lock().unwrap().pop().unwrap();
    assert_eq!(
        (failed.error_type.as_str(), failed.checkpoint),
        ("boom", journal.into_bytes())
    );
}

#[tokio::test]
async fn a_long_journaled_call_keeps_the_lease() {
    let (client, fake) = serve(Vec::new()).await;
    let worker = StepWorker::new(client, "default", "q", "w1");
    let task = StepTask {
        heartbeat_timeout_ms: 300,
        ..task_with("")
    };
    let mut step = worker.step(task);
    let v: u32 = step
        .run("slow", || async {
            tokio::time::sleep(Duration::from_millis(450)).await;
            7
        })
        .await
        .unwrap();
    assert_eq!(v, 7);
    let sent = fake.heartbeats.lock().unwrap().clone();
    // Beats every 100 ms while the call ran, nothing in them; then the record.
    let (beats, record) = sent.split_at(sent.len() - 1);
    assert!(!beats.is_empty(), "{} heartbeats", sent.len());
    assert!(
        beats
            .iter()
            .all(|b| b.checkpoint.is_empty() && b.checkpoint_append.is_none())
    );
    assert!(record[0].checkpoint.starts_with(HEADER.as_bytes()));
}

#[tokio::test]
async fn a_step_spawns_children_once_and_journals_their_ids() {
    let (client, fake) = serve(Vec::new()).await;
    let worker = StepWorker::new(client, "default", "q", "w1");
    let journal =
        format!("{HEADER}\n{{\"k\":\"spawn\",\"name\":\"kids\",\"seq\":0,\"run_ids\":[\"old-0\"]}}\n");
    let mut step = worker.step(task_with(&journal));
    let spec = || ChildRunSpec {
        workflow_id: "w".into(),
        ..Default::default()
    };
    // Journaled: the ids, and no call.
    assert_eq!(step.spawn("kids", vec![spec()]).await.unwrap(), ["old-0"]);
    assert_eq!(calls(&fake), 0);
    // The second call of the name starts its children and journals them.
    assert_eq!(
        step.spawn("kids", vec![spec(), spec()]).await.unwrap(),
        ["child-0", "child-1"]
    );
    let sent = fake.heartbeats.lock().unwrap().pop().unwrap();
    let append = sent.checkpoint_append.expect("appended");
    assert_eq!(
        append.bytes,
        b"{\"k\":\"spawn\",\"name\":\"kids\",\"seq\":1,\"run_ids\":[\"child-0\",\"child-1\"]}\n"
    );
    assert_eq!(step.journal().spawned("kids", 1).map(<[String]>::len), Some(2));
}

#[tokio::test]
async fn a_wait_s_outcomes_are_journaled_once_and_replayed() {
    let (client, fake) = serve(Vec::new()).await;
    let worker = StepWorker::new(client, "default", "q", "w1");
    let ids = vec!["c1".to_string(), "c2".to_string()];
    let outcomes = serde_json::json!({
        "children": [
            {"childRunId": "c2", "outcome": "COMPLETED", "notes": "", "artifacts": [], "result": null},
            {"childRunId": "c1", "outcome": "FAILED", "notes": "x", "artifacts": [], "result": null},
        ],
        "stillRunning": [],
    });
    // Not resumed from the wait: nothing to answer, nothing written.
    let mut step = worker.step(task_with(""));
    assert_eq!(step.waited("kids", &ids).await.unwrap(), None);
    assert!(fake.heartbeats.lock().unwrap().is_empty());

    // Resumed: the outcomes from the resume message, in the order of the ids, journaled.
    let resumed = StepTask {
        resume_messages: vec![format!("[your child runs have closed]\n{outcomes}")],
        ..task_with("")
    };
    let mut step = worker.step(resumed);
    let want = serde_json::json!({
        "children": [outcomes["children"][1], outcomes["children"][0]],
        "stillRunning": [],
    });
    assert_eq!(step.waited("kids", &ids).await.unwrap(), Some(want.clone()));
    let sent = fake.heartbeats.lock().unwrap().pop().unwrap();
    let journal = String::from_utf8(sent.checkpoint).unwrap();
    assert!(journal.ends_with(&format!(
        "{{\"k\":\"outcomes\",\"name\":\"kids\",\"seq\":0,\"value\":{want}}}\n"
    )));

    // A later attempt (the server sends resume messages once) replays them.
    let mut step = worker.step(task_with(&journal));
    assert_eq!(step.waited("kids", &ids).await.unwrap(), Some(want));
    assert!(
        fake.heartbeats.lock().unwrap().is_empty(),
        "a replay sends nothing"
    );
}
