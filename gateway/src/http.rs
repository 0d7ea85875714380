//! The gateway over MCP's streamable HTTP transport, as an axum router for `/mcp`.
//! The server mounts it on its HTTP listener (`ServerConfig::http_extension`); the
//! gateway behind it talks to the server's gRPC services over the channel it is
//! given (the server's in-process one), like any worker, so the server crate knows
//! nothing of MCP and the gateway nothing of the server's internals. Each tool call
//! is made with the credentials of the HTTP request that carried it.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use railyard_sdk::Client;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::watch;

use super::jsonrpc::{self, Refusal};
use super::sessions::{self, BoundedSessions, SessionLimits};
use super::{Gateway, GatewayOptions};

/// The largest MCP request body accepted (a step's notes are at most 1 MiB).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// A router serving MCP at `/mcp` through `client`. `allowed_hosts` are the `Host`
/// headers accepted (the defence against DNS rebinding of a loopback server); empty
/// accepts any, for a listener other machines reach. Sessions are held to `limits`
/// ([`sessions`]). Open sessions end when `shutdown` turns true, so they do not hold
/// the listener's graceful shutdown.
pub fn router(
    client: Client,
    opts: GatewayOptions,
    allowed_hosts: Vec<String>,
    limits: SessionLimits,
    mut shutdown: watch::Receiver<bool>,
) -> axum::Router {
    let gateway = Gateway::new(client, opts);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_max_request_body_bytes(MAX_BODY);
    let cancel = config.cancellation_token.clone();
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|s| *s).await;
        cancel.cancel();
    });
    let bounded = Arc::new(BoundedSessions::new(limits));
    let service = StreamableHttpService::new(move || Ok(gateway.clone()), bounded.clone(), config);
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(json_rpc_body))
        .layer(axum::middleware::from_fn(move |req, next| {
            sessions::guard(bounded.clone(), req, next)
        }))
}

/// The middleware in front of rmcp's service that answers a POSTed JSON body which is
/// not a JSON-RPC message with a JSON-RPC error, HTTP 400 (rmcp answers 415 to it, as
/// if the content type were wrong): `-32700` for a body that is not JSON, `-32600`
/// for JSON that is not a client message ([`jsonrpc`]). Anything else (another method
/// or content type, a body over [`MAX_BODY`] by its `Content-Length`) goes to rmcp
/// untouched, as does the body that was read.
async fn json_rpc_body(req: Request<Body>, next: axum::middleware::Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if req.method() != Method::POST
        || !is_json(req.headers())
        || declared.is_some_and(|n| n > MAX_BODY as u64)
    {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &Refusal::invalid_request(format!(
                    "the request body was not read ({e}); at most {MAX_BODY} bytes are"
                )),
            );
        }
    };
    if let Err(refusal) = jsonrpc::read(&bytes) {
        tracing::debug!(code = refusal.code, reason = %refusal.message, "MCP over HTTP: refused a body that is not a message");
        return refuse(StatusCode::BAD_REQUEST, &refusal);
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// Whether the request says its body is JSON (rmcp's own test: the media type,
/// parameters aside, is `application/json`).
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

fn refuse(status: StatusCode, refusal: &Refusal) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        refusal.to_json().to_string(),
    )
        .into_response()
}
