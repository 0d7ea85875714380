//! Worker configuration: a config file, environment variables and command-line flags,
//! in rising precedence, loaded through Railyard's one configuration loader
//! ([`railyard_config`]) and then resolved and checked once.
//!
//! The config file is TOML (`worker.toml`), or JSON when its name ends in `.json`
//! (the format earlier releases read, still accepted). Every key is optional; an
//! unknown key is an error; relative paths are taken from the file's directory:
//!
//! ```toml
//! server_url = "http://127.0.0.1:7400"
//! api_key = "ry_..."                  # or RAILYARD_API_KEY; a worker key when the server runs with auth
//! tls_ca = "ca.pem"                   # https:// servers: the CA to trust (or RAILYARD_TLS_CA)
//! tls_cert = "worker.pem"             # mutual TLS: this worker's certificate and key
//! tls_key = "worker.key"              # (or RAILYARD_TLS_CLIENT_CERT / RAILYARD_TLS_CLIENT_KEY)
//! namespace = "default"
//! queues = ["default"]
//! slots = 4
//! workspace = ".railyard/workspaces"
//! identity = "builder-1"
//! provider = "anthropic"              # anthropic | openai | scripted
//! model = "claude-sonnet-4-5"
//! max_tokens = 4096
//! anthropic_api_key = "..."           # or ANTHROPIC_API_KEY
//! anthropic_base_url = "https://api.anthropic.com"
//! openai_api_key = "..."
//! openai_base_url = "http://localhost:11434/v1"
//! script = "workflows/demo.script.json"
//! shutdown_grace_secs = 30
//! heartbeat_interval_secs = 10
//! max_model_response_bytes = 33554432  # 32 MiB; a longer model answer fails the call
//! rate_limit_key = "anthropic:prod"   # the fleet's rate-limit key: ask the server before each model call
//! model_stream = true                 # stream model answers (live output); false reads them whole
//! model_stream_idle_timeout_secs = 300  # a stream silent this long fails the call (retryable)
//! bash_env = ["GOPATH", "CARGO_HOME"]  # or RAILYARD_BASH_ENV="GOPATH,CARGO_HOME"
//! otlp_endpoint = "http://127.0.0.1:4318"  # OpenTelemetry traces (or RAILYARD_OTLP_ENDPOINT)
//!
//! mcp_env = ["GITHUB_TOKEN"]         # variables a definition's MCP servers may name ($GITHUB_TOKEN)
//! mcp_call_timeout_secs = 120         # one MCP tool call
//! mcp_result_max_bytes = 65536        # an MCP tool result is cut here, with a marker
//! mcp_allow_networks = ["10.0.0.0/8"]  # internal networks HTTP MCP servers may be on
//! web_fetch_allow_networks = ["10.1.0.0/16"]  # internal networks web_fetch may reach
//!
//! # MCP servers every step may use (allowedTools permitting), as mcp__NAME__TOOL;
//! # `$NAME` values are read from the worker's environment at start.
//! [mcp_servers.files]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/docs"]
//! env = { LOG_LEVEL = "warn" }
//!
//! # Estimated cost: US dollars per million tokens, by model (cache prices default to
//! # the input price). A model not listed costs 0.
//! [prices."claude-sonnet-4-5"]
//! input = 3.0
//! output = 15.0
//! cache_read = 0.3
//! cache_write = 3.75
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use railyard_config::{EnvVar, Loaded, Loader};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::mcp::McpSettings;
use crate::provider::{
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_STREAM_IDLE_TIMEOUT, ProviderConfig, ScriptSource, StreamSettings,
};
use crate::usage::ModelPrice;
use railyard_model::mcp::McpServer;

mod mcp;

/// Most models in the price table.
const MAX_PRICES: usize = 256;

/// Default Anthropic model when none is configured.
const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
/// Default OpenAI model when none is configured.
const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
/// Default output token limit for the Anthropic API.
const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Default Anthropic API root.
const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Default OpenAI API root (chat completions live under it).
const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Default directory for per-run workspaces.
const DEFAULT_WORKSPACE: &str = ".railyard/workspaces";

