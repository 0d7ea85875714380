//! The verified client certificate of a request, handed to the handlers. tonic puts
//! the TLS peer certificates in the request's extensions, which the handlers do not
//! read; this layer turns the first one's subject into the reserved metadata entry
//! [`PEER_SUBJECT`], after removing any such entry the client sent, so only the
//! server's own TLS layer can set it. [`super::caller_of`] passes it to
//! [`railyard_engine::service::caller::resolve`], which does not know about TLS.

use std::task::{Context, Poll};

use http::HeaderValue;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower::{Layer, Service};

/// The metadata key holding the client certificate's subject.
pub const PEER_SUBJECT: &str = railyard_proto::PEER_SUBJECT;

/// Adds [`PEER_SUBJECT`] to each request from the connection's client certificate.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerLayer;

impl<S> Layer<S> for PeerLayer {
    type Service = PeerService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PeerService { inner }
    }
}

/// See [`PeerLayer`].
#[derive(Debug, Clone)]
pub struct PeerService<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for PeerService<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        req.headers_mut().remove(PEER_SUBJECT);
        let subject = req
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .and_then(|info| info.peer_certs())
            .and_then(|certs| certs.first().and_then(|c| crate::tls::peer_subject(c)))
            .and_then(|s| HeaderValue::from_str(&header_safe(&s)).ok());
        if let Some(subject) = subject {
            req.headers_mut().insert(PEER_SUBJECT, subject);
        }
        self.inner.call(req)
    }
}

/// The subject with everything but printable ASCII escaped (`\u{e9}`), so it fits a
/// header and prints safely.
pub(crate) fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c.to_string()
            } else {
                c.escape_default().to_string()
            }
        })
        .collect()
}
