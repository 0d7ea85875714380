//! The HTTP listener (axum): `/healthz`, `/metrics`, and the webhooks,
//! `POST /hooks/{namespace}/{trigger}` ([`railyard_engine::service::triggers::deliver`]).
//!
//! `/healthz` is always open (load balancers and orchestrators probe it); it checks
//! that the database answers ([`healthz`]). With auth
//! on, `/metrics` needs `authorization: Bearer <key>` of a key whose role may
//! [`Operation::ReadMetrics`] (an admin key, of any namespace): the counters name
//! every namespace and queue. Refusals are 401 (no usable key) and 403 (a key of
//! another role), with the same message a gRPC call would get.
//!
//! `GET /runs/{run}/output` streams a run's live output as Server-Sent Events
//! ([`output`]), behind [`extension_guard`] and the API's role checks.
//!
//! The routes the binary adds (`/mcp`) go through [`extension_guard`]: with auth on,
//! any valid key (what it may do is checked by each gRPC call made with it); under
//! mutual TLS, a verified client certificate. The web console (`/ui`) goes through
//! [`open_extension_guard`]: no key at the door (its sign-in page must load without
//! one), since it makes every gRPC call with the key its user signed in with.

pub mod output;

use railyard_model::Rejection;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::grpc::peer::PEER_SUBJECT;
use railyard_engine::error::ApiError;
use railyard_engine::service::Core;
use railyard_engine::service::caller::{self, Credentials, Operation, Principal};

/// The webhook body limit when the configuration names none: 1 MiB.
pub const DEFAULT_HOOK_BODY_BYTES: usize = 1 << 20;

/// The HTTP routes, answering for `core`; a webhook body over `hook_body_bytes`
/// is refused with `413` before it is read whole.
pub(crate) fn router(core: Arc<Core>, hook_body_bytes: usize) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .route(
            "/hooks/{namespace}/{trigger}",
            post(hook)
                .layer(DefaultBodyLimit::max(hook_body_bytes))
                .layer(axum::middleware::from_fn(move |req, next| {
                    refuse_declared_oversize(hook_body_bytes, req, next)
                })),
        )
        .with_state(core)
}

/// Answers `413` at once to a webhook whose `Content-Length` is over `limit`, before
/// any of its body is read (the body limit alone would wait for `limit` bytes to
/// arrive, or for a sender that never sends them). A `Content-Length` that is not a
/// number is `400`. Without one (chunked), the body limit applies as it is read.
pub(crate) async fn refuse_declared_oversize(
    limit: usize,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(value) = req.headers().get(header::CONTENT_LENGTH) {
        let Some(declared) = value.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) else {
            return json_error(
                StatusCode::BAD_REQUEST,
                "the Content-Length header is not a number".into(),
            );
        };
        if declared > limit as u64 {
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is {declared} bytes (Content-Length); at most {limit}"),
            );
        }
    }
    next.run(req).await
}

pub(crate) fn json_error(status: StatusCode, message: String) -> Response {
    let body = serde_json::json!({ "error": message });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A webhook delivery: `202 {"runId": ...}`, or the refusal's status with
/// `{"error": ...}`.
async fn hook(
    State(core): State<Arc<Core>>,
    Path((namespace, trigger)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use railyard_engine::service::triggers::{self, HookError, HookRequest};
    // Whole values: each check bounds its own header (a signature or token past
    // `signature::MAX_HEADER_BYTES` does not match; a delivery id past its limit is
    // 400), so an over-long value is refused, never taken for an absent one. hyper
    // bounds the size of the whole head.
    let header = |name: &str| -> Option<String> { Some(headers.get(name)?.to_str().ok()?.to_string()) };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not text)"));
    let request = HookRequest {
        namespace: &namespace,
        trigger_id: &trigger,
        header: &header,
        content_type,
        body: &body,
    };
    match triggers::deliver(&core, request).await {
        Ok(d) => {
            let body = serde_json::json!({
                "runId": d.run_id,
                "duplicate": d.duplicate,
                "queued": d.queued,
            });
            (
                StatusCode::ACCEPTED,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
        Err(e) => {
            let status = match &e {
                HookError::NotFound(_) => StatusCode::NOT_FOUND,
                HookError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
                HookError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                HookError::BadRequest(_) => StatusCode::BAD_REQUEST,
                HookError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
                HookError::Api(api) => match api {
                    // What the rendered payload made the start refuse.
                    ApiError::Rejected(Rejection::InvalidArgument(_)) => StatusCode::UNPROCESSABLE_ENTITY,
                    ApiError::Rejected(Rejection::NotFound(_)) => StatusCode::NOT_FOUND,
                    ApiError::Rejected(Rejection::AlreadyExists(_))
                    | ApiError::Rejected(Rejection::FailedPrecondition(_)) => StatusCode::CONFLICT,
                    ApiError::Rejected(Rejection::ResourceExhausted(_)) => StatusCode::TOO_MANY_REQUESTS,
                    ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                    ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
                    ApiError::Rejected(Rejection::PermissionDenied(_)) => StatusCode::FORBIDDEN,
                    ApiError::Internal(_) | ApiError::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
                },
            };
            let message = match &e {
                HookError::Api(api @ ApiError::Storage(_)) => {
                    tracing::error!(error = %api, "a webhook delivery failed in storage");
                    api.client_message()
                }
                e => e.to_string(),
            };
            json_error(status, message)
        }
    }
}

/// How long `/healthz` waits for the database to answer.
pub const HEALTH_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// `200 {"status":"ok"}`; with a database over the network (Postgres), also
/// `"database":"ok"` and the node id and lease epoch this server claimed it as. A
/// database that does not answer a trivial query within [`HEALTH_WITHIN`], or a
/// claim lost to another node, is `503` with `"status":"unavailable"` and the cause
/// (the storage error's words: never a connection string).
async fn healthz(State(core): State<Arc<Core>>) -> Response {
    let store = core.store.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let backend = store.backend();
        (backend.ping(HEALTH_WITHIN), backend.stats().claim)
    })
    .await;
    let (ping, claim) = match checked {
        Ok(checked) => checked,
        Err(e) => (
            Err(railyard_store::StorageError::Backend(
                format!("the health check stopped: {e}").into(),
            )),
            None,
        ),
    };
    let mut body = serde_json::Map::new();
    let status = match &ping {
        Ok(()) => {
            body.insert("status".into(), "ok".into());
            StatusCode::OK
        }
        Err(e) => {
            body.insert("status".into(), "unavailable".into());
            body.insert("error".into(), e.to_string().into());
            StatusCode::SERVICE_UNAVAILABLE
        }
    };
    if let Some(claim) = claim {
        body.insert(
            "database".into(),
            if ping.is_ok() { "ok" } else { "unavailable" }.into(),
        );
        body.insert("node".into(), claim.node.into());
        body.insert("lease_epoch".into(), claim.epoch.into());
        body.insert("lease_held".into(), claim.held.into());
    }
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::Value::Object(body).to_string(),
    )
        .into_response()
}

