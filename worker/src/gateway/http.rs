//! The gateway over MCP's streamable HTTP transport, as an axum router for `/mcp`.
//! The server mounts it on its HTTP listener (`ServerConfig::http_extension`); the
//! gateway behind it talks to the server's gRPC services over the channel it is
//! given (the server's in-process one), like any worker, so the server crate knows
//! nothing of MCP and the gateway nothing of the server's internals. Each tool call
//! is made with the credentials of the HTTP request that carried it.

use std::sync::Arc;

use railyard_sdk::Client;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::watch;

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
        .layer(axum::middleware::from_fn(move |req, next| {
            sessions::guard(bounded.clone(), req, next)
        }))
}