/// Everything a worker needs, fully resolved.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub server_url: String,
    /// Sent with every call to the server (its `Debug` never shows it).
    pub api_key: Option<railyard_sdk::ApiKey>,
    /// TLS settings for an `https://` server.
    pub tls: railyard_sdk::TlsOptions,
    pub namespace: String,
    /// Task queues to poll, one poll loop each.
    pub queues: Vec<String>,
    /// Steps run at once, across all queues.
    pub slots: usize,
    /// Parent of the per-run workspace directories (`<workspace>/<run_id>/`).
    pub workspace: PathBuf,
    /// Who this worker is, in history and on the server's poller list.
    pub identity: String,
    pub provider: ProviderConfig,
    /// Every real provider it has settings for, `provider` first: a step naming
    /// another model or provider (or falling back to one) runs on these.
    pub providers: Vec<ProviderConfig>,
    /// How long running steps may go on after shutdown is requested.
    pub shutdown_grace: Duration,
    /// Upper bound on the pause between background heartbeats (a step's own
    /// heartbeat timeout / 3 is used when shorter).
    pub heartbeat_interval: Duration,
    /// Variables of the worker's environment passed on to `bash`, besides the small
    /// default set it always gets (`PATH`, the locale, `TERM`, `TZ`); nothing else is.
    pub bash_env: Vec<String>,
    /// Price per model, for the estimated cost of a step's tokens.
    pub prices: BTreeMap<String, ModelPrice>,
    /// MCP servers and their bounds (its `Debug` shows no value).
    pub mcp: McpSettings,
    /// Internal networks the `web_fetch` tool may reach (else only public addresses).
    pub web_fetch_allow_networks: Vec<railyard_model::net::Network>,
    /// The rate-limit key the fleet shares (docs/flow-control.md): capacity is asked
    /// under it before each model call, and a provider's 429 reported under it.
    pub rate_limit_key: Option<String>,
}

/// The provider kinds a config file, `RAILYARD_PROVIDER` or a flag can name (in any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Anthropic,
    OpenAi,
    Scripted,
}

impl ProviderKind {
    /// The name a config file uses.
    fn name(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::Scripted => "scripted",
        }
    }
}

impl Serialize for ProviderKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ProviderKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "anthropic" => Ok(Self::Anthropic),
            "openai" | "openai-compatible" => Ok(Self::OpenAi),
            "scripted" => Ok(Self::Scripted),
            other => Err(format!(
                "unknown provider {other:?} (expected anthropic, openai or scripted)"
            )),
        }
    }
}

pub(crate) use railyard_config::ConfigError;

/// The environment variables a worker reads, and the key each sets.
const ENV: &[EnvVar] = &[
    EnvVar {
        var: "RAILYARD_SERVER",
        key: "server_url",
    },
    EnvVar {
        var: "RAILYARD_OTLP_ENDPOINT",
        key: "otlp_endpoint",
    },
    EnvVar {
        var: "RAILYARD_API_KEY",
        key: "api_key",
    },
    EnvVar {
        var: "RAILYARD_TLS_CA",
        key: "tls_ca",
    },
    EnvVar {
        var: "RAILYARD_TLS_CLIENT_CERT",
        key: "tls_cert",
    },
    EnvVar {
        var: "RAILYARD_TLS_CLIENT_KEY",
        key: "tls_key",
    },
    EnvVar {
        var: "RAILYARD_NAMESPACE",
        key: "namespace",
    },
    EnvVar {
        var: "RAILYARD_QUEUES",
        key: "queues",
    },
    EnvVar {
        var: "RAILYARD_SLOTS",
        key: "slots",
    },
    EnvVar {
        var: "RAILYARD_WORKSPACE",
        key: "workspace",
    },
    EnvVar {
        var: "RAILYARD_IDENTITY",
        key: "identity",
    },
    EnvVar {
        var: "RAILYARD_PROVIDER",
        key: "provider",
    },
    EnvVar {
        var: "RAILYARD_MODEL",
        key: "model",
    },
    EnvVar {
        var: "RAILYARD_SCRIPT",
        key: "script",
    },
    EnvVar {
        var: "ANTHROPIC_API_KEY",
        key: "anthropic_api_key",
    },
    EnvVar {
        var: "ANTHROPIC_BASE_URL",
        key: "anthropic_base_url",
    },
    EnvVar {
        var: "OPENAI_API_KEY",
        key: "openai_api_key",
    },
    EnvVar {
        var: "OPENAI_BASE_URL",
        key: "openai_base_url",
    },
    EnvVar {
        var: "RAILYARD_MAX_MODEL_RESPONSE_BYTES",
        key: "max_model_response_bytes",
    },
    EnvVar {
        var: "RAILYARD_MODEL_STREAM",
        key: "model_stream",
    },
    EnvVar {
        var: "RAILYARD_MODEL_STREAM_IDLE_TIMEOUT_SECS",
        key: "model_stream_idle_timeout_secs",
    },
    EnvVar {
        var: "RAILYARD_BASH_ENV",
        key: "bash_env",
    },
    EnvVar {
        var: "RAILYARD_RATE_LIMIT_KEY",
        key: "rate_limit_key",
    },
    EnvVar {
        var: "RAILYARD_MCP_ENV",
        key: "mcp_env",
    },
];

