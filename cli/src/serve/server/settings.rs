//! The settings of `railyard server` (and `railyard dev`): its flags, its config file,
//! and how they resolve with the environment into [`ServerSettings`].
//!
//! Settings come from a TOML config file (`--config railyard.toml`), the environment
//! (`RAILYARD_DATA_DIR`, `RAILYARD_LISTEN`, ...) and flags, in rising precedence,
//! through Railyard's one configuration loader ([`railyard_config`]). The file
//! has one section per part of the server (`[server]`, `[hooks]` and the
//! `[[triggers]]` table; delivery adds its own): add a field to [`ServerFile`] and
//! map it in [`ServerSettings::config`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use railyard_config::{ConfigError, Loader};
use railyard_engine::ChildLimits;
use railyard_engine::service::triggers::TriggerInput;
use railyard_gateway::sessions::SessionLimits;
use railyard_server::ServerConfig;
use railyard_server::net::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PER_PEER,
    DEFAULT_REQUEST_TIMEOUT, NetLimits,
};
use railyard_server::tls::TlsFiles;

use super::file::{DeliverySection, ENV, FLAG_NAMES, NetworkList, ServerFile, ServerSection, TriggersFile};
use crate::serve::builtin;

/// Default `server.data_dir`.
pub(crate) const DEFAULT_DATA_DIR: &str = "./.railyard";
/// Default `server.workflows`.
pub(crate) const DEFAULT_WORKFLOWS: &str = "./workflows";
/// Longest graceful shutdown that may be configured.
const MAX_SHUTDOWN_GRACE_SECS: u64 = 3600;

