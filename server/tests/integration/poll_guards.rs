//! What a polled trigger may reach and send. A namespace's admin once made a trigger
//! poll `http://127.0.0.1:PORT` with `--token '$RAILYARD_DELIVERY_SIGNING_SECRET'`,
//! and every poll sent the server's own signing secret there: now a trigger names
//! only the secrets the operator declares (`[secrets]`), never the server's own
//! settings; its API URL passes result delivery's address guard; and setting its
//! token or URL takes an admin key of every namespace. And six triggers of one
//! namespace whose API never answers once held every poll slot: another
//! namespace's trigger now polls beside them.

use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_engine::poller::PollLimits;
use railyard_engine::secrets::SecretPolicy;
use railyard_proto::v1::{self, ApiKeyRole, CreateApiKeyRequest};
use railyard_sdk::{ApiKey, Client, ClientError, ConnectOptions};
use railyard_server::{RunningServer, ServerConfig};

use crate::poll_mock::{Mock, issue};
use crate::support;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One step","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;

const T0: i64 = 1_767_225_600_000;

struct Server {
    server: RunningServer,
    clock: ManualClock,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// A server with auth on or off, `declared` secrets (name → namespaces), loopback
/// allowed to polls or not.
async fn server(auth: bool, declared: &[(&str, &[&str])], loopback: bool, limits: PollLimits) -> Server {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let clock = ManualClock::new(T0);
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.clock = Arc::new(clock.clone());
    config.auth = auth;
    config.triggers.poll = limits;
    config.triggers.secrets = SecretPolicy::new(
        declared
            .iter()
            .map(|(n, ns)| (n.to_string(), ns.iter().map(|s| s.to_string()).collect()))
            .collect(),
    )
    .unwrap();
    if loopback {
        config.delivery.allow_networks = vec!["127.0.0.0/8".parse().unwrap()];
    }
    let server = support::serve(config).await;
    Server {
        server,
        clock,
        _dirs: (data, workflows),
    }
}

impl Server {
    async fn client(&self, key: Option<&str>) -> Client {
        let opts = ConnectOptions {
            api_key: key.map(ApiKey::new),
            max_attempts: 1,
            ..ConnectOptions::default()
        };
        Client::connect_with(&format!("http://{}", self.server.grpc_addr), opts)
            .await
            .unwrap()
    }

    fn admin_key(&self) -> String {
        let path = self.server.admin_key_file.clone().expect("an admin key");
        std::fs::read_to_string(path).unwrap().trim().to_string()
    }

