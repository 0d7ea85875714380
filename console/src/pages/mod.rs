//! One module per page.

pub(crate) mod actions;
pub(crate) mod approvals;
pub(crate) mod checkpoint;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod schedule;
pub(crate) mod signin;
pub(crate) mod system;
pub(crate) mod transcript;
pub(crate) mod waterfall;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

/// `GET /ui`: the runs list.
pub(crate) async fn root() -> Response {
    Redirect::to("/ui/runs").into_response()
}

/// Any other path under `/ui`.
pub(crate) async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such console page\n").into_response()
}
