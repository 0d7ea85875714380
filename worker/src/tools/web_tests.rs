//! `web_fetch` against a real HTTP server on loopback.

use super::*;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

const PAGE: &str = "<html><head><title>T</title><style>p { color: red }</style>\
    <script>var hidden = 'script text';</script></head>\
    <body><h1>Release notes</h1><p>Hello <b>world</b>, see <a href=\"/next\">next</a>.</p>\
    <ul><li>one</li><li>two</li></ul></body></html>";

fn redirect(to: String) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

/// Serves the test routes on 127.0.0.1; returns its port.
async fn serve() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route(
            "/page",
            get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }),
        )
        .route(
            "/hop/{n}",
            get(|Path(n): Path<u32>| async move {
                if n == 0 {
                    redirect("/page".into())
                } else {
                    redirect(format!("/hop/{}", n - 1))
                }
            }),
        )
        .route("/loop", get(|| async { redirect("/loop".into()) }))
        .route(
            "/away",
            get(|State(port): State<u16>| async move { redirect(format!("http://127.0.0.2:{port}/page")) }),
        )
        .route(
            "/to-file",
            get(|| async { redirect("file:///etc/passwd".into()) }),
        )
        .route(
            "/endless",
            get(|| async {
                let chunk = axum::body::Bytes::from(vec![b'a'; 64 * 1024]);
                let stream = futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
                ([(header::CONTENT_TYPE, "text/plain")], Body::from_stream(stream))
            }),
        )
        .route(
            "/binary",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0u8, 159, 146, 150]) }),
        )
        .route(
            "/json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], r#"{"a":1}"#) }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such page") }),
        )
        .route(
            "/deep",
            get(|| async {
                let depth = 50_000;
                let html = format!("{}deep text{}", "<div>".repeat(depth), "</div>".repeat(depth));
                ([(header::CONTENT_TYPE, "text/html")], html)
            }),
        )
        .with_state(port);
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

fn loopback() -> ToolLimits {
    ToolLimits {
        web_allow_networks: vec!["127.0.0.1/32".parse().unwrap()],
        ..ToolLimits::default()
    }
}

async fn fetch(url: &str, limits: &ToolLimits) -> ToolOutput {
    run(&json!({ "url": url }), limits).await
}