/// The layer over every route an [`crate::HttpExtension`] adds. It removes any
/// [`PEER_SUBJECT`] header the client sent, then refuses with `401` before the route
/// sees the request: with auth on, a request without a valid API key
/// (`authorization: Bearer <key>`, checked by [`caller::authenticate`], so a revoked
/// or expired key is refused too); under mutual TLS (`mutual`), one whose connection
/// proved no client certificate. It then puts the certificate's subject in
/// [`PEER_SUBJECT`], where the extension finds it to pass on to the gRPC calls it
/// makes for this caller over the in-process channel.
pub(crate) fn extension_guard(
    core: Arc<Core>,
    mutual: bool,
) -> axum::middleware::FromFnLayer<
    impl Fn(axum::extract::Request, axum::middleware::Next) -> GuardFuture + Clone,
    (),
    (axum::extract::Request,),
> {
    axum::middleware::from_fn(move |req, next| -> GuardFuture {
        let core = core.clone();
        Box::pin(guard(Some(core), mutual, req, next))
    })
}

/// The future of [`extension_guard`]'s check.
pub(crate) type GuardFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>;

/// The layer over the routes an open extension adds (`ServerConfig::http_open_extension`):
/// like [`extension_guard`] it removes any [`PEER_SUBJECT`] the client sent and, under
/// mutual TLS, refuses a connection without a client certificate and passes on its
/// subject; it checks no API key, since those routes authenticate for themselves and
/// make every gRPC call with the key their user signed in with.
pub(crate) fn open_extension_guard(
    mutual: bool,
) -> axum::middleware::FromFnLayer<
    impl Fn(axum::extract::Request, axum::middleware::Next) -> GuardFuture + Clone,
    (),
    (axum::extract::Request,),
> {
    axum::middleware::from_fn(move |req, next| -> GuardFuture { Box::pin(guard(None, mutual, req, next)) })
}

/// `core`: check the request's API key with it; `None`: check none.
async fn guard(
    core: Option<Arc<Core>>,
    mutual: bool,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    req.headers_mut().remove(PEER_SUBJECT);
    let subject = req
        .extensions()
        .get::<axum::extract::ConnectInfo<crate::tls::HttpPeer>>()
        .and_then(|info| info.0.subject.clone());
    if mutual && subject.is_none() {
        return unauthorized(
            "this server requires a client certificate (mutual TLS): none was presented on this connection"
                .into(),
        );
    }
    let credentials = Credentials::from_header(
        req.headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().map_err(|_| ())),
    );
    if let Some(core) = core
        && let Err(e) = caller::authenticate(&core, &credentials)
    {
        return unauthorized(e.to_string());
    }
    if let Some(subject) = subject
        && let Ok(value) = header::HeaderValue::from_str(&crate::grpc::peer::header_safe(&subject))
    {
        req.headers_mut().insert(PEER_SUBJECT, value);
    }
    next.run(req).await
}

/// `401` with `WWW-Authenticate: Bearer` and the reason as a JSON error.
fn unauthorized(message: String) -> Response {
    let mut response = json_error(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

/// Whether the request may read metrics.
fn may_read_metrics(core: &Core, headers: &HeaderMap) -> Result<(), ApiError> {
    let credentials = Credentials::from_header(
        headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().map_err(|_| ())),
    );
    let principal = caller::authenticate(core, &credentials)?;
    if let Principal::Key(k) = &principal {
        // Any namespace: the check is of the role.
        caller::authorize(&principal, &k.namespace, Operation::ReadMetrics)?;
    }
    Ok(())
}

async fn metrics_text(State(core): State<Arc<Core>>, headers: HeaderMap) -> Response {
    if let Err(e) = may_read_metrics(&core, &headers) {
        let status = match e {
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Rejected(Rejection::PermissionDenied(_)) => StatusCode::FORBIDDEN,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut response = (status, format!("{e}\n")).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        return response;
    }
    (
        [(header::CONTENT_TYPE, railyard_engine::metrics::CONTENT_TYPE)],
        core.metrics.render(),
    )
        .into_response()
}