/// Keys whose flag is not `--key-with-dashes`.
const FLAG_NAMES: &[(&str, &str)] = &[
    ("server_url", "--server"),
    ("queues", "--queue"),
    ("shutdown_grace_secs", "--shutdown-grace"),
];

/// One layer of settings, every one optional: the shape of the config file, and what
/// the CLI fills from its flags for [`WorkerConfig::load`].
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigLayer {
    pub server_url: Option<String>,
    /// The API key for the Railyard server.
    pub api_key: Option<String>,
    /// CA certificates (PEM) the server's certificate must chain to.
    pub tls_ca: Option<PathBuf>,
    /// This worker's certificate chain (PEM), for mutual TLS.
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    pub namespace: Option<String>,
    /// A list, or (from `RAILYARD_QUEUES`) comma-separated text.
    #[serde(default, deserialize_with = "queue_list")]
    pub queues: Option<Vec<String>>,
    pub slots: Option<usize>,
    pub workspace: Option<PathBuf>,
    pub identity: Option<String>,
    pub provider: Option<ProviderKind>,
    /// Model for whichever real provider is chosen.
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub anthropic_api_key: Option<String>,
    pub anthropic_base_url: Option<String>,
    pub openai_api_key: Option<String>,
    pub openai_base_url: Option<String>,
    /// Script for the scripted provider: a path, or the script itself (an object in a
    /// file; JSON text starting with `{` in `RAILYARD_SCRIPT`).
    #[serde(default, deserialize_with = "script_source")]
    pub script: Option<ScriptSource>,
    #[serde(
        default,
        rename = "shutdown_grace_secs",
        deserialize_with = "secs",
        serialize_with = "as_secs"
    )]
    pub shutdown_grace: Option<Duration>,
    #[serde(
        default,
        rename = "heartbeat_interval_secs",
        deserialize_with = "secs",
        serialize_with = "as_secs"
    )]
    pub heartbeat_interval: Option<Duration>,
    /// Cap on a model answer's body, in bytes.
    pub max_model_response_bytes: Option<u64>,
    /// The fleet's rate-limit key (at most 64 bytes).
    pub rate_limit_key: Option<String>,
    /// Whether model answers are streamed (the default) or read whole.
    pub model_stream: Option<bool>,
    /// Longest silence of a streamed model answer before the call fails.
    #[serde(
        default,
        rename = "model_stream_idle_timeout_secs",
        deserialize_with = "secs",
        serialize_with = "as_secs"
    )]
    pub model_stream_idle_timeout: Option<Duration>,
    /// Variable names passed on to `bash`: a list, or (from `RAILYARD_BASH_ENV`)
    /// comma-separated text.
    #[serde(default, deserialize_with = "queue_list")]
    pub bash_env: Option<Vec<String>>,
    /// US dollars per million tokens, by model name.
    pub prices: Option<BTreeMap<String, ModelPrice>>,
    /// MCP servers every step may use, by name.
    pub mcp_servers: Option<BTreeMap<String, McpServer>>,
    /// Variables of the worker's environment a definition's MCP servers may name
    /// (`$NAME`): a list, or (from `RAILYARD_MCP_ENV`) comma-separated text.
    #[serde(default, deserialize_with = "queue_list")]
    pub mcp_env: Option<Vec<String>>,
    /// Timeout of one MCP tool call.
    #[serde(
        default,
        rename = "mcp_call_timeout_secs",
        deserialize_with = "secs",
        serialize_with = "as_secs"
    )]
    pub mcp_call_timeout: Option<Duration>,
    /// Cut of one MCP tool result, in bytes.
    pub mcp_result_max_bytes: Option<usize>,
    /// Internal networks streamable-HTTP MCP servers may be reached on
    /// (`127.0.0.0/8`, `10.1.2.3`); none: public addresses only.
    pub mcp_allow_networks: Option<Vec<String>>,
    /// Internal networks the `web_fetch` tool may reach; none: public addresses only.
    pub web_fetch_allow_networks: Option<Vec<String>>,
    /// The OTLP/HTTP endpoint of OpenTelemetry traces; read by the binary, which
    /// exports them (the worker only makes the spans).
    pub otlp_endpoint: Option<String>,
}

fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let Some(v) = Option::<f64>::deserialize(d)? else {
        return Ok(None);
    };
    Duration::try_from_secs_f64(v)
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("expected a non-negative number of seconds, got {v}")))
}

fn as_secs<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    d.map(|d| d.as_secs_f64()).serialize(s)
}

fn queue_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Queues {
        Text(String),
        List(Vec<String>),
    }
    Ok(Option::<Queues>::deserialize(d)?.map(|q| match q {
        Queues::Text(s) => split_queues(&s),
        Queues::List(l) => l,
    }))
}

fn script_source<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ScriptSource>, D::Error> {
    match Option::<ScriptSource>::deserialize(d)? {
        // Text that looks like JSON is the script itself; anything else is a path.
        Some(ScriptSource::Path(p)) if p.to_str().is_some_and(|s| s.trim_start().starts_with('{')) => {
            let text = p.to_str().unwrap_or_default();
            serde_json::from_str(text)
                .map(|s| Some(ScriptSource::Inline(s)))
                .map_err(|e| serde::de::Error::custom(format!("inline script is not valid: {e}")))
        }
        other => Ok(other),
    }
}

impl WorkerConfig {
    /// Loads `file` (if any), the environment and `flags`, in rising precedence, and
    /// resolves them. Defaults are filled in and the result checked; with no provider
    /// named, the first that is configured wins: Anthropic (a key), OpenAI (a key or a
    /// base URL), a script, and finally `default_script` (the demo's script: a file, or
    /// the one built into the binary) as the scripted provider.
    pub fn load(
        file: Option<&Path>,
        flags: ConfigLayer,
        default_script: Option<ScriptSource>,
    ) -> Result<WorkerConfig, ConfigError> {
        Self::load_with(file, |k| std::env::var(k).ok(), flags, default_script)
    }

    /// [`WorkerConfig::load`] with the environment read through `env`, so tests need
    /// not change the process's own.
    fn load_with(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        flags: ConfigLayer,
        default_script: Option<ScriptSource>,
    ) -> Result<WorkerConfig, ConfigError> {
        let mut loaded = Loader::new()
            .file(file)?
            .env(ENV, &env)
            .flags(&flags, FLAG_NAMES)?
            .load::<ConfigLayer>()?;
        // Relative paths in a file mean "next to this file", wherever the worker starts.
        let base = |key: &str| {
            loaded
                .file_of(key)
                .map(|f| f.parent().unwrap_or(Path::new(".")).to_path_buf())
        };
        let (ws_base, script_base) = (base("workspace"), base("script"));
        let layer = &mut loaded.value;
        if let (Some(ws), Some(dir)) = (layer.workspace.as_mut(), ws_base)
            && ws.is_relative()
        {
            *ws = dir.join(&*ws);
        }
        if let (Some(ScriptSource::Path(p)), Some(dir)) = (layer.script.as_mut(), script_base)
            && p.is_relative()
        {
            *p = dir.join(&*p);
        }
        let mut config = resolve(&loaded, default_script)?;
        config.mcp = mcp::resolve(&loaded, &env)?;
        Ok(config)
    }
}

