//! The web console at `/ui` on the server's HTTP listener ([`railyard_console`]),
//! mounted as an open extension: it signs its users in itself and makes every gRPC
//! call, over the server's in-process channel, with the key they signed in with.

use std::net::SocketAddr;
use std::sync::Arc;

use railyard_server::{HttpContext, HttpExtension};

/// The `/ui` routes of `railyard server` and `railyard dev`.
pub(crate) fn http_extension() -> HttpExtension {
    Arc::new(|cx: HttpContext| {
        let config = railyard_console::ConsoleConfig {
            auth: cx.auth,
            tls: cx.tls,
            ..Default::default()
        };
        match railyard_console::router(cx.grpc_channel.clone(), config, Some(cx.shutdown.clone())) {
            Ok(router) => router,
            Err(e) => {
                tracing::error!(error = %e, "the web console is unavailable");
                axum::Router::new()
            }
        }
    })
}

/// The console's address on the HTTP listener at `http` (loopback when it listens on
/// every interface), for the line the server prints.
pub(crate) fn url(http: SocketAddr, tls: bool) -> String {
    let mut addr = http;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!(
        "{}://{addr}{}",
        if tls { "https" } else { "http" },
        railyard_console::BASE
    )
}
