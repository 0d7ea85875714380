//! A polled trigger end to end: `railyard trigger create --source github-issues`
//! against a real server process and a local mock of GitHub's issues API, the
//! server SIGKILLed while a poll waits on its second page, and restarted: every
//! item starts exactly one run, in two rounds of new items.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::support::*;

/// A one-step workflow; nothing works its steps, so its runs stay open.
const WORKFLOW: &str = r#"{"id":"review","version":"1","name":"review","steps":[
    {"id":"only","title":"Only","prompt":"Do {{goal}}"}]}"#;

#[derive(Default)]
struct Issues {
    items: Mutex<Vec<Value>>,
    /// The next request for page 2 is held (never answered) while set.
    hold_page_two: AtomicBool,
    /// Requests held so far.
    held: AtomicUsize,
}

/// GitHub's `GET /repos/{owner}/{repo}/issues`: `since`, oldest change first, two
/// a page, `Link: rel="next"`.
async fn issues(State(s): State<Arc<Issues>>, uri: Uri, headers: HeaderMap) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer e2e-token") {
        return (axum::http::StatusCode::UNAUTHORIZED, "{}").into_response();
    }
    let parsed = reqwest::Url::parse(&format!("http://mock{uri}")).unwrap();
    let query: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
    let param = |n: &str| query.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let page: usize = param("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    if page == 2 && s.hold_page_two.swap(false, Ordering::SeqCst) {
        s.held.fetch_add(1, Ordering::SeqCst);
        // Until the server that asked is killed.
        std::future::pending::<()>().await;
    }
    let since = param("since").unwrap_or_default();
    let mut items: Vec<Value> = s
        .items
        .lock()
        .unwrap()
        .iter()
        .filter(|v| v["updated_at"].as_str().unwrap_or("") >= since.as_str())
        .cloned()
        .collect();
    items.sort_by(|a, b| a["updated_at"].as_str().cmp(&b["updated_at"].as_str()));
    let body: Vec<Value> = items.iter().skip((page - 1) * 2).take(2).cloned().collect();
    let mut h = HeaderMap::new();
    if page * 2 < items.len() {
        let host = headers.get("host").and_then(|v| v.to_str().ok()).unwrap_or("");
        let mut next = reqwest::Url::parse(&format!("http://{host}{}", uri.path())).unwrap();
        for (k, v) in query.iter().filter(|(k, _)| k != "page") {
            next.query_pairs_mut().append_pair(k, v);
        }
        next.query_pairs_mut()
            .append_pair("page", &(page + 1).to_string());
        let link = format!("<{next}>; rel=\"next\"");
        h.insert("link", link.parse().unwrap());
    }
    h.insert("x-ratelimit-remaining", "4000".parse().unwrap());
    (h, axum::Json(Value::Array(body))).into_response()
}

fn issue(n: u64, at: &str) -> Value {
    json!({"number": n, "title": format!("Issue {n}"), "state": "open", "user": {"login": "ann"},
        "labels": [{"name": "agent"}], "created_at": at, "updated_at": at})
}

/// A time an hour from now plus `n` seconds (after the trigger's baseline, in order).
fn later(n: u64) -> String {
    let t = chrono::Utc::now() + chrono::Duration::seconds(3600 + n as i64);
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn goals(server: &ServerProcess) -> Vec<String> {
    let listed = json(server.ry(&["run", "list", "--output", "json"]));
    let mut goals: Vec<String> = listed["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| r["goal"].as_str().unwrap_or("").to_string())
        .collect();
    goals.sort();
    goals
}

fn polls(server: &ServerProcess) -> u64 {
    let d = json(server.ry(&["trigger", "describe", "triage", "--output", "json"]));
    d["poll"]["status"]["polls"].as_u64().unwrap_or(0)
}

#[test]
fn a_polled_trigger_starts_each_item_once_across_a_sigkill_mid_poll() {
    let state = Arc::new(Issues::default());
    for n in 1..=5 {
        state.items.lock().unwrap().push(issue(n, &later(n)));
    }
    state.hold_page_two.store(true, Ordering::SeqCst);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let mock = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(issues).with_state(state.clone());
    rt.spawn(async move { axum::serve(listener, app).await });

    let sandbox = Sandbox::new();
    sandbox.workflow("review.json", WORKFLOW);
    // SAFETY: set before the server child is spawned; only that child reads it.
    unsafe { std::env::set_var("E2E_POLL_TOKEN", "e2e-token") };
    // The operator declares the token, and lets polls reach the mock on loopback.
    let config = sandbox.path("railyard.toml");
    std::fs::write(
        &config,
        "[delivery]\nallow_networks = [\"127.0.0.0/8\"]\n\n[secrets]\nE2E_POLL_TOKEN = [\"default\"]\n",
    )
    .unwrap();
    let mut server = sandbox.server_with(&["--config", config.to_str().unwrap()]);
    let created = json(server.ry(&[
        "trigger",
        "create",
        "triage",
        "--source",
        "github-issues",
        "--repo",
        "acme/app",
        "--api-url",
        &mock,
        "--label",
        "agent",
        "--every",
        "1s",
        "--token",
        "$E2E_POLL_TOKEN",
        "--workflow",
        "review",
        "--goal",
        "Triage #{{$.number}}: {{$.title}}",
        "--output",
        "json",
    ]));
    assert_eq!(created["poll"]["source"], "github-issues", "{created}");
    assert_eq!(created["hook_path"], "");

    for (round, last) in [(1, 5u64), (2, 7)] {
        // The poll has page 1 and waits on page 2: kill the server there.
        eventually(Duration::from_secs(30), || {
            (state.held.load(Ordering::SeqCst) == round).then_some(())
        });
        server.kill9();
        server = server.restart();
        let mut want: Vec<String> = (1..=last).map(|n| format!("Triage #{n}: Issue {n}")).collect();
        want.sort();
        eventually(Duration::from_secs(30), || {
            (goals(&server).len() >= want.len()).then_some(())
        });
        // Two more polls (each re-reads the cursor's last item) start nothing more.
        let seen = polls(&server);
        eventually(Duration::from_secs(30), || {
            (polls(&server) >= seen + 2).then_some(())
        });
        assert_eq!(goals(&server), want, "each item started exactly once");
        if round == 1 {
            let human = ok(server.ry(&["trigger", "describe", "triage"]));
            assert!(human.contains("github-issues acme/app"), "{human}");
            assert!(
                human
                    .lines()
                    .any(|l| l.starts_with("runs started") && l.ends_with(" 5")),
                "{human}"
            );
            // New items, and a poll held on its second page again.
            state.hold_page_two.store(true, Ordering::SeqCst);
            // Both at once: a poll sees either none or both (two pages with #5).
            state
                .items
                .lock()
                .unwrap()
                .extend([issue(6, &later(6)), issue(7, &later(7))]);
        }
    }
    let d = json(server.ry(&["trigger", "describe", "triage", "--output", "json"]));
    assert_eq!(d["poll"]["status"]["runs_started"], 7, "{d}");
    assert_eq!(d["poll"]["status"]["last_error"], "", "{d}");
}
