//! TLS to PostgreSQL, as processes: the test's cluster is switched to `ssl = on`
//! with a certificate made here (by a CA made here), and a server started with
//! `sslmode=verify-full` connects over TLS given the CA (`--store-ca`) and exits
//! with a clear error without it. Skipped, saying so, without
//! `RAILYARD_TEST_POSTGRES`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::support::*;

/// The cluster's `ssl = on` with the certificate in `dir`, undone on drop.
struct SslOn {
    admin: TestDatabase,
    dir: PathBuf,
}

impl SslOn {
    fn enable(url: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("railyard-pg-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "railyard-test-db-ca");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "railyard-test-db");
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
        set_mode(&dir, 0o755);
        set_mode(&dir.join("server.pem"), 0o644);
        // The database refuses a key others may read; it must own it.
        set_mode(&dir.join("server.key"), 0o600);
        let uid = Command::new("id").arg("-u").output().expect("id -u");
        if String::from_utf8_lossy(&uid.stdout).trim() == "0" {
            let chowned = Command::new("chown")
                .arg("postgres")
                .arg(dir.join("server.key"))
                .status()
                .expect("chown");
            assert!(chowned.success());
        }
        let admin = TestDatabase::create(url).expect("a database for the settings");
        let path = |f: &str| dir.join(f).to_string_lossy().replace('\'', "''");
        admin
            .execute(&format!(
                "ALTER SYSTEM SET ssl_cert_file = '{}'",
                path("server.pem")
            ))
            .unwrap();
        admin
            .execute(&format!(
                "ALTER SYSTEM SET ssl_key_file = '{}'",
                path("server.key")
            ))
            .unwrap();
        admin.execute("ALTER SYSTEM SET ssl = on").unwrap();
        admin.execute("SELECT pg_reload_conf()").unwrap();
        eventually(Duration::from_secs(30), || {
            (admin.query_text("SHOW ssl").ok().flatten().as_deref() == Some("on")).then_some(())
        });
        Self { admin, dir }
    }
}

impl Drop for SslOn {
    fn drop(&mut self) {
        for sql in [
            "ALTER SYSTEM RESET ssl",
            "ALTER SYSTEM RESET ssl_cert_file",
            "ALTER SYSTEM RESET ssl_key_file",
            "SELECT pg_reload_conf()",
        ] {
            let _ = self.admin.execute(sql);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Starts `railyard server` on `store` with `args`: `Ok(server)` once it listens,
/// `Err(stderr)` when it exits first.
fn start(store: &str, sandbox: &Sandbox, args: &[&str]) -> Result<std::process::Child, String> {
    let mut child = Command::new(BIN)
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(["--store", store, "--keys-dir"])
        .arg(sandbox.path("keys"))
        .arg("--workflows")
        .arg(sandbox.path("workflows"))
        .args(args)
        .env_remove("RAILYARD_AUTH")
        .env_remove("RAILYARD_STORE")
        .env_remove("RAILYARD_STORE_CA")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn railyard server");
    let mut line = [0u8; 1];
    let deadline = Instant::now() + Duration::from_secs(60);
    // The first byte on stdout is the listening line's.
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || out.read(&mut line).map(|n| n > 0).unwrap_or(false));
    while !reader.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the server neither listened nor exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    if reader.join().unwrap_or(false) {
        return Ok(child);
    }
    let _ = child.wait();
    let mut said = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut said)
        .unwrap();
    Err(said)
}

#[test]
fn a_database_over_tls_is_reached_with_its_ca_and_refused_clearly_without_it() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("postgres_tls::a_database_over_tls_is_reached_with_its_ca")
        );
        return;
    };
    let ssl = SslOn::enable(&url);
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.path("workflows")).unwrap();
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let verify_full = format!("{}{sep}sslmode=verify-full", db.url());
    let ca = ssl.dir.join("ca.pem");

    // Without the CA: the system's roots do not know it, and the server says so.
    let said = start(&verify_full, &sandbox, &[]).expect_err("refused without the CA");
    assert!(said.contains("certificate"), "{said}");
    assert!(
        said.contains("UnknownIssuer") || said.contains("unknown issuer"),
        "{said}"
    );
    assert!(said.contains("--store-ca"), "the error says what to do: {said}");

    // With it: the server starts, and its connections are encrypted.
    let mut server =
        start(&verify_full, &sandbox, &["--store-ca", ca.to_str().unwrap()]).expect("starts with the CA");
    let name = db
        .url()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();
    let encrypted = db
        .query_text(&format!(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE ssl AND datname = '{name}' AND application_name = 'railyard'"
        ))
        .unwrap();
    assert_ne!(
        encrypted.as_deref(),
        Some("0"),
        "no TLS connection of the server's"
    );
    let _ = server.kill();
    let _ = server.wait();
    drop(db);
    drop(ssl);
}
