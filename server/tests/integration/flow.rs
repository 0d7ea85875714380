//! Flow control over real gRPC, on each backend: a run's priority and keys stored
//! and shown, bad fields refused by name with nothing stored, a namespace's rules
//! on keys set, listed and removed, and after a restart the rules and the slots
//! leased runs hold are rebuilt from the tables (docs/flow-control.md).

use std::sync::Arc;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{
    AcquireCapacityRequest, CompleteStepTaskRequest, FailStepTaskRequest, KeyRule, PollStepTaskRequest,
    ReportRateLimitedRequest, StartRunRequest,
};
use railyard_sdk::{Client, ClientError};
use railyard_server::ServerConfig;

const ONE: &str = r#"{"id":"one","version":"1","name":"One","taskQueue":"fq","steps":[
  {"id":"a","title":"A","prompt":"do {{goal}}","heartbeatTimeoutSeconds":600}]}"#;

fn invalid(r: Result<impl std::fmt::Debug, ClientError>, want: &str) {
    match r {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains(want), "{m:?} should say {want:?}"),
        other => panic!("expected INVALID_ARGUMENT saying {want:?}, got {other:?}"),
    }
}

fn start(run_id: &str, priority: u32, key: &str, weight: u32) -> StartRunRequest {
    StartRunRequest {
        namespace: "default".into(),
        workflow_id: "one".into(),
        run_id: run_id.into(),
        goal: "g".into(),
        priority,
        fairness_key: key.into(),
        fairness_weight: weight,
        ..Default::default()
    }
}

fn rule(key: &str, concurrency: i64, weight: i64) -> KeyRule {
    KeyRule {
        key: key.into(),
        concurrency,
        weight,
        ..Default::default()
    }
}

async fn poll(c: &Client, wait_ms: u32) -> Option<String> {
    c.poll_step_task(PollStepTaskRequest {
        namespace: "default".into(),
        task_queue: "fq".into(),
        identity: "w".into(),
        wait_timeout_ms: wait_ms,
        run_id: String::new(),
    })
    .await
    .unwrap()
    .map(|t| t.run_id)
}

fn config(data: &std::path::Path, workflows: &std::path::Path) -> ServerConfig {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(ManualClock::new(1_700_000_000_000));
    config
}

#[tokio::test]
async fn keys_and_rules_are_checked_stored_and_rebuilt_after_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let (server, c) = crate::support::start(config(data.path(), workflows.path())).await;

    // Bad rules: each refused naming the field, nothing stored.
    invalid(
        c.set_key_rule("default", rule("acme", -1, 0)).await,
        "concurrency",
    );
    invalid(
        c.set_key_rule("default", rule("acme", 0, 1_000_000_000)).await,
        "weight",
    );
    invalid(c.set_key_rule("default", rule("acme", 0, 0)).await, "concurrency");
    invalid(
        c.set_key_rule("default", rule(&"k".repeat(10 * 1024), 2, 0))
            .await,
        "key",
    );
    invalid(c.set_key_rule("default", rule("a*b", 2, 0)).await, "key");
    assert!(c.list_key_rules("default").await.unwrap().is_empty());
    // Bad starts: refused naming the field, nothing started.
    invalid(c.start_run_with(start("bad", 6, "", 0)).await, "priority");
    invalid(
        c.start_run_with(start("bad", 0, "", 1_000_000_000)).await,
        "fairness_weight",
    );
    invalid(
        c.start_run_with(start("bad", 0, &"k".repeat(10 * 1024), 0)).await,
        "fairness_key",
    );
    assert!(matches!(
        c.describe_run("default", "bad").await,
        Err(ClientError::NotFound(_))
    ));

    let rules = c.set_key_rule("default", rule("acme", 1, 3)).await.unwrap();
    assert_eq!(rules.len(), 1);
    c.set_key_rule("default", rule("*", 5, 0)).await.unwrap();
    c.start_run_with(start("r1", 2, "acme", 4)).await.unwrap();
    c.start_run_with(start("r2", 2, "acme", 0)).await.unwrap();
    c.start_run_with(start("plain", 0, "", 0)).await.unwrap();
    let run = c.describe_run("default", "r1").await.unwrap().run.unwrap();
    assert_eq!(
        (run.priority, run.fairness_key.as_str(), run.fairness_weight),
        (2, "acme", 4)
    );
    let plain = c.describe_run("default", "plain").await.unwrap().run.unwrap();
    assert_eq!((plain.priority, plain.fairness_weight), (3, 1), "the defaults");

    assert_eq!(poll(&c, 2_000).await.as_deref(), Some("r1"), "priority 2 first");
    assert_eq!(
        poll(&c, 2_000).await.as_deref(),
        Some("plain"),
        "r2 waits for acme's slot"
    );
    assert_eq!(poll(&c, 300).await, None);
    let waiting = c.describe_run("default", "r2").await.unwrap().run.unwrap();
    assert!(waiting.flow_wait.contains("1 of 1"), "{}", waiting.flow_wait);
    server.shutdown().await;

    // After a restart: the rules are there, and r1's lease still holds acme's slot.
    let (server, c) = crate::support::start(config(data.path(), workflows.path())).await;
    let rules = c.list_key_rules("default").await.unwrap();
    let acme = rules.iter().find(|r| r.key == "acme").expect("the acme rule");
    assert_eq!((acme.concurrency, acme.weight, acme.running), (1, 3, 1));
    assert_eq!(poll(&c, 300).await, None, "r2 still waits after the restart");
    let queue = c.describe_task_queue("default", "fq").await.unwrap();
    let key = queue.keys.iter().find(|k| k.key == "acme").expect("acme");
    assert_eq!((key.queued, key.running, key.limit), (1, 1, 1));
    // Raising the limit lets r2 out at once.
    c.set_key_rule("default", rule("acme", 2, 0)).await.unwrap();
    assert_eq!(poll(&c, 2_000).await.as_deref(), Some("r2"));
    let rules = c.remove_key_rule("default", "acme").await.unwrap();
    assert_eq!(rules.len(), 1);
    assert!(matches!(
        c.remove_key_rule("default", "acme").await,
        Err(ClientError::NotFound(_))
    ));
    server.shutdown().await;
}

