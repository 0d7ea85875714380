//! A follower node ([`railyard_server::follower`]) in front of a real leader (a
//! `RunningServer` on redb): every call made to the follower is answered by the
//! leader, streams and long polls included; webhooks are forwarded once; API keys
//! are checked by the leader; with the leader gone a call is answered `UNAVAILABLE`
//! within its deadline, naming the leader tried.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::service::triggers::TriggerInput;
use railyard_proto::v1::{self, history_client::HistoryClient};
use railyard_sdk::{ApiKey, Client, ClientError, Completion, ConnectOptions, StepWorker};
use railyard_server::follower::{FixedLeader, FollowerConfig, Leader, RunningFollower};
use railyard_server::{RunningServer, ServerConfig};

const TWO_STEPS: &str = r#"{"id":"two","version":"1","name":"Two steps","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"},
  {"id":"b","title":"B","prompt":"Then more"}]}"#;

/// Bounds a wait that should end long before; never a measure of anything.
const HANG: Duration = Duration::from_secs(30);

struct Pair {
    leader: RunningServer,
    follower: RunningFollower,
    admin_key: Option<String>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn leader_of(server: &RunningServer) -> Leader {
    Leader {
        node: "leader-node".into(),
        epoch: 1,
        grpc: server.grpc_addr.to_string(),
        http: server.http_addr.to_string(),
        tls: false,
    }
}

async fn follower_of(leader: Option<Leader>) -> RunningFollower {
    let mut config = FollowerConfig::new("follower-node", Arc::new(FixedLeader(leader)));
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    RunningFollower::start(config).await.unwrap()
}

async fn pair(auth: bool) -> Pair {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("two.json"), TWO_STEPS).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.auth = auth;
    // Under auth a trigger needs a secret from the environment: the webhook test runs
    // without.
    config.triggers.config = vec![TriggerInput {
        id: "hook".into(),
        workflow_id: "two".into(),
        goal: "{{$.n}}".into(),
        ..TriggerInput::default()
    }];
    if auth {
        config.triggers.config.clear();
    }
    let leader = crate::support::serve(config).await;
    let admin_key = leader
        .admin_key_file
        .as_ref()
        .map(|p| std::fs::read_to_string(p).unwrap().trim().to_string());
    let follower = follower_of(Some(leader_of(&leader))).await;
    Pair {
        leader,
        follower,
        admin_key,
        _dirs: (data, workflows),
    }
}

