//! `railyard mcp`: the MCP gateway ([`railyard_gateway`]) on stdin/stdout, so
//! that an agent someone already uses (Claude Code, Cursor, any MCP client) can drive
//! Railyard runs step by step. The same gateway serves `/mcp` on the server's HTTP
//! listener ([`http_extension`]).
//!
//! stdout carries MCP messages and nothing else; logs go to stderr. The Railyard server
//! is reached through [`railyard_sdk::Client`] (`--server`, `RAILYARD_SERVER`); a
//! server that cannot be reached, or that refuses a request, is a tool error the agent
//! can read (`isError: true`), never the end of this process. The process ends when
//! the client closes stdin, or when stdout breaks. A line that is not a JSON-RPC message
//! is answered with a JSON-RPC error ([`gateway::stdio`]), and serving goes on.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use railyard_gateway::{self as gateway, Gateway, GatewayOptions};
use railyard_sdk::{Client, ConnectOptions};
use railyard_server::{HttpContext, HttpExtension};
use rmcp::ServiceExt;

use crate::client::global::GlobalOpts;

/// `railyard mcp` flags (besides the global `--server` and `--namespace`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct McpArgs {
    /// The task queue of the runs this gateway starts and of the steps it leases.
    /// Ordinary workers of a workflow's own queue never take them; a worker started
    /// on this queue may, once a gateway's lease has expired.
    #[arg(long, env = "RAILYARD_MCP_QUEUE", default_value = gateway::DEFAULT_QUEUE)]
    pub queue: String,
}

/// Fewer, shorter retries than a worker's: an agent waits on each tool call.
fn connect_options(base: ConnectOptions) -> ConnectOptions {
    ConnectOptions {
        max_attempts: 3,
        request_timeout: Duration::from_secs(15),
        ..base
    }
}

/// `railyard mcp`: serves MCP on stdin/stdout until the client goes away.
pub(crate) async fn run(global: &GlobalOpts, args: &McpArgs) -> anyhow::Result<()> {
    if railyard_model::ids::check_name(&args.queue).is_err() {
        let shown = railyard_text::prefix_chars(&args.queue, 64);
        anyhow::bail!(
            "--queue {shown:?} is not a queue name: 1 to {} bytes of {}",
            railyard_model::ids::MAX_NAME,
            railyard_model::ids::NAME_CHARACTERS
        );
    }
    let client = Client::connect_with(&global.server, connect_options(global.connect_options())).await?;
    let mut opts = GatewayOptions::new(
        global.namespace.clone(),
        format!("railyard-mcp-{}", std::process::id()),
    );
    opts.queue = args.queue.clone();
    tracing::info!(server = %global.server, namespace = %global.namespace, queue = %opts.queue, "railyard mcp: serving MCP on stdio");
    let service = Gateway::new(client, opts)
        .serve(gateway::stdio::stdio())
        .await
        .context("MCP session did not start")?;
    let reason = service.waiting().await.context("MCP session failed")?;
    tracing::info!(?reason, "railyard mcp: the MCP session ended");
    Ok(())
}

/// The `/mcp` route of `railyard server` and `railyard dev`: the gateway over MCP's
/// streamable HTTP transport, in the `default` namespace on the `mcp` queue, talking
/// to the server's own services over its in-process channel (no network hop, so it
/// works over TLS as well). The server's guard has checked the HTTP caller's key and
/// client certificate before a request gets here; the gateway makes each call with
/// them (see [`railyard_gateway`]).
pub(crate) fn http_extension(limits: railyard_gateway::sessions::SessionLimits) -> HttpExtension {
    Arc::new(move |cx: HttpContext| {
        let client = match Client::over_channel(
            "this server (in process)",
            cx.grpc_channel.clone(),
            connect_options(ConnectOptions::default()),
        ) {
            Ok(client) => client,
            Err(e) => {
                tracing::error!(error = %e, "MCP over HTTP unavailable");
                return axum::Router::new();
            }
        };
        // A loopback listener accepts only loopback Host headers (DNS rebinding);
        // one other machines reach accepts any.
        let hosts = if cx.http_addr.ip().is_loopback() {
            vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
        } else {
            Vec::new()
        };
        let opts = GatewayOptions::new(
            railyard_proto::DEFAULT_NAMESPACE,
            format!("railyard-mcp-http-{}", std::process::id()),
        );
        gateway::http::router(client, opts, hosts, limits, cx.shutdown)
    })
}
