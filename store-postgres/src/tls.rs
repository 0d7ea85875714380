//! TLS to the database, over rustls (`tokio-rustls`, which the workspace already
//! has: the connector is the few lines `tokio_postgres::tls` asks for).
//!
//! The URL's `sslmode` says what is asked, as libpq's does:
//!
//! | `sslmode` | TLS | the database's certificate |
//! |---|---|---|
//! | `disable`, `prefer` (the default) | no | — |
//! | `require` | yes | not checked; checked as `verify-ca` when root certificates are given |
//! | `verify-ca` | yes | chains to a root certificate |
//! | `verify-full` | yes | chains to a root certificate and names the host connected to |
//!
//! The root certificates are the ones given ([`crate::PostgresOptions::root_certs_pem`]),
//! else the system's. The driver knows only `disable`, `prefer` and `require`:
//! `verify-ca` and `verify-full` are read here and handed to it as `require`.
//! Channel binding is not offered (SCRAM authenticates without it).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// How the database's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Encrypted, the certificate not checked (`require` without root certificates).
    Nothing,
    /// It chains to a root certificate (`verify-ca`).
    Chain,
    /// It chains to a root certificate and names the host (`verify-full`).
    Full,
}

/// `url` with a `sslmode=verify-ca` or `verify-full` rewritten to `require` (which
/// the driver knows), and what was asked; `None` when neither is in it.
pub(crate) fn take_verify_mode(url: &str) -> (String, Option<Verify>) {
    for (mode, verify) in [
        ("sslmode=verify-full", Verify::Full),
        ("sslmode=verify-ca", Verify::Chain),
    ] {
        if url.contains(mode) {
            return (url.replace(mode, "sslmode=require"), Some(verify));
        }
    }
    (url.to_string(), None)
}

/// The rustls client configuration for `verify`, trusting `roots_pem` (PEM
/// certificates) or, when `None`, the system's root certificates.
pub(crate) fn client_config(
    verify: Verify,
    roots_pem: Option<&[u8]>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = if verify == Verify::Nothing {
        Arc::new(Unchecked(provider))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match roots_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("the root certificates: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("the root certificates: {e}"))?;
                }
                if roots.is_empty() {
                    return Err("the root certificates: no PEM certificate in them".into());
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(
                        "no system root certificates found to check the database's certificate: give its root \
                         certificate"
                            .into(),
                    );
                }
            }
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| e.to_string())?;
        if verify == Verify::Full {
            webpki
        } else {
            Arc::new(AnyName(webpki))
        }
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// Accepts any certificate (`sslmode=require`, as libpq's), but still checks the
/// handshake's signatures with it.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain checked, the name not (`verify-ca`).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The connector the pool connects with.
#[derive(Clone)]
pub(crate) struct MakeRustls(tokio_rustls::TlsConnector);

impl MakeRustls {
    pub(crate) fn new(config: rustls::ClientConfig) -> Self {
        Self(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, host: &str) -> Result<Connect, io::Error> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("host {host:?}: {e}")))?;
        Ok(Connect(self.0.clone(), name))
    }
}

/// One connection's handshake.
pub(crate) struct Connect(tokio_rustls::TlsConnector, ServerName<'static>);

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let Self(connector, name) = self;
        Box::pin(async move { connector.connect(name, stream).await.map(Stream) })
    }
}

/// A TLS connection to the database.
pub(crate) struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::{Verify, take_verify_mode};

    #[test]
    fn verify_modes_are_handed_to_the_driver_as_require() {
        assert_eq!(
            take_verify_mode("postgres://u@h/db?sslmode=verify-full"),
            ("postgres://u@h/db?sslmode=require".into(), Some(Verify::Full))
        );
        assert_eq!(
            take_verify_mode("host=h sslmode=verify-ca"),
            ("host=h sslmode=require".into(), Some(Verify::Chain))
        );
        assert_eq!(take_verify_mode("postgres://u@h/db?sslmode=require").1, None);
    }
}