impl Pair {
    async fn client(&self, key: Option<&str>) -> Client {
        let opts = ConnectOptions {
            api_key: key.map(ApiKey::new),
            max_attempts: 1,
            ..ConnectOptions::default()
        };
        Client::connect_with(&format!("http://{}", self.follower.grpc_addr), opts)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_run_is_started_worked_and_watched_through_a_follower() {
    let p = pair(false).await;
    let client = p.client(None).await;
    let run_id = client
        .start_run("default", "two", "it", HashMap::new())
        .await
        .unwrap();
    let mut watch = client.watch_run("default", &run_id, 1).await.unwrap();
    let worker = StepWorker::new(client.clone(), "default", "default", "w1");
    for notes in ["a done", "b done"] {
        let task = worker
            .poll(HANG)
            .await
            .unwrap()
            .expect("a task, through the follower");
        worker
            .complete(&task.task_token, Completion::notes(notes))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(HANG, watch.message())
        .await
        .expect("the watch ends when the run closes")
        .unwrap()
    {
        seen.push((event.event_id, event.event_type));
    }
    let history = client.full_history("default", &run_id).await.unwrap();
    let all: Vec<_> = history.into_iter().map(|e| (e.event_id, e.event_type)).collect();
    assert_eq!(seen, all, "the watch through the follower saw every event");
    assert_eq!(all.last().map(|e| e.1.as_str()), Some("RunCompleted"));

    // The leader has the run; the follower counted what it forwarded.
    let direct = Client::connect(&format!("http://{}", p.leader.grpc_addr))
        .await
        .unwrap();
    let run = direct
        .describe_run("default", &run_id)
        .await
        .unwrap()
        .run
        .unwrap();
    assert_eq!(run.status, v1::RunStatus::Completed as i32);
    let metrics = crate::support::metrics(p.follower.http_addr).await;
    assert!(
        metrics.contains(r#"railyard_node_role{role="follower"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"railyard_follower_forwarded_total{kind="grpc"}"#),
        "{metrics}"
    );
    p.follower.shutdown(HANG).await;
    p.leader.shutdown().await;
}

#[tokio::test]
async fn a_webhook_posted_to_a_follower_starts_one_run_per_delivery_id() {
    let p = pair(false).await;
    let http = reqwest::Client::new();
    let post = |n: u32, delivery: &str| {
        http.post(format!("http://{}/hooks/default/hook?x=1", p.follower.http_addr))
            .header("content-type", "application/json")
            .header("X-GitHub-Delivery", delivery)
            .body(format!(r#"{{"n":{n}}}"#))
            .send()
    };
    let mut runs = Vec::new();
    for (n, delivery) in [(1, "d-1"), (1, "d-1"), (2, "d-2"), (1, "d-1")] {
        let answer = post(n, delivery).await.unwrap();
        assert_eq!(answer.status(), 202);
        let json: serde_json::Value = answer.json().await.unwrap();
        runs.push(json["runId"].as_str().unwrap().to_string());
    }
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[0], runs[3]);
    assert_ne!(runs[0], runs[2]);
    let listed = p
        .client(None)
        .await
        .list_runs(v1::ListRunsRequest {
            namespace: "default".into(),
            page_size: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.runs.len(), 2, "one run per delivery id");
    // The leader's refusals come back as they are.
    let missing = http
        .post(format!("http://{}/hooks/default/nope", p.follower.http_addr))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // A body over the limit is refused by the follower itself.
    let big = http
        .post(format!("http://{}/hooks/default/hook", p.follower.http_addr))
        .header("content-type", "application/json")
        .body(vec![b' '; 2 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 413);
    p.follower.shutdown(HANG).await;
    p.leader.shutdown().await;
}

#[tokio::test]
async fn api_keys_are_checked_by_the_leader_through_a_follower() {
    let p = pair(true).await;
    let admin = p.admin_key.clone().expect("an admin key");
    let created = p
        .client(Some(&admin))
        .await
        .create_api_key(v1::CreateApiKeyRequest {
            namespace: "default".into(),
            role: v1::ApiKeyRole::Client as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    let with_key = p.client(Some(&created.api_key)).await;
    with_key
        .start_run("default", "two", "keyed", HashMap::new())
        .await
        .unwrap();
    let err = p
        .client(None)
        .await
        .start_run("default", "two", "anonymous", HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::Unauthenticated), "{err}");
    let err = p
        .client(Some("ry_nope_nope"))
        .await
        .start_run("default", "two", "bad key", HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::Unauthenticated), "{err}");
    // /healthz answers on the follower itself.
    let health: serde_json::Value = reqwest::get(format!("http://{}/healthz", p.follower.http_addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["role"], "follower");
    assert_eq!(health["leader"]["node"], "leader-node");
    assert_eq!(health["database"]["status"], "ok");
    p.follower.shutdown(HANG).await;
    p.leader.shutdown().await;
}

#[tokio::test]
async fn with_the_leader_gone_or_silent_a_follower_answers_unavailable_within_the_deadline() {
    let p = pair(false).await;
    let leader = leader_of(&p.leader);
    let client = p.client(None).await;
    p.leader.shutdown().await;
    let err = tokio::time::timeout(HANG, client.start_run("default", "two", "x", HashMap::new()))
        .await
        .expect("answered, not hung")
        .unwrap_err();
    assert!(matches!(err, ClientError::Unavailable { .. }), "{err}");
    let said = err.to_string();
    assert!(
        said.contains("follower") && said.contains("leader-node") && said.contains(&leader.grpc),
        "{said}"
    );
    let hook = reqwest::Client::new()
        .post(format!("http://{}/hooks/default/hook", p.follower.http_addr))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 503);
    p.follower.shutdown(HANG).await;

    // A leader that accepts connections and never answers (stopped, say): a call
    // with a deadline is answered UNAVAILABLE by then.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    let follower = follower_of(Some(Leader {
        grpc: silent_addr.to_string(),
        http: silent_addr.to_string(),
        ..leader
    }))
    .await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", follower.grpc_addr))
        .unwrap()
        .connect_lazy();
    let mut history = HistoryClient::new(channel);
    let mut request = tonic::Request::new(v1::DescribeRunRequest {
        namespace: "default".into(),
        run_id: "r".into(),
    });
    request.set_timeout(Duration::from_secs(2));
    let status = tokio::time::timeout(HANG, history.describe_run(request))
        .await
        .expect("answered, not hung")
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("did not answer within"), "{status:?}");
    follower.shutdown(Duration::from_secs(1)).await;

    // No leader at all.
    let lonely = follower_of(None).await;
    let client = Client::connect_with(
        &format!("http://{}", lonely.grpc_addr),
        ConnectOptions {
            max_attempts: 1,
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    let err = client.describe_run("default", "r").await.unwrap_err();
    assert!(
        matches!(err, ClientError::Unavailable { .. }) && err.to_string().contains("knows no leader"),
        "{err}"
    );
    lonely.shutdown(HANG).await;
}

#[tokio::test]
async fn a_follower_forwards_to_a_tls_leader_trusting_the_peer_ca_and_refuses_mutual_tls() {
    use railyard_sdk::TlsOptions;
    use railyard_server::tls::TlsFiles;

    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("two.json"), TWO_STEPS).unwrap();
    let ca = crate::tls::TestCa::new(certs.path(), "nodes");
    let (leader_cert, leader_key) = ca.issue("leader");
    let (follower_cert, follower_key) = ca.issue("follower");
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Some(TlsFiles {
        cert: leader_cert,
        key: leader_key,
        client_ca: None,
    });
    let leader = RunningServer::start(config).await.unwrap();
    let target = Leader {
        node: "tls-leader".into(),
        epoch: 1,
        grpc: format!("localhost:{}", leader.grpc_addr.port()),
        http: format!("localhost:{}", leader.http_addr.port()),
        tls: true,
    };
    let tls = TlsFiles {
        cert: follower_cert,
        key: follower_key,
        client_ca: None,
    };
    let mut config = FollowerConfig::new("tls-follower", Arc::new(FixedLeader(Some(target))));
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Some(tls.clone());
    config.peer_ca = Some(ca.ca_path());

    // Mutual TLS cannot be forwarded: refused, naming the file.
    let mut mutual = config.clone();
    mutual.tls = Some(TlsFiles {
        client_ca: Some(ca.ca_path()),
        ..tls
    });
    let err = RunningFollower::start(mutual).await.err().expect("refused");
    assert!(err.to_string().contains("--tls-client-ca"), "{err}");

    let follower = RunningFollower::start(config).await.unwrap();
    let opts = ConnectOptions {
        tls: TlsOptions {
            ca: Some(ca.ca_path()),
            ..TlsOptions::default()
        },
        max_attempts: 1,
        ..ConnectOptions::default()
    };
    let client = Client::connect_with(&format!("https://localhost:{}", follower.grpc_addr.port()), opts)
        .await
        .unwrap();
    let run_id = client
        .start_run("default", "two", "over tls", HashMap::new())
        .await
        .expect("forwarded over TLS to the leader");
    let pem = std::fs::read(ca.ca_path()).unwrap();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let health: serde_json::Value = http
        .get(format!("https://localhost:{}/healthz", follower.http_addr.port()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["leader"]["tls"], true, "{health}");
    let missing = http
        .post(format!(
            "https://localhost:{}/hooks/default/nope",
            follower.http_addr.port()
        ))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        missing.status(),
        404,
        "forwarded over TLS, answered by the leader"
    );
    let direct = Client::connect_with(
        &format!("https://localhost:{}", leader.grpc_addr.port()),
        ConnectOptions {
            tls: TlsOptions {
                ca: Some(ca.ca_path()),
                ..TlsOptions::default()
            },
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(direct.describe_run("default", &run_id).await.is_ok());
    follower.shutdown(HANG).await;
    leader.shutdown().await;
}

#[tokio::test]
async fn live_output_is_appended_and_watched_through_a_follower_over_grpc_and_sse() {
    use railyard_proto::v1::{
        AppendStepOutputRequest, OutputChunk, OutputKind, watch_output_response::Message,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let p = pair(false).await;
    let client = p.client(None).await;
    let run_id = client
        .start_run("default", "two", "it", HashMap::new())
        .await
        .unwrap();
    let worker = StepWorker::new(client.clone(), "default", "default", "w1");
    let task = worker.poll(HANG).await.unwrap().expect("a task");
    let mut watch = client.watch_output("default", &run_id, 0).await.unwrap();
    let text = |t: &str| OutputChunk {
        kind: OutputKind::Text as i32,
        text: t.into(),
        ..Default::default()
    };
    client
        .append_step_output(AppendStepOutputRequest {
            task_token: task.task_token.clone(),
            identity: "w1".into(),
            chunks: vec![text("through"), text(" the follower")],
        })
        .await
        .unwrap();
    // Live, while the step runs: the segment start, then both chunks.
    let mut offsets = Vec::new();
    while offsets.len() < 3 {
        let m = tokio::time::timeout(HANG, watch.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(Message::Chunk(c)) = m.message {
            offsets.push(c.offset);
        }
    }
    assert_eq!(offsets, vec![1, 2, 3]);

    // SSE on the follower's HTTP listener, resumed after offset 1, streamed as it
    // comes: the rest, then the end once the run closes.
    let mut conn = tokio::net::TcpStream::connect(p.follower.http_addr)
        .await
        .unwrap();
    conn.write_all(format!("GET /runs/{run_id}/output HTTP/1.0\r\nLast-Event-ID: 1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    for notes in ["a done", "b done"] {
        let task = if notes == "a done" {
            task.clone()
        } else {
            worker.poll(HANG).await.unwrap().expect("the second step")
        };
        worker
            .complete(&task.task_token, Completion::notes(notes))
            .await
            .unwrap();
    }
    let mut body = String::new();
    tokio::time::timeout(HANG, conn.read_to_string(&mut body))
        .await
        .unwrap()
        .unwrap();
    assert!(body.starts_with("HTTP/1.0 200"), "{body}");
    let ids: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(str::trim)
        .collect();
    assert_eq!(ids, vec!["2", "3"]);
    assert!(body.contains("event: end"), "{body}");
    p.follower.shutdown(HANG).await;
    p.leader.shutdown().await;
}

/// A node killed while it led and started again on the same ports follows the lease
/// its earlier run still holds: it must not forward to itself (each forwarded call
/// coming back to it, until its headers grow past the limit), but answer
/// UNAVAILABLE saying why until the lease ends and it takes over.
#[tokio::test]
async fn a_node_following_a_lease_that_names_its_own_address_forwards_nothing() {
    let free = |_| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (grpc, http) = (free(0), free(1));
    let earlier = Leader {
        node: "earlier-run".into(),
        epoch: 3,
        grpc: grpc.to_string(),
        http: http.to_string(),
        tls: false,
    };
    let mut config = FollowerConfig::new("restarted-node", Arc::new(FixedLeader(Some(earlier))));
    config.grpc_listen = grpc;
    config.http_listen = http;
    config.advertise_grpc = Some(grpc.to_string());
    let follower = RunningFollower::start(config).await.unwrap();
    let client = Client::connect_with(
        &format!("http://{grpc}"),
        ConnectOptions {
            max_attempts: 1,
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    let err = tokio::time::timeout(HANG, client.describe_run("default", "r"))
        .await
        .expect("answered, not hung")
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Unavailable { .. })
            && err.to_string().contains("an earlier run of this node"),
        "{err}"
    );
    let hook = reqwest::Client::new()
        .post(format!("http://{http}/hooks/default/hook"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 503);
    follower.shutdown(HANG).await;
}
