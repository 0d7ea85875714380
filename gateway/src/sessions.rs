//! Bounds on `/mcp` sessions: at most [`SessionLimits::max_total`] open at once, at most
//! [`SessionLimits::max_per_key`] per API key (or certificate subject, or, with neither,
//! per anonymous caller), each closed after [`SessionLimits::idle`] without a message.
//! Each session holds some 50 KB until it ends, so the caps bound the gateway's memory
//! whatever clients send.
//!
//! rmcp's session manager does not see the HTTP request, so [`guard`] (an axum
//! middleware around the service) puts the caller's name in a task-local for
//! [`BoundedSessions::create_session`], which counts and refuses; a refused
//! `initialize` is answered by [`guard`] with HTTP 429 and a JSON-RPC error naming the
//! cap. A session's slot is given back when rmcp closes it (a `DELETE`, or its idle
//! timeout: rmcp calls `close_session` when a session's worker ends).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId, SessionManager};

/// The caps on `/mcp` sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions open at once, across all callers.
    pub max_total: usize,
    /// Sessions open at once for one API key (certificate subject; anonymous caller).
    pub max_per_key: usize,
    /// A session without a message for this long is closed.
    pub idle: Duration,
}

impl SessionLimits {
    /// Default [`SessionLimits::max_total`]: about 50 MB of sessions at most.
    pub const DEFAULT_MAX_TOTAL: usize = 1000;
    /// Default [`SessionLimits::max_per_key`]: an agent needs one; a few agents may share a key.
    pub const DEFAULT_MAX_PER_KEY: usize = 16;
    /// Default [`SessionLimits::idle`] (rmcp's own default is 5 minutes).
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(120);
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_total: Self::DEFAULT_MAX_TOTAL,
            max_per_key: Self::DEFAULT_MAX_PER_KEY,
            idle: Self::DEFAULT_IDLE,
        }
    }
}

/// Who opens a session, and the refusal [`BoundedSessions`] leaves for [`guard`].
#[derive(Clone)]
struct Opener {
    who: String,
    refused: Arc<Mutex<Option<String>>>,
}

tokio::task_local! {
    static OPENER: Opener;
}

/// Why a session was not made or not found.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    #[error("{0}")]
    Full(String),
}

#[derive(Default)]
struct Counts {
    total: usize,
    per_key: HashMap<String, usize>,
    owner: HashMap<SessionId, String>,
}

impl Counts {
    fn release(&mut self, who: &str) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_key.get_mut(who) {
            *n -= 1;
            if *n == 0 {
                self.per_key.remove(who);
            }
        }
    }
}

/// rmcp's in-memory session manager, with the caps of [`SessionLimits`].
pub struct BoundedSessions {
    inner: LocalSessionManager,
    limits: SessionLimits,
    counts: Mutex<Counts>,
}

impl BoundedSessions {
    /// A manager whose sessions close after `limits.idle` without a message.
    pub fn new(limits: SessionLimits) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(limits.idle);
        Self {
            inner,
            limits,
            counts: Mutex::default(),
        }
    }

    /// Sessions open now: in all, and for `who`.
    pub fn open(&self, who: &str) -> (usize, usize) {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        (c.total, c.per_key.get(who).copied().unwrap_or(0))
    }

    /// Takes a slot for `who`, or says which cap is reached.
    fn reserve(&self, who: &str) -> Result<(), String> {
        self.check(who, true)
    }

    /// Whether `who` may open a session now (and, if `take`, takes the slot).
    fn check(&self, who: &str, take: bool) -> Result<(), String> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if c.total >= self.limits.max_total {
            return Err(format!(
                "too many MCP sessions open on this server ({}, the most allowed); close one \
                 (HTTP DELETE /mcp with its Mcp-Session-Id) or retry once idle sessions expire",
                self.limits.max_total
            ));
        }
        let mine = c.per_key.get(who).copied().unwrap_or(0);
        if mine >= self.limits.max_per_key {
            return Err(format!(
                "too many MCP sessions open for {who} ({mine}, the most allowed per key); close one \
                 (HTTP DELETE /mcp with its Mcp-Session-Id) or reuse it"
            ));
        }
        if take {
            c.total += 1;
            *c.per_key.entry(who.to_string()).or_default() += 1;
        }
        Ok(())
    }
}

impl SessionManager for BoundedSessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let opener = OPENER.try_with(Opener::clone).ok();
        let who = opener
            .as_ref()
            .map_or_else(|| "anonymous".to_string(), |o| o.who.clone());
        if let Err(why) = self.reserve(&who) {
            // Debug only: a client that keeps asking must not flood the log either.
            tracing::debug!(caller = %who, "MCP session refused: {why}");
            if let Some(o) = &opener {
                *o.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            }
            return Err(SessionsError::Full(why));
        }
        match self.inner.create_session().await {
            Ok((id, transport)) => {
                let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
                c.owner.insert(id.clone(), who);
                Ok((id, transport))
            }
            Err(e) => {
                self.counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .release(&who);
                Err(e.into())
            }
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.inner.close_session(id).await;
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(who) = c.owner.remove(id) {
            c.release(&who);
        }
        Ok(closed?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }
}

/// Whose session a request would open: `key:<key id>` for a bearer key of Railyard's
/// shape, else the verified certificate subject, else `anonymous` (the server has
/// checked both before a request gets here, when auth or mutual TLS is on).
fn opener_of(req: &Request<Body>) -> String {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let key_id = header(axum::http::header::AUTHORIZATION.as_str())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .and_then(|(_, key)| key.trim().strip_prefix("ry_"))
        .and_then(|rest| rest.get(..16))
        .filter(|id| id.bytes().all(|b| b.is_ascii_hexdigit()));
    if let Some(id) = key_id {
        return format!("key {id}");
    }
    if let Some(subject) = header(railyard_proto::PEER_SUBJECT) {
        return format!("certificate {}", railyard_text::prefix_chars(subject, 200));
    }
    "anonymous callers".to_string()
}

/// The middleware in front of rmcp's service: refuses at once a new session (a POST
/// without `Mcp-Session-Id`) past a cap, names the opener for
/// [`BoundedSessions::create_session`] (which counts, and refuses what raced past
/// this check), and turns a refusal into HTTP 429 with a JSON-RPC error (code -32000)
/// whose message names the cap.
pub async fn guard(
    sessions: Arc<BoundedSessions>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let who = opener_of(&req);
    let opening = req.method() == axum::http::Method::POST && !req.headers().contains_key("mcp-session-id");
    if opening && let Err(why) = sessions.check(&who, false) {
        tracing::debug!(caller = %who, "MCP session refused: {why}");
        return too_many(why);
    }
    let opener = Opener {
        who,
        refused: Arc::default(),
    };
    let refused = opener.refused.clone();
    let response = OPENER.scope(opener, next.run(req)).await;
    let why = refused.lock().unwrap_or_else(|p| p.into_inner()).take();
    match why {
        None => response,
        Some(why) => too_many(why),
    }
}

/// HTTP 429 with a JSON-RPC error naming the cap (the request's id is not read, so
/// it is `null`, as JSON-RPC allows).
fn too_many(why: String) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": why},
    });
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
