//! Result delivery across a SIGKILL: a real `railyard server` delivers a run's result
//! to a local HTTP receiver that keeps failing; the server is killed in the middle of
//! the retries, started again on the same data, and the delivery completes from the
//! timer rows it left (no in-memory loop survives a kill). The receiver checks every
//! signature.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use railyard_engine::delivery::SigningSecret;
use railyard_engine::delivery::sign::verify;
use railyard_proto::v1::StartRunRequest;
use railyard_sdk::{Client, Completion, StepWorker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
    {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;

const SECRET: &str = "e2e-delivery-secret";

/// The config: short timeouts and backoffs, and a budget the test never reaches.
const CONFIG: &str = r#"
[delivery]
signing_secret = "e2e-delivery-secret"
allow_networks = ["127.0.0.0/8"]    # the receiver is on loopback
request_timeout_ms = 1000
initial_backoff_ms = 200
max_backoff_secs = 1
max_attempts = 100
"#;

/// What the receiver saw: (signature verified, status answered).
type Seen = Arc<Mutex<Vec<(bool, u16)>>>;

#[expect(
    clippy::disallowed_methods,
    reason = "a real server process signs with the wall clock; the receiver checks against the same clock"
)]
fn unix_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_secs()).unwrap()
}

/// One HTTP/1.1 request, answered with 200 when `healthy`, else 503.
async fn serve_one(mut conn: tokio::net::TcpStream, healthy: Arc<AtomicBool>, seen: Seen) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let Ok(n) = conn.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        assert!(buf.len() < 64 << 10, "headers too long");
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let len: usize = header("content-length").parse().unwrap_or(0);
    while buf.len() < head_end + len {
        let Ok(n) = conn.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = &buf[head_end..head_end + len];
    let secret = SigningSecret::new(SECRET).unwrap();
    let verified = verify(&secret, &header("railyard-signature"), body, unix_now(), 300).is_ok();
    let status = if healthy.load(SeqCst) { 200 } else { 503 };
    seen.lock().unwrap().push((verified, status));
    let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = conn.write_all(reply.as_bytes()).await;
}

#[test]
fn delivery_completes_after_a_sigkill_in_the_middle_of_its_retries() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let config = sandbox.path("railyard.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let server = sandbox.server_with(&["--config", config.to_str().unwrap()]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let healthy = Arc::new(AtomicBool::new(false));
    let seen: Seen = Arc::default();
    let url = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/result?team=e2e", listener.local_addr().unwrap());
        let (healthy, seen) = (healthy.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve_one(conn, healthy.clone(), seen.clone()));
            }
        });
        url
    });
    rt.block_on(async {
        let client = Client::connect(&server.url).await.unwrap();
        client
            .start_run_with(StartRunRequest {
                namespace: "default".into(),
                workflow_id: "one".into(),
                goal: "deliver me".into(),
                run_id: "kill-me".into(),
                callback_url: url.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let w = StepWorker::new(client, "default", "default", "w");
        let task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
        w.complete(&task.task_token, Completion::notes("done"))
            .await
            .unwrap();
    });
    // The receiver fails the first attempts; kill the server in the middle of them.
    eventually(Duration::from_secs(30), || {
        (seen.lock().unwrap().len() >= 2).then_some(())
    });
    let mut server = server;
    server.kill9();
    healthy.store(true, SeqCst);
    let server = server.crash_and_restart();

    let history = rt.block_on(async {
        let client = Client::connect(&server.url).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let h = client.full_history("default", "kill-me").await.unwrap();
            if h.iter().any(|e| e.event_type == "DeliverySucceeded") {
                return h;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no DeliverySucceeded: {h:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|(verified, _)| *verified),
        "every request is signed: {seen:?}"
    );
    assert!(seen.iter().filter(|(_, s)| *s == 503).count() >= 2, "{seen:?}");
    assert_eq!(seen.iter().filter(|(_, s)| *s == 200).count(), 1, "{seen:?}");
    // Attempts are numbered without gaps across the kill, and the last one succeeded.
    let attempts: Vec<u64> = history
        .iter()
        .filter(|e| e.event_type == "DeliveryAttempted")
        .map(|e| attrs(e)["attempt"].as_u64().unwrap())
        .collect();
    assert!(attempts.len() >= 3, "{attempts:?}");
    assert_eq!(attempts, (1..=attempts.len() as u64).collect::<Vec<_>>());
    let succeeded = history
        .iter()
        .find(|e| e.event_type == "DeliverySucceeded")
        .unwrap();
    assert_eq!(attrs(succeeded)["attempt"].as_u64(), attempts.last().copied());
    // The history URL keeps only the origin: the path and query may hold a secret.
    let first = history
        .iter()
        .find(|e| e.event_type == "DeliveryAttempted")
        .unwrap();
    let shown = attrs(first)["url"].as_str().unwrap().to_string();
    assert!(
        !shown.contains("team=e2e") && shown.starts_with("http://127.0.0.1:"),
        "{shown}"
    );

    // The CLI shows delivery apart from the run's outcome, and refuses a redelivery.
    let described = json(server.ry(&["run", "describe", "kill-me", "--output", "json"]));
    assert_eq!(described["run"]["status"], "COMPLETED");
    assert_eq!(described["run"]["delivery"]["state"], "SUCCEEDED");
    assert_eq!(described["run"]["delivery"]["targets"][0]["target"], "callback");
    let listed = ok(server.ry(&["run", "list"]));
    assert!(
        listed.contains("DELIVERY") && listed.contains("SUCCEEDED"),
        "{listed}"
    );
    let refused = server.ry(&["run", "redeliver", "kill-me"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("callback is SUCCEEDED"),
        "{}",
        stderr(&refused)
    );
}
