//! The shape of `railyard server`'s config file ([`ServerFile`] and its sections) and
//! the environment variables that set its keys: what the loader reads, kept apart
//! from how `settings.rs` resolves and checks it.

use std::net::SocketAddr;
use std::path::PathBuf;

use railyard_config::EnvVar;
use railyard_engine::service::triggers::TriggerInput;
use serde::{Deserialize, Serialize};

/// The server's config file: one section per part of the server, every key optional,
/// unknown keys refused.
///
/// ```toml
/// [server]
/// data_dir = "/var/lib/railyard"      # relative paths are taken from the file's directory
/// # store = "postgres://railyard@db:5432/railyard"   # instead of data_dir (password: PGPASSWORD)
/// # keys_dir = "/var/lib/railyard"    # admin.key, with a postgres store
/// # store_ca = "db-ca.pem"            # root certificates of the database's (sslmode=verify-full)
/// listen = "0.0.0.0:7400"
/// http_listen = "0.0.0.0:7401"
/// workflows = "workflows"
/// shutdown_grace_secs = 10
/// auth = true                         # API keys required; needed on a non-loopback address
/// # insecure = true                   # ... unless this says to listen there without auth
/// tls_cert = "server.pem"             # TLS on both listeners (with tls_key)
/// tls_key = "server.key"
/// tls_client_ca = "clients-ca.pem"    # mutual TLS on gRPC
/// max_connections = 4096              # per listener
/// idle_timeout_secs = 120
/// max_connections_per_peer = 256     # per listener, from one address (IPv6: a /64)
/// http_request_timeout_secs = 30     # for an HTTP request to arrive whole
/// http_header_timeout_secs = 5       # for its headers to
/// cache_size_mib = 64                 # the database's page cache
/// kept_transcripts_mib = 64           # finished steps' checkpoints kept per run (0: none)
/// # advertise_host = "node1.internal" # with a postgres store: where other nodes reach this one
/// # node_lease = "30s"                # with a postgres store: the writer lease (failover time)
/// # peer_ca = "ca.pem"                # with a postgres store and TLS: trusted for the leader
/// # principles_file = "principles.md" # the agents' principles (default: built in)
///
/// [delivery]                          # result delivery (callback URLs, subscriptions)
/// signing_secret = "..."              # better: RAILYARD_DELIVERY_SIGNING_SECRET
/// request_timeout_ms = 10000
/// max_attempts = 8                    # per round; `railyard run redeliver` starts another
/// max_elapsed_secs = 3600
/// initial_backoff_ms = 1000
/// max_backoff_secs = 600
/// max_concurrent = 32
/// max_per_target = 8                  # calls in flight to one origin (default: a quarter)
/// max_per_namespace = 16              # calls in flight for one namespace (default: half)
/// allow_networks = ["127.0.0.0/8"]    # internal networks deliveries may reach (default: none)
///
/// [telemetry]                         # OpenTelemetry traces, off without an endpoint
/// otlp_endpoint = "http://127.0.0.1:4318"   # OTLP/HTTP; /v1/traces is appended
///
/// [hooks]
/// max_body_bytes = 1048576            # larger webhook bodies get 413
/// dedup_retention_secs = 604800       # how long a delivery id is remembered
/// max_pollers = 4                     # polled triggers: polls at once, and per poll
/// items_per_poll = 100                #   at most this many items
/// pages_per_poll = 10                 #   and pages
/// triggers_file = "triggers.toml"     # more [[triggers]], in a file of their own
///
/// [secrets]                           # variables API-made triggers may name as $NAME secrets,
/// GITHUB_TOKEN = ["team-a"]           #   each with the namespaces that may ("*": every one);
/// GITHUB_WEBHOOK_SECRET = ["*"]       #   never RAILYARD_*, the server's own settings
///
/// [output]                            # live output of steps (docs/live-output.md)
/// attempt_cap_bytes = 4194304         # per step attempt; past it chunks are dropped, counted
/// run_cap_bytes = 16777216            # per run, over all its attempts
/// retention_secs = 604800             # kept this long after the run closed (0: as long as the run)
/// flush_interval_ms = 200             # how often pending output is written (what a crash may lose)
/// watch_buffer = 1024                 # chunks a run's live channel holds; a slower watcher lags
///
/// [batches]                           # batch operations (docs/batches.md)
/// retention_secs = 2592000            # a finished batch is kept this long after it closed (0: for good)
///
/// [[triggers]]                        # POST /hooks/default/pr-review
/// id = "pr-review"
/// workflow = "review"
/// goal = "Review PR #{{$.number}}: {{$.pull_request.title}}"
/// context = { repo = "{{$.repository.full_name}}" }
/// signature_secret = "$GITHUB_WEBHOOK_SECRET"   # an environment variable, never the secret
/// concurrency_key = "{{$.repository.full_name}}#{{$.number}}"
/// mode = "serial"
/// ```
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerFile {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub delivery: DeliverySection,
    #[serde(default)]
    pub hooks: HooksSection,
    #[serde(default)]
    pub output: OutputSection,
    #[serde(default)]
    pub batches: BatchesSection,
    /// The environment variables API-made triggers may name as secrets, each with
    /// the namespaces whose triggers may (`railyard_engine::secrets`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secrets: std::collections::BTreeMap<String, Vec<String>>,
    /// OpenTelemetry traces (read by `crate::telemetry` before logging starts).
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetrySection,
    /// Webhook triggers: written into storage at start, read-only through the API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<TriggerInput>,
}

