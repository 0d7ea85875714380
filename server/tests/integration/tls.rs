//! TLS and mutual TLS over real gRPC and HTTPS, with certificates generated here: the
//! SDK client over TLS; under mutual TLS a client without a certificate, or with one
//! from another CA, refused, and one with a good certificate served, its certificate's
//! subject recorded as the identity.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use railyard_sdk::{Client, ClientError, ConnectOptions, TlsOptions};
use railyard_server::tls::TlsFiles;
use railyard_server::{RunningServer, ServerConfig, StartError};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

const ONE_STEP: &str =
    r#"{"id":"one","version":"1","name":"One","steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

/// A CA that issues certificates into a directory, as PEM files.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    name: String,
}

impl TestCa {
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca = Self {
            issuer,
            dir: dir.to_path_buf(),
            name: name.to_string(),
        };
        std::fs::write(ca.ca_path(), ca.issuer.pem()).unwrap();
        ca
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// Issues a certificate for `localhost` / 127.0.0.1 with common name `cn`;
    /// returns (certificate, key) paths.
    pub fn issue(&self, cn: &str) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Railyard Test");
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let cert_path = self.dir.join(format!("{}-{cn}.pem", self.name));
        let key_path = self.dir.join(format!("{}-{cn}.key", self.name));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}

struct TlsServer {
    server: RunningServer,
    url: String,
    ca: TestCa,
    _dirs: (tempfile::TempDir, tempfile::TempDir, tempfile::TempDir),
}

async fn tls_server(mutual: bool) -> TlsServer {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE_STEP).unwrap();
    let ca = TestCa::new(certs.path(), "good");
    let (cert, key) = ca.issue("server");
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Some(TlsFiles {
        cert,
        key,
        client_ca: mutual.then(|| ca.ca_path()),
    });
    let server = RunningServer::start(config).await.unwrap();
    let url = format!("https://localhost:{}", server.grpc_addr.port());
    TlsServer {
        server,
        url,
        ca,
        _dirs: (data, workflows, certs),
    }
}

async fn client(url: &str, tls: TlsOptions) -> Result<Client, ClientError> {
    let opts = ConnectOptions {
        tls,
        max_attempts: 1,
        ..ConnectOptions::default()
    };
    Client::connect_with(url, opts).await
}

async fn start(c: &Client) -> Result<String, ClientError> {
    c.start_run("default", "one", "the thing", HashMap::new()).await
}

