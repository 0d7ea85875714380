//! The follower's HTTP routes: webhooks and live output (`/runs/{run}/output`, its
//! Server-Sent Events streamed back as they come) forwarded to the leader,
//! `/healthz` and `/metrics` answered here, and the guard over the binary's `/mcp`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, OriginalUri, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use railyard_sdk::{ApiKey, Client, ClientError, ConnectOptions};

use super::Forwarding;
use crate::grpc::peer::PEER_SUBJECT;
use crate::http::json_error;
use crate::metrics::NodeMetrics;

/// Headers that belong to one connection, never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

#[derive(Clone)]
struct Shared {
    forwarding: Arc<Forwarding>,
    metrics: Arc<NodeMetrics>,
}

/// The follower's routes; a webhook body over `hook_body_bytes` is refused with
/// `413` here, before anything is forwarded.
pub(super) fn router(
    forwarding: Arc<Forwarding>,
    metrics: Arc<NodeMetrics>,
    hook_body_bytes: usize,
) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .route(
            "/hooks/{namespace}/{trigger}",
            post(hook)
                .layer(DefaultBodyLimit::max(hook_body_bytes))
                .layer(axum::middleware::from_fn(move |req, next| {
                    crate::http::refuse_declared_oversize(hook_body_bytes, req, next)
                })),
        )
        .route("/runs/{run}/output", get(output))
        .with_state(Shared { forwarding, metrics })
}

/// Live output, forwarded to the leader (which checks the caller's key), its event
/// stream handed back piece by piece as it comes.
async fn output(State(shared): State<Shared>, OriginalUri(uri): OriginalUri, headers: HeaderMap) -> Response {
    let f = shared.forwarding.clone();
    let (answer, _) = match send(&f, Method::GET, &uri, &headers, Bytes::new(), "live output").await {
        Ok(sent) => sent,
        Err(refused) => return refused,
    };
    f.counters.forwarded("http");
    let status = answer.status();
    let mut out_headers = HeaderMap::new();
    for (name, value) in answer.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out_headers.append(name, value.clone());
        }
    }
    let body = futures::stream::unfold(Some(answer), |answer| async move {
        let mut answer = answer?;
        match answer.chunk().await {
            Ok(Some(bytes)) => Some((Ok::<_, std::io::Error>(bytes), Some(answer))),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e)), None)),
        }
    });
    (status, out_headers, axum::body::Body::from_stream(body)).into_response()
}

/// Sends a request on to the leader's HTTP listener: method, path, query, headers
/// and body. Answers the leader's response and its node, or the error response to
/// give the client (`503` with no leader known or reachable).
async fn send(
    f: &Forwarding,
    method: Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: Bytes,
    what: &str,
) -> Result<(reqwest::Response, String), Response> {
    let Some(target) = f
        .target()
        .filter(|t| !t.leader.http.is_empty() && !t.earlier_self)
    else {
        f.ask_again();
        f.counters.failed("http");
        return Err(json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "this node ({}) is a follower and knows no leader to forward to now; try again shortly",
                f.node()
            ),
        ));
    };
    let leader = &target.leader;
    let scheme = if leader.tls { "https" } else { "http" };
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{scheme}://{}{path}", leader.http);
    let mut request = f.http_client().request(method, &url).body(body);
    for (name, value) in headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(answer) => Ok((answer, leader.node.clone())),
        Err(e) => {
            f.ask_again();
            f.counters.failed("http");
            tracing::warn!(node = %f.node(), leader = %leader.node, http = %leader.http,
                error = %railyard_sdk::tls::error_chain(&e), "cannot forward {what} to the leader");
            Err(json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "this node ({}) is a follower and cannot reach the leader, node {} at {}: {}",
                    f.node(),
                    leader.node,
                    leader.http,
                    railyard_sdk::tls::error_chain(&e)
                ),
            ))
        }
    }
}

/// A webhook, forwarded to the leader's HTTP listener: method, path, query, headers
/// and body; its answer (status, headers, body) handed back.
async fn hook(
    State(shared): State<Shared>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let f = &shared.forwarding;
    let (answer, leader) = match send(f, method, &uri, &headers, body, "a webhook").await {
        Ok(sent) => sent,
        Err(refused) => return refused,
    };
    let status = answer.status();
    let mut out_headers = HeaderMap::new();
    for (name, value) in answer.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out_headers.append(name, value.clone());
        }
    }
    match answer.bytes().await {
        Ok(bytes) => {
            f.counters.forwarded("http");
            (status, out_headers, bytes).into_response()
        }
        Err(e) => {
            f.counters.failed("http");
            json_error(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the leader, node {}, answered {status} but its body was lost: {}",
                    leader,
                    railyard_sdk::tls::error_chain(&e)
                ),
            )
        }
    }
}

