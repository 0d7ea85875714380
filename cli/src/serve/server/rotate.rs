//! `railyard server rotate-token-key`: adds a task-token signing key where the server
//! keeps its keys (the database's `token_keys` with a Postgres store, `keys.json` in
//! the data directory with redb) and makes it the one that signs; the older keys keep
//! verifying, so tokens already handed out stay good. Running servers pick it up
//! within `railyard_engine::token::keyring::RELOAD_EVERY`, or at once for a token
//! signed with it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::settings::{ServerArgs, StoreSetting};

/// Flags of `railyard server rotate-token-key`: where the keys are, found as
/// `railyard server` finds its store.
#[derive(Debug, Clone, Args)]
pub(crate) struct RotateArgs {
    /// The server's TOML config file (its [server] store, data_dir)
    /// [env: RAILYARD_SERVER_CONFIG].
    #[arg(long, value_name = "FILE", env = "RAILYARD_SERVER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The server's store: postgres://USER@HOST:PORT/DB (the password from
    /// PGPASSWORD, or in the URL) or redb:DIR [env: RAILYARD_STORE].
    #[arg(long, value_name = "STORE")]
    pub store: Option<String>,
    /// The redb server's data directory (keys.json is there) [env: RAILYARD_DATA_DIR].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// With a postgres store: a PEM file of the root certificates the database's
    /// certificate must chain to [env: RAILYARD_STORE_CA].
    #[arg(long, value_name = "FILE")]
    pub store_ca: Option<PathBuf>,
}

/// Rotates, and says on stdout what it did.
pub(crate) async fn run(a: RotateArgs) -> anyhow::Result<()> {
    let settings = ServerArgs {
        config: a.config,
        store: a.store,
        data_dir: a.data_dir,
        store_ca: a.store_ca,
        ..ServerArgs::default()
    }
    .settings()?;
    let reload = railyard_engine::token::keyring::RELOAD_EVERY.as_secs();
    let shown = settings.store.shown();
    let (kid, keys) = match &settings.store {
        StoreSetting::Postgres(url) => {
            let options = super::postgres_options(&settings)?;
            let url = url.clone();
            let rotated = tokio::task::spawn_blocking(move || {
                railyard_store_postgres::rotate_token_key(&url, &options)
            })
            .await
            .context("rotating the task-token key")??;
            (rotated.kid, rotated.keys.to_string())
        }
        StoreSetting::Redb(dir) => {
            let (kid, keys) = railyard_engine::token::rotate_file(dir)?;
            (kid, keys.to_string())
        }
    };
    println!(
        "added task-token key {kid} to {shown}: it signs from now on (a running server switches within {reload} s), \
         and all {keys} keys there verify"
    );
    Ok(())
}
