//! Authentication and roles over real gRPC and HTTP: a server with auth on, its
//! bootstrap admin key, and every method against every role, the wrong namespace,
//! the wrong queue, revoked and expired keys, no key and a garbage header. A refused
//! call changes nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{
    self, ApiKeyRole, CancelRunRequest, CompleteStepTaskRequest, CreateApiKeyRequest, FailStepTaskRequest,
    GetHistoryRequest, HeartbeatStepTaskRequest, ListApiKeysRequest, ListRunsRequest, PollStepTaskRequest,
    SignalRunRequest, TerminateRunRequest,
};
use railyard_sdk::{ApiKey, Client, ClientError, ConnectOptions};
use railyard_server::{RunningServer, ServerConfig, StartError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

/// One step on queue `q1`.
const ONE: &str = r#"{"id":"one","version":"1","name":"One","taskQueue":"q1",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;
/// One step on the default queue.
const OTHER: &str = r#"{"id":"other","version":"1","name":"Other",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

pub(crate) struct Secured {
    pub server: RunningServer,
    pub clock: ManualClock,
    pub admin_key: String,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

pub(crate) async fn secured() -> Secured {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    std::fs::write(workflows.path().join("other.json"), OTHER).unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.clock = Arc::new(clock.clone());
    config.auth = true;
    let server = crate::support::serve(config).await;
    let path = server
        .admin_key_file
        .clone()
        .expect("the first start makes an admin key");
    assert_eq!(path, data.path().join("admin.key"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the admin key is readable by its owner only");
    }
    let admin_key = std::fs::read_to_string(&path).unwrap().trim().to_string();
    Secured {
        server,
        clock,
        admin_key,
        _dirs: (data, workflows),
    }
}

impl Secured {
    fn url(&self) -> String {
        format!("http://{}", self.server.grpc_addr)
    }

    pub async fn client(&self, key: Option<&str>) -> Client {
        let opts = ConnectOptions {
            api_key: key.map(ApiKey::new),
            max_attempts: 1,
            ..ConnectOptions::default()
        };
        Client::connect_with(&self.url(), opts).await.unwrap()
    }

    pub async fn admin(&self) -> Client {
        self.client(Some(&self.admin_key)).await
    }

    /// A new key; returns the whole key and its id.
    pub async fn key(
        &self,
        ns: &str,
        role: ApiKeyRole,
        queues: &[&str],
        expires_secs: u64,
    ) -> (String, String) {
        let resp = self
            .admin()
            .await
            .create_api_key(CreateApiKeyRequest {
                namespace: ns.into(),
                role: role as i32,
                task_queues: queues.iter().map(|q| q.to_string()).collect(),
                expires_in_seconds: expires_secs,
                description: String::new(),
            })
            .await
            .unwrap();
        let info = resp.key.unwrap();
        assert!(resp.api_key.starts_with(&format!("ry_{}_", info.key_id)));
        (resp.api_key, info.key_id)
    }
}

/// Every method of History, Tasks and Admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Start,
    Describe,
    History,
    Watch,
    List,
    Signal,
    Cancel,
    Terminate,
    Workflows,
    Tree,
    DescribeQueue,
    Poll,
    Heartbeat,
    Complete,
    Fail,
    CreateKey,
    ListKeys,
    RevokeKey,
}

const ALL: [Call; 18] = [
    Call::Start,
    Call::Describe,
    Call::History,
    Call::Watch,
    Call::List,
    Call::Signal,
    Call::Cancel,
    Call::Terminate,
    Call::Workflows,
    Call::Tree,
    Call::DescribeQueue,
    Call::Poll,
    Call::Heartbeat,
    Call::Complete,
    Call::Fail,
    Call::CreateKey,
    Call::ListKeys,
    Call::RevokeKey,
];

/// Calls `call` in namespace `ns`. Calls that would change something when allowed
/// aim where they cannot: a run that does not exist, a stale task token, a key id
/// that does not exist; so an allowed call ends in NOT_FOUND or FAILED_PRECONDITION
/// at worst, never in PERMISSION_DENIED or UNAUTHENTICATED.
async fn call(c: &Client, call: Call, ns: &str, run: &str, stale_token: &str) -> Result<(), ClientError> {
    let ns = ns.to_string();
    match call {
        Call::Start => c.start_run(&ns, "one", "matrix", HashMap::new()).await.map(drop),
        Call::Describe => c.describe_run(&ns, run).await.map(drop),
        Call::History => c
            .get_history(GetHistoryRequest {
                namespace: ns,
                run_id: run.into(),
                ..Default::default()
            })
            .await
            .map(drop),
        Call::Watch => c.watch_run(&ns, run, 1).await.map(drop),
        Call::List => c
            .list_runs(ListRunsRequest {
                namespace: ns,
                ..Default::default()
            })
            .await
            .map(drop),
        Call::Signal => {
            c.signal_run(SignalRunRequest {
                namespace: ns,
                run_id: "no-such-run".into(),
                signal_name: "steer".into(),
                payload_json: "{}".into(),
                ..Default::default()
            })
            .await
        }
        Call::Cancel => {
            c.cancel_run(CancelRunRequest {
                namespace: ns,
                run_id: "no-such-run".into(),
                ..Default::default()
            })
            .await
        }
        Call::Terminate => {
            c.terminate_run(TerminateRunRequest {
                namespace: ns,
                run_id: "no-such-run".into(),
                ..Default::default()
            })
            .await
        }
        Call::Workflows => c.list_workflows(&ns).await.map(drop),
        Call::Tree => c.get_session_tree(&ns, run).await.map(drop),
        Call::DescribeQueue => c.describe_task_queue(&ns, "q1").await.map(drop),
        Call::Poll => c
            .poll_step_task(PollStepTaskRequest {
                namespace: ns,
                task_queue: "q1".into(),
                identity: "matrix".into(),
                wait_timeout_ms: 1,
                ..Default::default()
            })
            .await
            .map(drop),
        Call::Heartbeat => c
            .heartbeat_step_task(HeartbeatStepTaskRequest {
                task_token: stale_token.into(),
                ..Default::default()
            })
            .await
            .map(drop),
        Call::Complete => c
            .complete_step_task(CompleteStepTaskRequest {
                task_token: stale_token.into(),
                ..Default::default()
            })
            .await
            .map(drop),
        Call::Fail => c
            .fail_step_task(FailStepTaskRequest {
                task_token: stale_token.into(),
                error_type: "boom".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        Call::CreateKey => c
            .create_api_key(CreateApiKeyRequest {
                namespace: ns,
                role: ApiKeyRole::Client as i32,
                ..Default::default()
            })
            .await
            .map(drop),
        Call::ListKeys => c
            .list_api_keys(ListApiKeysRequest {
                namespace: ns,
                ..Default::default()
            })
            .await
            .map(drop),
        Call::RevokeKey => c.revoke_api_key("0000000000000000").await.map(drop),
    }
}

/// Whether the call got past authentication and authorization.
fn passed(r: &Result<(), ClientError>) -> bool {
    !matches!(
        r,
        Err(ClientError::PermissionDenied(_) | ClientError::Unauthenticated(_))
    )
}

/// Starts a run of `one` and completes its step, to get a token that is stale.
async fn stale_token(admin: &Client) -> String {
    admin
        .start_run("default", "one", "stale", HashMap::new())
        .await
        .unwrap();
    let task = admin
        .poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "q1".into(),
            identity: "setup".into(),
            wait_timeout_ms: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .expect("a task");
    admin
        .complete_step_task(CompleteStepTaskRequest {
            task_token: task.task_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    task.task_token
}

#[tokio::test]
async fn every_role_against_every_method() {
    let s = secured().await;
    let admin = s.admin().await;
    let token = stale_token(&admin).await;
    // The run the reads look at; its history must not move under refused calls.
    let run = admin
        .start_run("default", "other", "watched", HashMap::new())
        .await
        .unwrap();
    let before = admin.full_history("default", &run).await.unwrap().len();

    // Of the watched run's queue too, so that it may describe that run.
    let (worker_key, _) = s.key("default", ApiKeyRole::Worker, &["q1", "default"], 0).await;
    let (client_key, _) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    let (ns_admin_key, _) = s.key("default", ApiKeyRole::Admin, &[], 0).await;
    let client_calls = [
        Call::Start,
        Call::Describe,
        Call::History,
        Call::Watch,
        Call::List,
        Call::Signal,
        Call::Cancel,
        Call::Terminate,
        Call::Workflows,
        Call::Tree,
        Call::DescribeQueue,
    ];
    let worker_calls = [
        Call::Describe,
        Call::Poll,
        Call::Heartbeat,
        Call::Complete,
        Call::Fail,
    ];
    let roles: [(&str, &str, Vec<Call>); 3] = [
        ("worker", &worker_key, worker_calls.to_vec()),
        ("client", &client_key, client_calls.to_vec()),
        ("admin", &ns_admin_key, ALL.to_vec()),
    ];
    for (role, key, allowed) in &roles {
        let c = s.client(Some(key)).await;
        for op in ALL {
            let r = call(&c, op, "default", &run, &token).await;
            if allowed.contains(&op) {
                assert!(passed(&r), "{role} may {op:?}: {r:?}");
            } else {
                match &r {
                    Err(ClientError::PermissionDenied(m)) => assert!(
                        m.contains(&format!("has role {role}, which may not")),
                        "{role} {op:?}: {m}"
                    ),
                    other => panic!("{role} may not {op:?}, got {other:?}"),
                }
            }
            // The wrong namespace is refused for every method that names one.
            if !matches!(
                op,
                Call::Heartbeat | Call::Complete | Call::Fail | Call::RevokeKey
            ) && allowed.contains(&op)
            {
                match call(&c, op, "elsewhere", &run, &token).await {
                    Err(ClientError::PermissionDenied(m)) => assert!(
                        m.contains("is for namespace \"default\", not \"elsewhere\""),
                        "{role} {op:?}: {m}"
                    ),
                    other => panic!("{role} {op:?} in another namespace: {other:?}"),
                }
            }
        }
    }

    // Without a key, or with garbage, nothing passes, and the message says why.
    let nobody = s.client(None).await;
    let garbage = s.client(Some("not-a-key")).await;
    let flipped = if worker_key.ends_with('0') { '1' } else { '0' };
    let forged = s
        .client(Some(&format!("{}{flipped}", &worker_key[..worker_key.len() - 1])))
        .await;
    for op in ALL {
        for (who, c, says) in [
            ("no key", &nobody, "no API key"),
            ("garbage", &garbage, "malformed API key"),
            ("wrong secret", &forged, "unknown API key"),
        ] {
            match call(c, op, "default", &run, &token).await {
                Err(ClientError::Unauthenticated(m)) => {
                    assert!(m.contains(says), "{who} {op:?}: {m}");
                    assert!(!m.contains(&worker_key[20..]), "the secret is never echoed: {m}");
                }
                other => panic!("{who} {op:?}: {other:?}"),
            }
        }
    }

    // Nothing refused reached the run.
    let after = admin.full_history("default", &run).await.unwrap();
    assert_eq!(after.len(), before, "{after:?}");
}

#[tokio::test]
async fn a_worker_key_is_held_to_its_queues_and_a_non_bearer_header_is_refused() {
    let s = secured().await;
    let admin = s.admin().await;
    let (key, key_id) = s.key("default", ApiKeyRole::Worker, &["q1"], 0).await;
    let worker = s.client(Some(&key)).await;
    match worker
        .poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "default".into(),
            wait_timeout_ms: 1,
            ..Default::default()
        })
        .await
    {
        Err(ClientError::PermissionDenied(m)) => assert_eq!(
            m,
            format!("API key {key_id} may use only task queues [q1], not \"default\"")
        ),
        other => panic!("{other:?}"),
    }
    // A token for a step on another queue (leased by the admin) is refused too,
    // and the lease stays good.
    admin
        .start_run("default", "other", "g", HashMap::new())
        .await
        .unwrap();
    let task = admin
        .poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "default".into(),
            wait_timeout_ms: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .expect("a task");
    let complete = |token: &str| CompleteStepTaskRequest {
        task_token: token.into(),
        ..Default::default()
    };
    match worker.complete_step_task(complete(&task.task_token)).await {
        Err(ClientError::PermissionDenied(m)) => assert!(m.contains("not \"default\""), "{m}"),
        other => panic!("{other:?}"),
    }
    admin
        .complete_step_task(complete(&task.task_token))
        .await
        .unwrap();

    // On its own queue the worker does its job, start to finish.
    let run = admin
        .start_run("default", "one", "g", HashMap::new())
        .await
        .unwrap();
    let task = worker
        .poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "q1".into(),
            identity: "w1".into(),
            wait_timeout_ms: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .expect("a task");
    worker
        .complete_step_task(complete(&task.task_token))
        .await
        .unwrap();
    let status = admin
        .describe_run("default", &run)
        .await
        .unwrap()
        .run
        .unwrap()
        .status;
    assert_eq!(status, v1::RunStatus::Completed as i32);

    // A header that is not `Bearer <key>`.
    let channel = tonic::transport::Endpoint::from_shared(s.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = v1::history_client::HistoryClient::new(channel);
    let mut req = tonic::Request::new(v1::ListWorkflowsRequest::default());
    req.metadata_mut()
        .insert("authorization", "Basic dXNlcjpwYXNz".parse().unwrap());
    let status = raw.list_workflows(req).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(
        status.message().contains("not `Bearer <api key>`"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn revoked_and_expired_keys_are_refused_by_the_servers_clock() {
    let s = secured().await;
    let admin = s.admin().await;
    let (short, short_id) = s.key("default", ApiKeyRole::Client, &[], 60).await;
    let (revoked, revoked_id) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    let short_client = s.client(Some(&short)).await;
    let revoked_client = s.client(Some(&revoked)).await;
    short_client.list_workflows("default").await.unwrap();
    revoked_client.list_workflows("default").await.unwrap();

    let info = admin.revoke_api_key(&revoked_id).await.unwrap();
    assert_ne!(info.revoke_time_unix_ms, 0);
    // Revoking again is a no-op that keeps the first time.
    assert_eq!(admin.revoke_api_key(&revoked_id).await.unwrap(), info);
    match revoked_client.list_workflows("default").await {
        Err(ClientError::Unauthenticated(m)) => {
            assert!(m.contains(&format!("API key {revoked_id} was revoked at")), "{m}")
        }
        other => panic!("{other:?}"),
    }

    s.clock.advance(Duration::from_secs(59));
    short_client.list_workflows("default").await.unwrap();
    s.clock.advance(Duration::from_secs(1));
    match short_client.list_workflows("default").await {
        Err(ClientError::Unauthenticated(m)) => {
            assert!(
                m.contains(&format!("API key {short_id} expired at 2023-11-14T22:14:20Z")),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }

    // Listings show revoked keys only when asked, and never a secret or hash.
    let list = |include_revoked| ListApiKeysRequest {
        namespace: "*".into(),
        include_revoked,
        ..Default::default()
    };
    let active = admin.list_api_keys(list(false)).await.unwrap().keys;
    let all = admin.list_api_keys(list(true)).await.unwrap().keys;
    assert!(!active.iter().any(|k| k.key_id == revoked_id));
    assert!(
        all.iter()
            .any(|k| k.key_id == revoked_id && k.revoke_time_unix_ms != 0)
    );
    assert!(
        all.iter()
            .any(|k| k.namespace == "*" && k.created_by == "bootstrap")
    );
    assert_eq!(all.len(), 3);
    // Paging visits every key once.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = admin
            .list_api_keys(ListApiKeysRequest {
                namespace: "*".into(),
                include_revoked: true,
                page_size: 1,
                page_token: token,
            })
            .await
            .unwrap();
        seen.extend(page.keys.into_iter().map(|k| k.key_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, all.iter().map(|k| k.key_id.clone()).collect::<Vec<_>>());
}

#[tokio::test]
async fn no_key_reaches_beyond_the_key_that_made_it() {
    let s = secured().await;
    let (ns_admin, _) = s.key("default", ApiKeyRole::Admin, &[], 0).await;
    let ns_admin = s.client(Some(&ns_admin)).await;
    let every = CreateApiKeyRequest {
        namespace: "*".into(),
        role: ApiKeyRole::Admin as i32,
        ..Default::default()
    };
    match ns_admin.create_api_key(every.clone()).await {
        Err(ClientError::PermissionDenied(m)) => assert!(m.contains("not \"*\""), "{m}"),
        other => panic!("{other:?}"),
    }
    // Nor may it revoke the all-namespace admin key.
    let boot_id = s.admin_key[3..19].to_string();
    assert!(matches!(
        ns_admin.revoke_api_key(&boot_id).await,
        Err(ClientError::PermissionDenied(_))
    ));
    // Bad requests name the field and create nothing.
    let admin = s.admin().await;
    let bad = [
        (
            CreateApiKeyRequest {
                role: ApiKeyRole::Client as i32,
                task_queues: vec!["q1".into()],
                ..Default::default()
            },
            "task_queues: only worker keys",
        ),
        (CreateApiKeyRequest::default(), "role: must be"),
        (
            CreateApiKeyRequest {
                role: ApiKeyRole::Worker as i32,
                task_queues: vec!["bad queue".into()],
                ..Default::default()
            },
            "task_queues[0]",
        ),
        (
            CreateApiKeyRequest {
                namespace: "nope".into(),
                role: ApiKeyRole::Worker as i32,
                ..Default::default()
            },
            "namespace \"nope\" does not exist",
        ),
    ];
    for (req, says) in bad {
        match admin.create_api_key(req).await {
            Err(ClientError::InvalidArgument(m) | ClientError::NotFound(m)) => {
                assert!(m.contains(says), "{m}")
            }
            other => panic!("{says}: {other:?}"),
        }
    }
    let keys = admin
        .list_api_keys(ListApiKeysRequest {
            namespace: "*".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .keys;
    assert_eq!(
        keys.len(),
        2,
        "the bootstrap key and the namespace admin: {keys:?}"
    );
    assert!(admin.create_api_key(every).await.is_ok());
}

/// `GET path` over HTTP/1.0 with an optional bearer key: (status line, body).
async fn http_get(server: &RunningServer, path: &str, key: Option<&str>) -> (String, String) {
    let mut conn = tokio::net::TcpStream::connect(server.http_addr).await.unwrap();
    let auth = key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    conn.write_all(format!("GET {path} HTTP/1.0\r\n{auth}\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

#[tokio::test]
async fn metrics_need_an_admin_key_and_healthz_stays_open() {
    let s = secured().await;
    let (client_key, _) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    let (ns_admin, _) = s.key("default", ApiKeyRole::Admin, &[], 0).await;
    let (status, body) = http_get(&s.server, "/healthz", None).await;
    assert!(status.contains(" 200"), "{status}");
    assert!(body.contains("ok"));
    let (status, body) = http_get(&s.server, "/metrics", None).await;
    assert!(status.contains(" 401"), "{status}");
    assert!(body.contains("no API key"), "{body}");
    let (status, body) = http_get(&s.server, "/metrics", Some(&client_key)).await;
    assert!(status.contains(" 403"), "{status}");
    assert!(body.contains("may not read metrics"), "{body}");
    let (status, body) = http_get(&s.server, "/metrics", Some(&ns_admin)).await;
    assert!(status.contains(" 200"), "{status}");
    assert!(body.contains("railyard_"), "{body}");
}

#[tokio::test]
async fn a_restart_keeps_the_keys_and_makes_no_second_admin_key() {
    let s = secured().await;
    let (client_key, _) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    let Secured {
        server, clock, _dirs, ..
    } = s;
    server.shutdown().await;
    let mut config = ServerConfig::new(_dirs.0.path(), _dirs.1.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.clock = Arc::new(clock);
    config.auth = true;
    let server = crate::support::serve(config).await;
    assert_eq!(server.admin_key_file, None);
    let opts = ConnectOptions {
        api_key: Some(ApiKey::new(client_key)),
        ..ConnectOptions::default()
    };
    let c = Client::connect_with(&format!("http://{}", server.grpc_addr), opts)
        .await
        .unwrap();
    c.list_workflows("default").await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_server_on_a_network_address_refuses_to_start_without_auth() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "0.0.0.0:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    match RunningServer::start(config.clone()).await {
        Err(e @ StartError::Exposed { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("0.0.0.0:0") && m.contains("--auth") && m.contains("--insecure"),
                "{m}"
            );
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("started without auth on 0.0.0.0"),
    }
    // Refused before anything was touched.
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0);
    config.insecure = true;
    let server = RunningServer::start(config).await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_worker_key_spawns_children_on_its_task_token_and_a_client_key_may_not_poll_or_spawn() {
    let s = secured().await;
    let admin = s.admin().await;
    // Of the watched run's queue too, so that it may describe that run.
    let (worker_key, _) = s.key("default", ApiKeyRole::Worker, &["q1", "default"], 0).await;
    let (client_key, _) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    let parent = admin
        .start_run("default", "one", "delegate", HashMap::new())
        .await
        .unwrap();
    let worker = s.client(Some(&worker_key)).await;
    let w = railyard_sdk::StepWorker::new(worker.clone(), "default", "q1", "w");
    let task = w
        .poll(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the parent's step");
    assert_eq!(task.run_id, parent);

    // A client key can neither take work nor act on a worker's lease.
    let client = s.client(Some(&client_key)).await;
    let as_client = railyard_sdk::StepWorker::new(client.clone(), "default", "q1", "c");
    match as_client.poll(Duration::from_millis(100)).await {
        Err(ClientError::PermissionDenied(m)) => assert!(m.contains("has role client, which may not"), "{m}"),
        other => panic!("a client key polled: {other:?}"),
    }
    let child = v1::ChildRunSpec {
        workflow_id: "other".into(),
        goal: "a sub-task".into(),
        ..Default::default()
    };
    match as_client
        .spawn_children(&task.task_token, vec![child.clone()], false, vec![], vec![])
        .await
    {
        Err(ClientError::PermissionDenied(m)) => assert!(m.contains("has role client, which may not"), "{m}"),
        other => panic!("a client key spawned: {other:?}"),
    }

    // The worker key starts a child (on a queue it does not hold: the task token is
    // the authority, and the child's own workers need their own keys), though it may
    // not start a run by itself.
    let ids = w
        .spawn_children(&task.task_token, vec![child], false, vec![], vec![])
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    let kid = admin.describe_run("default", &ids[0]).await.unwrap().run.unwrap();
    assert_eq!(kid.parent_run_id, parent);
    match worker
        .start_run("default", "other", "on my own", HashMap::new())
        .await
    {
        Err(ClientError::PermissionDenied(_)) => {}
        other => panic!("a worker key started a run: {other:?}"),
    }
    let tree = admin.get_session_tree("default", &parent).await.unwrap();
    assert_eq!(
        tree.root.unwrap().children.len(),
        1,
        "only the worker's spawn started a child"
    );
    s.server.shutdown().await;
}