/// `200` with this node's role, the leader it follows and whether the database
/// answered the last question; `503` while the database does not answer.
async fn healthz(State(shared): State<Shared>) -> Response {
    let f = &shared.forwarding;
    let leader = f.target().map(|t| {
        serde_json::json!({
            "node": t.leader.node,
            "epoch": t.leader.epoch,
            "grpc": t.leader.grpc,
            "http": t.leader.http,
            "tls": t.leader.tls,
        })
    });
    let database = f.database_error();
    let body = serde_json::json!({
        "status": if database.is_none() { "ok" } else { "degraded" },
        "role": "follower",
        "node": f.node(),
        "leader": leader,
        "database": match &database {
            None => serde_json::json!({"status": "ok"}),
            Some(e) => serde_json::json!({"status": "unreachable", "error": e}),
        },
    });
    let status = if database.is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The follower's own metrics: its role, the calls it forwarded and could not, and
/// their latencies by method. Open without a key even under auth: unlike the
/// leader's, they name no namespace, queue or schedule.
async fn metrics_text(State(shared): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, railyard_engine::metrics::CONTENT_TYPE)],
        shared.metrics.render(),
    )
        .into_response()
}

/// How long a key the leader accepted is taken as checked, so a session's every
/// message does not cost a call to the leader. A key revoked meanwhile is still
/// refused by the leader on each call the extension makes with it.
const CHECKED_FOR: Duration = Duration::from_secs(30);
/// Most keys remembered as checked; past it the oldest half is forgotten.
const MAX_CHECKED: usize = 4096;
/// Time for the leader to answer a key check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// The keys the leader has accepted lately, and a client to ask it about others.
pub(super) struct KeyCheck {
    client: Client,
    checked: Mutex<HashMap<String, Instant>>,
}

/// What the leader says of a key.
enum Verdict {
    Known,
    Refused(String),
    Unreachable(String),
}

impl KeyCheck {
    /// Checks keys over `channel`, the follower's in-process one (which forwards to
    /// the leader).
    pub(super) fn new(channel: tonic::transport::Channel) -> Result<Self, ClientError> {
        let opts = ConnectOptions {
            request_timeout: CHECK_TIMEOUT,
            max_attempts: 1,
            ..ConnectOptions::default()
        };
        Ok(Self {
            client: Client::over_channel("the leader", channel, opts)?,
            checked: Mutex::default(),
        })
    }

    /// Asks the leader about `key` unless it accepted it within [`CHECKED_FOR`]. Any
    /// answer but `UNAUTHENTICATED` (a key of a role that may not describe the
    /// namespace, or of another namespace, is still a key) means the key is known.
    async fn check(&self, key: &str) -> Verdict {
        {
            let checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            if checked.get(key).is_some_and(|at| at.elapsed() < CHECKED_FOR) {
                return Verdict::Known;
            }
        }
        let caller = match self.client.with_caller(Some(&ApiKey::new(key)), None) {
            Ok(c) => c,
            Err(e) => return Verdict::Refused(e.to_string()),
        };
        match caller.describe_namespace(railyard_proto::DEFAULT_NAMESPACE).await {
            Err(ClientError::Unauthenticated(m)) => Verdict::Refused(format!("unauthenticated: {m}")),
            Err(e @ (ClientError::Unavailable { .. } | ClientError::DeadlineExceeded(_))) => {
                Verdict::Unreachable(e.to_string())
            }
            _ => {
                let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
                if checked.len() >= MAX_CHECKED {
                    checked.retain(|_, at| at.elapsed() < CHECKED_FOR);
                    if checked.len() >= MAX_CHECKED {
                        checked.clear();
                    }
                }
                checked.insert(key.to_string(), Instant::now());
                Verdict::Known
            }
        }
    }
}

/// The guard over the binary's routes (`/mcp`) on a follower: it removes any
/// [`PEER_SUBJECT`] a client sent and, with auth on (`keys`), refuses with `401` a
/// request without an API key or with one the leader does not know, before the
/// route sees it: so an `/mcp` session, and its place under the session caps, is
/// only ever a checked key's. The leader unreachable: `503`.
pub(super) async fn extension_guard(
    keys: Option<Arc<KeyCheck>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    req.headers_mut().remove(PEER_SUBJECT);
    if let Some(keys) = keys {
        let key = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, key)| scheme.eq_ignore_ascii_case("bearer") && !key.trim().is_empty())
            .map(|(_, key)| key.trim().to_string());
        let refusal = match key {
            None => Some((
                StatusCode::UNAUTHORIZED,
                "this server requires an API key: send authorization: Bearer <key>".to_string(),
            )),
            Some(key) => match keys.check(&key).await {
                Verdict::Known => None,
                Verdict::Refused(m) => Some((StatusCode::UNAUTHORIZED, m)),
                Verdict::Unreachable(m) => Some((
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the key could not be checked: {m}"),
                )),
            },
        };
        if let Some((status, message)) = refusal {
            let mut response = json_error(status, message);
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
            }
            return response;
        }
    }
    next.run(req).await
}

/// The guard over the binary's routes that authenticate for themselves (`/ui`) on a
/// follower: it only removes any [`PEER_SUBJECT`] a client sent.
pub(super) async fn open_extension_guard(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    req.headers_mut().remove(PEER_SUBJECT);
    next.run(req).await
}