/// `[delivery]`: how closed runs' results are POSTed (see `railyard_engine::delivery`).
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeliverySection {
    /// The HMAC-SHA256 key of the `Railyard-Signature` header.
    pub signing_secret: Option<String>,
    pub request_timeout_ms: Option<u64>,
    pub max_attempts: Option<u32>,
    pub max_elapsed_secs: Option<u64>,
    pub initial_backoff_ms: Option<u64>,
    pub max_backoff_secs: Option<u64>,
    pub max_concurrent: Option<usize>,
    pub max_per_target: Option<usize>,
    pub max_per_namespace: Option<usize>,
    /// Internal networks deliveries may reach: a list, or one comma-separated string
    /// (as the environment gives it).
    pub allow_networks: Option<NetworkList>,
}

/// `delivery.allow_networks`: a TOML list, or a comma-separated string.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub(crate) enum NetworkList {
    List(Vec<String>),
    Text(String),
}

impl NetworkList {
    pub(super) fn items(&self) -> Vec<&str> {
        match self {
            Self::List(v) => v.iter().map(|s| s.trim()).collect(),
            Self::Text(t) => t.split(',').map(str::trim).filter(|s| !s.is_empty()).collect(),
        }
    }
}

impl std::fmt::Debug for DeliverySection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliverySection")
            .field(
                "signing_secret",
                &self.signing_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("max_attempts", &self.max_attempts)
            .field("max_elapsed_secs", &self.max_elapsed_secs)
            .field("initial_backoff_ms", &self.initial_backoff_ms)
            .field("max_backoff_secs", &self.max_backoff_secs)
            .field("max_concurrent", &self.max_concurrent)
            .field("max_per_target", &self.max_per_target)
            .field("max_per_namespace", &self.max_per_namespace)
            .field("allow_networks", &self.allow_networks)
            .finish()
    }
}

impl PartialEq for DeliverySection {
    fn eq(&self, o: &Self) -> bool {
        (
            &self.signing_secret,
            self.request_timeout_ms,
            self.max_attempts,
            self.max_elapsed_secs,
            self.initial_backoff_ms,
            self.max_backoff_secs,
            self.max_concurrent,
            self.max_per_target,
            self.max_per_namespace,
            &self.allow_networks,
        ) == (
            &o.signing_secret,
            o.request_timeout_ms,
            o.max_attempts,
            o.max_elapsed_secs,
            o.initial_backoff_ms,
            o.max_backoff_secs,
            o.max_concurrent,
            o.max_per_target,
            o.max_per_namespace,
            &o.allow_networks,
        )
    }
}

