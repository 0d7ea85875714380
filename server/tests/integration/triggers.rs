//! Webhook triggers over the real HTTP listener and the `Triggers` gRPC API, on a
//! real redb file: rendering, signatures and tokens, refusals that start nothing,
//! deduplication across a restart, and each concurrency mode through real runs
//! worked by a `StepWorker`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_engine::service::triggers::TriggerInput;
use railyard_engine::signature::sign;
use railyard_proto::v1::{self, RunStatus};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

use crate::support;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One step","steps":[
  {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;

struct Harness {
    server: RunningServer,
    client: Client,
    http: reqwest::Client,
    clock: ManualClock,
    data: tempfile::TempDir,
    workflows: tempfile::TempDir,
}

async fn start_in(
    data: &Path,
    workflows: &Path,
    clock: &ManualClock,
    configured: Vec<TriggerInput>,
) -> (RunningServer, Client) {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(clock.clone());
    config.triggers.config = configured;
    config.triggers.max_body_bytes = 64 * 1024;
    config.triggers.secrets = support::secrets(&["IT_HOOK_SECRET", "IT_HOOK_TOKEN", "IT_REFUSALS_SECRET"]);
    support::start(config).await
}

async fn harness_with(configured: Vec<TriggerInput>) -> Harness {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let clock = ManualClock::new(T0);
    let (server, client) = start_in(data.path(), workflows.path(), &clock, configured).await;
    Harness {
        server,
        client,
        http: reqwest::Client::new(),
        clock,
        data,
        workflows,
    }
}

async fn harness() -> Harness {
    harness_with(Vec::new()).await
}

impl Harness {
    /// Stops the server and starts another on the same files, with no triggers configured.
    async fn restart(self) -> Self {
        self.server.shutdown().await;
        let (server, client) =
            start_in(self.data.path(), self.workflows.path(), &self.clock, Vec::new()).await;
        Harness {
            server,
            client,
            ..self
        }
    }
}

fn spec(goal: &str) -> v1::TriggerSpec {
    v1::TriggerSpec {
        workflow_id: "one".into(),
        goal: goal.into(),
        ..Default::default()
    }
}

impl Harness {
    async fn create(&self, id: &str, spec: v1::TriggerSpec) -> v1::TriggerInfo {
        self.client
            .create_trigger(v1::CreateTriggerRequest {
                namespace: "default".into(),
                trigger_id: id.into(),
                spec: Some(spec),
                identity: "test".into(),
            })
            .await
            .unwrap()
    }

    async fn post(&self, trigger: &str, body: &str, headers: &[(&str, &str)]) -> (u16, serde_json::Value) {
        let mut req = self
            .http
            .post(format!(
                "http://{}/hooks/default/{trigger}",
                self.server.http_addr
            ))
            .header("content-type", "application/json")
            .body(body.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (status, json)
    }

    /// Posts and expects 202; answers the run id.
    async fn deliver(&self, trigger: &str, body: &str, headers: &[(&str, &str)]) -> String {
        let (status, json) = self.post(trigger, body, headers).await;
        assert_eq!(status, 202, "{json}");
        json["runId"].as_str().unwrap().to_string()
    }

    async fn runs(&self) -> Vec<v1::RunInfo> {
        self.client
            .list_runs(v1::ListRunsRequest {
                namespace: "default".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .runs
    }

    async fn run(&self, run_id: &str) -> Option<v1::RunInfo> {
        match self.client.describe_run("default", run_id).await {
            Ok(r) => r.run,
            Err(ClientError::NotFound(_)) => None,
            Err(e) => panic!("{e}"),
        }
    }

    fn worker(&self) -> StepWorker {
        StepWorker::new(self.client.clone(), "default", "default", "w")
    }
}

async fn poll(w: &StepWorker) -> v1::StepTask {
    w.poll(Duration::from_secs(10)).await.unwrap().expect("a task")
}

/// Sets a test's own environment variable (the server reads secrets from it).
fn set_env(name: &str, value: &str) {
    // SAFETY: each test uses variables of its own name; nothing else writes them.
    unsafe { std::env::set_var(name, value) };
}

#[tokio::test]
async fn an_unsigned_trigger_starts_its_workflow_with_the_rendered_goal_and_context() {
    let h = harness().await;
    let mut s = spec("Review PR #{{$.number}}: {{$.pull_request.title}}");
    s.context
        .insert("repo".into(), "{{$.repository.full_name}}".into());
    s.context.insert("labels".into(), "{{$.labels}}".into());
    let info = h.create("pr", s).await;
    assert_eq!(info.hook_path, "/hooks/default/pr");
    assert!(!info.from_config);
    let body = r#"{"number":7,"pull_request":{"title":"Fix the build"},
        "repository":{"full_name":"acme/app"},"labels":["ci",1]}"#;
    let run_id = h.deliver("pr", body, &[]).await;
    let run = h.run(&run_id).await.expect("the run exists");
    assert_eq!(run.goal, "Review PR #7: Fix the build");
    assert_eq!(run.context["repo"], "acme/app");
    assert_eq!(run.context["labels"], r#"["ci",1]"#);
    assert_eq!(run.status(), RunStatus::Running);
    // Without a delivery id every delivery is a new run.
    let again = h.deliver("pr", body, &[]).await;
    assert_ne!(again, run_id);
    assert_eq!(h.runs().await.len(), 2);
}

#[tokio::test]
async fn triggers_are_listed_described_updated_and_deleted_and_bad_ones_are_refused_by_field() {
    let h = harness().await;
    h.create("a", spec("A {{$.x}}")).await;
    h.create("b", spec("B")).await;
    let page = h
        .client
        .list_triggers(v1::ListTriggersRequest {
            namespace: "default".into(),
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.triggers.len(), 1);
    assert_eq!(page.triggers[0].trigger_id, "a");
    let rest = h
        .client
        .list_triggers(v1::ListTriggersRequest {
            namespace: "default".into(),
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        rest.triggers
            .iter()
            .map(|t| t.trigger_id.as_str())
            .collect::<Vec<_>>(),
        ["b"]
    );

    let mut changed = spec("A2 {{$.y}}");
    changed.concurrency_key = "{{$.y}}".into();
    changed.mode = v1::TriggerMode::Serial.into();
    let updated = h
        .client
        .update_trigger(v1::UpdateTriggerRequest {
            namespace: "default".into(),
            trigger_id: "a".into(),
            spec: Some(changed),
            identity: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(updated.spec.as_ref().unwrap().goal, "A2 {{$.y}}");
    assert_eq!(updated.spec.unwrap().mode(), v1::TriggerMode::Serial);
    let described = h.client.describe_trigger("default", "a").await.unwrap();
    assert_eq!(described.spec.unwrap().concurrency_key, "{{$.y}}");

    let refused = |e: ClientError| match e {
        ClientError::InvalidArgument(m) => m,
        other => panic!("expected INVALID_ARGUMENT, got {other}"),
    };
    let create = |id: &str, s: v1::TriggerSpec| {
        let c = h.client.clone();
        let id = id.to_string();
        async move {
            c.create_trigger(v1::CreateTriggerRequest {
                namespace: "default".into(),
                trigger_id: id,
                spec: Some(s),
                identity: String::new(),
            })
            .await
        }
    };
    let mut literal = spec("g");
    literal.signature_secret = "hunter2".into();
    let m = refused(create("c", literal).await.unwrap_err());
    assert!(m.contains("signature_secret") && m.contains("$NAME"), "{m}");
    assert!(!m.contains("hunter2"), "the secret is never echoed: {m}");
    let m = refused(create("c", spec("{{$.a[x]}}")).await.unwrap_err());
    assert!(m.starts_with("goal:") && m.contains("not a number"), "{m}");
    let mut serial = spec("g");
    serial.mode = v1::TriggerMode::Serial.into();
    let m = refused(create("c", serial).await.unwrap_err());
    assert!(m.contains("concurrency_key"), "{m}");
    let m = refused(
        create(
            "c",
            v1::TriggerSpec {
                workflow_id: "nope".into(),
                ..spec("g")
            },
        )
        .await
        .unwrap_err(),
    );
    assert!(
        m.contains("workflow_id") && m.contains("neither loaded nor registered"),
        "{m}"
    );
    assert!(matches!(
        create("a", spec("g")).await.unwrap_err(),
        ClientError::AlreadyExists(_)
    ));

    h.client
        .delete_trigger(v1::DeleteTriggerRequest {
            namespace: "default".into(),
            trigger_id: "b".into(),
            identity: String::new(),
        })
        .await
        .unwrap();
    assert!(matches!(
        h.client.describe_trigger("default", "b").await.unwrap_err(),
        ClientError::NotFound(_)
    ));
    let (status, json) = h.post("b", "{}", &[]).await;
    assert_eq!(status, 404, "{json}");
}

#[tokio::test]
async fn signed_deliveries_start_and_a_missing_or_bad_signature_starts_nothing() {
    set_env("IT_HOOK_SECRET", "It's a Secret to Everybody");
    let h = harness().await;
    let mut s = spec("push to {{$.ref}}");
    s.signature_secret = "$IT_HOOK_SECRET".into();
    h.create("signed", s).await;
    let body = r#"{"ref":"refs/heads/main"}"#;
    let good = sign(b"It's a Secret to Everybody", body.as_bytes());
    let run_id = h.deliver("signed", body, &[("X-Hub-Signature-256", &good)]).await;
    assert_eq!(h.run(&run_id).await.unwrap().goal, "push to refs/heads/main");

    let bad = sign(b"wrong secret", body.as_bytes());
    for headers in [vec![("X-Hub-Signature-256", bad.as_str())], vec![]] {
        let (status, json) = h.post("signed", body, &headers).await;
        assert_eq!(status, 401, "{json}");
        assert!(
            json["error"].as_str().unwrap().contains("X-Hub-Signature-256"),
            "{json}"
        );
    }
    // The right signature of another body.
    let (status, _) = h
        .post(
            "signed",
            r#"{"ref":"refs/heads/evil"}"#,
            &[("X-Hub-Signature-256", &good)],
        )
        .await;
    assert_eq!(status, 401);
    assert_eq!(h.runs().await.len(), 1, "a refused delivery starts nothing");

    // A custom header, and the bearer token alternative.
    set_env("IT_HOOK_TOKEN", "t0ken");
    let mut s = spec("{{$.ref}}");
    s.bearer_token = "$IT_HOOK_TOKEN".into();
    h.create("token", s).await;
    h.deliver("token", body, &[("authorization", "Bearer t0ken")])
        .await;
    let (status, _) = h.post("token", body, &[("authorization", "Bearer nope")]).await;
    assert_eq!(status, 401);
    let mut s = spec("{{$.ref}}");
    s.signature_secret = "$IT_HOOK_SECRET".into();
    s.signature_header = "X-Gitea-Signature".into();
    h.create("gitea", s).await;
    let hex = good.trim_start_matches("sha256=");
    h.deliver("gitea", body, &[("X-Gitea-Signature", hex)]).await;
    assert_eq!(h.runs().await.len(), 3);
}

#[tokio::test]
async fn bad_payloads_are_refused_with_their_status_and_start_nothing() {
    let h = harness().await;
    let mut s = spec("Review {{$.pull_request.title}}");
    s.concurrency_key = "{{$.repository.full_name}}".into();
    h.create("pr", s).await;
    // A path the payload lacks: 422 naming it.
    let (status, json) = h.post("pr", r#"{"pull_request":{}}"#, &[]).await;
    assert_eq!(status, 422, "{json}");
    let error = json["error"].as_str().unwrap();
    assert!(
        error.contains("$.pull_request.title") && error.starts_with("goal:"),
        "{error}"
    );
    let (status, json) = h.post("pr", r#"{"pull_request":{"title":"t"}}"#, &[]).await;
    assert_eq!(status, 422, "{json}");
    assert!(
        json["error"].as_str().unwrap().contains("$.repository.full_name"),
        "{json}"
    );
    // Over the body limit (64 KiB here): 413.
    let big = format!(r#"{{"pull_request":{{"title":"{}"}}}}"#, "x".repeat(70 * 1024));
    let (status, _) = h.post("pr", &big, &[]).await;
    assert_eq!(status, 413);
    // Not JSON: 400; declared as something else: 415.
    let (status, json) = h.post("pr", "title=x", &[]).await;
    assert_eq!(status, 400, "{json}");
    assert!(json["error"].as_str().unwrap().contains("not JSON"), "{json}");
    let resp = h
        .http
        .post(format!("http://{}/hooks/default/pr", h.server.http_addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("payload=%7B%7D")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    // Unknown trigger, unknown namespace, a name no trigger can have: 404.
    assert_eq!(h.post("nope", "{}", &[]).await.0, 404);
    let resp = h
        .http
        .post(format!("http://{}/hooks/elsewhere/pr", h.server.http_addr))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    // A delivery id past its limit: 400, however long (one over 1 KiB was once
    // taken for an absent id, so each repeat started a run).
    for len in [257, 300, 1024, 1025, 4096, 16 * 1024] {
        let long_id = "d".repeat(len);
        let (status, json) = h
            .post(
                "pr",
                r#"{"pull_request":{"title":"t"},"repository":{"full_name":"a/b"}}"#,
                &[("X-GitHub-Delivery", &long_id)],
            )
            .await;
        assert_eq!(status, 400, "{len} bytes: {json}");
        assert!(
            json["error"].as_str().unwrap().contains("X-GitHub-Delivery"),
            "{json}"
        );
    }
    assert!(h.runs().await.is_empty(), "nothing was started");
}

#[tokio::test]
async fn a_repeated_delivery_id_answers_the_same_run_before_and_after_a_restart() {
    let mut h = harness().await;
    h.create("d", spec("{{$.n}}")).await;
    let first = h
        .deliver("d", r#"{"n":1}"#, &[("X-GitHub-Delivery", "abc-1")])
        .await;
    let (status, json) = h.post("d", r#"{"n":1}"#, &[("X-GitHub-Delivery", "abc-1")]).await;
    assert_eq!(status, 202);
    assert_eq!(json["runId"], first.as_str());
    assert_eq!(json["duplicate"], true);
    let other = h
        .deliver("d", r#"{"n":2}"#, &[("X-GitHub-Delivery", "abc-2")])
        .await;
    assert_ne!(other, first);

    h = h.restart().await;
    let again = h
        .deliver("d", r#"{"n":1}"#, &[("X-GitHub-Delivery", "abc-1")])
        .await;
    assert_eq!(again, first);
    assert_eq!(h.runs().await.len(), 2);
    // The trigger keeps the deliveries that started runs, the repeats not, across the
    // restart.
    let described = h.client.describe_trigger("default", "d").await.unwrap();
    let recent: Vec<_> = described
        .recent_deliveries
        .iter()
        .map(|d| (d.delivery_id.as_str(), d.run_id.as_str(), d.outcome.as_str()))
        .collect();
    assert_eq!(
        recent,
        [
            ("abc-1", first.as_str(), "started"),
            ("abc-2", other.as_str(), "started")
        ]
    );

    // Past the retention window (seven days) the id is forgotten: the purge runs
    // at start and once a minute.
    h.clock.advance(Duration::from_secs(8 * 86_400));
    h = h.restart().await;
    let mut fresh = first.clone();
    for _ in 0..100 {
        fresh = h
            .deliver("d", r#"{"n":1}"#, &[("X-GitHub-Delivery", "abc-1")])
            .await;
        if fresh != first {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_ne!(fresh, first, "a delivery id past the window starts a new run");
}

fn keyed(mode: v1::TriggerMode) -> v1::TriggerSpec {
    let mut s = spec("PR {{$.n}} delivery {{$.d}}");
    s.concurrency_key = "{{$.repo}}#{{$.n}}".into();
    s.mode = mode.into();
    s
}

#[tokio::test]
async fn serial_mode_runs_one_key_one_run_at_a_time_in_arrival_order() {
    let h = harness().await;
    h.create("serial", keyed(v1::TriggerMode::Serial)).await;
    let mut ids = Vec::new();
    for d in 1..=3 {
        let (status, json) = h
            .post("serial", &format!(r#"{{"repo":"a/b","n":5,"d":{d}}}"#), &[])
            .await;
        assert_eq!(status, 202, "{json}");
        assert_eq!(json["queued"], d > 1, "{json}");
        ids.push(json["runId"].as_str().unwrap().to_string());
    }
    // Another key is not held up.
    let other = h.deliver("serial", r#"{"repo":"a/b","n":6,"d":9}"#, &[]).await;
    assert!(h.run(&other).await.is_some());
    assert!(h.run(&ids[1]).await.is_none(), "the second waits");
    assert!(h.run(&ids[2]).await.is_none(), "the third waits");

    let w = h.worker();
    let mut order = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let open: Vec<_> = h
            .runs()
            .await
            .into_iter()
            .filter(|r| r.status() == RunStatus::Running && r.run_id != other)
            .collect();
        assert_eq!(open.len(), 1, "one run of the key at a time");
        assert_eq!(&open[0].run_id, id);
        assert_eq!(open[0].goal, format!("PR 5 delivery {}", i + 1));
        loop {
            let task = poll(&w).await;
            let done = task.run_id.clone();
            w.complete(&task.task_token, Completion::notes("done"))
                .await
                .unwrap();
            if done != other {
                order.push(done);
                break;
            }
        }
    }
    assert_eq!(order, ids, "in arrival order");
    for id in &ids {
        assert_eq!(h.run(id).await.unwrap().status(), RunStatus::Completed);
    }
    // The key is free again: the next delivery starts at once.
    let (_, json) = h.post("serial", r#"{"repo":"a/b","n":5,"d":4}"#, &[]).await;
    assert_eq!(json["queued"], false, "{json}");
}

#[tokio::test]
async fn parallel_mode_runs_a_keys_deliveries_together() {
    let h = harness().await;
    h.create("par", keyed(v1::TriggerMode::Parallel)).await;
    let mut ids = Vec::new();
    for d in 1..=3 {
        ids.push(
            h.deliver("par", &format!(r#"{{"repo":"a/b","n":5,"d":{d}}}"#), &[])
                .await,
        );
    }
    for id in &ids {
        assert_eq!(h.run(id).await.unwrap().status(), RunStatus::Running);
    }
    let w = h.worker();
    let mut leased = Vec::new();
    for _ in 0..3 {
        leased.push(poll(&w).await);
    }
    let mut got: Vec<_> = leased.iter().map(|t| t.run_id.clone()).collect();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got, want, "all three steps are out at once");
}

#[tokio::test]
async fn replace_mode_cancels_the_open_run_and_starts_the_new_one() {
    let h = harness().await;
    h.create("rep", keyed(v1::TriggerMode::Replace)).await;
    let first = h.deliver("rep", r#"{"repo":"a/b","n":5,"d":1}"#, &[]).await;
    let second = h.deliver("rep", r#"{"repo":"a/b","n":5,"d":2}"#, &[]).await;
    assert_eq!(h.run(&first).await.unwrap().status(), RunStatus::Canceled);
    assert_eq!(h.run(&second).await.unwrap().status(), RunStatus::Running);
    // A leased run is asked to stop, and stops at its next report.
    let w = h.worker();
    let task = poll(&w).await;
    assert_eq!(task.run_id, second);
    let third = h.deliver("rep", r#"{"repo":"a/b","n":5,"d":3}"#, &[]).await;
    let beat = w.heartbeat(&task.task_token).send().await.unwrap();
    assert!(beat.cancel_requested);
    assert_eq!(h.run(&third).await.unwrap().status(), RunStatus::Running);
}

#[tokio::test]
async fn configured_triggers_are_stored_at_start_and_read_only_through_the_api() {
    let configured = TriggerInput {
        id: "from-file".into(),
        workflow_id: "one".into(),
        goal: "{{$.x}}".into(),
        ..TriggerInput::default()
    };
    let mut h = harness_with(vec![configured.clone()]).await;
    let info = h.client.describe_trigger("default", "from-file").await.unwrap();
    assert!(info.from_config);
    let run_id = h.deliver("from-file", r#"{"x":"hello"}"#, &[]).await;
    assert_eq!(h.run(&run_id).await.unwrap().goal, "hello");
    let e = h
        .client
        .delete_trigger(v1::DeleteTriggerRequest {
            namespace: "default".into(),
            trigger_id: "from-file".into(),
            identity: String::new(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::FailedPrecondition(m) if m.contains("configuration")),
        "{e}"
    );
    // Gone from the configuration: gone from storage at the next start.
    h = h.restart().await;
    assert!(matches!(
        h.client
            .describe_trigger("default", "from-file")
            .await
            .unwrap_err(),
        ClientError::NotFound(_)
    ));
}

/// Sends `head` (a request head, no body) on a raw connection and reads the answer's
/// status line; the deadline only bounds a hang.
async fn raw_status(addr: std::net::SocketAddr, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf))
        .await
        .expect("an answer before any body was sent")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    text.lines().next().unwrap_or("").to_string()
}

#[tokio::test]
async fn a_declared_oversize_body_is_refused_at_once() {
    let h = harness().await;
    h.create("big", spec("x")).await;
    let addr = h.server.http_addr;
    // 10 GB declared, nothing sent: 413 without waiting for the body.
    let status = raw_status(
        addr,
        "POST /hooks/default/big HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 10000000000\r\n\r\n",
    )
    .await;
    assert!(status.contains(" 413 "), "{status}");
    // Just over the limit (64 KiB here): 413 too, and with `Expect: 100-continue`.
    let status = raw_status(
        addr,
        "POST /hooks/default/big HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         expect: 100-continue\r\ncontent-length: 65537\r\n\r\n",
    )
    .await;
    assert!(status.contains(" 413 "), "{status}");
    assert!(h.runs().await.is_empty(), "nothing was started");
}

#[tokio::test]
async fn a_triggers_search_attributes_are_rendered_from_the_payload_queued_starts_included() {
    let h = harness().await;
    let mut s = keyed(v1::TriggerMode::Serial);
    s.search_attributes.insert("repo".into(), "{{$.repo}}".into());
    // Undeclared: refused when the trigger is created, naming it.
    match h
        .client
        .create_trigger(v1::CreateTriggerRequest {
            namespace: "default".into(),
            trigger_id: "attrs".into(),
            spec: Some(s.clone()),
            ..Default::default()
        })
        .await
    {
        Err(ClientError::InvalidArgument(m)) => {
            assert!(m.contains("\"repo\" is not a search attribute"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    h.client
        .add_search_attribute("default", "repo", "keyword")
        .await
        .unwrap();
    h.client
        .add_search_attribute("default", "pr", "int")
        .await
        .unwrap();
    s.search_attributes.insert("pr".into(), "{{$.n}}".into());
    h.create("attrs", s).await;
    let first = h.deliver("attrs", r#"{"repo":"a/b","n":5,"d":1}"#, &[]).await;
    let (status, json) = h.post("attrs", r#"{"repo":"a/b","n":5,"d":2}"#, &[]).await;
    assert_eq!((status, json["queued"].as_bool()), (202, Some(true)), "{json}");
    let second = json["runId"].as_str().unwrap().to_string();
    let shown = |r: v1::RunInfo| -> Vec<(String, String)> {
        r.search_attributes
            .into_iter()
            .map(|a| (a.name, a.value))
            .collect()
    };
    let want = vec![
        ("pr".to_string(), "5".to_string()),
        ("repo".to_string(), "a/b".to_string()),
    ];
    assert_eq!(shown(h.run(&first).await.unwrap()), want);
    // The queued start keeps its rendered attributes until it starts.
    let w = h.worker();
    let task = poll(&w).await;
    assert_eq!(task.run_id, first);
    w.complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    assert_eq!(shown(h.run(&second).await.expect("the queued start ran")), want);
}

/// Refused deliveries, and duplicates, are among a trigger's recent refusals with
/// their reasons (kept in memory, bounded as its accepted ones); a delivery to no
/// trigger is remembered nowhere.
#[tokio::test]
async fn refused_and_duplicate_deliveries_are_listed_with_their_reasons() {
    set_env("IT_REFUSALS_SECRET", "s3cret");
    let h = harness().await;
    let mut s = spec("{{$.ref}}");
    s.signature_secret = "$IT_REFUSALS_SECRET".into();
    h.create("guarded", s).await;
    let body = r#"{"ref":"main"}"#;
    let good = sign(b"s3cret", body.as_bytes());
    let bad = sign(b"nope", body.as_bytes());
    let first = h
        .deliver(
            "guarded",
            body,
            &[("X-Hub-Signature-256", &good), ("X-GitHub-Delivery", "d-1")],
        )
        .await;
    let (status, _) = h
        .post(
            "guarded",
            body,
            &[("X-Hub-Signature-256", &bad), ("X-GitHub-Delivery", "d-2")],
        )
        .await;
    assert_eq!(status, 401);
    let not_json = "not json";
    let signed = sign(b"s3cret", not_json.as_bytes());
    assert_eq!(
        h.post("guarded", not_json, &[("X-Hub-Signature-256", &signed)])
            .await
            .0,
        400
    );
    let no_ref = r#"{"other":1}"#;
    let signed = sign(b"s3cret", no_ref.as_bytes());
    assert_eq!(
        h.post("guarded", no_ref, &[("X-Hub-Signature-256", &signed)])
            .await
            .0,
        422
    );
    let again = h
        .deliver(
            "guarded",
            body,
            &[("X-Hub-Signature-256", &good), ("X-GitHub-Delivery", "d-1")],
        )
        .await;
    assert_eq!(again, first);
    assert_eq!(h.post("nowhere", body, &[]).await.0, 404);

    let info = h.client.describe_trigger("default", "guarded").await.unwrap();
    let seen: Vec<(&str, &str)> = info
        .recent_refusals
        .iter()
        .map(|r| (r.kind.as_str(), r.delivery_id.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("unauthorized", "d-2"),
            ("bad request", ""),
            ("unprocessable", ""),
            ("duplicate", "d-1")
        ]
    );
    let r = &info.recent_refusals;
    assert!(r[0].reason.contains("X-Hub-Signature-256"), "{:?}", r[0]);
    assert!(r[1].reason.contains("not JSON"), "{:?}", r[1]);
    assert!(r[2].reason.contains("goal"), "{:?}", r[2]);
    assert!(r[3].reason.contains(&first), "{:?}", r[3]);
    assert_eq!(r[0].received_time_unix_ms, T0);
    assert_eq!(info.recent_deliveries.len(), 1, "the accepted one");
    // Listed alike; bounded to the last 20.
    for _ in 0..25 {
        h.post("guarded", body, &[("X-Hub-Signature-256", &bad)]).await;
    }
    let listed = h
        .client
        .list_triggers(v1::ListTriggersRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.triggers[0].recent_refusals.len(), 20);
    h.server.shutdown().await;
}