/// Flags of `railyard server` (and of `railyard dev`). Each wins over its environment
/// variable, which wins over the config file.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ServerArgs {
    /// TOML config file with a [server] section (keys: data_dir, store, keys_dir, store_ca, listen,
    /// http_listen, workflows, shutdown_grace_secs, auth, insecure, tls_cert, tls_key,
    /// tls_client_ca, max_connections, idle_timeout_secs, max_connections_per_peer,
    /// http_request_timeout_secs, http_header_timeout_secs, max_child_depth, max_children_per_run, cache_size_mib,
    /// kept_transcripts_mib,
    /// mcp_max_sessions, mcp_max_sessions_per_key, mcp_session_idle_secs, advertise_host,
    /// node_lease, peer_ca, principles_file) and a [telemetry] section (key: otlp_endpoint).
    #[arg(long, value_name = "FILE", env = "RAILYARD_SERVER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Directory of the database and the token keys, created if missing; the same as
    /// --store redb:DIR [env: RAILYARD_DATA_DIR] [default: ./.railyard].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Where runs are stored: redb:DIR (a database file in DIR, as --data-dir DIR) or
    /// postgres://USER@HOST:PORT/DB (the password from PGPASSWORD, or in the URL)
    /// [env: RAILYARD_STORE] [default: redb:./.railyard].
    #[arg(long, value_name = "STORE")]
    pub store: Option<String>,

    /// Directory of the first admin key, with a postgres store (the task-token keys
    /// are in the database; with redb both are in the data directory) [env: RAILYARD_KEYS_DIR]
    /// [default: ./.railyard].
    #[arg(long, value_name = "DIR")]
    pub keys_dir: Option<PathBuf>,

    /// With a postgres store: a PEM file of the root certificates the database's
    /// certificate must chain to (with sslmode=verify-full, verify-ca or require in
    /// the URL; without it, the system's roots) [env: RAILYARD_STORE_CA].
    #[arg(long, value_name = "FILE")]
    pub store_ca: Option<PathBuf>,

    /// gRPC listen address; port 0 picks a free port and the bound one is printed
    /// [env: RAILYARD_LISTEN] [default: 127.0.0.1:7400].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// HTTP listen address for webhooks, /healthz and /metrics
    /// [env: RAILYARD_HTTP_LISTEN] [default: 127.0.0.1:7401].
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<SocketAddr>,

    /// Directory of workflow definition files (*.json)
    /// [env: RAILYARD_WORKFLOWS] [default: ./workflows].
    #[arg(long, value_name = "DIR")]
    pub workflows: Option<PathBuf>,

    /// Seconds a graceful shutdown may take before the server stops at once [default: 10].
    #[arg(long, value_name = "SECONDS")]
    pub shutdown_grace: Option<u64>,

    /// Require an API key on every request (the first start writes an admin key to
    /// <data-dir>/admin.key) [env: RAILYARD_AUTH].
    #[arg(long)]
    pub auth: bool,

    /// Listen on a non-loopback address without --auth anyway: anyone who reaches the
    /// server can start runs, and so run code on the workers.
    #[arg(long)]
    pub insecure: bool,

    /// Certificate chain (PEM) to serve TLS with on both listeners; needs --tls-key
    /// [env: RAILYARD_TLS_CERT].
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert [env: RAILYARD_TLS_KEY].
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// CA certificates (PEM): gRPC clients must present a certificate it issued
    /// (mutual TLS), and its subject is their identity [env: RAILYARD_TLS_CLIENT_CA].
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,

    /// Most connections open at once on each listener (gRPC and HTTP); one more is
    /// accepted and closed at once, without an answer, so it does not wait in the
    /// backlog [env: RAILYARD_MAX_CONNECTIONS] [default: 4096].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Seconds after which a connection nothing was read from is closed (live gRPC
    /// peers answer the server's pings) [env: RAILYARD_IDLE_TIMEOUT] [default: 120].
    #[arg(long, value_name = "SECONDS")]
    pub idle_timeout: Option<u64>,

    /// Most connections open at once from one peer address (IPv6: one /64), on each
    /// listener [env: RAILYARD_MAX_CONNECTIONS_PER_PEER] [default: 256].
    #[arg(long, value_name = "N")]
    pub max_connections_per_peer: Option<usize>,

    /// Seconds an HTTP request (head and body) may take to arrive from its first
    /// byte, however steadily it trickles [env: RAILYARD_HTTP_REQUEST_TIMEOUT]
    /// [default: 30].
    #[arg(long, value_name = "SECONDS")]
    pub http_request_timeout: Option<u64>,

    /// Seconds an HTTP request's head (its headers) may take to arrive from its first
    /// byte; at most --http-request-timeout [env: RAILYARD_HTTP_HEADER_TIMEOUT]
    /// [default: 5].
    #[arg(long, value_name = "SECONDS")]
    pub http_header_timeout: Option<u64>,

    /// Deepest child run `spawn_agent` may start (a root run is depth 0; 0: none)
    /// [env: RAILYARD_MAX_CHILD_DEPTH] [default: 3].
    #[arg(long, value_name = "N")]
    pub max_child_depth: Option<u32>,

    /// Most child runs one run may start over its life
    /// [env: RAILYARD_MAX_CHILDREN_PER_RUN] [default: 10].
    #[arg(long, value_name = "N")]
    pub max_children_per_run: Option<u32>,

    /// An internal network results may be delivered to (callback and subscription
    /// URLs), such as 127.0.0.0/8; repeatable. By default loopback, private,
    /// link-local and other internal addresses are refused
    /// [env: RAILYARD_DELIVERY_ALLOW_NETWORKS, comma-separated].
    #[arg(long = "delivery-allow-network", value_name = "CIDR")]
    pub delivery_allow_networks: Vec<String>,

    /// MiB of memory the database's page cache may hold (1 to 65536); more makes
    /// reads of a large database faster, at that cost in memory
    /// [env: RAILYARD_CACHE_SIZE_MIB] [default: 64].
    #[arg(long, value_name = "MIB")]
    pub cache_size_mib: Option<u64>,

    /// MiB of finished steps' checkpoints (their transcripts, shown by the web
    /// console) each run keeps, the oldest dropped first past it (0 to 1024; 0 keeps
    /// none) [env: RAILYARD_KEPT_TRANSCRIPTS_MIB] [default: 64].
    #[arg(long, value_name = "MIB")]
    pub kept_transcripts_mib: Option<u64>,

    /// Most /mcp sessions open at once, across all callers (each holds ~50 KB)
    /// [env: RAILYARD_MCP_MAX_SESSIONS] [default: 1000].
    #[arg(long, value_name = "N")]
    pub mcp_max_sessions: Option<usize>,

    /// Most /mcp sessions open at once per API key (or client certificate; without auth,
    /// for all callers together) [env: RAILYARD_MCP_MAX_SESSIONS_PER_KEY] [default: 16].
    #[arg(long, value_name = "N")]
    pub mcp_max_sessions_per_key: Option<usize>,

    /// Seconds an /mcp session may go without a message before it is closed
    /// [env: RAILYARD_MCP_SESSION_IDLE] [default: 120].
    #[arg(long, value_name = "SECONDS")]
    pub mcp_session_idle: Option<u64>,

    /// With a postgres store: the host (name or IP) the other nodes on the database
    /// reach this one at, on its --listen and --http-listen ports; needed when
    /// listening on 0.0.0.0 or :: [env: RAILYARD_ADVERTISE_HOST] [default: the listen IP].
    #[arg(long, value_name = "HOST")]
    pub advertise_host: Option<String>,

    /// With a postgres store: how long this node's claim on the database (the writer
    /// lease) lasts unrenewed, renewed every third of it; a leader that dies is
    /// replaced after about this long [env: RAILYARD_NODE_LEASE] [default: 30s].
    #[arg(long, value_name = "DURATION")]
    pub node_lease: Option<String>,

    /// With a postgres store and TLS: CA certificates (PEM) a follower trusts for the
    /// leader's certificate, besides the system's roots [env: RAILYARD_PEER_CA].
    #[arg(long, value_name = "FILE")]
    pub peer_ca: Option<PathBuf>,

    /// The agents' principles, in every step's system prompt (at most 16 KiB; default:
    /// built in); read at start [env: RAILYARD_PRINCIPLES_FILE].
    #[arg(long, value_name = "FILE")]
    pub principles_file: Option<PathBuf>,

    /// Send OpenTelemetry traces (a span per step attempt, in a trace per run) to this
    /// OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318 (/v1/traces is appended); off when
    /// unset [env: RAILYARD_OTLP_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT; service.name
    /// from OTEL_SERVICE_NAME].
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// Largest webhook body that may be configured.
const MAX_HOOK_BODY_BYTES: u64 = 32 << 20;
/// Longest delivery id retention that may be configured: a year.
const MAX_DEDUP_RETENTION_SECS: u64 = 366 * 86_400;
/// Most triggers the configuration may define.
const MAX_CONFIGURED_TRIGGERS: usize = 1000;