/// Fills defaults and checks the result; errors name the key and where it was set.
fn resolve(
    loaded: &Loaded<ConfigLayer>,
    default_script: Option<ScriptSource>,
) -> Result<WorkerConfig, ConfigError> {
    let layer = &loaded.value;
    let provider = resolve_provider(loaded, default_script)?;
    let providers = configured_providers(loaded, &provider)?;
    let queues: Vec<String> = match &layer.queues {
        Some(q) => q
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        None => vec!["default".to_string()],
    };
    if queues.is_empty() {
        return Err(loaded.invalid("queues", "at least one task queue is needed"));
    }
    let slots = layer.slots.unwrap_or(4);
    if slots == 0 {
        return Err(loaded.invalid("slots", "must be at least 1"));
    }
    let heartbeat_interval = layer.heartbeat_interval.unwrap_or(Duration::from_secs(10));
    if heartbeat_interval.is_zero() {
        return Err(loaded.invalid("heartbeat_interval_secs", "must be more than zero"));
    }
    let bash_env = resolve_bash_env(loaded)?;
    let prices = layer.prices.clone().unwrap_or_default();
    if prices.len() > MAX_PRICES {
        return Err(loaded.invalid(
            "prices",
            format!("{} models, more than the limit of {MAX_PRICES}", prices.len()),
        ));
    }
    for (model, price) in &prices {
        if let Err(e) = price.check() {
            let shown = crate::provider::excerpt(model, 64);
            return Err(loaded.invalid("prices", format!("{shown:?}.{e}")));
        }
    }
    // Relative paths in the file mean "next to the file".
    let tls_path = |key: &str, value: &Option<PathBuf>| {
        value.as_ref().map(|v| match loaded.file_of(key) {
            Some(file) if v.is_relative() => file.parent().unwrap_or(Path::new(".")).join(v),
            _ => v.clone(),
        })
    };
    Ok(WorkerConfig {
        api_key: layer.api_key.clone().map(railyard_sdk::ApiKey::new),
        tls: railyard_sdk::TlsOptions {
            ca: tls_path("tls_ca", &layer.tls_ca),
            cert: tls_path("tls_cert", &layer.tls_cert),
            key: tls_path("tls_key", &layer.tls_key),
        },
        server_url: layer
            .server_url
            .clone()
            .unwrap_or_else(|| railyard_sdk::DEFAULT_SERVER_URL.to_string()),
        namespace: layer
            .namespace
            .clone()
            .unwrap_or_else(|| railyard_proto::DEFAULT_NAMESPACE.to_string()),
        queues,
        slots,
        workspace: layer
            .workspace
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_WORKSPACE)),
        identity: layer.identity.clone().unwrap_or_else(default_identity),
        provider,
        providers,
        shutdown_grace: layer.shutdown_grace.unwrap_or(Duration::from_secs(30)),
        heartbeat_interval,
        bash_env,
        prices,
        mcp: McpSettings::default(),
        web_fetch_allow_networks: mcp::networks(
            loaded,
            "web_fetch_allow_networks",
            &layer.web_fetch_allow_networks,
        )?,
        rate_limit_key: resolve_rate_limit_key(loaded)?,
    })
}

/// The rate-limit key, checked as the server checks it (empty: none).
fn resolve_rate_limit_key(loaded: &Loaded<ConfigLayer>) -> Result<Option<String>, ConfigError> {
    let Some(key) = loaded
        .value
        .rate_limit_key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
    else {
        return Ok(None);
    };
    if let Err(e) = railyard_model::flow::check_key("rate_limit_key", key, false) {
        return Err(loaded.invalid("rate_limit_key", e.to_string()));
    }
    Ok(Some(key.to_string()))
}