/// `[hooks]`: webhook settings.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HooksSection {
    pub max_body_bytes: Option<u64>,
    pub dedup_retention_secs: Option<u64>,
    /// A TOML or JSON file of `[[triggers]]` (relative: next to the config file).
    pub triggers_file: Option<PathBuf>,
    /// Polled triggers: polls at once (1 to 64), items per poll (1 to 1000) and
    /// pages per poll (1 to 100).
    pub max_pollers: Option<u64>,
    pub items_per_poll: Option<u64>,
    pub pages_per_poll: Option<u64>,
}

impl HooksSection {
    /// The polled triggers' bounds, or the key that is out of range and why.
    pub(crate) fn poll_limits(&self) -> Result<railyard_engine::poller::PollLimits, (&'static str, String)> {
        let mut limits = railyard_engine::poller::PollLimits::default();
        for (key, value, max, dst) in [
            ("hooks.max_pollers", self.max_pollers, 64, &mut limits.max_pollers),
            (
                "hooks.items_per_poll",
                self.items_per_poll,
                1000,
                &mut limits.items_per_poll,
            ),
            (
                "hooks.pages_per_poll",
                self.pages_per_poll,
                100,
                &mut limits.pages_per_poll,
            ),
        ] {
            match value {
                Some(v) if (1..=max).contains(&v) => *dst = v as usize,
                Some(v) => return Err((key, format!("{v} is not between 1 and {max}"))),
                None => {}
            }
        }
        Ok(limits)
    }
}

/// `[output]`: bounds and timing of live output (`railyard_engine::output`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputSection {
    pub attempt_cap_bytes: Option<u64>,
    pub run_cap_bytes: Option<u64>,
    pub retention_secs: Option<u64>,
    pub flush_interval_ms: Option<u64>,
    pub watch_buffer: Option<usize>,
}

/// `[batches]`: how long finished batches are kept (the retention purge).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchesSection {
    pub retention_secs: Option<u64>,
}

/// A triggers file: `[[triggers]]` tables and nothing else.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggersFile {
    #[serde(default)]
    pub(super) triggers: Vec<TriggerInput>,
}

/// `[server]`: where the server keeps its data and listens.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerSection {
    pub data_dir: Option<PathBuf>,
    pub store: Option<String>,
    pub keys_dir: Option<PathBuf>,
    pub store_ca: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    pub workflows: Option<PathBuf>,
    pub shutdown_grace_secs: Option<u64>,
    pub auth: Option<bool>,
    pub insecure: Option<bool>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    pub max_connections: Option<usize>,
    pub idle_timeout_secs: Option<u64>,
    pub max_connections_per_peer: Option<usize>,
    pub http_request_timeout_secs: Option<u64>,
    pub http_header_timeout_secs: Option<u64>,
    pub max_child_depth: Option<u32>,
    pub max_children_per_run: Option<u32>,
    pub cache_size_mib: Option<u64>,
    pub kept_transcripts_mib: Option<u64>,
    pub mcp_max_sessions: Option<usize>,
    pub mcp_max_sessions_per_key: Option<usize>,
    pub mcp_session_idle_secs: Option<u64>,
    pub advertise_host: Option<String>,
    pub node_lease: Option<String>,
    pub peer_ca: Option<PathBuf>,
    pub principles_file: Option<PathBuf>,
}