    async fn key(&self, ns: &str) -> String {
        let admin = self.client(Some(&self.admin_key())).await;
        admin
            .create_api_key(CreateApiKeyRequest {
                namespace: ns.into(),
                role: ApiKeyRole::Admin as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .api_key
    }
}

fn spec(base_url: &str, token: &str) -> v1::TriggerSpec {
    v1::TriggerSpec {
        workflow_id: "one".into(),
        goal: "Triage #{{$.number}}: {{$.title}}".into(),
        poll: Some(v1::TriggerPollSource {
            source: "github-issues".into(),
            repo: "acme/app".into(),
            base_url: base_url.into(),
            token: token.into(),
            every: "1s".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn create(
    c: &Client,
    ns: &str,
    id: &str,
    spec: v1::TriggerSpec,
) -> Result<v1::TriggerInfo, ClientError> {
    c.create_trigger(v1::CreateTriggerRequest {
        namespace: ns.into(),
        trigger_id: id.into(),
        spec: Some(spec),
        identity: String::new(),
    })
    .await
}

async fn update(
    c: &Client,
    ns: &str,
    id: &str,
    spec: v1::TriggerSpec,
) -> Result<v1::TriggerInfo, ClientError> {
    c.update_trigger(v1::UpdateTriggerRequest {
        namespace: ns.into(),
        trigger_id: id.into(),
        spec: Some(spec),
        identity: String::new(),
    })
    .await
}

fn invalid(r: Result<v1::TriggerInfo, ClientError>, words: &[&str]) {
    match r {
        Err(ClientError::InvalidArgument(m)) => {
            for w in words {
                assert!(m.contains(w), "{w:?} not in {m}");
            }
        }
        other => panic!("expected INVALID_ARGUMENT with {words:?}, got {other:?}"),
    }
}

async fn polls(c: &Client, ns: &str, id: &str) -> v1::TriggerPollStatus {
    c.describe_trigger(ns, id).await.unwrap().poll_status.unwrap()
}

/// Waits until trigger `id` has been polled (a bound on a hang only).
async fn polled(c: &Client, ns: &str, id: &str, within: Duration) -> Option<v1::TriggerPollStatus> {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        let s = polls(c, ns, id).await;
        if s.polls >= 1 {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test]
async fn a_trigger_names_only_declared_secrets_and_never_the_servers_own() {
    // SAFETY: this test's own variable; only this server reads it.
    unsafe { std::env::set_var("GUARD_TEAM_TOKEN", "team-token") };
    let mock = Mock::start(10, None).await;
    mock.put(issue(
        1,
        "2026-01-01T00:00:10Z",
        "2026-01-01T00:00:10Z",
        "ann",
        &[],
    ));
    let s = server(
        false,
        &[("GUARD_TEAM_TOKEN", &["default"])],
        true,
        PollLimits::default(),
    )
    .await;
    let c = s.client(None).await;
    c.create_namespace("other", "").await.unwrap();
    let url = mock.base_url();

    invalid(
        create(
            &c,
            "default",
            "t1",
            spec(&url, "$RAILYARD_DELIVERY_SIGNING_SECRET"),
        )
        .await,
        &[
            "poll.token",
            "RAILYARD_DELIVERY_SIGNING_SECRET",
            "server's own settings",
        ],
    );
    for name in ["$HOME", "$PATH"] {
        invalid(
            create(&c, "default", "t1", spec(&url, name)).await,
            &["poll.token", "[secrets]", &name[1..]],
        );
    }
    // A webhook's secrets follow the same rules.
    let mut hook = spec("", "");
    hook.poll = None;
    hook.signature_secret = "$HOME".into();
    invalid(
        create(&c, "default", "h1", hook.clone()).await,
        &["signature_secret", "HOME"],
    );
    hook.signature_secret = String::new();
    hook.bearer_token = "$RAILYARD_DELIVERY_SIGNING_SECRET".into();
    invalid(
        create(&c, "default", "h1", hook).await,
        &["bearer_token", "server's own"],
    );
    // Declared for `default`, not for `other`.
    invalid(
        create(&c, "other", "t1", spec(&url, "$GUARD_TEAM_TOKEN")).await,
        &["poll.token", "GUARD_TEAM_TOKEN", "other"],
    );
    assert!(mock.take_seen().is_empty(), "nothing was polled");

    create(&c, "default", "t1", spec(&url, "$GUARD_TEAM_TOKEN"))
        .await
        .unwrap();
    s.clock.advance(Duration::from_millis(1));
    let status = polled(&c, "default", "t1", Duration::from_secs(30))
        .await
        .expect("polled");
    assert_eq!(status.last_error, "", "{status:?}");
    let seen = mock.take_seen();
    assert!(!seen.is_empty());
    for r in &seen {
        assert_eq!(r.authorization.as_deref(), Some("Bearer team-token"));
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_polled_triggers_api_url_passes_the_delivery_address_guard() {
    let mock = Mock::start(10, None).await;
    let s = server(false, &[], false, PollLimits::default()).await;
    let c = s.client(None).await;
    let port = mock.addr.unwrap().port();
    for url in [
        format!("http://127.0.0.1:{port}"),
        "http://169.254.169.254".to_string(),
        "http://[::1]:80".to_string(),
        "https://10.0.0.1/api/v3".to_string(),
    ] {
        invalid(
            create(&c, "default", "t1", spec(&url, "")).await,
            &["poll.base_url", "internal address", "delivery.allow_networks"],
        );
    }
    // A name that resolves to loopback passes the create and is refused where it
    // connects: the poll's error says so, and the mock sees nothing.
    create(&c, "default", "t1", spec(&format!("http://localhost:{port}"), ""))
        .await
        .unwrap();
    // And the server's own listener, by its name.
    let own = format!("http://localhost:{}", s.server.http_addr.port());
    create(&c, "default", "t2", spec(&own, "")).await.unwrap();
    s.clock.advance(Duration::from_millis(1));
    for id in ["t1", "t2"] {
        let status = polled(&c, "default", id, Duration::from_secs(30))
            .await
            .expect("polled");
        assert!(
            status.last_error.contains("internal address") || status.last_error.contains("own listener"),
            "{status:?}"
        );
    }
    assert!(mock.take_seen().is_empty(), "the poll never reached loopback");
    s.server.shutdown().await;
}

#[tokio::test]
async fn only_an_admin_of_every_namespace_sets_a_polled_triggers_token_or_url() {
    // SAFETY: this test's own variable; only this server reads it.
    unsafe { std::env::set_var("GUARD_SHARED_TOKEN", "shared-token") };
    let mock = Mock::start(10, None).await;
    let other = Mock::start(10, None).await;
    let s = server(
        true,
        &[("GUARD_SHARED_TOKEN", &["*"])],
        true,
        PollLimits::default(),
    )
    .await;
    let root = s.client(Some(&s.admin_key())).await;
    let team = s.client(Some(&s.key("default").await)).await;
    let url = mock.base_url();
    let denied = |r: Result<v1::TriggerInfo, ClientError>, field: &str| match r {
        Err(ClientError::PermissionDenied(m)) => {
            assert!(m.contains(field) && m.contains("(*)"), "{m}")
        }
        other => panic!("expected PERMISSION_DENIED naming {field}, got {other:?}"),
    };
    denied(
        create(&team, "default", "t1", spec(&url, "$GUARD_SHARED_TOKEN")).await,
        "poll.base_url",
    );
    denied(
        create(&team, "default", "t1", spec("", "$GUARD_SHARED_TOKEN")).await,
        "poll.token",
    );
    denied(
        create(&team, "default", "t1", spec(&url, "")).await,
        "poll.base_url",
    );

    // The operator's key sets them; the namespace's admin changes the rest.
    create(&root, "default", "t1", spec(&url, "$GUARD_SHARED_TOKEN"))
        .await
        .unwrap();
    let mut changed = spec(&url, "$GUARD_SHARED_TOKEN");
    changed.goal = "Look at #{{$.number}}".into();
    let t = update(&team, "default", "t1", changed).await.unwrap();
    assert_eq!(t.spec.unwrap().goal, "Look at #{{$.number}}");
    denied(
        update(
            &team,
            "default",
            "t1",
            spec(&other.base_url(), "$GUARD_SHARED_TOKEN"),
        )
        .await,
        "poll.base_url",
    );
    update(
        &root,
        "default",
        "t1",
        spec(&other.base_url(), "$GUARD_SHARED_TOKEN"),
    )
    .await
    .unwrap();
    let d = root.describe_trigger("default", "t1").await.unwrap();
    assert_eq!(d.spec.unwrap().poll.unwrap().base_url, other.base_url());
    s.server.shutdown().await;
}

#[tokio::test]
async fn one_namespaces_hung_polls_leave_slots_for_another_namespace() {
    // An API that takes connections and never answers.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_url = format!("http://{}", hung.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = hung.accept().await {
            conns.push(c);
        }
    });
    let mock = Mock::start(10, None).await;
    let limits = PollLimits {
        max_pollers: 4,
        // Longer than this test waits: the hung polls hold what they hold.
        first_byte_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(60),
        ..PollLimits::default()
    };
    let s = server(false, &[], true, limits).await;
    let c = s.client(None).await;
    c.create_namespace("noisy", "").await.unwrap();
    for i in 0..6 {
        create(&c, "noisy", &format!("hung{i}"), spec(&hung_url, ""))
            .await
            .unwrap();
    }
    s.clock.advance(Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    create(&c, "default", "quiet", spec(&mock.base_url(), ""))
        .await
        .unwrap();
    s.clock.advance(Duration::from_millis(1));
    let status = polled(&c, "default", "quiet", Duration::from_secs(10))
        .await
        .expect("the other namespace's trigger polls while the hung ones wait");
    assert_eq!(status.last_error, "", "{status:?}");
    let mut in_flight = 0;
    for i in 0..6 {
        if polls(&c, "noisy", &format!("hung{i}")).await.polls == 0 {
            in_flight += 1;
        }
    }
    assert_eq!(in_flight, 6, "none of the hung polls has ended");
    s.server.shutdown().await;
    held.abort();
}

#[tokio::test]
async fn an_api_that_never_answers_ends_the_poll_at_the_first_byte_timeout() {
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_url = format!("http://{}", hung.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = hung.accept().await {
            conns.push(c);
        }
    });
    let limits = PollLimits {
        first_byte_timeout: Duration::from_millis(500),
        ..PollLimits::default()
    };
    let s = server(false, &[], true, limits).await;
    let c = s.client(None).await;
    create(&c, "default", "hung", spec(&hung_url, "")).await.unwrap();
    s.clock.advance(Duration::from_millis(1));
    let status = polled(&c, "default", "hung", Duration::from_secs(20))
        .await
        .expect("the poll ends");
    assert!(status.last_error.contains("no answer within 0.5 s"), "{status:?}");
    s.server.shutdown().await;
    held.abort();
}

#[tokio::test]
async fn a_freed_poll_slot_goes_to_the_namespaces_in_turn() {
    // Two APIs that never answer (one per namespace: each API takes half the slots).
    let mut hung_urls = Vec::new();
    let mut held = Vec::new();
    for _ in 0..2 {
        let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        hung_urls.push(format!("http://{}", hung.local_addr().unwrap()));
        held.push(tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = hung.accept().await {
                conns.push(c);
            }
        }));
    }
    let mock = Mock::start(10, None).await;
    let limits = PollLimits {
        max_pollers: 4,
        first_byte_timeout: Duration::from_millis(500),
        ..PollLimits::default()
    };
    let s = server(false, &[], true, limits).await;
    let c = s.client(None).await;
    // Two namespaces of triggers whose API never answers hold every slot.
    for (ns, hung_url) in ["noisy-a", "noisy-b"].into_iter().zip(&hung_urls) {
        c.create_namespace(ns, "").await.unwrap();
        for i in 0..6 {
            create(&c, ns, &format!("hung{i}"), spec(hung_url, ""))
                .await
                .unwrap();
        }
    }
    s.clock.advance(Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.create_namespace("quiet", "").await.unwrap();
    create(&c, "quiet", "q", spec(&mock.base_url(), ""))
        .await
        .unwrap();
    s.clock.advance(Duration::from_millis(1));
    let status = polled(&c, "quiet", "q", Duration::from_secs(30))
        .await
        .expect("the quiet namespace's trigger polls");
    assert_eq!(status.last_error, "", "{status:?}");
    // It had the first slot that freed (or the second: one may free in the same
    // pass), not one after the other namespaces' eight triggers still due.
    let mut noisy_polls = 0;
    for ns in ["noisy-a", "noisy-b"] {
        for i in 0..6 {
            noisy_polls += polls(&c, ns, &format!("hung{i}")).await.polls;
        }
    }
    assert!(
        noisy_polls < 8,
        "{noisy_polls} hung polls ended before the quiet one's"
    );
    s.server.shutdown().await;
    for h in held {
        h.abort();
    }
}
