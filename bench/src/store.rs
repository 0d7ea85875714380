//! `--store` and `--store-ca` for the in-process benches: the PostgreSQL database
//! their server keeps its runs in, connected to as `railyard server` connects (the
//! password from `PGPASSWORD` when the URL has none, the root certificates from the
//! file). The benches with a server process pass the flags on to it instead.

use std::path::Path;

use anyhow::{Context, bail};
use railyard_server::ServerConfig;
use railyard_store_postgres::{PostgresBackend, PostgresOptions};

/// Largest root certificate file read (as `railyard server` reads `store_ca`).
const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// Whether `store` names a PostgreSQL database.
pub(crate) fn is_postgres(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

/// How to connect to the database at `url`, with the root certificates in `ca`.
pub(crate) fn options(ca: Option<&Path>) -> anyhow::Result<PostgresOptions> {
    let root_certs_pem = ca
        .map(|file| {
            railyard_files::read_regular_file(file, MAX_CA_FILE_BYTES)
                .with_context(|| format!("--store-ca: cannot read {}", file.display()))
        })
        .transpose()?;
    Ok(PostgresOptions {
        password: std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()),
        root_certs_pem,
        ..PostgresOptions::default()
    })
}

/// `config` on the database at `url` (opened here, as `railyard server` opens it:
/// migrated, its writer lease claimed), and the store as it may be shown.
pub(crate) async fn open(
    config: ServerConfig,
    url: &str,
    ca: Option<&Path>,
) -> anyhow::Result<(ServerConfig, String)> {
    if !is_postgres(url) {
        bail!(
            "--store: the bench takes a postgres://USER@HOST:PORT/DB URL; without --store it runs on redb in a temp directory"
        );
    }
    let shown = railyard_store_postgres::redact(url);
    let options = options(ca)?;
    let owned = url.to_string();
    // Opening connects and migrates, waiting on the backend's own runtime: off this
    // runtime's workers.
    let backend = tokio::task::spawn_blocking(move || PostgresBackend::open(&owned, &options))
        .await
        .context("opening the postgres store")?
        .with_context(|| format!("cannot open the bench's store {shown}"))?;
    let mut config = config;
    config.store = Some(backend.into_store());
    Ok((config, shown))
}
