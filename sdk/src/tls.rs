//! TLS settings of a client (the CLI, the worker, `railyard mcp`) and the bounded
//! read of the PEM files both the client and the server are given.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// Largest PEM file (certificate chain, key or CA bundle) read.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// A PEM file that could not be used; names the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {reason}")]
pub struct PemFileError {
    /// Which file this was (`--tls-cert`, say).
    pub what: &'static str,
    /// The file's path.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// Reads a PEM file: a regular file of at most [`MAX_PEM_BYTES`], opened without
/// blocking so a FIFO is refused instead of waited on. `what` names the setting.
pub fn read_pem(what: &'static str, path: &Path) -> Result<Vec<u8>, PemFileError> {
    let refuse = |reason: String| PemFileError {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let bytes = railyard_files::read_regular_file(path, MAX_PEM_BYTES).map_err(|e| refuse(e.to_string()))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(refuse("no PEM block in it".into()));
    }
    Ok(bytes)
}

/// How a client checks the server and proves who it is, for `https://` URLs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// CA certificates (PEM) that the server's certificate must chain to; without
    /// it the system's trusted roots are used.
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM), for a server that requires mutual TLS.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsOptions {
    /// Whether any TLS setting was given.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// The tonic TLS configuration these options describe, with the files read.
    pub fn client_config(&self) -> Result<ClientTlsConfig, PemFileError> {
        let mut config = ClientTlsConfig::new();
        match &self.ca {
            Some(ca) => config = config.ca_certificate(Certificate::from_pem(read_pem("--tls-ca", ca)?)),
            None => config = config.with_native_roots(),
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let cert_pem = read_pem("--tls-cert", cert)?;
                let key_pem = read_pem("--tls-key", key)?;
                config = config.identity(Identity::from_pem(cert_pem, key_pem));
            }
            (Some(cert), None) => {
                return Err(PemFileError {
                    what: "--tls-cert",
                    path: cert.clone(),
                    reason: "given without --tls-key".into(),
                });
            }
            (None, Some(key)) => {
                return Err(PemFileError {
                    what: "--tls-key",
                    path: key.clone(),
                    reason: "given without --tls-cert".into(),
                });
            }
            (None, None) => {}
        }
        Ok(config)
    }
}

/// An error with its sources, `: `-joined on one line (tonic's transport errors say
/// little at the top; the reason, such as an untrusted certificate, is in a source).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Whether an error met on a call is a TLS failure that a retry cannot fix (the
/// server's certificate is not trusted, or the server refused ours).
pub fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let text = error_chain(e);
    const SIGNS: [&str; 4] = [
        "invalid peer certificate",
        "certificate required",
        "received fatal alert",
        "InvalidCertificate",
    ];
    SIGNS.iter().any(|s| text.contains(s)).then_some(text)
}
