//! The page shell, the security headers and the small formatters every page uses.
//!
//! Every string a page shows goes through maud's escaping; nothing stored is ever
//! written with `PreEscaped`. Links to stored URLs are made only for `http`/`https`
//! ([`link`]); anything else is shown as text.

use std::borrow::Cow;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};
use railyard_proto::v1 as pb;
use railyard_sdk::ClientError;
use railyard_view::{DurationStyle, TimeStyle};

use crate::api::{Api, CALLS_HEADER};
use crate::session::{CSRF_FIELD, Viewer};

/// The console's `Content-Security-Policy`: scripts, styles and connections from this
/// origin only (no inline script or style, no `eval`), no frames, no plugins.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the security headers to every console response.
pub(crate) async fn security_headers(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The `<head>`: the stylesheet, htmx and its SSE extension, and htmx's settings as a
/// meta tag (no inline script; no indicator styles injected; no `eval`).
fn head(title: &str) -> Markup {
    html! {
        meta charset="utf-8";
        meta name="viewport" content="width=device-width, initial-scale=1";
        meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false,"selfRequestsOnly":true}"#;
        title { (title) " · Railyard" }
        link rel="stylesheet" href="/ui/assets/console.css";
        script src="/ui/assets/htmx.min.js" defer {}
        script src="/ui/assets/sse.min.js" defer {}
    }
}

/// A page without the navigation (sign-in).
pub(crate) fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title)) }
            body { main { (body) } }
        }
    }
}