/// Bounds of `max_connections` and `idle_timeout_secs`.
const MAX_CONNECTIONS_LIMIT: usize = 1 << 20;
/// Largest `/mcp` session cap that may be configured (~5 GB of sessions).
const MAX_MCP_SESSIONS: u64 = 100_000;
const MAX_IDLE_TIMEOUT_SECS: u64 = 24 * 3600;
/// Bounds of `max_child_depth` and `max_children_per_run` (a parent's close settles
/// every child still open in one commit, so the count stays modest).
const MAX_CHILD_DEPTH_LIMIT: u32 = 32;
const MAX_CHILDREN_PER_RUN_LIMIT: u32 = 10_000;
/// Bounds of `cache_size_mib` (64 GiB at most) and its default.
const MAX_CACHE_SIZE_MIB: u64 = 65_536;
const DEFAULT_CACHE_SIZE_MIB: u64 = (railyard_store::redb_backend::DEFAULT_CACHE_BYTES >> 20) as u64;
/// Bounds of `kept_transcripts_mib` (1 GiB a run at most) and its default.
const MAX_KEPT_TRANSCRIPTS_MIB: u64 = 1024;
const DEFAULT_KEPT_TRANSCRIPTS_MIB: u64 = 64;

/// Where the server stores runs (`server.store`).
#[derive(Clone, PartialEq)]
pub(crate) enum StoreSetting {
    /// A redb file in this directory (which also holds the token keys).
    Redb(PathBuf),
    /// A PostgreSQL database, by its connection URL (shown only redacted).
    Postgres(String),
}

impl StoreSetting {
    /// How the store is shown: the directory, or the URL without its password.
    pub(crate) fn shown(&self) -> String {
        match self {
            Self::Redb(dir) => format!("redb:{}", dir.display()),
            Self::Postgres(url) => railyard_store_postgres::redact(url),
        }
    }
}

