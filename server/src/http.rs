//! The HTTP listener (axum): `/healthz` and `/metrics`. Webhooks and the console
//! will live here too.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// The HTTP routes.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .with_state(metrics)
}

async fn healthz() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], r#"{"status":"ok"}"#)
}

async fn metrics_text(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        metrics.render(),
    )
}