#[tokio::test]
async fn a_fleet_shares_a_keys_rate_and_a_reported_reset_holds_every_worker() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let mut cfg = config(data.path(), workflows.path());
    cfg.clock = clock.clone();
    let (server, c) = crate::support::start(cfg).await;

    invalid(
        c.set_key_rule(
            "default",
            KeyRule {
                key: "anthropic:prod".into(),
                requests_per_minute: -1,
                ..Default::default()
            },
        )
        .await,
        "requests_per_minute",
    );
    assert!(
        c.list_key_rules("default").await.unwrap().is_empty(),
        "nothing stored"
    );
    c.set_key_rule(
        "default",
        KeyRule {
            key: "anthropic:*".into(),
            requests_per_minute: 2,
            tokens_per_minute: 1000,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    c.start_run_with(start("r", 0, "", 0)).await.unwrap();
    let task = c
        .poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "fq".into(),
            identity: "w".into(),
            wait_timeout_ms: 2_000,
            run_id: String::new(),
        })
        .await
        .unwrap()
        .expect("a lease");
    let ask = |key: &str, tokens| AcquireCapacityRequest {
        task_token: task.task_token.clone(),
        identity: "w".into(),
        key: key.into(),
        tokens,
    };
    let t0 = 1_700_000_000_000;
    for _ in 0..2 {
        assert!(c.acquire_capacity(ask("anthropic:prod", 100)).await.unwrap().go);
    }
    let third = c.acquire_capacity(ask("anthropic:prod", 100)).await.unwrap();
    assert_eq!((third.go, third.retry_at_unix_ms), (false, t0 + 30_000));
    // A key no rule covers always goes; another key has buckets of its own.
    assert!(
        c.acquire_capacity(ask("openai:prod", 1_000_000))
            .await
            .unwrap()
            .go
    );
    assert!(c.acquire_capacity(ask("anthropic:dev", 100)).await.unwrap().go);
    clock.advance(std::time::Duration::from_secs(30));
    assert!(c.acquire_capacity(ask("anthropic:prod", 100)).await.unwrap().go);

    // A provider's 429 with a reset 20 s ahead holds the key until then.
    let now = t0 + 30_000;
    c.report_rate_limited(ReportRateLimitedRequest {
        task_token: task.task_token.clone(),
        identity: "w".into(),
        key: "anthropic:dev".into(),
        reset_time_unix_ms: now + 20_000,
    })
    .await
    .unwrap();
    let held = c.acquire_capacity(ask("anthropic:dev", 1)).await.unwrap();
    assert_eq!((held.go, held.retry_at_unix_ms), (false, now + 20_000));
    clock.advance(std::time::Duration::from_secs(21));
    assert!(c.acquire_capacity(ask("anthropic:dev", 1)).await.unwrap().go);

    // Bad input, refused by name.
    invalid(c.acquire_capacity(ask(&"k".repeat(10 * 1024), 1)).await, "key");
    invalid(c.acquire_capacity(ask("anthropic:prod", 1 << 40)).await, "tokens");
    invalid(
        c.report_rate_limited(ReportRateLimitedRequest {
            task_token: task.task_token.clone(),
            identity: "w".into(),
            key: "anthropic:dev".into(),
            reset_time_unix_ms: now + 3 * 24 * 3600 * 1000,
        })
        .await,
        "reset_time_unix_ms",
    );
    let mut forged = ask("anthropic:prod", 1);
    forged.task_token.push('x');
    assert!(matches!(
        c.acquire_capacity(forged).await,
        Err(ClientError::PermissionDenied(_))
    ));
    server.shutdown().await;
}