/// The pass-through list, checked: plain variable names, and never one of the worker's
/// own credentials.
fn resolve_bash_env(loaded: &Loaded<ConfigLayer>) -> Result<Vec<String>, ConfigError> {
    let mut names: Vec<String> = Vec::new();
    for name in loaded.value.bash_env.iter().flatten().map(|n| n.trim()) {
        if name.is_empty() {
            continue;
        }
        let plain = name.len() <= 128
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain {
            let shown = crate::provider::excerpt(name, 40);
            return Err(loaded.invalid(
                "bash_env",
                format!("{shown:?} is not an environment variable name (letters, digits and _)"),
            ));
        }
        if crate::tools::WORKER_SECRETS.contains(&name) {
            return Err(loaded.invalid(
                "bash_env",
                format!("{name} is a credential of the worker and is never passed to bash"),
            ));
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

fn resolve_provider(
    loaded: &Loaded<ConfigLayer>,
    default_script: Option<ScriptSource>,
) -> Result<ProviderConfig, ConfigError> {
    let layer = &loaded.value;
    let kind = match layer.provider {
        Some(kind) => kind,
        None if layer.anthropic_api_key.is_some() => ProviderKind::Anthropic,
        None if layer.openai_api_key.is_some() || layer.openai_base_url.is_some() => ProviderKind::OpenAi,
        None => ProviderKind::Scripted,
    };
    provider_config(loaded, kind, layer.model.clone(), default_script)
}

/// Every real provider the worker has settings for (the chosen one with its model,
/// the others with their default models): what a step naming another model or
/// provider runs on.
fn configured_providers(
    loaded: &Loaded<ConfigLayer>,
    chosen: &ProviderConfig,
) -> Result<Vec<ProviderConfig>, ConfigError> {
    let layer = &loaded.value;
    let mut all = Vec::new();
    if !matches!(chosen, ProviderConfig::Scripted { .. }) {
        all.push(chosen.clone());
    }
    if layer.anthropic_api_key.is_some() && !matches!(chosen, ProviderConfig::Anthropic { .. }) {
        all.push(provider_config(loaded, ProviderKind::Anthropic, None, None)?);
    }
    if (layer.openai_api_key.is_some() || layer.openai_base_url.is_some())
        && !matches!(chosen, ProviderConfig::OpenAi { .. })
    {
        all.push(provider_config(loaded, ProviderKind::OpenAi, None, None)?);
    }
    Ok(all)
}

/// The settings of a provider of `kind`, with `model` (none: its default).
fn provider_config(
    loaded: &Loaded<ConfigLayer>,
    kind: ProviderKind,
    model: Option<String>,
    default_script: Option<ScriptSource>,
) -> Result<ProviderConfig, ConfigError> {
    let layer = &loaded.value;
    Ok(match kind {
        ProviderKind::Anthropic => ProviderConfig::Anthropic {
            base_url: layer
                .anthropic_base_url
                .clone()
                .unwrap_or_else(|| DEFAULT_ANTHROPIC_BASE_URL.into()),
            api_key: layer.anthropic_api_key.clone().ok_or_else(|| {
                loaded.invalid(
                    "provider",
                    "the anthropic provider needs an API key: set ANTHROPIC_API_KEY",
                )
            })?,
            model: model.clone().unwrap_or_else(|| DEFAULT_ANTHROPIC_MODEL.into()),
            max_tokens: layer.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            max_response_bytes: max_response_bytes(loaded)?,
            stream: stream_settings(loaded)?,
        },
        ProviderKind::OpenAi => ProviderConfig::OpenAi {
            base_url: layer
                .openai_base_url
                .clone()
                .unwrap_or_else(|| DEFAULT_OPENAI_BASE_URL.into()),
            api_key: layer.openai_api_key.clone(),
            model: model.unwrap_or_else(|| DEFAULT_OPENAI_MODEL.into()),
            max_response_bytes: max_response_bytes(loaded)?,
            stream: stream_settings(loaded)?,
        },
        ProviderKind::Scripted => ProviderConfig::Scripted {
            script: layer.script.clone().or(default_script).ok_or_else(|| {
                ConfigError::Invalid(
                    "no model provider configured: set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL, \
                     or RAILYARD_SCRIPT for the offline scripted provider"
                        .into(),
                )
            })?,
        },
    })
}

fn max_response_bytes(loaded: &Loaded<ConfigLayer>) -> Result<u64, ConfigError> {
    match loaded.value.max_model_response_bytes {
        None => Ok(DEFAULT_MAX_RESPONSE_BYTES),
        Some(n) if n < 1024 => Err(loaded.invalid("max_model_response_bytes", "must be at least 1024 bytes")),
        Some(n) => Ok(n),
    }
}

/// Longest idle timeout of a model stream: a streamed answer lasts at most an hour.
const MAX_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

fn stream_settings(loaded: &Loaded<ConfigLayer>) -> Result<StreamSettings, ConfigError> {
    let layer = &loaded.value;
    let idle_timeout = match layer.model_stream_idle_timeout {
        None => DEFAULT_STREAM_IDLE_TIMEOUT,
        Some(d) if d.is_zero() || d > MAX_STREAM_IDLE_TIMEOUT => {
            return Err(loaded.invalid(
                "model_stream_idle_timeout_secs",
                "must be more than 0 and at most 3600 seconds",
            ));
        }
        Some(d) => d,
    };
    Ok(StreamSettings {
        enabled: layer.model_stream.unwrap_or(true),
        idle_timeout,
    })
}

/// Splits a comma-separated queue list, dropping blanks.
fn split_queues(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(str::to_string)
        .collect()
}

/// `hostname:pid`, the hostname from the kernel or `HOSTNAME`.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "worker".to_string());
    format!("{host}:{}", std::process::id())
}

#[cfg(test)]
mod tests;
