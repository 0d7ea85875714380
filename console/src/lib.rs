//! Railyard's web console, served by the server at `/ui` (docs/console.md).
//!
//! The console knows nothing of the server's internals: like the MCP gateway it is
//! mounted by the binary (`ServerConfig::http_open_extension`) and reads and acts only
//! through the typed gRPC client over the server's in-process channel, with the
//! signed-in user's API key on every call, so the server checks roles and namespaces
//! on every read and every action exactly as it does for any client.
//!
//! Pages are rendered on the server with `maud` (which escapes every interpolated
//! string); the only script is the vendored htmx with its SSE extension, served from
//! `/ui/assets/`, and a `Content-Security-Policy` forbids inline script and other
//! origins ([`layout::CSP`]). Sessions and CSRF tokens are in [`session`], the
//! sign-in page in `pages/signin.rs`. Each page states how many gRPC calls it may make ([`api::Budget`]).

pub mod api;
mod assets;
mod layout;
mod pages;
pub mod session;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use railyard_sdk::{Client, ConnectOptions};

/// Where the console is mounted.
pub const BASE: &str = "/ui";

/// How the console is set up.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// The server requires an API key: nothing is shown before sign-in.
    pub auth: bool,
    /// The listener speaks TLS: the session cookie is `Secure`.
    pub tls: bool,
    /// Sessions held at once (the least recently used is dropped past it).
    pub max_sessions: usize,
    /// A session unused this long is dropped.
    pub idle_timeout: Duration,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            auth: false,
            tls: false,
            max_sessions: session::DEFAULT_MAX_SESSIONS,
            idle_timeout: session::DEFAULT_IDLE,
        }
    }
}

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) client: Client,
    /// Turns true when the server shuts down: open streams end on it.
    pub(crate) shutdown: Option<tokio::sync::watch::Receiver<bool>>,
    pub(crate) sessions: session::Sessions,
    pub(crate) config: ConsoleConfig,
}

/// The error of [`router`]: the client over `channel` could not be made.
#[derive(Debug, thiserror::Error)]
#[error("the console's client could not be made: {0}")]
pub struct ConsoleError(#[from] railyard_sdk::ClientError);

/// The console's routes under [`BASE`], calling the server over `channel` (the
/// server's in-process channel, or any channel to it). Streams it serves end when
/// `shutdown` turns true.
pub fn router(
    channel: tonic::transport::Channel,
    config: ConsoleConfig,
    shutdown: Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<Router, ConsoleError> {
    let opts = ConnectOptions {
        max_attempts: 2,
        request_timeout: Duration::from_secs(15),
        ..ConnectOptions::default()
    };
    let client = Client::over_channel("this server (in process)", channel, opts)?;
    let shared = Arc::new(Shared {
        client,
        shutdown,
        sessions: session::Sessions::new(config.max_sessions, config.idle_timeout),
        config,
    });
    let routes = Router::new()
        .route("/ui", get(pages::root))
        .route("/ui/", get(pages::root))
        .route("/ui/assets/{name}", get(assets::serve))
        .route("/ui/signin", get(pages::signin::page).post(pages::signin::signin))
        .route("/ui/signout", post(pages::signin::signout))
        .route("/ui/runs", get(pages::runs::page))
        .route("/ui/runs/start", post(pages::actions::start))
        .route("/ui/runs/{run}", get(pages::run::page))
        .route("/ui/runs/{run}/act/{action}", post(pages::actions::act))
        .route("/ui/runs/{run}/transcript", get(pages::transcript::page))
        .route("/ui/runs/{run}/transcript/stream", get(pages::transcript::stream))
        .route("/ui/approvals", get(pages::approvals::page))
        .route("/ui/workflows", get(pages::system::workflows))
        .route("/ui/schedules", get(pages::system::schedules))
        .route(
            "/ui/schedules/{schedule}/{action}",
            post(pages::system::schedule_action),
        )
        .route("/ui/schedules/{schedule}", get(pages::schedule::page))
        .route("/ui/triggers", get(pages::system::triggers))
        .route("/ui/queues", get(pages::system::queues))
        .route("/ui/namespaces", get(pages::system::namespaces))
        .route("/ui/keys", get(pages::system::keys))
        .route("/ui/{*rest}", get(pages::not_found))
        .layer(axum::middleware::from_fn(layout::security_headers))
        .with_state(shared);
    Ok(routes)
}
