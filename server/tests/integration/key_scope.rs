//! What a key reaches. A key may make only keys that reach no further and last no
//! longer than itself (a 2-second admin key once made a never-expiring admin key that
//! kept working after its maker expired or was revoked); a worker key limited to
//! task queues describes only runs with a step on them (it once described any run of
//! its namespace, goal and context included).

use std::collections::HashMap;
use std::time::Duration;

use railyard_proto::v1::{ApiKeyRole, CreateApiKeyRequest};
use railyard_sdk::{Client, ClientError};

use crate::auth::{Secured, secured};

fn admin_key(expires_in_seconds: u64) -> CreateApiKeyRequest {
    CreateApiKeyRequest {
        namespace: "default".into(),
        role: ApiKeyRole::Admin as i32,
        expires_in_seconds,
        ..Default::default()
    }
}

async fn make(by: &Client, req: CreateApiKeyRequest) -> (String, String, i64) {
    let resp = by.create_api_key(req).await.unwrap();
    let info = resp.key.unwrap();
    (resp.api_key, info.key_id, info.expire_time_unix_ms)
}

async fn works(s: &Secured, key: &str) -> Result<(), ClientError> {
    s.client(Some(key))
        .await
        .list_workflows("default")
        .await
        .map(drop)
}

#[tokio::test]
async fn a_key_made_by_an_expiring_key_expires_with_it() {
    let s = secured().await;
    let (short, short_id) = s.key("default", ApiKeyRole::Admin, &[], 2).await;
    let short_client = s.client(Some(&short)).await;
    let now = 1_700_000_000_000i64;

    // Never-expiring, or later than its maker: refused, naming the field and the limit.
    match short_client.create_api_key(admin_key(3)).await {
        Err(ClientError::InvalidArgument(m)) => {
            assert!(m.contains("expires_in_seconds: at most 2"), "{m}");
            assert!(m.contains(&short_id), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // Asking for no expiry gets the maker's; an earlier one is kept.
    let (inherited, _, at) = make(&short_client, admin_key(0)).await;
    assert_eq!(at, now + 2_000);
    let (earlier, _, at) = make(&short_client, admin_key(1)).await;
    assert_eq!(at, now + 1_000);
    // And the made key cannot extend itself either (a grandchild).
    let inherited_client = s.client(Some(&inherited)).await;
    let (grandchild, _, at) = make(&inherited_client, admin_key(0)).await;
    assert_eq!(at, now + 2_000);
    assert!(inherited_client.create_api_key(admin_key(3)).await.is_err());

    s.clock.advance(Duration::from_secs(2));
    for key in [&short, &inherited, &earlier, &grandchild] {
        assert!(
            matches!(works(&s, key).await, Err(ClientError::Unauthenticated(_))),
            "every key made from the expired key has expired"
        );
    }
    // A key of the never-expiring admin still makes never-expiring keys.
    let (_, _, at) = make(&s.admin().await, admin_key(0)).await;
    assert_eq!(at, 0);
}

#[tokio::test]
async fn revoking_a_key_revokes_every_key_made_from_it() {
    let s = secured().await;
    let (maker, maker_id) = s.key("default", ApiKeyRole::Admin, &[], 0).await;
    let maker_client = s.client(Some(&maker)).await;
    let (child, child_id, _) = make(&maker_client, admin_key(0)).await;
    let (grandchild, _, _) = make(&s.client(Some(&child)).await, admin_key(0)).await;
    let (worker, _, _) = make(
        &maker_client,
        CreateApiKeyRequest {
            namespace: "default".into(),
            role: ApiKeyRole::Worker as i32,
            ..Default::default()
        },
    )
    .await;
    // A sibling made by another key is not touched.
    let (sibling, _) = s.key("default", ApiKeyRole::Client, &[], 0).await;
    for key in [&maker, &child, &grandchild, &sibling] {
        works(&s, key).await.unwrap();
    }

    let admin = s.admin().await;
    admin.revoke_api_key(&maker_id).await.unwrap();
    for key in [&maker, &child, &grandchild] {
        match works(&s, key).await {
            Err(ClientError::Unauthenticated(m)) => assert!(m.contains("was revoked"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        s.client(Some(&worker))
            .await
            .describe_run("default", "nope")
            .await,
        Err(ClientError::Unauthenticated(_))
    ));
    works(&s, &sibling).await.unwrap();
    // The child's row says it was revoked.
    let all = admin
        .list_api_keys(railyard_proto::v1::ListApiKeysRequest {
            namespace: "*".into(),
            include_revoked: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .keys;
    let revoked = all.iter().filter(|k| k.revoke_time_unix_ms != 0).count();
    assert_eq!(revoked, 4, "the maker, its two keys and the grandchild: {all:?}");
    assert!(
        all.iter()
            .any(|k| k.key_id == child_id && k.revoke_time_unix_ms != 0)
    );
}

#[tokio::test]
async fn a_worker_key_limited_to_queues_describes_only_runs_on_them() {
    let s = secured().await;
    let admin = s.admin().await;
    let on_q1 = admin
        .start_run("default", "one", "the q1 goal", HashMap::new())
        .await
        .unwrap();
    let elsewhere = admin
        .start_run("default", "other", "a secret goal", HashMap::new())
        .await
        .unwrap();
    let (limited, limited_id) = s.key("default", ApiKeyRole::Worker, &["q1"], 0).await;
    let limited = s.client(Some(&limited)).await;
    let run = limited
        .describe_run("default", &on_q1)
        .await
        .unwrap()
        .run
        .unwrap();
    assert_eq!(run.goal, "the q1 goal");
    match limited.describe_run("default", &elsewhere).await {
        Err(ClientError::PermissionDenied(m)) => {
            assert_eq!(
                m,
                format!("API key {limited_id} may describe only runs with a step on its task queues [q1]")
            );
            assert!(!m.contains("secret"));
        }
        other => panic!("{other:?}"),
    }
    // A worker key without queues serves every queue, so every run is its own.
    let (any, _) = s.key("default", ApiKeyRole::Worker, &[], 0).await;
    let any = s.client(Some(&any)).await;
    assert_eq!(
        any.describe_run("default", &elsewhere)
            .await
            .unwrap()
            .run
            .unwrap()
            .goal,
        "a secret goal"
    );
}

/// Under auth, history records who proved themselves, never who a request says it
/// is (a client key once recorded itself as `server` and `admin:alice`).
#[tokio::test]
async fn history_records_the_key_not_the_identity_a_request_claims() {
    use railyard_proto::v1::{
        CompleteStepTaskRequest, PollStepTaskRequest, SignalRunRequest, StartRunRequest,
    };
    let s = secured().await;
    let admin = s.admin().await;
    let made = |role: ApiKeyRole, description: &str| CreateApiKeyRequest {
        namespace: "default".into(),
        role: role as i32,
        description: description.into(),
        ..Default::default()
    };
    let client_key = admin
        .create_api_key(made(ApiKeyRole::Client, "alice's laptop"))
        .await
        .unwrap();
    let worker_key = admin.create_api_key(made(ApiKeyRole::Worker, "")).await.unwrap();
    let client_label = format!("key:{} (alice's laptop)", client_key.key.unwrap().key_id);
    let worker_label = format!("key:{}", worker_key.key.unwrap().key_id);
    let client = s.client(Some(&client_key.api_key)).await;
    let worker = s.client(Some(&worker_key.api_key)).await;

    let run_id = client
        .start_run_with(StartRunRequest {
            namespace: "default".into(),
            workflow_id: "one".into(),
            goal: "g".into(),
            identity: "server".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .run_id;
    client
        .signal_run(SignalRunRequest {
            namespace: "default".into(),
            run_id: run_id.clone(),
            signal_name: "steer".into(),
            payload_json: r#""go""#.into(),
            identity: "admin:alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let task = worker
        .poll_step_task(PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "q1".into(),
            identity: "server".into(),
            wait_timeout_ms: 5_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .expect("the step");
    worker
        .complete_step_task(CompleteStepTaskRequest {
            task_token: task.task_token,
            notes: "done".into(),
            identity: "admin:alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let history = admin.full_history("default", &run_id).await.unwrap();
    // Scheduling a step is the server's own doing, and says so; every other event
    // was caused by a request.
    for ev in history.iter().filter(|e| e.event_type == "StepScheduled") {
        assert_eq!(ev.identity, "server");
    }
    let mut by = HashMap::<String, usize>::new();
    for ev in history.iter().filter(|e| e.event_type != "StepScheduled") {
        *by.entry(ev.identity.clone()).or_default() += 1;
    }
    assert!(
        by.keys().all(|who| *who == client_label || *who == worker_label),
        "every event names the key that caused it: {by:?}"
    );
    assert!(by[&client_label] >= 2, "the start and the signal: {by:?}");
    assert!(by[&worker_label] >= 2, "the lease and the completion: {by:?}");
    assert!(
        history
            .iter()
            .any(|e| e.event_type == "SignalReceived" && e.identity == client_label)
    );
    assert!(
        history
            .iter()
            .any(|e| e.event_type == "StepCompleted" && e.identity == worker_label)
    );
}
