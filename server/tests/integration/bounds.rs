//! Every input bounded, over real gRPC on loopback: each test reproduces one way a
//! hostile or careless client (or a file in the server's directories) could hang,
//! exhaust or confuse the server, and checks the clear error or bounded outcome it
//! now gets instead.

use std::path::Path;
use std::time::Duration;

use railyard_proto::v1::{self, StartRunRequest};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use tonic::Code;

/// A one-step workflow and a three-step one.
const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;
const MANY: &str = r#"{"id":"many","version":"1","name":"Many","steps":[
  {"id":"a","title":"A","prompt":"p"},{"id":"b","title":"B","prompt":"p"},
  {"id":"c","title":"C","prompt":"p"},{"id":"d","title":"D","prompt":"p"},
  {"id":"e","title":"E","prompt":"p"},{"id":"f","title":"F","prompt":"p"},
  {"id":"g","title":"G","prompt":"p"},{"id":"h","title":"H","prompt":"p"},
  {"id":"i","title":"I","prompt":"p"},{"id":"j","title":"J","prompt":"p"}]}"#;

pub struct Bed {
    pub server: RunningServer,
    pub client: Client,
    pub data: tempfile::TempDir,
    pub _workflows: tempfile::TempDir,
}

pub async fn bed_with(config: impl FnOnce(&mut ServerConfig)) -> Bed {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    std::fs::write(workflows.path().join("many.json"), MANY).unwrap();
    let mut c = ServerConfig::new(data.path().join("data"), workflows.path());
    c.grpc_listen = "127.0.0.1:0".parse().unwrap();
    c.http_listen = "127.0.0.1:0".parse().unwrap();
    config(&mut c);
    let server = crate::support::serve(c).await;
    let client = Client::connect(&format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    Bed {
        server,
        client,
        data,
        _workflows: workflows,
    }
}

pub async fn bed() -> Bed {
    bed_with(|_| {}).await
}

impl Bed {
    pub fn worker(&self) -> StepWorker {
        StepWorker::new(self.client.clone(), "default", "default", "w")
    }

    pub async fn start(&self, workflow: &str, run_id: &str) -> Result<String, ClientError> {
        let req = StartRunRequest {
            workflow_id: workflow.into(),
            run_id: run_id.into(),
            goal: "g".into(),
            ..Default::default()
        };
        Ok(self.client.start_run_with(req).await?.run_id)
    }

    pub fn data_dir(&self) -> std::path::PathBuf {
        self.data.path().join("data")
    }
}

pub fn assert_code<T: std::fmt::Debug>(r: Result<T, ClientError>, code: Code, needle: &str) -> String {
    let e = r.expect_err("expected an error");
    assert_eq!(e.code(), Some(code), "{e}");
    let msg = e.to_string();
    assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
    msg
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
#[tokio::test]
async fn the_data_directory_and_its_files_are_private() {
    if !crate::support::redb_only(
        "the_data_directory_and_its_files_are_private",
        "it checks the redb file's mode",
    ) {
        return;
    }
    let b = bed().await;
    let dir = b.data_dir();
    assert_eq!(mode(&dir), 0o700, "data directory");
    assert_eq!(mode(&dir.join("railyard.redb")), 0o600, "database");
    assert_eq!(mode(&dir.join("keys.json")), 0o600, "key file");
    b.server.shutdown().await;

    // An existing database left readable by others is narrowed at the next start.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("railyard.redb"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = ServerConfig::new(&dir, b._workflows.path());
    c.grpc_listen = "127.0.0.1:0".parse().unwrap();
    c.http_listen = "127.0.0.1:0".parse().unwrap();
    let server = RunningServer::start(c).await.unwrap();
    assert_eq!(mode(&dir.join("railyard.redb")), 0o600);
    server.shutdown().await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_fifo_at_keys_json_is_refused_by_name_instead_of_hanging_the_start() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    let keys = data.path().join("keys.json");
    let c = std::ffi::CString::new(keys.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    let started = tokio::time::timeout(Duration::from_secs(30), RunningServer::start(config))
        .await
        .expect("the start hung on the FIFO");
    let err = started.err().expect("a FIFO key file is refused").to_string();
    assert!(
        err.contains("keys.json") && err.contains("not a regular file (a FIFO)"),
        "{err}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn fifo_device_and_huge_workflow_files_are_listed_as_invalid_and_the_server_starts() {
    let b = bed_with(|c| {
        let dir = &c.workflows_dir;
        let fifo = std::ffi::CString::new(dir.join("fifo.json").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.json")).unwrap();
        std::fs::File::create(dir.join("huge.json"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
    })
    .await;
    let listing = b.client.list_workflows("default").await.unwrap();
    let mut ids: Vec<_> = listing.workflows.iter().map(|w| w.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["many", "one"]);
    let errors: Vec<_> = listing.invalid.iter().map(|i| i.error.as_str()).collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].contains("fifo.json: not a regular file (a FIFO)"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("huge.json: 1073741824 bytes, more than the limit"),
        "{errors:?}"
    );
    assert!(
        errors[2].contains("zero.json: not a regular file (a device)"),
        "{errors:?}"
    );
}

#[tokio::test]
async fn reflection_answers_v1alpha_clients_as_well_as_v1() {
    use tonic_reflection::pb::{v1, v1alpha};
    let b = bed().await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", b.server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();

    let mut alpha = v1alpha::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let req = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1alpha::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = alpha
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.message().await.unwrap().expect("an answer");
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        resp.message_response
    else {
        panic!("unexpected answer {resp:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"railyard.v1.History"), "{names:?}");
    assert!(names.contains(&"railyard.v1.Tasks"), "{names:?}");

    let mut stable = v1::server_reflection_client::ServerReflectionClient::new(channel);
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1::server_reflection_request::MessageRequest::FileContainingSymbol("railyard.v1.History".into()),
        ),
    };
    let mut stream = stable
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.message().await.unwrap().expect("an answer");
    assert!(matches!(
        resp.message_response,
        Some(v1::server_reflection_response::MessageResponse::FileDescriptorResponse(_))
    ));
}

/// Sends raw bytes as the request message of a unary method.
async fn raw_unary(addr: std::net::SocketAddr, path: &'static str, body: Vec<u8>) -> tonic::Status {
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    #[derive(Default)]
    struct Raw;
    struct RawEnc;
    struct RawDec;
    impl Encoder for RawEnc {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
            use prost::bytes::BufMut;
            buf.put_slice(&item);
            Ok(())
        }
    }
    impl Decoder for RawDec {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
            use prost::bytes::Buf;
            Ok(Some(buf.copy_to_bytes(buf.remaining()).to_vec()))
        }
    }
    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = RawEnc;
        type Decoder = RawDec;
        fn encoder(&mut self) -> RawEnc {
            RawEnc
        }
        fn decoder(&mut self) -> RawDec {
            RawDec
        }
    }
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(body),
        http::uri::PathAndQuery::from_static(path),
        Raw,
    )
    .await
    .expect_err("a malformed message is refused")
}

#[tokio::test]
async fn malformed_protobuf_is_invalid_argument_not_internal() {
    let b = bed().await;
    // Field 1 (namespace), length-delimited, claiming 100 bytes that never come.
    let status = raw_unary(
        b.server.grpc_addr,
        "/railyard.v1.History/StartRun",
        vec![0x0a, 100, b'x'],
    )
    .await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("malformed protobuf message"),
        "{status:?}"
    );
    // A wire type that does not exist.
    let status = raw_unary(b.server.grpc_addr, "/railyard.v1.Tasks/PollStepTask", vec![0x0f]).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

#[tokio::test]
async fn dot_run_ids_are_refused_at_the_api() {
    let b = bed().await;
    for id in [".", ".."] {
        assert_code(b.start("one", id).await, Code::InvalidArgument, "run_id");
    }
    assert_eq!(b.start("one", ".a").await.unwrap(), ".a");
}

#[tokio::test]
async fn artifacts_outside_the_workspace_are_refused_and_change_nothing() {
    let b = bed().await;
    let run = b.start("one", "art").await.unwrap();
    let w = b.worker();
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    for bad in ["../../etc/passwd", "/etc/passwd", "a/\u{1b}[2J"] {
        let c = Completion {
            notes: "n".into(),
            artifacts: vec!["ok.md".into(), bad.into()],
            ..Default::default()
        };
        assert_code(
            w.complete(&task.task_token, c).await,
            Code::InvalidArgument,
            "artifacts[1]",
        );
    }
    let info = b.client.describe_run("default", &run).await.unwrap().run.unwrap();
    assert_eq!(info.status, v1::RunStatus::Running as i32);
    let c = Completion {
        notes: "n".into(),
        artifacts: vec!["out/report.md".into()],
        ..Default::default()
    };
    w.complete(&task.task_token, c).await.unwrap();
}

#[tokio::test]
async fn echoed_client_input_is_cut_short() {
    let b = bed().await;
    let huge = "n".repeat(10 << 20);
    let msg = assert_code(
        b.client.list_workflows(&huge).await,
        Code::InvalidArgument,
        "namespace: is 10485760 bytes",
    );
    assert!(msg.len() < 1024, "a {} byte error", msg.len());
    let req = StartRunRequest {
        workflow_id: format!("{}!", "w".repeat(1 << 20)),
        goal: "g".into(),
        ..Default::default()
    };
    let msg = assert_code(
        b.client.start_run_with(req).await,
        Code::InvalidArgument,
        "workflow_id",
    );
    assert!(msg.len() < 1024, "a {} byte error", msg.len());
    let mut context = std::collections::HashMap::new();
    context.insert("k".repeat(1 << 20), "v".into());
    let req = StartRunRequest {
        workflow_id: "one".into(),
        goal: "g".into(),
        context,
        ..Default::default()
    };
    let msg = assert_code(
        b.client.start_run_with(req).await,
        Code::InvalidArgument,
        "context",
    );
    assert!(msg.len() < 1024, "a {} byte error", msg.len());
}

#[tokio::test]
async fn pending_signals_are_capped_so_the_step_task_is_still_delivered() {
    let b = bed().await;
    let run = b.start("one", "sig").await.unwrap();
    let payload = format!("\"{}\"", "x".repeat(256 * 1024 - 2));
    let mut accepted = 0;
    let refusal = loop {
        let req = v1::SignalRunRequest {
            run_id: run.clone(),
            signal_name: "steer".into(),
            payload_json: payload.clone(),
            ..Default::default()
        };
        match b.client.signal_run(req).await {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 70, "70 signals of 256 KiB were all accepted");
    };
    assert_eq!(refusal.code(), Some(Code::ResourceExhausted), "{refusal}");
    assert!(
        refusal.to_string().contains("max pending signal bytes"),
        "{refusal}"
    );
    assert_eq!(accepted, 3);
    // The refused signal left nothing behind, and the task reaches the worker.
    let task = b
        .worker()
        .poll(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a task");
    assert_eq!(task.signals.len(), accepted);
    let history = b.client.full_history("default", &run).await.unwrap();
    let signals = history
        .iter()
        .filter(|e| e.event_type == "SignalReceived")
        .count();
    assert_eq!(signals, accepted);
}

#[tokio::test]
async fn a_completion_that_would_make_the_next_task_too_large_is_refused() {
    let b = bed().await;
    let run = b.start("many", "big").await.unwrap();
    let w = b.worker();
    let notes = "n".repeat(1 << 20);
    let mut done = 0;
    let (token, refusal) = loop {
        let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
        // Every task that was leased is delivered whole.
        assert_eq!(task.prior_steps.len(), done);
        match w
            .complete(&task.task_token, Completion::notes(notes.clone()))
            .await
        {
            Ok(()) => done += 1,
            Err(e) => break (task.task_token, e),
        }
        assert!(done < 10, "every completion was accepted");
    };
    assert_eq!(refusal.code(), Some(Code::ResourceExhausted), "{refusal}");
    assert!(refusal.to_string().contains("max task bytes"), "{refusal}");
    assert_eq!(done, 5);
    // Nothing changed: the step is still leased, and a smaller result goes through.
    w.complete(&token, Completion::notes("short")).await.unwrap();
    let info = b.client.describe_run("default", &run).await.unwrap().run.unwrap();
    assert_eq!(info.current_step, 6);
}

#[tokio::test]
async fn a_context_larger_than_its_limit_is_refused_at_start() {
    let b = bed().await;
    let context = (0..20)
        .map(|i| (format!("k{i}"), "v".repeat(60 * 1024)))
        .collect();
    let req = StartRunRequest {
        workflow_id: "one".into(),
        run_id: "ctx".into(),
        goal: "g".into(),
        context,
        ..Default::default()
    };
    assert_code(
        b.client.start_run_with(req).await,
        Code::ResourceExhausted,
        "max context bytes",
    );
    assert_code(
        b.client.describe_run("default", "ctx").await,
        Code::NotFound,
        "ctx",
    );
}

#[tokio::test]
async fn a_history_larger_than_a_message_is_paged_by_bytes() {
    let b = bed().await;
    let run = b.start("one", "long").await.unwrap();
    let w = b.worker();
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    let payload = format!("\"{}\"", "x".repeat(256 * 1024 - 2));
    // 70 signals of 256 KiB: 17.5 MiB of history, more than one message holds. The
    // worker acknowledges each as it comes, so none stays pending.
    for _ in 0..70 {
        let req = v1::SignalRunRequest {
            run_id: run.clone(),
            signal_name: "steer".into(),
            payload_json: payload.clone(),
            ..Default::default()
        };
        b.client.signal_run(req).await.unwrap();
        {
            let hb = v1::HeartbeatStepTaskRequest {
                task_token: task.task_token.clone(),
                acked_signal_event_id: u64::MAX,
                ..Default::default()
            };
            b.client.heartbeat_step_task(hb).await.unwrap();
        }
    }
    let mut from = 1;
    let mut pages = 0;
    let mut signals = 0;
    loop {
        let page = b
            .client
            .get_history(v1::GetHistoryRequest {
                run_id: run.clone(),
                from_event_id: from,
                ..Default::default()
            })
            .await
            .unwrap();
        pages += 1;
        signals += page
            .events
            .iter()
            .filter(|e| e.event_type == "SignalReceived")
            .count();
        let Some(last) = page.events.last() else { break };
        from = last.event_id + 1;
    }
    assert_eq!(signals, 70);
    assert!(pages >= 5, "{pages} pages for 17.5 MiB");
}

#[tokio::test]
async fn large_runs_do_not_break_the_run_listing() {
    let b = bed().await;
    let value = "v".repeat(60 * 1024);
    for i in 0..20 {
        let context = (0..16).map(|k| (format!("k{k}"), value.clone())).collect();
        let req = StartRunRequest {
            workflow_id: "one".into(),
            run_id: format!("big{i}"),
            goal: "g".repeat(64 * 1024),
            context,
            ..Default::default()
        };
        b.client.start_run_with(req).await.unwrap();
    }
    // 20 runs of about 1 MiB each: a listing of whole runs would not fit a message.
    let list = b
        .client
        .list_runs(v1::ListRunsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.runs.len(), 20);
    for r in &list.runs {
        assert!(r.context.is_empty());
        assert!(
            r.goal.len() <= 1024 + '…'.len_utf8() && r.goal.ends_with('…'),
            "{}",
            r.goal.len()
        );
    }
    // Describe still has it all, and its answer fits the client's limit.
    let whole = b
        .client
        .describe_run("default", "big3")
        .await
        .unwrap()
        .run
        .unwrap();
    assert_eq!(whole.context.len(), 16);
    assert_eq!(whole.goal.len(), 64 * 1024);
}

/// Whether the server closes `conn` within 30 s (a read sees the end, or an error).
async fn closed_by_server(conn: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // The server's HTTP/2 preface and pings: keep reading.
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn idle_connections_are_closed_on_both_listeners() {
    let b = bed_with(|c| c.net.idle_timeout = Duration::from_millis(300)).await;
    for addr in [b.server.grpc_addr, b.server.http_addr] {
        // Connected, and never a byte sent.
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            closed_by_server(&mut conn).await,
            "idle connection to {addr} stayed open"
        );
    }
}

#[tokio::test]
async fn a_long_poll_outlives_the_idle_timeout_because_live_peers_answer_pings() {
    let b = bed_with(|c| c.net.idle_timeout = Duration::from_secs(2)).await;
    let started = std::time::Instant::now();
    let task = b.worker().poll(Duration::from_secs(5)).await.unwrap();
    assert!(task.is_none());
    assert!(started.elapsed() >= Duration::from_secs(5));
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_at_once() {
    let b = bed_with(|c| c.net.max_connections = 2).await;
    let held = [
        tokio::net::TcpStream::connect(b.server.grpc_addr).await.unwrap(),
        tokio::net::TcpStream::connect(b.server.grpc_addr).await.unwrap(),
    ];
    let mut third = tokio::net::TcpStream::connect(b.server.grpc_addr).await.unwrap();
    assert!(closed_by_server(&mut third).await, "a third connection was kept");
    // Once the held ones go, a client gets in again.
    drop(held);
    let mut answered = false;
    for _ in 0..300 {
        if b.client.list_workflows("default").await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "no connection was accepted after the held ones closed");
}

#[tokio::test]
async fn the_workflow_listing_fits_one_answer_at_the_loader_limits() {
    use railyard_engine::registry::MAX_DEFINITION_FILES;
    use railyard_model::workflow::{MAX_DESCRIPTION, MAX_STEPS};
    let b = bed_with(|c| {
        let steps: Vec<String> = (0..MAX_STEPS)
            .map(|i| format!(r#"{{"id":"{i:0>120}","title":"T","prompt":"p"}}"#))
            .collect();
        let steps = steps.join(",");
        // Every file the loader takes, each as large as a listing shows it.
        for i in 0..MAX_DEFINITION_FILES - 3 {
            let def = format!(
                r#"{{"id":"w{i}","version":"1","name":"W","description":"{}","steps":[{steps}]}}"#,
                "d".repeat(MAX_DESCRIPTION)
            );
            std::fs::write(c.workflows_dir.join(format!("w{i:03}.json")), def).unwrap();
        }
        // And one whose description is over the limit: listed as invalid, briefly.
        let def = format!(
            r#"{{"id":"huge","version":"1","name":"H","description":"{}","steps":[{steps}]}}"#,
            "d".repeat(512 << 10)
        );
        std::fs::write(c.workflows_dir.join("huge.json"), def).unwrap();
    })
    .await;
    let listing = b.client.list_workflows("default").await.unwrap();
    assert_eq!(listing.workflows.len(), MAX_DEFINITION_FILES - 1);
    assert_eq!(listing.invalid.len(), 1);
    assert!(
        listing.invalid[0].error.contains("description: is 524288 bytes"),
        "{:?}",
        listing.invalid
    );
    let bytes = prost::Message::encoded_len(&listing);
    assert!(
        bytes > 4 << 20,
        "more than the 4 MiB a default client accepts: {bytes}"
    );
}