#[tokio::test]
async fn a_step_parked_for_a_rate_limit_frees_its_slot_and_resumes_after_the_reset() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let t0 = 1_700_000_000_000;
    let clock = Arc::new(ManualClock::new(t0));
    let cfg = |clock: &Arc<ManualClock>| {
        let mut cfg = config(data.path(), workflows.path());
        cfg.clock = clock.clone();
        cfg
    };
    let (server, c) = crate::support::start(cfg(&clock)).await;
    // One slot for the key: q can only run once p's lease is over.
    c.set_key_rule("default", rule("acme", 1, 0)).await.unwrap();
    c.start_run_with(start("p", 0, "acme", 0)).await.unwrap();
    c.start_run_with(start("q", 0, "acme", 0)).await.unwrap();
    let lease = |wait_ms| {
        c.poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "fq".into(),
            identity: "w".into(),
            wait_timeout_ms: wait_ms,
            run_id: String::new(),
        })
    };
    let p = lease(2_000).await.unwrap().expect("p's lease");
    assert_eq!((p.run_id.as_str(), p.attempt), ("p", 1));
    assert!(lease(300).await.unwrap().is_none(), "q waits for acme's slot");
    let park = |error_type: &str, key: &str, until| FailStepTaskRequest {
        task_token: p.task_token.clone(),
        error_type: error_type.into(),
        identity: "w".into(),
        checkpoint: b"the transcript so far".to_vec(),
        park_until_unix_ms: until,
        rate_limit_key: key.into(),
        ..Default::default()
    };

    // Bad parks: refused by name, and the lease goes on.
    let day = 24 * 3600 * 1000;
    invalid(
        c.fail_step_task(park("rate_limited", "anthropic:prod", t0 + 2 * day))
            .await,
        "park_until_unix_ms",
    );
    invalid(
        c.fail_step_task(park("boom", "anthropic:prod", t0 + 20_000))
            .await,
        "park_until_unix_ms",
    );
    invalid(
        c.fail_step_task(park("rate_limited", &"k".repeat(10 * 1024), t0 + 20_000))
            .await,
        "rate_limit_key",
    );
    let run = c.describe_run("default", "p").await.unwrap().run.unwrap();
    assert!(run.waiting.is_none(), "nothing parked");

    // A 429 with a reset 20 s ahead: p parks, its slot goes to q at once.
    c.fail_step_task(park("rate_limited", "anthropic:prod", t0 + 20_000))
        .await
        .unwrap();
    let run = c.describe_run("default", "p").await.unwrap().run.unwrap();
    let wait = run.waiting.expect("p waits");
    assert_eq!(
        (
            wait.on.as_str(),
            wait.rate_limit_key.as_str(),
            wait.deadline_unix_ms
        ),
        ("rate_limit", "anthropic:prod", t0 + 20_000)
    );
    let q = lease(2_000).await.unwrap().expect("q runs meanwhile");
    assert_eq!(q.run_id, "q");
    c.complete_step_task(CompleteStepTaskRequest {
        task_token: q.task_token.clone(),
        notes: "done".into(),
        identity: "w".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(lease(300).await.unwrap().is_none(), "p waits for the reset");

    // The parked step's wait survives a restart; at the reset it runs again under
    // the same attempt, from its checkpoint.
    server.shutdown().await;
    let (server, c) = crate::support::start(cfg(&clock)).await;
    clock.advance(std::time::Duration::from_secs(20));
    let again = c
        .poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "fq".into(),
            identity: "w".into(),
            wait_timeout_ms: 5_000,
            run_id: String::new(),
        })
        .await
        .unwrap()
        .expect("p after the reset");
    assert_eq!(
        (again.run_id.as_str(), again.attempt),
        ("p", 1),
        "no attempt used"
    );
    assert_eq!(again.checkpoint, b"the transcript so far");
    assert!(again.resume_messages.is_empty(), "the model never saw the wait");
    let events = c.full_history("default", "p").await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert!(!types.contains(&"StepFailed"), "{types:?}");
    assert!(
        types.contains(&"StepWaiting") && types.contains(&"StepResumed"),
        "{types:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_rule_in_another_namespace_is_refused_and_nothing_is_stored() {
    let s = crate::auth::secured().await;
    let (key, _) = s
        .key("default", railyard_proto::v1::ApiKeyRole::Admin, &[], 0)
        .await;
    let ns_admin = s.client(Some(&key)).await;
    match ns_admin.set_key_rule("elsewhere", rule("acme", 2, 0)).await {
        Err(ClientError::PermissionDenied(m)) => assert!(m.contains("elsewhere"), "{m}"),
        other => panic!("expected PERMISSION_DENIED naming the namespace, got {other:?}"),
    }
    assert!(matches!(
        ns_admin.remove_key_rule("elsewhere", "acme").await,
        Err(ClientError::PermissionDenied(_))
    ));
    let admin = s.admin().await;
    assert!(
        admin
            .list_key_rules("elsewhere")
            .await
            .map(|r| r.is_empty())
            .unwrap_or(true),
        "nothing stored"
    );
    // Its own namespace's rule goes through.
    assert_eq!(
        ns_admin
            .set_key_rule("default", rule("acme", 2, 0))
            .await
            .unwrap()
            .len(),
        1
    );
}
