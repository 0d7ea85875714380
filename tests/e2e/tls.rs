//! `railyard server` with mutual TLS, used by a CLI client command and by a
//! `railyard worker` that completes the demo; clients without the right certificate
//! or CA get one line naming what is wrong.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::support::worker::WorkerProcess;
use crate::support::{BIN, Sandbox, drain, eventually, json, ok, stderr};

/// Writes a CA and a certificate per name (for localhost) under `dir`; returns the CA path.
pub(crate) fn certificates(dir: &Path, ca_name: &str, names: &[&str]) -> PathBuf {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, ca_name);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let ca_path = dir.join(format!("{ca_name}.pem"));
    std::fs::write(&ca_path, ca.pem()).unwrap();
    for name in names {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, *name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
    ca_path
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_mutual_tls_server_serves_the_cli_and_a_worker_that_completes_the_demo() {
    let sandbox = Sandbox::new();
    let certs = sandbox.path("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let ca = certificates(&certs, "railyard-ca", &["server", "cli", "worker-1"]);
    let other_ca = certificates(&certs, "other-ca", &["stranger"]);
    let repo_workflows = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows");

    let mut child = Command::new(BIN)
        .arg("server")
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(sandbox.path("data"))
        .arg("--workflows")
        .arg(&repo_workflows)
        .arg("--tls-cert")
        .arg(certs.join("server.pem"))
        .arg("--tls-key")
        .arg(certs.join("server.key"))
        .arg("--tls-client-ca")
        .arg(&ca)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn railyard server");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let grpc = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .expect("grpc address")
        .to_string();
    drain(out);
    let port = grpc.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}");

    let cli = |tls: &[&str], args: &[&str]| -> Output {
        Command::new(BIN)
            .args(args)
            .args(["--server", &url])
            .args(tls)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let (cli_cert, cli_key) = (certs.join("cli.pem"), certs.join("cli.key"));
    let good = [
        "--tls-ca",
        path_str(&ca),
        "--tls-cert",
        path_str(&cli_cert),
        "--tls-key",
        path_str(&cli_key),
    ];

    // Refusals, each one line on stderr.
    let no_cert = cli(&["--tls-ca", path_str(&ca)], &["run", "list"]);
    assert_eq!(no_cert.status.code(), Some(1), "{}", stderr(&no_cert));
    assert!(refused_in_one_line(&stderr(&no_cert)), "{}", stderr(&no_cert));
    let stranger = cli(
        &[
            "--tls-ca",
            path_str(&ca),
            "--tls-cert",
            path_str(&certs.join("stranger.pem")),
            "--tls-key",
            path_str(&certs.join("stranger.key")),
        ],
        &["run", "list"],
    );
    assert_eq!(stranger.status.code(), Some(1), "{}", stderr(&stranger));
    assert!(refused_in_one_line(&stderr(&stranger)), "{}", stderr(&stranger));
    let untrusted = cli(&["--tls-ca", path_str(&other_ca)], &["run", "list"]);
    assert!(
        stderr(&untrusted).contains("invalid peer certificate"),
        "{}",
        stderr(&untrusted)
    );
    let missing = cli(&["--tls-ca", path_str(&certs.join("nope.pem"))], &["run", "list"]);
    assert!(
        stderr(&missing).starts_with("error: TLS: --tls-ca ") && stderr(&missing).contains("nope.pem"),
        "{}",
        stderr(&missing)
    );
    for o in [&no_cert, &stranger, &untrusted, &missing] {
        assert_eq!(stderr(o).trim_end().lines().count(), 1, "{}", stderr(o));
    }

    // A worker with its certificate completes the demo started by the CLI.
    let script = repo_workflows.join("demo.script.json");
    let _worker = WorkerProcess::start(
        &url,
        &sandbox.path("workspace"),
        "worker-1",
        &[
            &["--provider", "scripted", "--script", path_str(&script)][..],
            &good[..2],
        ]
        .concat(),
        &[
            ("RAILYARD_TLS_CLIENT_CERT", path_str(&certs.join("worker-1.pem"))),
            ("RAILYARD_TLS_CLIENT_KEY", path_str(&certs.join("worker-1.key"))),
        ],
    );
    let started = ok(cli(
        &good,
        &["run", "start", "demo", "--goal", "a haiku", "--run-id", "tls1"],
    ));
    assert_eq!(started.trim(), "started run tls1 of demo");
    let status = eventually(Duration::from_secs(60), || {
        let d = json(cli(&good, &["run", "describe", "tls1", "-o", "json"]));
        let s = d["run"]["status"].as_str().unwrap_or("").to_string();
        (s != "RUNNING").then_some(d)
    });
    assert_eq!(status["run"]["status"], "COMPLETED", "{status}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A client certificate refused by the server, in one line: either the handshake's
/// alert reached the client (`TLS: ...`), or, under TLS 1.3, only the connection
/// closing did, and the message says what to check.
fn refused_in_one_line(stderr: &str) -> bool {
    stderr.trim_end().lines().count() == 1
        && (stderr.starts_with("error: TLS: ")
            || (stderr.starts_with("error: server unavailable at https://")
                && stderr.contains("client certificate")))
}