/// The environment variables of the server's settings.
pub(super) const ENV: &[EnvVar] = &[
    EnvVar {
        var: "RAILYARD_DATA_DIR",
        key: "server.data_dir",
    },
    EnvVar {
        var: "RAILYARD_STORE",
        key: "server.store",
    },
    EnvVar {
        var: "RAILYARD_KEYS_DIR",
        key: "server.keys_dir",
    },
    EnvVar {
        var: "RAILYARD_STORE_CA",
        key: "server.store_ca",
    },
    EnvVar {
        var: "RAILYARD_LISTEN",
        key: "server.listen",
    },
    EnvVar {
        var: "RAILYARD_HTTP_LISTEN",
        key: "server.http_listen",
    },
    EnvVar {
        var: "RAILYARD_WORKFLOWS",
        key: "server.workflows",
    },
    EnvVar {
        var: "RAILYARD_AUTH",
        key: "server.auth",
    },
    EnvVar {
        var: "RAILYARD_DELIVERY_SIGNING_SECRET",
        key: "delivery.signing_secret",
    },
    EnvVar {
        var: "RAILYARD_TLS_CERT",
        key: "server.tls_cert",
    },
    EnvVar {
        var: "RAILYARD_TLS_KEY",
        key: "server.tls_key",
    },
    EnvVar {
        var: "RAILYARD_TLS_CLIENT_CA",
        key: "server.tls_client_ca",
    },
    EnvVar {
        var: "RAILYARD_MAX_CONNECTIONS",
        key: "server.max_connections",
    },
    EnvVar {
        var: "RAILYARD_IDLE_TIMEOUT",
        key: "server.idle_timeout_secs",
    },
    EnvVar {
        var: "RAILYARD_MAX_CHILD_DEPTH",
        key: "server.max_child_depth",
    },
    EnvVar {
        var: "RAILYARD_MAX_CHILDREN_PER_RUN",
        key: "server.max_children_per_run",
    },
    EnvVar {
        var: "RAILYARD_MAX_CONNECTIONS_PER_PEER",
        key: "server.max_connections_per_peer",
    },
    EnvVar {
        var: "RAILYARD_HTTP_REQUEST_TIMEOUT",
        key: "server.http_request_timeout_secs",
    },
    EnvVar {
        var: "RAILYARD_HTTP_HEADER_TIMEOUT",
        key: "server.http_header_timeout_secs",
    },
    EnvVar {
        var: "RAILYARD_DELIVERY_ALLOW_NETWORKS",
        key: "delivery.allow_networks",
    },
    EnvVar {
        var: "RAILYARD_CACHE_SIZE_MIB",
        key: "server.cache_size_mib",
    },
    EnvVar {
        var: "RAILYARD_KEPT_TRANSCRIPTS_MIB",
        key: "server.kept_transcripts_mib",
    },
    EnvVar {
        var: "RAILYARD_MCP_MAX_SESSIONS",
        key: "server.mcp_max_sessions",
    },
    EnvVar {
        var: "RAILYARD_MCP_MAX_SESSIONS_PER_KEY",
        key: "server.mcp_max_sessions_per_key",
    },
    EnvVar {
        var: "RAILYARD_MCP_SESSION_IDLE",
        key: "server.mcp_session_idle_secs",
    },
    EnvVar {
        var: "RAILYARD_ADVERTISE_HOST",
        key: "server.advertise_host",
    },
    EnvVar {
        var: "RAILYARD_NODE_LEASE",
        key: "server.node_lease",
    },
    EnvVar {
        var: "RAILYARD_PEER_CA",
        key: "server.peer_ca",
    },
    EnvVar {
        var: "RAILYARD_PRINCIPLES_FILE",
        key: "server.principles_file",
    },
    EnvVar {
        var: crate::telemetry::ENDPOINT_VAR,
        key: "telemetry.otlp_endpoint",
    },
];

/// Keys whose flag is not `--key-with-dashes`.
pub(super) const FLAG_NAMES: &[(&str, &str)] = &[
    ("server.shutdown_grace_secs", "--shutdown-grace"),
    ("server.idle_timeout_secs", "--idle-timeout"),
    ("delivery.allow_networks", "--delivery-allow-network"),
    ("server.http_request_timeout_secs", "--http-request-timeout"),
    ("server.http_header_timeout_secs", "--http-header-timeout"),
    ("server.mcp_session_idle_secs", "--mcp-session-idle"),
];