impl std::fmt::Debug for StoreSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// The server's settings, resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerSettings {
    /// Live output's caps, retention and flush interval (`[output]`).
    pub output: railyard_engine::output::OutputSettings,
    /// How long a finished batch is kept (`[batches] retention_secs`); zero: for good.
    pub batch_retention: Duration,
    /// The directory of the server's local files: the redb database (with a redb
    /// store), the token keys and the first admin key.
    pub data_dir: PathBuf,
    /// Where runs are stored.
    pub store: StoreSetting,
    /// With a Postgres store: the root certificates of the database's (a PEM file).
    pub store_ca: Option<PathBuf>,
    pub listen: SocketAddr,
    pub http_listen: SocketAddr,
    pub workflows: PathBuf,
    /// The demo built into the binary stands in for `workflows` (no directory was
    /// configured and the default one has no definitions; see [`crate::serve::builtin`]).
    pub built_in_demo: bool,
    pub shutdown_grace: Duration,
    /// API keys required ([`ServerConfig::auth`]).
    pub auth: bool,
    /// Non-loopback listeners allowed without auth.
    pub insecure: bool,
    /// `[delivery]`, as given (checked).
    pub delivery: DeliverySection,
    /// TLS files; `None`: plaintext.
    pub tls: Option<TlsFiles>,
    /// Connection limit and idle timeout of each listener.
    pub net: NetLimits,
    /// The configuration's webhook triggers (`[[triggers]]` and the triggers file).
    pub triggers: Vec<TriggerInput>,
    /// Largest webhook body.
    pub hook_max_body_bytes: usize,
    /// How long a webhook delivery id is remembered.
    pub dedup_retention: Duration,
    /// Bounds on polled triggers (`hooks.max_pollers`, ...).
    pub poll_limits: railyard_engine::poller::PollLimits,
    /// `[secrets]`: what API-made triggers may name as secrets.
    pub secrets: railyard_engine::secrets::SecretPolicy,
    /// Bounds on trees of child runs.
    pub child_limits: ChildLimits,
    /// MiB the database's page cache may hold.
    pub cache_size_mib: u64,
    /// MiB of finished steps' checkpoints a run keeps (0: none).
    pub kept_transcripts_mib: u64,
    /// Caps on `/mcp` sessions.
    pub mcp_sessions: SessionLimits,
    /// With a postgres store: the host the other nodes reach this one at.
    pub advertise_host: Option<String>,
    /// With a postgres store: the writer lease's length.
    pub node_lease: Duration,
    /// With a postgres store and TLS: the CA trusted for the leader's certificate.
    pub peer_ca: Option<PathBuf>,
    /// The agents' principles (`server.principles_file`; none: the built-in ones).
    pub principles_file: Option<PathBuf>,
}

/// Default `server.node_lease`.
pub(crate) const DEFAULT_NODE_LEASE: Duration = Duration::from_secs(30);
/// Bounds of `server.node_lease`.
const MIN_NODE_LEASE: Duration = Duration::from_secs(1);
const MAX_NODE_LEASE: Duration = Duration::from_secs(600);

impl ServerSettings {
    /// The server library's configuration for these settings.
    pub(crate) fn config(&self) -> ServerConfig {
        let mut config = ServerConfig::new(&self.data_dir, &self.workflows);
        config.grpc_listen = self.listen;
        config.http_listen = self.http_listen;
        config.auth = self.auth;
        config.insecure = self.insecure;
        let d = &self.delivery;
        let mut delivery = railyard_engine::delivery::DeliverySettings {
            signing_secret: d
                .signing_secret
                .as_deref()
                .and_then(railyard_engine::delivery::SigningSecret::new),
            ..Default::default()
        };
        if let Some(v) = d.request_timeout_ms {
            delivery.request_timeout = Duration::from_millis(v);
        }
        if let Some(v) = d.max_attempts {
            delivery.max_attempts = v;
        }
        if let Some(v) = d.max_elapsed_secs {
            delivery.max_elapsed = Duration::from_secs(v);
        }
        if let Some(v) = d.initial_backoff_ms {
            delivery.initial_backoff = Duration::from_millis(v);
        }
        if let Some(v) = d.max_backoff_secs {
            delivery.max_backoff = Duration::from_secs(v);
        }
        if let Some(v) = d.max_concurrent {
            delivery.max_concurrent = v;
        }
        delivery.max_per_target = d.max_per_target;
        delivery.max_per_namespace = d.max_per_namespace;
        // Checked when the settings were resolved.
        delivery.allow_networks = d
            .allow_networks
            .as_ref()
            .map(|l| l.items().iter().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        config.delivery = delivery;
        config.tls = self.tls.clone();
        config.net = self.net;
        config.child_limits = self.child_limits;
        config.cache_bytes = usize::try_from(self.cache_size_mib << 20).unwrap_or(usize::MAX);
        config.kept_checkpoint_bytes = self.kept_transcripts_mib << 20;
        config.triggers.config = self.triggers.clone();
        config.triggers.max_body_bytes = self.hook_max_body_bytes;
        config.triggers.dedup_retention_ms = self.dedup_retention.as_millis() as u64;
        config.triggers.poll = self.poll_limits;
        config.triggers.secrets = self.secrets.clone();
        config.output = self.output.clone();
        config.purge.batch_retention_ms = self.batch_retention.as_millis() as i64;
        config.principles_file = self.principles_file.clone();
        if self.built_in_demo {
            config.embedded_workflows.push(builtin::DEMO_WORKFLOW);
        }
        config.http_extension = Some(crate::serve::mcp::http_extension(self.mcp_sessions));
        config.http_open_extension = Some(crate::serve::console::http_extension());
        config
    }

    /// Says, once the server is up, that it serves the demo built into the binary
    /// because the workflows directory had none.
    pub(crate) fn log_built_in_demo(&self) {
        if self.built_in_demo {
            tracing::info!(
                dir = %self.workflows.display(),
                "no workflow definitions there and no --workflows given: serving the demo built into this binary (<built-in>/demo.json)"
            );
        }
    }

    /// The host the other nodes on a shared database reach this one at: the
    /// advertised host, or the gRPC listen IP.
    pub(crate) fn advertised_host(&self) -> String {
        self.advertise_host
            .clone()
            .unwrap_or_else(|| self.listen.ip().to_string())
    }

    /// Where the definitions come from, for the listening lines: the directory, or
    /// `<built-in>`.
    pub(crate) fn workflows_label(&self) -> String {
        if self.built_in_demo {
            builtin::WORKFLOWS_LABEL.to_string()
        } else {
            self.workflows.display().to_string()
        }
    }
}

impl ServerArgs {
    /// The config file, the process environment and these flags, resolved.
    pub(crate) fn settings(&self) -> Result<ServerSettings, ConfigError> {
        self.settings_with(|k| std::env::var(k).ok())
    }

