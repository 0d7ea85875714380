//! `railyard store export` and `railyard store import`: moving a store between
//! backends (redb to PostgreSQL and back) through a dump on stdout / stdin. The
//! dump's format, its checks and the tables are the storage crates'
//! (`railyard_store::dump`); this module opens the stores named as `railyard
//! server` names them, pipes, and prints what moved on stderr.

use std::io::{BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use railyard_store::dump::{self, ImportOptions, Summary};
use railyard_store::redb_backend::{RedbBackend, RedbReader};
use railyard_store_postgres::{PostgresBackend, PostgresOptions, PostgresReader};
use serde_json::json;

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table};
use crate::client::timefmt;
use crate::serve::server::{ServerArgs, StoreSetting};

/// `railyard store` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Write every table of a store to stdout as a dump (a versioned, checksummed
    /// text stream), from one consistent snapshot, in bounded memory.
    ///
    /// A running redb server holds its file alone: export it through the server
    /// with --from-server (the server reads one snapshot while it goes on). A
    /// PostgreSQL store is exported directly, beside its servers (the export claims
    /// no writer lease). What moved is printed on stderr. `railyard store export
    /// --data-dir DIR > dump`.
    Export(ExportArgs),
    /// Read a dump from stdin into a store that is empty (or, with --replace, whose
    /// contents are deleted first).
    ///
    /// The store must not be in use: no server may run on it (redb's lock and
    /// PostgreSQL's writer lease refuse the import). Rows are written in batches;
    /// a dump found bad (a checksum mismatch, truncated, malformed, another format
    /// version) empties the store again, and the error names the dump's line.
    /// `railyard store import --store postgres://USER@HOST/DB < dump`.
    Import(ImportArgs),
}

/// Which store: as `railyard server` takes it (flag, environment, config file).
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// TOML config file whose [server] section names the store (data_dir or store).
    #[arg(long, value_name = "FILE", env = "RAILYARD_SERVER_CONFIG")]
    pub config: Option<PathBuf>,

    /// A redb store: the server's data directory; the same as --store redb:DIR
    /// [env: RAILYARD_DATA_DIR] [default: ./.railyard].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The store: redb:DIR or postgres://USER@HOST:PORT/DB (the password from
    /// PGPASSWORD, or in the URL) [env: RAILYARD_STORE].
    #[arg(long, value_name = "STORE")]
    pub store: Option<String>,
}

impl StoreArgs {
    /// The store these settings name, resolved as the server resolves its own.
    fn store(&self) -> anyhow::Result<StoreSetting> {
        let args = ServerArgs {
            config: self.config.clone(),
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            ..ServerArgs::default()
        };
        Ok(args.settings()?.store)
    }
}

/// Flags of `store export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    pub store: StoreArgs,

    /// Ask the running server at --server for the dump (with --api-key: an admin key
    /// of every namespace, under --auth) instead of opening the store; for a redb
    /// store whose server runs.
    #[arg(long, conflicts_with_all = ["data_dir", "store"])]
    pub from_server: bool,
}

/// Flags of `store import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    pub store: StoreArgs,

    /// Delete everything the target store holds before importing, instead of
    /// refusing a store that is not empty.
    #[arg(long)]
    pub replace: bool,
}

/// Runs a `railyard store` command.
pub(crate) async fn run(g: &GlobalOpts, cmd: StoreCommand) -> anyhow::Result<()> {
    let json = g.output.is_json();
    match cmd {
        StoreCommand::Export(a) => {
            if std::io::stdout().is_terminal() {
                bail!(
                    "the dump goes to stdout, which is a terminal: redirect it (railyard store export > FILE)"
                );
            }
            if a.from_server {
                let summary = remote::export(g).await?;
                return report("exported", &summary, json);
            }
            let store = a.store.store()?;
            let summary = tokio::task::spawn_blocking(move || export(&store))
                .await
                .context("the export stopped")??;
            report("exported", &summary, json)
        }
        StoreCommand::Import(a) => {
            let store = a.store.store()?;
            let options = ImportOptions { replace: a.replace };
            let summary = tokio::task::spawn_blocking(move || import(&store, &options))
                .await
                .context("the import stopped")??;
            report("imported", &summary, json)
        }
    }
}

/// Options for opening a PostgreSQL store, as the server opens its own.
fn pg_options() -> PostgresOptions {
    PostgresOptions {
        password: std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()),
        application_name: "railyard store".into(),
        ..PostgresOptions::default()
    }
}

fn export(store: &StoreSetting) -> anyhow::Result<Summary> {
    let created = timefmt::now_unix_ms();
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let summary = match store {
        StoreSetting::Redb(dir) => {
            let source = RedbReader::open(dir)?;
            dump::export(&source, &mut out, created)
        }
        StoreSetting::Postgres(url) => {
            let source = PostgresReader::open(url, &pg_options())?;
            dump::export(&source, &mut out, created)
        }
    };
    summary.with_context(|| format!("cannot export {}", store.shown()))
}

fn import(store: &StoreSetting, options: &ImportOptions) -> anyhow::Result<Summary> {
    let mut input = BufReader::with_capacity(1 << 20, std::io::stdin().lock());
    let summary = match store {
        StoreSetting::Redb(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            // A bulk load reads little back: a small page cache.
            let target = RedbBackend::open_with_cache(dir, 16 << 20)?;
            dump::import(&target, &mut input, options)
        }
        StoreSetting::Postgres(url) => {
            let target = PostgresBackend::open(url, &pg_options())?;
            dump::import(&target, &mut input, options)
        }
    };
    summary.with_context(|| format!("cannot import into {}", store.shown()))
}

/// The process's peak resident memory in KiB (`VmHWM`), where the system says.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Prints what moved on stderr (stdout carries an export's dump): a table of rows
/// and bytes per table, or one JSON object with `--output json`.
fn report(done: &str, s: &Summary, json: bool) -> anyhow::Result<()> {
    let peak = peak_rss_kib();
    let mut err = std::io::stderr().lock();
    if json {
        let mut v = serde_json::to_value(s).map_err(|e| anyhow!("cannot show the summary: {e}"))?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("done".into(), json!(done));
            obj.insert("peak_rss_kib".into(), json!(peak));
        }
        writeln!(err, "{v}")?;
        return Ok(());
    }
    let mut t = Table::new(["TABLE", "ROWS", "BYTES"]);
    for (name, n) in &s.tables {
        t.row([name.clone(), n.rows.to_string(), n.bytes.to_string()]);
    }
    for line in t.render() {
        writeln!(err, "{line}")?;
    }
    writeln!(
        err,
        "{done} {} rows ({} of values) from {} layout {}; dump {} bytes, sha256 {}{}",
        s.rows,
        mib(s.value_bytes),
        output::escape(&s.source_backend),
        s.source_layout,
        s.dump_bytes,
        s.sha256,
        peak.map(|k| format!("; peak memory {}", mib(k * 1024)))
            .unwrap_or_default()
    )?;
    Ok(())
}

mod remote;
#[cfg(test)]
mod tests;
