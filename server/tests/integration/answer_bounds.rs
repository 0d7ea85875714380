//! Answers kept to their bounds: a 10 MiB namespace name is INVALID_ARGUMENT naming
//! the limit (it was NOT_FOUND); `CountRuns group_by` answers the 1,000 largest
//! groups and sums the rest (it answered all 10,051); a rate limit's reset time far
//! ahead is reported as the wait the poller keeps (at most an hour), not
//! "next poll in 98203831352 s".

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use railyard_engine::clock::{Clock, ManualClock};
use railyard_proto::v1::{self, CountRunsRequest, ListRunsRequest, StartRunRequest};
use railyard_sdk::ClientError;
use railyard_server::ServerConfig;

const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

#[tokio::test]
async fn a_namespace_name_no_namespace_can_have_is_refused_naming_the_limit() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    let (server, c) = crate::support::start(ServerConfig::new(data.path(), workflows.path())).await;
    let huge = "n".repeat(10 << 20);
    match c
        .list_runs(ListRunsRequest {
            namespace: huge,
            ..Default::default()
        })
        .await
    {
        Err(ClientError::InvalidArgument(m)) => {
            assert!(m.starts_with("namespace:") && m.contains("limit of"), "{m}");
            assert!(m.len() < 300, "the name is not echoed: {} bytes", m.len());
        }
        other => panic!("{other:?}"),
    }
    // A name that could exist and does not is still NOT_FOUND.
    match c
        .list_runs(ListRunsRequest {
            namespace: "nowhere".into(),
            ..Default::default()
        })
        .await
    {
        Err(ClientError::NotFound(m)) => assert!(m.contains("nowhere"), "{m}"),
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_count_by_group_answers_the_largest_groups_and_sums_the_rest() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let (server, c) = crate::support::start(ServerConfig::new(data.path(), workflows.path())).await;
    c.add_search_attribute("default", "customer", "keyword")
        .await
        .unwrap();
    // 1,004 customers of one run each, and "big" with three.
    let mut starts = Vec::new();
    for i in 0..1007 {
        let customer = if i < 3 {
            "big".to_string()
        } else {
            format!("c{i:04}")
        };
        let c = c.clone();
        starts.push(tokio::spawn(async move {
            c.start_run_with(StartRunRequest {
                namespace: "default".into(),
                workflow_id: "one".into(),
                goal: "g".into(),
                search_attributes: HashMap::from([("customer".to_string(), customer)]),
                ..Default::default()
            })
            .await
            .unwrap()
        }));
    }
    for s in starts {
        s.await.unwrap();
    }
    let r = c
        .count_runs(CountRunsRequest {
            namespace: "default".into(),
            group_by: "customer".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.count, 1007);
    assert_eq!(r.groups.len(), 1000);
    assert_eq!((r.other_groups, r.other_count), (5, 5));
    assert!(r.groups.iter().any(|g| g.value == "big" && g.count == 3));
    let values: Vec<&str> = r.groups.iter().map(|g| g.value.as_str()).collect();
    let mut sorted = values.clone();
    sorted.sort();
    assert_eq!(values, sorted, "still in value order");
    let summed: u64 = r.groups.iter().map(|g| g.count).sum::<u64>() + r.other_count;
    assert_eq!(summed, r.count);
    server.shutdown().await;
}

#[tokio::test]
async fn a_rate_limit_reset_far_ahead_is_reported_as_the_wait_kept() {
    // GitHub's primary limit, with a reset time in the year 5000.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(|| async {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", "95617584000".parse().unwrap());
        (
            StatusCode::FORBIDDEN,
            h,
            r#"{"message":"API rate limit exceeded"}"#,
        )
            .into_response()
    });
    tokio::spawn(async move { axum::serve(listener, app).await });

    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let clock = ManualClock::new(1_767_225_600_000);
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.clock = Arc::new(clock.clone());
    config.delivery.allow_networks = vec!["127.0.0.0/8".parse().unwrap()];
    let (server, c) = crate::support::start(config).await;
    c.create_trigger(v1::CreateTriggerRequest {
        namespace: "default".into(),
        trigger_id: "limited".into(),
        spec: Some(v1::TriggerSpec {
            workflow_id: "one".into(),
            goal: "#{{$.number}}".into(),
            poll: Some(v1::TriggerPollSource {
                source: "github-issues".into(),
                repo: "acme/app".into(),
                base_url: url,
                ..Default::default()
            }),
            ..Default::default()
        }),
        identity: String::new(),
    })
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let s = c
            .describe_trigger("default", "limited")
            .await
            .unwrap()
            .poll_status
            .unwrap();
        if s.polls >= 1 {
            break s;
        }
        assert!(tokio::time::Instant::now() < deadline, "never polled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.last_error.contains("next poll in 3600 s"), "{status:?}");
    assert_eq!(status.next_poll_unix_ms, clock.now_ms() + 3_600_000, "{status:?}");
    server.shutdown().await;
}