    /// [`ServerArgs::settings`] with the environment read through `env`.
    pub(crate) fn settings_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ServerSettings, ConfigError> {
        let flags = ServerFile {
            server: ServerSection {
                data_dir: self.data_dir.clone(),
                store: self.store.clone(),
                keys_dir: self.keys_dir.clone(),
                store_ca: self.store_ca.clone(),
                listen: self.listen,
                http_listen: self.http_listen,
                workflows: self.workflows.clone(),
                shutdown_grace_secs: self.shutdown_grace,
                auth: self.auth.then_some(true),
                insecure: self.insecure.then_some(true),
                tls_cert: self.tls_cert.clone(),
                tls_key: self.tls_key.clone(),
                tls_client_ca: self.tls_client_ca.clone(),
                max_connections: self.max_connections,
                idle_timeout_secs: self.idle_timeout,
                max_connections_per_peer: self.max_connections_per_peer,
                http_request_timeout_secs: self.http_request_timeout,
                http_header_timeout_secs: self.http_header_timeout,
                max_child_depth: self.max_child_depth,
                max_children_per_run: self.max_children_per_run,
                cache_size_mib: self.cache_size_mib,
                kept_transcripts_mib: self.kept_transcripts_mib,
                mcp_max_sessions: self.mcp_max_sessions,
                mcp_max_sessions_per_key: self.mcp_max_sessions_per_key,
                mcp_session_idle_secs: self.mcp_session_idle,
                advertise_host: self.advertise_host.clone(),
                node_lease: self.node_lease.clone(),
                peer_ca: self.peer_ca.clone(),
                principles_file: self.principles_file.clone(),
            },
            delivery: DeliverySection {
                allow_networks: (!self.delivery_allow_networks.is_empty())
                    .then(|| NetworkList::List(self.delivery_allow_networks.clone())),
                ..DeliverySection::default()
            },
            telemetry: crate::telemetry::TelemetrySection {
                otlp_endpoint: self.otlp_endpoint.clone(),
            },
            ..ServerFile::default()
        };
        let loaded = Loader::new()
            .file(self.config.as_deref())?
            .env(ENV, env)
            .flags(&flags, FLAG_NAMES)?
            .load::<ServerFile>()?;
        // Relative paths in the file mean "next to the file", wherever the server starts.
        let path = |key: &str, value: &Option<PathBuf>, default: &str| {
            let value = value.clone().unwrap_or_else(|| PathBuf::from(default));
            match loaded.file_of(key) {
                Some(file) if value.is_relative() => file.parent().unwrap_or(Path::new(".")).join(value),
                _ => value,
            }
        };
        let s = &loaded.value.server;
        let hooks = &loaded.value.hooks;
        let mut triggers = loaded.value.triggers.clone();
        if let Some(file) = &hooks.triggers_file {
            let file = path("hooks.triggers_file", &Some(file.clone()), "");
            let more = Loader::new().file(Some(&file))?.load::<TriggersFile>()?;
            triggers.extend(more.value.triggers);
        }
        if triggers.len() > MAX_CONFIGURED_TRIGGERS {
            return Err(loaded.invalid(
                "triggers",
                format!("{} triggers; at most {MAX_CONFIGURED_TRIGGERS}", triggers.len()),
            ));
        }
        let max_body = hooks
            .max_body_bytes
            .unwrap_or(railyard_server::http::DEFAULT_HOOK_BODY_BYTES as u64);
        if !(1024..=MAX_HOOK_BODY_BYTES).contains(&max_body) {
            return Err(loaded.invalid(
                "hooks.max_body_bytes",
                format!("{max_body} is not between 1024 and {MAX_HOOK_BODY_BYTES}"),
            ));
        }
        let retention = hooks.dedup_retention_secs.unwrap_or(7 * 86_400);
        if !(60..=MAX_DEDUP_RETENTION_SECS).contains(&retention) {
            return Err(loaded.invalid(
                "hooks.dedup_retention_secs",
                format!("{retention} is not between 60 and {MAX_DEDUP_RETENTION_SECS}"),
            ));
        }
        let poll_limits = hooks.poll_limits().map_err(|(k, m)| loaded.invalid(k, m))?;
        let secrets = railyard_engine::secrets::SecretPolicy::new(loaded.value.secrets.clone())
            .map_err(|m| loaded.invalid("secrets", m))?;
        let workflows = path("server.workflows", &s.workflows, DEFAULT_WORKFLOWS);
        let optional = |key: &str, value: &Option<PathBuf>| value.as_ref().map(|_| path(key, value, ""));
        let tls = match (
            optional("server.tls_cert", &s.tls_cert),
            optional("server.tls_key", &s.tls_key),
        ) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca: optional("server.tls_client_ca", &s.tls_client_ca),
            }),
            (None, None) if s.tls_client_ca.is_some() => {
                return Err(loaded.invalid(
                    "server.tls_client_ca",
                    "mutual TLS needs server.tls_cert and server.tls_key too",
                ));
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(loaded.invalid("server.tls_key", "missing: server.tls_cert is set"));
            }
            (None, Some(_)) => {
                return Err(loaded.invalid("server.tls_cert", "missing: server.tls_key is set"));
            }
        };
        let (store, data_dir) = match (&s.store, &s.data_dir) {
            (Some(_), Some(_)) => {
                return Err(loaded.invalid(
                    "server.store",
                    "server.data_dir is set too; give one of them (server.data_dir DIR means \
                     server.store redb:DIR)",
                ));
            }
            (Some(store), None) => {
                if let Some(dir) = store.strip_prefix("redb:") {
                    if dir.is_empty() {
                        return Err(loaded.invalid("server.store", "redb: needs a directory: redb:DIR"));
                    }
                    let dir = path("server.store", &Some(PathBuf::from(dir)), "");
                    (StoreSetting::Redb(dir.clone()), dir)
                } else if store.starts_with("postgres://") || store.starts_with("postgresql://") {
                    let keys = path("server.keys_dir", &s.keys_dir, DEFAULT_DATA_DIR);
                    (StoreSetting::Postgres(store.clone()), keys)
                } else {
                    return Err(loaded.invalid(
                        "server.store",
                        format!(
                            "{} is neither redb:DIR nor postgres://USER@HOST:PORT/DB",
                            railyard_model::echo(&railyard_store_postgres::redact(store))
                        ),
                    ));
                }
            }
            (None, dir) => {
                let dir = path("server.data_dir", dir, DEFAULT_DATA_DIR);
                (StoreSetting::Redb(dir.clone()), dir)
            }
        };
        if s.keys_dir.is_some() && matches!(store, StoreSetting::Redb(_)) {
            return Err(loaded.invalid(
                "server.keys_dir",
                "only with a postgres store: with redb the keys are in the data directory",
            ));
        }
        if s.store_ca.is_some() && matches!(store, StoreSetting::Redb(_)) {
            return Err(loaded.invalid(
                "server.store_ca",
                "only with a postgres store: it names the database's root certificates",
            ));
        }
        let postgres = matches!(store, StoreSetting::Postgres(_));
        for (key, given) in [
            ("server.advertise_host", s.advertise_host.is_some()),
            ("server.node_lease", s.node_lease.is_some()),
            ("server.peer_ca", s.peer_ca.is_some()),
        ] {
            if given && !postgres {
                return Err(loaded.invalid(
                    key,
                    "only with a postgres store: several nodes share a database only there",
                ));
            }
        }
        if postgres && tls.as_ref().is_some_and(|t| t.client_ca.is_some()) {
            return Err(loaded.invalid(
                "server.tls_client_ca",
                "mutual TLS is not supported with a postgres store: a node that follows cannot pass \
                 a client's certificate on to the leader; use TLS with API keys (--auth) instead",
            ));
        }
        let node_lease = match &s.node_lease {
            None => DEFAULT_NODE_LEASE,
            Some(text) => {
                let d = crate::client::timefmt::parse_duration(text)
                    .map_err(|e| loaded.invalid("server.node_lease", e))?;
                if !(MIN_NODE_LEASE..=MAX_NODE_LEASE).contains(&d) {
                    return Err(
                        loaded.invalid("server.node_lease", format!("{text} is not between 1s and 10m"))
                    );
                }
                d
            }
        };
        if let Some(host) = &s.advertise_host
            && (host.trim().is_empty() || host.contains(['/', ' ', '@']) || host.len() > 253)
        {
            return Err(loaded.invalid(
                "server.advertise_host",
                format!("{} is not a host name or IP address", railyard_model::echo(host)),
            ));
        }
        let settings = ServerSettings {
            advertise_host: s.advertise_host.clone(),
            node_lease,
            peer_ca: optional("server.peer_ca", &s.peer_ca),
            principles_file: optional("server.principles_file", &s.principles_file),
            tls,
            data_dir,
            store,
            store_ca: optional("server.store_ca", &s.store_ca),
            built_in_demo: builtin::use_built_in(s.workflows.is_some(), &workflows),
            workflows,
            listen: s.listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7400))),
            http_listen: s.http_listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7401))),
            shutdown_grace: Duration::from_secs(s.shutdown_grace_secs.unwrap_or(10)),
            auth: s.auth.unwrap_or(false),
            insecure: s.insecure.unwrap_or(false),
            net: NetLimits {
                max_connections: s.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
                idle_timeout: s
                    .idle_timeout_secs
                    .map_or(DEFAULT_IDLE_TIMEOUT, Duration::from_secs),
                max_per_peer: s.max_connections_per_peer.unwrap_or(DEFAULT_MAX_PER_PEER),
                request_timeout: s
                    .http_request_timeout_secs
                    .map_or(DEFAULT_REQUEST_TIMEOUT, Duration::from_secs),
                header_timeout: s
                    .http_header_timeout_secs
                    .map_or(DEFAULT_HEADER_TIMEOUT, Duration::from_secs),
            },
            delivery: loaded.value.delivery.clone(),
            output: super::output::resolve(&loaded.value.output, |k, m| loaded.invalid(k, m))?,
            batch_retention: super::output::batch_retention(&loaded.value.batches, |k, m| {
                loaded.invalid(k, m)
            })?,
            triggers,
            hook_max_body_bytes: max_body as usize,
            dedup_retention: Duration::from_secs(retention),
            poll_limits,
            secrets,
            child_limits: ChildLimits {
                max_depth: s.max_child_depth.unwrap_or(ChildLimits::default().max_depth),
                max_children: s
                    .max_children_per_run
                    .unwrap_or(ChildLimits::default().max_children),
            },
            cache_size_mib: s.cache_size_mib.unwrap_or(DEFAULT_CACHE_SIZE_MIB),
            kept_transcripts_mib: s.kept_transcripts_mib.unwrap_or(DEFAULT_KEPT_TRANSCRIPTS_MIB),
            mcp_sessions: SessionLimits {
                max_total: s.mcp_max_sessions.unwrap_or(SessionLimits::DEFAULT_MAX_TOTAL),
                max_per_key: s
                    .mcp_max_sessions_per_key
                    .unwrap_or(SessionLimits::DEFAULT_MAX_PER_KEY),
                idle: s
                    .mcp_session_idle_secs
                    .map_or(SessionLimits::DEFAULT_IDLE, Duration::from_secs),
            },
        };
        let m = &settings.mcp_sessions;
        let mcp: [(&str, u64, u64, u64); 3] = [
            ("server.mcp_max_sessions", m.max_total as u64, 1, MAX_MCP_SESSIONS),
            (
                "server.mcp_max_sessions_per_key",
                m.max_per_key as u64,
                1,
                MAX_MCP_SESSIONS,
            ),
            (
                "server.mcp_session_idle_secs",
                m.idle.as_secs(),
                1,
                MAX_IDLE_TIMEOUT_SECS,
            ),
        ];
        for (key, v, lo, hi) in mcp {
            if !(lo..=hi).contains(&v) {
                return Err(loaded.invalid(key, format!("{v} is outside {lo}..={hi}")));
            }
        }
        if !(1..=MAX_CACHE_SIZE_MIB).contains(&settings.cache_size_mib) {
            return Err(loaded.invalid(
                "server.cache_size_mib",
                format!("from 1 to {MAX_CACHE_SIZE_MIB} MiB"),
            ));
        }
        if settings.kept_transcripts_mib > MAX_KEPT_TRANSCRIPTS_MIB {
            return Err(loaded.invalid(
                "server.kept_transcripts_mib",
                format!("from 0 to {MAX_KEPT_TRANSCRIPTS_MIB} MiB"),
            ));
        }
        if settings.child_limits.max_depth > MAX_CHILD_DEPTH_LIMIT {
            return Err(loaded.invalid(
                "server.max_child_depth",
                format!("from 0 to {MAX_CHILD_DEPTH_LIMIT}"),
            ));
        }
        if settings.child_limits.max_children > MAX_CHILDREN_PER_RUN_LIMIT {
            return Err(loaded.invalid(
                "server.max_children_per_run",
                format!("from 0 to {MAX_CHILDREN_PER_RUN_LIMIT}"),
            ));
        }
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&settings.net.max_connections) {
            return Err(loaded.invalid(
                "server.max_connections",
                format!("from 1 to {MAX_CONNECTIONS_LIMIT}"),
            ));
        }
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&settings.net.max_per_peer) {
            return Err(loaded.invalid(
                "server.max_connections_per_peer",
                format!("from 1 to {MAX_CONNECTIONS_LIMIT}"),
            ));
        }
        if !(1..=MAX_IDLE_TIMEOUT_SECS).contains(&settings.net.request_timeout.as_secs()) {
            return Err(loaded.invalid(
                "server.http_request_timeout_secs",
                format!("from 1 to {MAX_IDLE_TIMEOUT_SECS} seconds"),
            ));
        }
        if !(1..=settings.net.request_timeout.as_secs()).contains(&settings.net.header_timeout.as_secs()) {
            return Err(loaded.invalid(
                "server.http_header_timeout_secs",
                format!(
                    "from 1 to the request timeout ({} seconds)",
                    settings.net.request_timeout.as_secs()
                ),
            ));
        }
        if !(1..=MAX_IDLE_TIMEOUT_SECS).contains(&settings.net.idle_timeout.as_secs()) {
            return Err(loaded.invalid(
                "server.idle_timeout_secs",
                format!("from 1 to {MAX_IDLE_TIMEOUT_SECS} seconds"),
            ));
        }
        let d = &settings.delivery;
        if let Some(list) = &d.allow_networks {
            for n in list.items() {
                if let Err(e) = n.parse::<railyard_engine::delivery::destination::Network>() {
                    return Err(loaded.invalid("delivery.allow_networks", e));
                }
            }
        }
        let ranges: [(&str, Option<u64>, u64, u64); 8] = [
            ("delivery.request_timeout_ms", d.request_timeout_ms, 100, 600_000),
            ("delivery.max_attempts", d.max_attempts.map(u64::from), 1, 100),
            ("delivery.max_elapsed_secs", d.max_elapsed_secs, 1, 30 * 86_400),
            ("delivery.initial_backoff_ms", d.initial_backoff_ms, 1, 3_600_000),
            ("delivery.max_backoff_secs", d.max_backoff_secs, 1, 86_400),
            (
                "delivery.max_concurrent",
                d.max_concurrent.map(|v| v as u64),
                1,
                4096,
            ),
            (
                "delivery.max_per_target",
                d.max_per_target.map(|v| v as u64),
                1,
                4096,
            ),
            (
                "delivery.max_per_namespace",
                d.max_per_namespace.map(|v| v as u64),
                1,
                4096,
            ),
        ];
        for (key, value, lo, hi) in ranges {
            if let Some(v) = value
                && !(lo..=hi).contains(&v)
            {
                return Err(loaded.invalid(key, format!("{v} is outside {lo}..={hi}")));
            }
        }
        if settings.shutdown_grace.as_secs() > MAX_SHUTDOWN_GRACE_SECS {
            return Err(loaded.invalid(
                "server.shutdown_grace_secs",
                format!("at most {MAX_SHUTDOWN_GRACE_SECS} seconds"),
            ));
        }
        if postgres && settings.advertise_host.is_none() {
            for (key, addr) in [
                ("server.listen", settings.listen),
                ("server.http_listen", settings.http_listen),
            ] {
                if addr.ip().is_unspecified() {
                    return Err(loaded.invalid(
                        key,
                        format!(
                            "{addr} listens on every interface: with a postgres store the other nodes \
                             must know where to reach this one; give --advertise-host HOST \
                             (server.advertise_host)"
                        ),
                    ));
                }
            }
        }
        if settings.listen == settings.http_listen && settings.listen.port() != 0 {
            return Err(loaded.invalid(
                "server.http_listen",
                format!("{} is also the gRPC listen address", settings.http_listen),
            ));
        }
        Ok(settings)
    }
}