#[tokio::test]
async fn an_html_page_is_returned_as_text() {
    let port = serve().await;
    let out = fetch(&format!("http://127.0.0.1:{port}/page"), &loopback()).await;
    assert!(!out.is_error, "{}", out.content);
    let text = &out.content;
    assert!(
        text.starts_with(&format!("URL: http://127.0.0.1:{port}/page\nStatus: 200 OK\n")),
        "{text}"
    );
    assert!(text.contains("Content-Type: text/html\n"), "{text}");
    // Markdown-like: headings, emphasis, lists and links kept as marks the model reads.
    for part in [
        "# Release notes",
        "Hello **world**, see [next][1].",
        "* one\n* two",
        "[1]: /next",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    assert!(
        !text.contains("<b>") && !text.contains("script text") && !text.contains("color: red"),
        "{text}"
    );

    let json = fetch(&format!("http://127.0.0.1:{port}/json"), &loopback()).await;
    assert!(json.content.ends_with("\n\n{\"a\":1}"), "{}", json.content);
    let binary = fetch(&format!("http://127.0.0.1:{port}/binary"), &loopback()).await;
    assert!(
        !binary.is_error
            && binary
                .content
                .ends_with("[4 bytes of image/png: not text, not shown]"),
        "{}",
        binary.content
    );
    let missing = fetch(&format!("http://127.0.0.1:{port}/missing"), &loopback()).await;
    assert!(
        missing.is_error
            && missing.content.contains("Status: 404 Not Found")
            && missing.content.ends_with("no such page"),
        "{}",
        missing.content
    );
    // Deeply nested HTML is read without exhausting the stack or the time.
    let deep = fetch(&format!("http://127.0.0.1:{port}/deep"), &loopback()).await;
    assert!(
        deep.content.contains("deep text"),
        "{}",
        railyard_model::text::prefix(&deep.content, 500)
    );
}

#[tokio::test]
async fn internal_addresses_are_refused_unless_allowed() {
    let port = serve().await;
    let none = ToolLimits::default();
    let out = fetch(&format!("http://127.0.0.1:{port}/page"), &none).await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("127.0.0.1 is an internal address")
            && out.content.contains("web_fetch_allow_networks"),
        "{}",
        out.content
    );
    // A name is judged by the address it resolves to.
    let out = fetch(&format!("http://localhost:{port}/page"), &none).await;
    assert!(
        out.is_error && out.content.contains("is an internal address"),
        "{}",
        out.content
    );
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:9/",
        "http://10.0.0.1/",
    ] {
        let out = fetch(url, &loopback()).await;
        assert!(
            out.is_error && out.content.contains("is an internal address"),
            "{url}: {}",
            out.content
        );
    }
    let out = fetch("file:///etc/passwd", &loopback()).await;
    assert!(
        out.is_error && out.content.contains("only http and https"),
        "{}",
        out.content
    );
    let out = fetch("not a url", &loopback()).await;
    assert!(
        out.is_error && out.content.contains("is not a URL"),
        "{}",
        out.content
    );
    let out = run(&json!({}), &loopback()).await;
    assert!(
        out.is_error && out.content.contains("missing required argument `url`"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn redirects_are_bounded_and_each_is_checked() {
    let port = serve().await;
    let base = format!("http://127.0.0.1:{port}");
    let out = fetch(&format!("{base}/hop/3"), &loopback()).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(
        out.content.starts_with(&format!("URL: {base}/page\n")),
        "{}",
        out.content
    );
    assert!(
        out.content
            .contains(&format!("Redirected from: {base}/hop/3 -> {base}/hop/2")),
        "{}",
        out.content
    );
    assert!(out.content.contains("Release notes"));

    let out = fetch(&format!("{base}/hop/{MAX_REDIRECTS}"), &loopback()).await;
    assert!(
        out.is_error && out.content.contains("more than 5 redirects"),
        "{}",
        out.content
    );
    let out = fetch(&format!("{base}/loop"), &loopback()).await;
    assert!(
        out.is_error && out.content.contains("more than 5 redirects"),
        "{}",
        out.content
    );
    // The first hop is allowed, the one it redirects to is not.
    let out = fetch(&format!("{base}/away"), &loopback()).await;
    assert!(
        out.is_error && out.content.contains("127.0.0.2 is an internal address"),
        "{}",
        out.content
    );
    let out = fetch(&format!("{base}/to-file"), &loopback()).await;
    assert!(
        out.is_error && out.content.contains("only http and https"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn at_most_a_mebibyte_of_a_body_is_read() {
    let port = serve().await;
    let limits = ToolLimits {
        read_cap: 4 << 20,
        ..loopback()
    };
    // The body never ends: the fetch stops reading at the cap.
    let out = fetch(&format!("http://127.0.0.1:{port}/endless"), &limits).await;
    assert!(
        !out.is_error,
        "{}",
        railyard_model::text::prefix(&out.content, 300)
    );
    let marker = format!("\n[web_fetch: only the first {MAX_BODY} bytes of the body were read]");
    assert!(out.content.ends_with(&marker));
    let body = out.content.split_once("\n\n").unwrap().1;
    assert_eq!(body.len() - marker.len(), MAX_BODY);
    // And the text the model reads is cut to a tool result's size.
    let out = fetch(&format!("http://127.0.0.1:{port}/endless"), &loopback()).await;
    assert!(
        out.content.len() < 70 * 1024 && out.content.contains("[... truncated:"),
        "{}",
        out.content.len()
    );
}