#[tokio::test]
async fn the_sdk_client_runs_over_tls_and_a_plaintext_or_untrusting_client_gets_nowhere() {
    let s = tls_server(false).await;
    let trusting = TlsOptions {
        ca: Some(s.ca.ca_path()),
        ..TlsOptions::default()
    };
    let c = client(&s.url, trusting).await.unwrap();
    let run_id = start(&c).await.unwrap();
    let history = c.full_history("default", &run_id).await.unwrap();
    assert_eq!(history[0].event_type, "RunStarted");
    assert_eq!(
        history[0].identity, "client",
        "no certificate: the role's default"
    );

    // A client that trusts another CA refuses the server's certificate, in one line.
    let other = TestCa::new(s._dirs.2.path(), "other");
    let untrusting = TlsOptions {
        ca: Some(other.ca_path()),
        ..TlsOptions::default()
    };
    let c = client(&s.url, untrusting).await.unwrap();
    match start(&c).await {
        Err(ClientError::Tls(m)) => {
            assert!(m.contains("invalid peer certificate"), "{m}");
            assert!(!m.contains('\n'), "{m}");
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }

    // Plaintext to a TLS port fails; it is not served.
    let plain = client(&format!("http://{}", s.server.grpc_addr), TlsOptions::default())
        .await
        .unwrap();
    assert!(start(&plain).await.is_err());
    s.server.shutdown().await;
}

#[tokio::test]
async fn under_mutual_tls_only_a_certificate_from_the_client_ca_is_served_and_its_subject_is_the_identity() {
    let s = tls_server(true).await;
    let ca = Some(s.ca.ca_path());

    // No client certificate: refused in the handshake.
    let c = client(
        &s.url,
        TlsOptions {
            ca: ca.clone(),
            ..TlsOptions::default()
        },
    )
    .await
    .unwrap();
    match start(&c).await {
        Err(ClientError::Tls(m)) => assert!(!m.contains('\n'), "{m}"),
        other => panic!("expected a TLS refusal, got {other:?}"),
    }

    // A certificate from another CA: refused.
    let other = TestCa::new(s._dirs.2.path(), "other");
    let (cert, key) = other.issue("intruder");
    let c = client(
        &s.url,
        TlsOptions {
            ca: ca.clone(),
            cert: Some(cert),
            key: Some(key),
        },
    )
    .await
    .unwrap();
    match start(&c).await {
        Err(ClientError::Tls(m)) => assert!(!m.contains('\n'), "{m}"),
        other => panic!("expected a TLS refusal, got {other:?}"),
    }

    // A good certificate: served, and its subject is the identity in history, even
    // over an identity the request names itself.
    let (cert, key) = s.ca.issue("worker-7");
    let c = client(
        &s.url,
        TlsOptions {
            ca,
            cert: Some(cert),
            key: Some(key),
        },
    )
    .await
    .unwrap();
    let run_id = start(&c).await.unwrap();
    let history = c.full_history("default", &run_id).await.unwrap();
    assert_eq!(history[0].event_type, "RunStarted");
    assert_eq!(history[0].identity, "CN=worker-7, O=Railyard Test");
    let named = c
        .start_run_with(railyard_proto::v1::StartRunRequest {
            namespace: "default".into(),
            workflow_id: "one".into(),
            goal: "again".into(),
            identity: "someone-else".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let history = c.full_history("default", &named.run_id).await.unwrap();
    assert_eq!(history[0].identity, "CN=worker-7, O=Railyard Test");
    s.server.shutdown().await;
}

#[tokio::test]
async fn bad_tls_files_stop_the_start_with_an_error_naming_the_file() {
    let certs = tempfile::tempdir().unwrap();
    let ca = TestCa::new(certs.path(), "good");
    let (cert, key) = ca.issue("server");
    let (_, other_key) = ca.issue("other");
    let start = |files: TlsFiles| async move {
        let data = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::new(data.path(), data.path());
        config.grpc_listen = "127.0.0.1:0".parse().unwrap();
        config.http_listen = "127.0.0.1:0".parse().unwrap();
        config.tls = Some(files);
        match RunningServer::start(config).await {
            Err(e @ StartError::Tls(_)) => e.to_string(),
            Err(e) => panic!("expected a TLS error, got {e}"),
            Ok(_) => panic!("started with bad TLS files"),
        }
    };
    let missing = certs.path().join("nope.pem");
    let m = start(TlsFiles {
        cert: missing.clone(),
        key: key.clone(),
        client_ca: None,
    })
    .await;
    assert!(m.contains("--tls-cert") && m.contains("nope.pem"), "{m}");
    let m = start(TlsFiles {
        cert: cert.clone(),
        key: other_key,
        client_ca: None,
    })
    .await;
    assert!(m.contains("--tls-key") && m.contains("does not fit"), "{m}");
    let m = start(TlsFiles {
        cert: cert.clone(),
        key: cert.clone(),
        client_ca: None,
    })
    .await;
    assert!(m.contains("--tls-key"), "{m}");
    let m = start(TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: Some(certs.path().to_path_buf()),
    })
    .await;
    assert!(
        m.contains("--tls-client-ca") && m.contains("not a regular file"),
        "{m}"
    );
}

#[tokio::test]
async fn the_http_listener_serves_healthz_over_tls() {
    let s = tls_server(true).await;
    let pem = std::fs::read(s.ca.ca_path()).unwrap();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let url = format!("https://localhost:{}/healthz", s.server.http_addr.port());
    let r = http.get(&url).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // Plain HTTP is not answered.
    let plain = reqwest::get(format!("http://{}/healthz", s.server.http_addr)).await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    s.server.shutdown().await;
}
