//! `GET /runs/{run}/output` over a real socket: Server-Sent Events whose ids are the
//! offsets, resuming after `Last-Event-ID`, ending with `event: end` once the run is
//! closed; the API's auth (401 without a key, a key's namespace checked).

use std::net::SocketAddr;
use std::time::Duration;

use railyard_proto::v1::{AppendStepOutputRequest, OutputChunk, OutputKind};
use railyard_sdk::{Client, Completion, StepWorker};
use railyard_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::start;

const ONE_STEP: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"agent","title":"Agent","prompt":"work"}]}"#;

/// The whole answer to a GET over HTTP/1.0 (the server closes after the stream ends).
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_string(&mut text))
        .await
        .expect("the stream ends")
        .unwrap();
    text
}

/// (id, event, data) of each event in an SSE body.
fn events(answer: &str) -> Vec<(String, String, serde_json::Value)> {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    body.split("\n\n")
        .filter(|e| e.lines().any(|l| l.starts_with("event:")))
        .map(|e| {
            let field = |name: &str| {
                e.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let data = serde_json::from_str(&field("data:")).unwrap();
            (field("id:"), field("event:"), data)
        })
        .collect()
}

async fn run_with_output(client: &Client, queue: &str) -> String {
    let run = client
        .start_run("default", "one", "g", Default::default())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", queue, "w");
    let task = w.poll(Duration::from_secs(5)).await.unwrap().expect("a task");
    let chunks = ["a", "b", "c"]
        .iter()
        .map(|t| OutputChunk {
            kind: OutputKind::Text as i32,
            text: t.to_string(),
            ..Default::default()
        })
        .collect();
    client
        .append_step_output(AppendStepOutputRequest {
            task_token: task.task_token.clone(),
            identity: "w".into(),
            chunks,
        })
        .await
        .unwrap();
    w.complete(&task.task_token, Completion::notes("ok"))
        .await
        .unwrap();
    run
}

#[tokio::test]
async fn sse_resumes_after_the_last_event_id_and_ends_at_the_close() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let (server, client) = start(ServerConfig::new(data.path(), workflows.path())).await;
    let run = run_with_output(&client, "default").await;

    let whole = get(server.http_addr, &format!("/runs/{run}/output"), &[]).await;
    assert!(whole.starts_with("HTTP/1.0 200"), "{whole}");
    assert!(whole.contains("content-type: text/event-stream"), "{whole}");
    let all = events(&whole);
    let seen: Vec<(&str, &str)> = all.iter().map(|(id, ev, _)| (id.as_str(), ev.as_str())).collect();
    assert_eq!(
        seen,
        vec![
            ("1", "segment_start"),
            ("2", "text"),
            ("3", "text"),
            ("4", "text"),
            ("", "end")
        ]
    );
    assert_eq!(all[1].2["text"], "a");
    assert_eq!(all[0].2["step_id"], "agent");
    assert_eq!(all[0].2["attempt"], 1);

    // A reconnecting EventSource sends the last id it saw: the stream goes on after it.
    let resumed = events(
        &get(
            server.http_addr,
            &format!("/runs/{run}/output"),
            &[("Last-Event-ID", "2")],
        )
        .await,
    );
    let ids: Vec<&str> = resumed.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, vec!["3", "4", ""]);
    // `from` asks for a first offset.
    let from = events(
        &get(
            server.http_addr,
            &format!("/runs/{run}/output?from=4&namespace=default"),
            &[],
        )
        .await,
    );
    assert_eq!(from[0].0, "4");

    let bad = get(
        server.http_addr,
        &format!("/runs/{run}/output"),
        &[("Last-Event-ID", "x")],
    )
    .await;
    assert!(bad.starts_with("HTTP/1.0 400"), "{bad}");
    assert!(bad.contains("Last-Event-ID"), "{bad}");
    let missing = get(server.http_addr, "/runs/nope/output", &[]).await;
    assert!(missing.starts_with("HTTP/1.0 404"), "{missing}");
    server.shutdown().await;
}

#[tokio::test]
async fn sse_takes_the_apis_keys() {
    let s = crate::auth::secured().await;
    let admin = s.admin().await;
    // The secured fixture's `one` runs on queue `q1`.
    let run = run_with_output(&admin, "q1").await;
    let path = format!("/runs/{run}/output");
    let none = get(s.server.http_addr, &path, &[]).await;
    assert!(none.starts_with("HTTP/1.0 401"), "{none}");
    let wrong = get(
        s.server.http_addr,
        &path,
        &[("Authorization", "Bearer ry_nope_nope")],
    )
    .await;
    assert!(wrong.starts_with("HTTP/1.0 401"), "{wrong}");
    let bearer = format!("Bearer {}", s.admin_key);
    let ok = get(s.server.http_addr, &path, &[("Authorization", bearer.as_str())]).await;
    assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
    assert_eq!(events(&ok).len(), 5);
    // A key of another namespace is refused for this one.
    admin.create_namespace("team", "").await.unwrap();
    let (team_key, _) = s
        .key("team", railyard_proto::v1::ApiKeyRole::Client, &[], 0)
        .await;
    let bearer = format!("Bearer {team_key}");
    let other = get(s.server.http_addr, &path, &[("Authorization", bearer.as_str())]).await;
    assert!(other.starts_with("HTTP/1.0 403"), "{other}");
}
