//! Output watchers are bounded: 1,000 `WatchOutput` streams that never read once
//! took a server from 230 MB to 1 GB, unbounded in number. Now a run has at most
//! `MAX_WATCHERS_PER_RUN` at once, a key `MAX_WATCHERS_PER_KEY`, the server
//! `MAX_WATCHERS`; past them a watch is RESOURCE_EXHAUSTED naming the limit, and a
//! watcher that leaves gives its place back.

use std::collections::HashMap;
use std::time::Duration;

use railyard_engine::service::output::{MAX_WATCHERS_PER_KEY, MAX_WATCHERS_PER_RUN};
use railyard_proto::v1::{ApiKeyRole, CreateApiKeyRequest};
use railyard_sdk::{ApiKey, Client, ClientError, ConnectOptions};
use railyard_server::ServerConfig;

const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

fn exhausted<T>(r: Result<T, ClientError>, words: &[&str]) {
    match r {
        Err(ClientError::ResourceExhausted(m)) => {
            for w in words {
                assert!(m.contains(w), "{w:?} not in {m}");
            }
        }
        Err(e) => panic!("expected RESOURCE_EXHAUSTED, got {e:?}"),
        Ok(_) => panic!("expected RESOURCE_EXHAUSTED, got a stream"),
    }
}

/// Watches `run` until one is let in again (the server frees a place once it sees
/// the stream gone; a bound on a hang only).
async fn watch_again(c: &Client, run: &str) {
    for _ in 0..500 {
        if c.watch_output("default", run, 0).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the place was never given back");
}

#[tokio::test]
async fn watchers_are_bounded_per_run_and_per_key_and_leaving_frees_a_place() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.auth = true;
    let (server, _) = crate::support::start(config).await;
    let url = format!("http://{}", server.grpc_addr);
    let connect = |key: String| {
        let url = url.clone();
        async move {
            let opts = ConnectOptions {
                api_key: Some(ApiKey::new(&key)),
                max_attempts: 1,
                ..ConnectOptions::default()
            };
            Client::connect_with(&url, opts).await.unwrap()
        }
    };
    let admin_key = std::fs::read_to_string(server.admin_key_file.clone().unwrap())
        .unwrap()
        .trim()
        .to_string();
    let admin = connect(admin_key).await;
    let key = admin
        .create_api_key(CreateApiKeyRequest {
            namespace: "default".into(),
            role: ApiKeyRole::Client as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .api_key;
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(
            admin
                .start_run("default", "one", "g", HashMap::new())
                .await
                .unwrap(),
        );
    }

    // Per run: the admin's watchers of the first run, never read.
    let mut held = Vec::new();
    for _ in 0..MAX_WATCHERS_PER_RUN {
        held.push(admin.watch_output("default", &runs[0], 0).await.unwrap());
    }
    exhausted(
        admin.watch_output("default", &runs[0], 0).await,
        &[&runs[0], "limit for one run"],
    );
    held.pop();
    watch_again(&admin, &runs[0]).await;
    drop(held);

    // Per key: a client key's watchers over the other runs (one connection each
    // batch, as a client opening many would).
    let mut held = Vec::new();
    let mut n = 0;
    while n < MAX_WATCHERS_PER_KEY {
        let c = connect(key.clone()).await;
        for _ in 0..MAX_WATCHERS_PER_RUN.min(MAX_WATCHERS_PER_KEY - n) {
            held.push(
                c.watch_output("default", &runs[1 + n / MAX_WATCHERS_PER_RUN], 0)
                    .await
                    .unwrap(),
            );
            n += 1;
        }
    }
    let c = connect(key.clone()).await;
    exhausted(
        c.watch_output("default", &runs[0], 0).await,
        &["limit for one key"],
    );
    // Another key is not held back by it.
    assert!(admin.watch_output("default", &runs[0], 0).await.is_ok());
    drop(held);
    watch_again(&c, &runs[0]).await;
    server.shutdown().await;
}
