//! TLS on the server's listeners (rustls). The gRPC listener uses tonic's TLS with
//! the same certificate and key as the HTTP listener's [`TlsAcceptor`](tokio_rustls::TlsAcceptor). With a client
//! CA the gRPC listener requires a client certificate issued by it (mutual TLS), and
//! the certificate's subject becomes the caller's identity ([`peer_subject`]); the
//! HTTP listener then asks for one without requiring it (`/healthz`, `/metrics` and
//! webhooks need none), verifies one that is sent against the same CA, and hands its
//! subject to the routes an extension adds ([`HttpPeer`]; `/mcp` requires it).
//!
//! Every file is read once, at start, bounded ([`railyard_sdk::tls::read_pem`]), and
//! checked here (PEM blocks present, the key matches the certificate) so a bad file
//! stops the start with an error naming it instead of failing each handshake.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use railyard_sdk::tls::read_pem;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// Longest a TLS handshake may take before the connection is dropped.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest subject kept as an identity (longer ones are cut on a character boundary).
const MAX_SUBJECT_CHARS: usize = 200;

/// Where the server's TLS material is (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// The leaf's private key (PEM).
    pub key: PathBuf,
    /// CA certificates (PEM) for client certificates: set, mutual TLS is required on
    /// the gRPC listener.
    pub client_ca: Option<PathBuf>,
}

/// A TLS file that cannot be used; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    File(#[from] railyard_sdk::tls::PemFileError),
    #[error("{what} {path}: {reason}")]
    Invalid {
        what: &'static str,
        path: String,
        reason: String,
    },
}

/// The loaded TLS material: tonic's config for gRPC and an acceptor for HTTP.
#[derive(Clone)]
pub(crate) struct ServerTls {
    /// For `tonic::transport::Server::tls_config`.
    pub(crate) grpc: ServerTlsConfig,
    /// For the HTTP listener.
    pub(crate) http: tokio_rustls::TlsAcceptor,
    /// Whether client certificates are required on gRPC.
    pub(crate) mutual: bool,
}

impl ServerTls {
    /// Reads and checks the files.
    pub(crate) fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let invalid = |what: &'static str, path: &PathBuf, reason: String| TlsError::Invalid {
            what,
            path: path.display().to_string(),
            reason,
        };
        let cert_pem = read_pem("--tls-cert", &files.cert)?;
        let key_pem = read_pem("--tls-key", &files.key)?;
        let certs = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("--tls-cert", &files.cert, format!("bad PEM: {e}")))?;
        if certs.is_empty() {
            return Err(invalid(
                "--tls-cert",
                &files.cert,
                "no CERTIFICATE block in it".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| invalid("--tls-key", &files.key, format!("no usable private key: {e}")))?;
        let http = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("--tls-cert", &files.cert, e.to_string()))?;
        let mut client_roots = None;
        if let Some(ca) = &files.client_ca {
            let ca_pem = read_pem("--tls-client-ca", ca)?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&ca_pem) {
                let c = c.map_err(|e| invalid("--tls-client-ca", ca, format!("bad PEM: {e}")))?;
                roots
                    .add(c)
                    .map_err(|e| invalid("--tls-client-ca", ca, format!("not a CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(invalid(
                    "--tls-client-ca",
                    ca,
                    "no CERTIFICATE block in it".into(),
                ));
            }
            client_roots = Some((ca_pem, roots));
        }
        let http = match &client_roots {
            // Optional on HTTP: a load balancer probes /healthz without one.
            Some((_, roots)) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots.clone()), provider())
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| {
                            let ca = files.client_ca.clone().unwrap_or_default();
                            invalid("--tls-client-ca", &ca, e.to_string())
                        })?;
                http.with_client_cert_verifier(verifier)
            }
            None => http.with_no_client_auth(),
        }
        .with_single_cert(certs, key)
        .map_err(|e| {
            invalid(
                "--tls-key",
                &files.key,
                format!("does not fit the certificate {}: {e}", files.cert.display()),
            )
        })?;
        let mut grpc = ServerTlsConfig::new()
            .identity(Identity::from_pem(&cert_pem, &key_pem))
            .timeout(HANDSHAKE_TIMEOUT);
        let mut mutual = false;
        if let Some((ca_pem, _)) = &client_roots {
            grpc = grpc.client_ca_root(Certificate::from_pem(ca_pem));
            mutual = true;
        }
        // tonic builds its own rustls config from the same PEM; a failure shows here.
        tonic::transport::Server::builder()
            .tls_config(grpc.clone())
            .map_err(|e| invalid("--tls-cert", &files.cert, railyard_sdk::tls::error_chain(&e)))?;
        Ok(Self {
            grpc,
            http: tokio_rustls::TlsAcceptor::from(Arc::new(http)),
            mutual,
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The subject of a client certificate (DER) as an identity, e.g. `CN=worker-1,O=Acme`
/// (RFC 4514 order as x509-parser prints it), at most 200 characters. `None` if the
/// certificate cannot be parsed (it passed the handshake, so this does not happen
/// with a certificate the client CA issued).
pub(crate) fn peer_subject(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject().to_string();
    let subject: String = subject.chars().take(MAX_SUBJECT_CHARS).collect();
    (!subject.is_empty()).then_some(subject)
}

/// An HTTP listener that speaks TLS over another [`axum::serve::Listener`] (so it
/// keeps that listener's bounds). Handshakes run concurrently, each for at most
/// [`HANDSHAKE_TIMEOUT`], so a slow or silent client holds up no one else; a failed
/// one is logged at debug and dropped.
pub(crate) struct TlsListener<L: axum::serve::Listener> {
    inner: L,
    acceptor: tokio_rustls::TlsAcceptor,
    handshakes: tokio::task::JoinSet<Option<Accepted<L>>>,
}

/// A connection whose handshake is done, with its peer's address.
type Accepted<L> = (
    tokio_rustls::server::TlsStream<<L as axum::serve::Listener>::Io>,
    <L as axum::serve::Listener>::Addr,
);

impl<L: axum::serve::Listener> TlsListener<L> {
    pub(crate) fn new(inner: L, acceptor: tokio_rustls::TlsAcceptor) -> Self {
        Self {
            inner,
            acceptor,
            handshakes: tokio::task::JoinSet::new(),
        }
    }
}

impl<L> axum::serve::Listener for TlsListener<L>
where
    L: axum::serve::Listener,
    L::Addr: Send + 'static,
{
    type Io = tokio_rustls::server::TlsStream<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                (io, addr) = self.inner.accept() => {
                    let acceptor = self.acceptor.clone();
                    self.handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
                            Ok(Ok(tls)) => Some((tls, addr)),
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, "HTTP TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                tracing::debug!("HTTP TLS handshake timed out");
                                None
                            }
                        }
                    });
                }
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(conn)) = done {
                        return conn;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// What the HTTP listener knows of a connection's peer: the subject of the client
/// certificate it verified, if one was sent (see [`crate::http::extension_guard`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct HttpPeer {
    /// [`peer_subject`] of the first certificate the client presented.
    pub(crate) subject: Option<String>,
}

impl<L> axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener<L>>> for HttpPeer
where
    L: axum::serve::Listener,
    L::Addr: Send + 'static,
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener<L>>) -> Self {
        let (_, session) = stream.io().get_ref();
        Self {
            subject: session
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|c| peer_subject(c)),
        }
    }
}
