//! The HTTP listener (axum): `/healthz` and `/metrics`. Webhooks and the console
//! will live here too.
//!
//! `/healthz` is always open (load balancers and orchestrators probe it). With auth
//! on, `/metrics` needs `authorization: Bearer <key>` of a key whose role may
//! [`Operation::ReadMetrics`] (an admin key, of any namespace): the counters name
//! every namespace and queue. Refusals are 401 (no usable key) and 403 (a key of
//! another role), with the same message a gRPC call would get.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;
use crate::service::Core;
use crate::service::caller::{self, Credentials, Operation, Principal};

/// The HTTP routes, answering for `core`.
pub fn router(core: Arc<Core>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .with_state(core)
}

async fn healthz() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], r#"{"status":"ok"}"#)
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
            ApiError::PermissionDenied(_) => StatusCode::FORBIDDEN,
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
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        core.metrics.render(),
    )
        .into_response()
}
