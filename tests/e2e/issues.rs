//! `report_issue` end to end: a real `railyard server` and `railyard worker` on the
//! scripted provider. The agent reports an issue and completes its step; the issue is
//! in history, counted by `run describe` and `run list` (and `--has-issues` finds the
//! run), a namespace subscription that takes `issue.reported` receives it at once as
//! its own signed POST, and the run's result (`run.closed`) carries it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::worker::WorkerProcess;
use crate::support::*;
use railyard_engine::delivery::SigningSecret;
use railyard_engine::delivery::sign::verify;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(90);
const SECRET: &str = "e2e-issue-secret";

const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
    {"id":"a","title":"A","prompt":"Do {{goal}}"}]}"#;
const QUIET: &str = r#"{"id":"quiet","version":"1","name":"Quiet","steps":[
    {"id":"q","title":"Q","prompt":"Do {{goal}}"}]}"#;

const SCRIPT: &str = r#"{"steps": {
  "a": [
    {"text": "Found a problem.", "tool_calls": [{"name": "report_issue", "input": {
      "severity": "error", "summary": "the test suite is broken", "details": "3 of 40 tests fail on main"}}]},
    {"tool_calls": [{"name": "complete_step", "input": {"notes": "done despite: {{last_user_text}}"}}]}
  ],
  "q": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "nothing to report"}}]}]
}}"#;

const CONFIG: &str = r#"
[delivery]
signing_secret = "e2e-issue-secret"
allow_networks = ["127.0.0.0/8"]    # the receiver is on loopback
request_timeout_ms = 2000
initial_backoff_ms = 200
max_backoff_secs = 1
"#;

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

/// Bodies received, each with whether its signature verified.
type Bodies = Arc<Mutex<Vec<(bool, Value)>>>;

/// One HTTP/1.1 request: keeps its body, answers 200.
async fn receive(mut conn: tokio::net::TcpStream, bodies: Bodies) {
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
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    bodies.lock().unwrap().push((verified, value));
    let _ = conn
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        .await;
}

fn of_type(bodies: &Bodies, kind: &str) -> Vec<Value> {
    bodies
        .lock()
        .unwrap()
        .iter()
        .filter(|(verified, b)| {
            assert!(verified, "a body with a bad signature: {b}");
            b["type"] == kind
        })
        .map(|(_, b)| b.clone())
        .collect()
}

#[test]
fn an_issue_is_recorded_counted_listed_and_sent_to_a_subscription() {
    let s = Sandbox::new();
    s.workflow("one.json", ONE);
    s.workflow("quiet.json", QUIET);
    std::fs::write(s.path("one.script.json"), SCRIPT).unwrap();
    let config = s.path("railyard.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let server = s.server_with(&["--config", config.to_str().unwrap()]);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let bodies: Bodies = Arc::default();
    let url = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/issues", listener.local_addr().unwrap());
        let bodies = bodies.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(receive(conn, bodies.clone()));
            }
        });
        url
    });
    ok(server.ry(&[
        "namespace",
        "subscribe",
        "default",
        "team",
        "--url",
        &url,
        "--event",
        "issue.reported",
        "--event",
        "run.closed",
    ]));
    let ns = ok(server.ry(&["namespace", "describe", "default"]));
    assert!(ns.contains("events issue.reported,run.closed"), "{ns}");

    let script = s.path("one.script.json");
    let _w = WorkerProcess::start(
        &server.url,
        &s.path("workspace"),
        "reporter",
        &[
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--slots",
            "1",
        ],
        &[],
    );
    let (quiet_id, run_id) = ("quiet-run".to_string(), "issue-run".to_string());
    ok(server.ry(&[
        "run", "start", "quiet", "--goal", "calm", "--run-id", &quiet_id, "--wait",
    ]));
    ok(server.ry(&[
        "run",
        "start",
        "one",
        "--goal",
        "the build",
        "--run-id",
        &run_id,
        "--wait",
    ]));

    // The step went on after the report: the model read the tool's answer.
    let run = json(server.ry(&["run", "describe", &run_id, "-o", "json"]))["run"].clone();
    assert!(
        run["steps"][0]["notes"]
            .as_str()
            .unwrap()
            .contains("issue recorded"),
        "{run}"
    );
    assert_eq!(run["issue_count"], 1, "{run}");
    assert_eq!(run["steps"][0]["issues"], 1, "{run}");
    let issue = &run["issues"][0];
    assert_eq!(issue["severity"], "error");
    assert_eq!(issue["summary"], "the test suite is broken");
    assert_eq!(issue["details"], "3 of 40 tests fail on main");
    assert_eq!(issue["step_id"], "a");
    let human = ok(server.ry(&["run", "describe", &run_id]));
    assert!(human.contains("issues: 1"), "{human}");
    assert!(human.contains("[error] step a attempt 1"), "{human}");

    let history = json(server.ry(&["run", "history", &run_id, "-o", "json"]));
    let reported: Vec<&Value> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "IssueReported")
        .collect();
    assert_eq!(reported.len(), 1, "{history}");
    assert_eq!(reported[0]["attributes"]["severity"], "error");

    // Listed with its count, and found by --has-issues (the quiet run is not).
    let listed = ok(server.ry(&["run", "list"]));
    assert!(listed.contains("ISSUES"), "{listed}");
    let with = json(server.ry(&["run", "list", "--has-issues", "-o", "json"]));
    let ids: Vec<&str> = with["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["run_id"].as_str())
        .collect();
    assert_eq!(ids, [run_id.as_str()], "{with}");

    // The subscription got the issue as its own event, and the results of both runs.
    let (issues, closed) = eventually(LIMIT, || {
        let issues = of_type(&bodies, "issue.reported");
        let closed = of_type(&bodies, "run.closed");
        (!issues.is_empty() && closed.len() >= 2).then_some((issues, closed))
    });
    assert_eq!(issues.len(), 1, "{issues:?}");
    let sent = &issues[0];
    assert_eq!(sent["runId"], run_id.as_str());
    assert_eq!(sent["issue"]["summary"], "the test suite is broken");
    assert_eq!(sent["issue"]["severity"], "error");
    assert_eq!(sent["delivery"]["target"], "issue:1:team");
    let result = closed
        .iter()
        .find(|b| b["runId"] == run_id.as_str())
        .expect("the run's result");
    assert_eq!(result["issueCount"], 1, "{result}");
    assert_eq!(result["issues"][0]["details"], "3 of 40 tests fail on main");
    assert_eq!(result["steps"][0]["issues"], 1);
    let calm = closed
        .iter()
        .find(|b| b["runId"] == quiet_id.as_str())
        .expect("the quiet run's result");
    assert_eq!(calm["issueCount"], 0);
}
