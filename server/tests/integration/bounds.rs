//! Every input bounded, over real gRPC on loopback: each test reproduces one way a
//! hostile or careless client (or a file in the server's directories) could hang,
//! exhaust or confuse the server, and checks the clear error or bounded outcome it
//! now gets instead.

use std::path::Path;
use std::time::Duration;

use railyard_proto::v1::{self, StartRunRequest};
use railyard_proto::{Client, ClientError, Completion, StepWorker};
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
    let server = RunningServer::start(c).await.unwrap();
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
        Code::NotFound,
        "does not exist",
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