/// A whole page: navigation (admin pages only for admins), the namespace, sign-out.
pub(crate) fn page(viewer: &Viewer, title: &str, body: Markup) -> Markup {
    let ns = &viewer.ns;
    html! {
        (DOCTYPE)
        html lang="en" {
            head { (head(title)) }
            body {
                header.top {
                    nav aria-label="main" {
                        a.brand href=(nav_href("/ui/runs", ns)) { "Railyard" }
                        a href=(nav_href("/ui/runs", ns)) { "Runs" }
                        a href=(nav_href("/ui/approvals", ns)) { "Approvals" }
                        a href=(nav_href("/ui/workflows", ns)) { "Workflows" }
                        a href=(nav_href("/ui/queues", ns)) { "Queues" }
                        @if viewer.is_admin() {
                            a href=(nav_href("/ui/schedules", ns)) { "Schedules" }
                            a href=(nav_href("/ui/triggers", ns)) { "Triggers" }
                            a href=(nav_href("/ui/namespaces", ns)) { "Namespaces" }
                            a href=(nav_href("/ui/keys", ns)) { "API keys" }
                        }
                    }
                    span.ns { "namespace " strong { (ns) } }
                    @if viewer.signed_in {
                        form.inline method="post" action="/ui/signout" {
                            (csrf(viewer))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// `path?ns=<namespace>`.
pub(crate) fn nav_href(path: &str, ns: &str) -> String {
    format!("{path}?ns={}", encode(ns))
}

/// Percent-encodes a query value.
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The hidden CSRF field of a state-changing form.
pub(crate) fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(viewer.csrf); }
}

/// A rendered page as a response, with the number of gRPC calls it took.
pub(crate) fn respond(viewer: &Viewer, api: &Api, status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup).into_response();
    response
        .headers_mut()
        .insert(CALLS_HEADER, HeaderValue::from(api.calls()));
    viewer.finish(response)
}

/// A page that only says something (a refusal, an outcome).
pub(crate) fn message_page(viewer: &Viewer, status: StatusCode, title: &str, message: &str) -> Response {
    let markup = page(
        viewer,
        title,
        html! {
            h1 { (title) }
            p class=(if status.is_success() { "outcome" } else { "refusal" }) role="alert" { (message) }
        },
    );
    viewer.finish((status, markup).into_response())
}

/// The page a form whose CSRF token is not the session's gets (403).
pub(crate) fn csrf_refused(viewer: &Viewer) -> Response {
    message_page(
        viewer,
        StatusCode::FORBIDDEN,
        "Refused",
        "The form's CSRF token does not match this session: reload the page and try again.",
    )
}

/// Stored text, escaped, cut past [`SHOWN_BYTES`] with the size left out said.
pub(crate) fn long_text(text: &str) -> Markup {
    let (shown, left) = cut(text, SHOWN_BYTES);
    html! {
        (shown)
        @if left > 0 { " " span.muted { "… (" (left) " more bytes, " (text.len()) " in all)" } }
    }
}

/// A tool's name as shown: an MCP server's tool (`mcp__SERVER__TOOL`, the name the
/// model calls it by) as its tool and server, the full name on hover.
pub(crate) fn tool_name(name: &str) -> Markup {
    match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
        Some((server, tool)) if !server.is_empty() && !tool.is_empty() => html! {
            strong title=(name) { (tool) } " " span.mcp { "(MCP server " strong { (server) } ")" }
        },
        _ => html! { strong { (name) } },
    }
}

/// The longest stored text shown whole; the rest is cut with its size said.
pub(crate) const SHOWN_BYTES: usize = 16 * 1024;

/// The HTTP status for a refusal the server answered.
pub(crate) fn status_of(e: &ClientError) -> StatusCode {
    match e {
        ClientError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        ClientError::PermissionDenied(_) => StatusCode::FORBIDDEN,
        ClientError::NotFound(_) => StatusCode::NOT_FOUND,
        ClientError::InvalidArgument(_) | ClientError::BadApiKey(_) => StatusCode::BAD_REQUEST,
        ClientError::FailedPrecondition(_) | ClientError::AlreadyExists(_) => StatusCode::CONFLICT,
        ClientError::ResourceExhausted(_) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::BAD_GATEWAY,
    }
}

/// A page showing the server's refusal word for word.
pub(crate) fn refused(viewer: &Viewer, api: &Api, e: &ClientError) -> Response {
    let status = status_of(e);
    let markup = page(
        viewer,
        "Refused",
        html! {
            h1 { "The server refused" }
            p.refusal role="alert" { (e.to_string()) }
        },
    );
    respond(viewer, api, status, markup)
}

/// A link to `url` when it is `http(s)`, else the URL as plain text.
pub(crate) fn link(url: &str) -> Markup {
    let lower = url.trim_start().to_ascii_lowercase();
    html! {
        @if lower.starts_with("http://") || lower.starts_with("https://") {
            a href=(url) rel="noopener noreferrer nofollow" { (url) }
        } @else {
            code { (url) }
        }
    }
}

/// A run status's short name (`running`, `unknown` for one this build does not know).
pub(crate) fn status_name(status: i32) -> Cow<'static, str> {
    railyard_view::run_status(status, railyard_view::Case::Lower)
}

/// A status from its short name (as in the URL).
pub(crate) fn status_from_name(name: &str) -> Option<pb::RunStatus> {
    Some(match name {
        "running" => pb::RunStatus::Running,
        "completed" => pb::RunStatus::Completed,
        "failed" => pb::RunStatus::Failed,
        "canceled" => pb::RunStatus::Canceled,
        "terminated" => pb::RunStatus::Terminated,
        "timed_out" => pb::RunStatus::TimedOut,
        _ => return None,
    })
}

/// The statuses the filter offers.
pub(crate) const STATUSES: [&str; 6] = [
    "running",
    "completed",
    "failed",
    "canceled",
    "terminated",
    "timed_out",
];

/// A unix-ms time as `YYYY-MM-DD HH:MM:SS` UTC (empty for 0).
pub(crate) fn time(ms: i64) -> String {
    if ms <= 0 {
        return String::new();
    }
    railyard_view::time(ms, TimeStyle::Plain).unwrap_or_default()
}

/// A duration in ms as `1h02m`, `3m04s`, `5.2s`, `42ms`.
pub(crate) fn duration(ms: i64) -> String {
    let ms = u64::try_from(ms).unwrap_or(0);
    railyard_view::duration(Duration::from_millis(ms), DurationStyle::Clock)
}

/// All the tokens of a usage.
pub(crate) fn tokens(u: Option<&pb::TokenUsage>) -> u64 {
    u.map_or(0, |u| {
        u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens
    })
}

/// A usage's cost in dollars.
pub(crate) fn cost(u: Option<&pb::TokenUsage>) -> String {
    format!("${:.4}", u.map_or(0.0, |u| u.cost_usd))
}

/// A run's duration: to its close, or to `now_ms` while open.
pub(crate) fn run_duration(run: &pb::RunInfo, now_ms: i64) -> String {
    duration(railyard_view::run_elapsed_ms(run, now_ms))
}

/// The wall clock, for the age of open runs on a page (display only).
#[expect(
    clippy::disallowed_methods,
    reason = "the console shows how long an open run has been going; nothing is stored"
)]
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Text cut to `max` bytes at a character boundary, with how many bytes were left out.
pub(crate) fn cut(text: &str, max: usize) -> (&str, usize) {
    let kept = railyard_text::prefix(text, max);
    (kept, text.len() - kept.len())
}
