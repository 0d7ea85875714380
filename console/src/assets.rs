//! The console's static files, built into the binary: the stylesheet and the vendored
//! htmx with its SSE extension (`console/assets/`, each with its licence).

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const HTMX: &str = include_str!("../assets/htmx.min.js");
const SSE: &str = include_str!("../assets/sse.min.js");
const CSS: &str = include_str!("../assets/console.css");

/// `GET /ui/assets/{name}`: served without a session (the sign-in page needs them).
pub(crate) async fn serve(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "htmx.min.js" => (HTMX, "text/javascript; charset=utf-8"),
        "sse.min.js" => (SSE, "text/javascript; charset=utf-8"),
        "console.css" => (CSS, "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    response
}
