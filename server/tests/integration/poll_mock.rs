//! A local HTTP server that speaks the parts of GitHub's and GitLab's REST APIs a
//! polled trigger uses: `GET /repos/{owner}/{repo}/issues` and
//! `GET /api/v4/projects/{path}/merge_requests`, with `since` / `updated_after`,
//! oldest change first, pages linked by `Link: rel="next"`, an `ETag` per page
//! that answers `304` to `If-None-Match`, rate-limit headers, and scripted
//! failures (`403` or `429` with `Retry-After`, `500`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A scripted answer, given before the listing's.
#[derive(Debug, Clone, Copy)]
pub enum Fail {
    /// `403` with `Retry-After` and `X-RateLimit-Remaining: 0` (GitHub's secondary limit).
    RateLimited403 { retry_after_secs: u64 },
    /// `429` with `Retry-After`.
    TooMany429 { retry_after_secs: u64 },
    /// `500`.
    Error500,
}

/// One request the mock saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub query: Vec<(String, String)>,
    pub if_none_match: Option<String>,
    pub authorization: Option<String>,
    /// What it answered.
    pub status: u16,
}

impl Seen {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Inner {
    items: Vec<Value>,
    per_page: usize,
    fails: VecDeque<Fail>,
    seen: Vec<Seen>,
    /// The token a request must carry (`None`: any).
    token: Option<String>,
    /// The next listing says the limit is spent until this time (epoch seconds).
    exhausted_until: Option<i64>,
}

/// The mock, shared with its handler.
#[derive(Clone, Default)]
pub struct Mock {
    inner: Arc<Mutex<Inner>>,
    pub addr: Option<SocketAddr>,
}

impl Mock {
    /// Serves on a free loopback port, `per_page` items a page at most.
    pub async fn start(per_page: usize, token: Option<&str>) -> Mock {
        let mut mock = Mock::default();
        {
            let mut i = mock.inner.lock().unwrap();
            i.per_page = per_page;
            i.token = token.map(str::to_string);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        mock.addr = Some(listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(handle).with_state(mock.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        mock
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr.unwrap())
    }

    /// Adds or replaces (by `number` / `iid`) an item.
    pub fn put(&self, item: Value) {
        let mut i = self.inner.lock().unwrap();
        let id = |v: &Value| v.get("number").or_else(|| v.get("iid")).cloned();
        let key = id(&item);
        i.items.retain(|v| id(v) != key);
        i.items.push(item);
    }

    /// The next listing answers, with `X-RateLimit-Remaining: 0` and
    /// `X-RateLimit-Reset: reset` (epoch seconds).
    pub fn exhaust_next(&self, reset: i64) {
        self.inner.lock().unwrap().exhausted_until = Some(reset);
    }

    pub fn fail_next(&self, f: Fail) {
        self.inner.lock().unwrap().fails.push_back(f);
    }

    /// Every request so far, and forgets them.
    pub fn take_seen(&self) -> Vec<Seen> {
        std::mem::take(&mut self.inner.lock().unwrap().seen)
    }
}

/// A GitHub issue (or pull request) at `at` (RFC 3339) by `user` with `labels`.
pub fn issue(number: u64, created: &str, updated: &str, user: &str, labels: &[&str]) -> Value {
    json!({
        "number": number, "title": format!("Issue {number}"), "state": "open",
        "user": {"login": user},
        "labels": labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
        "created_at": created, "updated_at": updated,
    })
}

/// A GitLab merge request.
pub fn merge_request(iid: u64, created: &str, updated: &str, user: &str, labels: &[&str]) -> Value {
    json!({
        "iid": iid, "id": 1000 + iid, "title": format!("MR {iid}"), "state": "opened",
        "author": {"username": user}, "labels": labels,
        "created_at": created, "updated_at": updated,
    })
}

fn fail_response(f: Fail) -> Response {
    let mut h = HeaderMap::new();
    let (status, retry) = match f {
        Fail::RateLimited403 { retry_after_secs } => {
            h.insert("x-ratelimit-remaining", "0".parse().unwrap());
            (StatusCode::FORBIDDEN, Some(retry_after_secs))
        }
        Fail::TooMany429 { retry_after_secs } => (StatusCode::TOO_MANY_REQUESTS, Some(retry_after_secs)),
        Fail::Error500 => (StatusCode::INTERNAL_SERVER_ERROR, None),
    };
    if let Some(s) = retry {
        h.insert("retry-after", s.to_string().parse().unwrap());
    }
    (status, h, r#"{"message":"scripted failure"}"#).into_response()
}

async fn handle(State(mock): State<Mock>, uri: Uri, headers: HeaderMap) -> Response {
    let query: Vec<(String, String)> = url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut seen = Seen {
        path: uri.path().to_string(),
        query: query.clone(),
        if_none_match: header("if-none-match"),
        authorization: header("authorization"),
        status: 200,
    };
    let mut i = mock.inner.lock().unwrap();
    let resp = answer(&mut i, &mock, &uri, &seen);
    seen.status = resp.status().as_u16();
    i.seen.push(seen);
    resp
}

fn answer(i: &mut Inner, mock: &Mock, uri: &Uri, seen: &Seen) -> Response {
    let gitlab = uri.path().starts_with("/api/v4/projects/") && uri.path().ends_with("/merge_requests");
    let github = uri.path().starts_with("/repos/") && uri.path().ends_with("/issues");
    if !gitlab && !github {
        return StatusCode::NOT_FOUND.into_response();
    }
    if let Some(t) = &i.token
        && seen.authorization.as_deref() != Some(format!("Bearer {t}").as_str())
    {
        return (StatusCode::UNAUTHORIZED, r#"{"message":"Bad credentials"}"#).into_response();
    }
    if let Some(f) = i.fails.pop_front() {
        return fail_response(f);
    }
    let since = seen
        .param(if gitlab { "updated_after" } else { "since" })
        .unwrap_or("");
    let stamp = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v["updated_at"].as_str().unwrap_or(""))
            .map(|t| t.timestamp_millis())
            .unwrap_or(0)
    };
    let since_ms = chrono::DateTime::parse_from_rfc3339(since)
        .map(|t| t.timestamp_millis())
        .unwrap_or(i64::MIN);
    let mut items: Vec<Value> = i.items.iter().filter(|v| stamp(v) >= since_ms).cloned().collect();
    items.sort_by_key(stamp);
    let page: usize = seen.param("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    let per_page = i.per_page;
    let body: Vec<Value> = items
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .cloned()
        .collect();
    let body = Value::Array(body).to_string();
    let etag = format!("\"{:016x}\"", fnv(&body));
    let mut h = HeaderMap::new();
    match i.exhausted_until.take() {
        Some(reset) => {
            h.insert("x-ratelimit-remaining", "0".parse().unwrap());
            h.insert("x-ratelimit-reset", reset.to_string().parse().unwrap());
        }
        None => {
            h.insert("x-ratelimit-remaining", "4999".parse().unwrap());
        }
    }
    h.insert("etag", etag.parse().unwrap());
    if seen.if_none_match.as_deref() == Some(etag.as_str()) {
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    if page * per_page < items.len() {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in seen.query.iter().filter(|(k, _)| k != "page") {
            q.append_pair(k, v);
        }
        q.append_pair("page", &(page + 1).to_string());
        let next = format!("{}{}?{}", mock.base_url(), uri.path(), q.finish());
        let last = format!("<{}{}?page=99>; rel=\"last\"", mock.base_url(), uri.path());
        h.insert("link", format!("<{next}>; rel=\"next\", {last}").parse().unwrap());
    }
    h.insert("content-type", "application/json".parse().unwrap());
    (StatusCode::OK, h, body).into_response()
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}
