//! Worker configuration: a JSON file, environment variables and command-line flags,
//! merged in that order of precedence (file < env < flags) and then resolved.
//!
//! Config file (every field optional; unknown fields are an error; relative paths are
//! taken from the file's directory):
//!
//! ```json
//! {
//!   "server_url": "http://127.0.0.1:7400",
//!   "namespace": "default",
//!   "queues": ["default"],
//!   "slots": 4,
//!   "workspace": ".railyard/workspaces",
//!   "identity": "builder-1",
//!   "provider": "anthropic",
//!   "model": "claude-sonnet-4-5",
//!   "max_tokens": 4096,
//!   "anthropic_api_key": "...", "anthropic_base_url": "https://api.anthropic.com",
//!   "openai_api_key": "...", "openai_base_url": "http://localhost:11434/v1",
//!   "script": "workflows/demo.script.json",
//!   "shutdown_grace_secs": 30,
//!   "heartbeat_interval_secs": 10
//! }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::provider::ScriptSource;

/// Default Anthropic model when none is configured.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
/// Default OpenAI model when none is configured.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
/// Default output token limit for the Anthropic API.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Default Anthropic API root.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Default OpenAI API root (chat completions live under it).
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Default directory for per-run workspaces.
pub const DEFAULT_WORKSPACE: &str = ".railyard/workspaces";

/// Everything a worker needs, fully resolved.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub server_url: String,
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
    /// How long running steps may go on after shutdown is requested.
    pub shutdown_grace: Duration,
    /// Upper bound on the pause between background heartbeats (a step's own
    /// heartbeat timeout / 3 is used when shorter).
    pub heartbeat_interval: Duration,
}

/// Which model backs the agent loop.
#[derive(Clone, PartialEq)]
pub enum ProviderConfig {
    /// Anthropic Messages API.
    Anthropic {
        base_url: String,
        api_key: String,
        model: String,
        max_tokens: u32,
    },
    /// OpenAI-compatible chat completions; no key for local servers.
    OpenAi {
        base_url: String,
        api_key: Option<String>,
        model: String,
    },
    /// The offline scripted provider (no model at all).
    Scripted { script: ScriptSource },
}

// Hand-written so that API keys never reach a log line.
impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anthropic {
                base_url,
                model,
                max_tokens,
                ..
            } => f
                .debug_struct("Anthropic")
                .field("base_url", base_url)
                .field("api_key", &"<redacted>")
                .field("model", model)
                .field("max_tokens", max_tokens)
                .finish(),
            Self::OpenAi {
                base_url,
                api_key,
                model,
            } => f
                .debug_struct("OpenAi")
                .field("base_url", base_url)
                .field("api_key", &api_key.as_ref().map(|_| "<redacted>"))
                .field("model", model)
                .finish(),
            Self::Scripted { script } => f
                .debug_struct("Scripted")
                .field("script", &script.describe())
                .finish(),
        }
    }
}

impl ProviderConfig {
    /// A one-line description for the startup log ("anthropic claude-sonnet-4-5").
    pub fn describe(&self) -> String {
        match self {
            Self::Anthropic { model, .. } => format!("anthropic {model}"),
            Self::OpenAi { base_url, model, .. } => format!("openai-compatible {model} at {base_url}"),
            Self::Scripted { script } => format!("scripted (offline, no model) from {}", script.describe()),
        }
    }
}

/// The provider kinds a config file, `RAILYARD_PROVIDER` or a flag can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    Anthropic,
    #[serde(alias = "openai-compatible")]
    OpenAi,
    Scripted,
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

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// The file is not valid JSON, has an unknown field or a field of the wrong type.
    #[error("config file {path}: field `{field}`: {message}")]
    Parse {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("environment variable {var}: {message}")]
    Env { var: &'static str, message: String },
    /// The merged settings do not make a working configuration.
    #[error("invalid worker configuration: {0}")]
    Invalid(String),
}

/// One layer of settings, every one optional. The CLI fills one from its flags and
/// merges: `ConfigLayer::from_file(..)?.merge(ConfigLayer::from_env()?).merge(flags)`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigLayer {
    pub server_url: Option<String>,
    pub namespace: Option<String>,
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
    /// Script for the scripted provider: a path, or (in a file) the script object itself.
    pub script: Option<ScriptSource>,
    #[serde(default, rename = "shutdown_grace_secs", deserialize_with = "secs")]
    pub shutdown_grace: Option<Duration>,
    #[serde(default, rename = "heartbeat_interval_secs", deserialize_with = "secs")]
    pub heartbeat_interval: Option<Duration>,
}

fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let Some(v) = Option::<f64>::deserialize(d)? else {
        return Ok(None);
    };
    Duration::try_from_secs_f64(v)
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("expected a non-negative number of seconds, got {v}")))
}

impl ConfigLayer {
    /// Reads a JSON config file. Errors name the file and the offending field.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let mut layer: Self = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            ConfigError::Parse {
                path: path.to_path_buf(),
                field,
                message: e.inner().to_string(),
            }
        })?;
        // Relative paths in a file mean "next to this file", wherever the worker starts.
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(ws) = layer.workspace.as_mut().filter(|p| p.is_relative()) {
            *ws = base.join(&*ws);
        }
        if let Some(ScriptSource::Path(p)) = layer.script.as_mut()
            && p.is_relative()
        {
            *p = base.join(&*p);
        }
        Ok(layer)
    }

    /// Reads the `RAILYARD_*` and provider variables from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with(|k| std::env::var(k).ok())
    }

    /// Reads the variables through `get` (for tests and embedding). Empty values count as unset.
    pub fn from_env_with(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let var = |k: &str| get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let mut layer = Self {
            server_url: var("RAILYARD_SERVER"),
            namespace: var("RAILYARD_NAMESPACE"),
            identity: var("RAILYARD_IDENTITY"),
            workspace: var("RAILYARD_WORKSPACE").map(PathBuf::from),
            model: var("RAILYARD_MODEL"),
            anthropic_api_key: var("ANTHROPIC_API_KEY"),
            anthropic_base_url: var("ANTHROPIC_BASE_URL"),
            openai_api_key: var("OPENAI_API_KEY"),
            openai_base_url: var("OPENAI_BASE_URL"),
            ..Self::default()
        };
        if let Some(q) = var("RAILYARD_QUEUES") {
            layer.queues = Some(split_queues(&q));
        }
        if let Some(s) = var("RAILYARD_SLOTS") {
            let slots = s
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ConfigError::Env {
                    var: "RAILYARD_SLOTS",
                    message: format!("expected a positive integer, got {s:?}"),
                })?;
            layer.slots = Some(slots);
        }
        if let Some(p) = var("RAILYARD_PROVIDER") {
            layer.provider = Some(p.parse().map_err(|message| ConfigError::Env {
                var: "RAILYARD_PROVIDER",
                message,
            })?);
        }
        if let Some(s) = var("RAILYARD_SCRIPT") {
            // A value that looks like JSON is the script itself; anything else is a path.
            layer.script = Some(if s.starts_with('{') {
                ScriptSource::Inline(serde_json::from_str(&s).map_err(|e| ConfigError::Env {
                    var: "RAILYARD_SCRIPT",
                    message: format!("inline script is not valid: {e}"),
                })?)
            } else {
                ScriptSource::Path(PathBuf::from(s))
            });
        }
        Ok(layer)
    }

    /// Overlays `higher` on `self`: every setting `higher` has wins.
    pub fn merge(self, higher: ConfigLayer) -> ConfigLayer {
        ConfigLayer {
            server_url: higher.server_url.or(self.server_url),
            namespace: higher.namespace.or(self.namespace),
            queues: higher.queues.or(self.queues),
            slots: higher.slots.or(self.slots),
            workspace: higher.workspace.or(self.workspace),
            identity: higher.identity.or(self.identity),
            provider: higher.provider.or(self.provider),
            model: higher.model.or(self.model),
            max_tokens: higher.max_tokens.or(self.max_tokens),
            anthropic_api_key: higher.anthropic_api_key.or(self.anthropic_api_key),
            anthropic_base_url: higher.anthropic_base_url.or(self.anthropic_base_url),
            openai_api_key: higher.openai_api_key.or(self.openai_api_key),
            openai_base_url: higher.openai_base_url.or(self.openai_base_url),
            script: higher.script.or(self.script),
            shutdown_grace: higher.shutdown_grace.or(self.shutdown_grace),
            heartbeat_interval: higher.heartbeat_interval.or(self.heartbeat_interval),
        }
    }

    /// Fills defaults and checks the result. With no provider named, the first that is
    /// configured wins: Anthropic (a key), OpenAI (a key or a base URL), a script, and
    /// finally `default_script` (the bundled demo script) as the scripted provider.
    pub fn resolve(self, default_script: Option<PathBuf>) -> Result<WorkerConfig, ConfigError> {
        let provider = self.resolve_provider(default_script)?;
        let queues: Vec<String> = match self.queues {
            Some(q) => q
                .into_iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            None => vec!["default".to_string()],
        };
        if queues.is_empty() {
            return Err(ConfigError::Invalid(
                "queues: at least one task queue is needed".into(),
            ));
        }
        let slots = self.slots.unwrap_or(4);
        if slots == 0 {
            return Err(ConfigError::Invalid("slots: must be at least 1".into()));
        }
        let heartbeat_interval = self.heartbeat_interval.unwrap_or(Duration::from_secs(10));
        if heartbeat_interval.is_zero() {
            return Err(ConfigError::Invalid(
                "heartbeat_interval: must be more than zero".into(),
            ));
        }
        Ok(WorkerConfig {
            server_url: self
                .server_url
                .unwrap_or_else(|| railyard_proto::DEFAULT_SERVER_URL.to_string()),
            namespace: self
                .namespace
                .unwrap_or_else(|| railyard_proto::DEFAULT_NAMESPACE.to_string()),
            queues,
            slots,
            workspace: self.workspace.unwrap_or_else(|| PathBuf::from(DEFAULT_WORKSPACE)),
            identity: self.identity.unwrap_or_else(default_identity),
            provider,
            shutdown_grace: self.shutdown_grace.unwrap_or(Duration::from_secs(30)),
            heartbeat_interval,
        })
    }

    fn resolve_provider(&self, default_script: Option<PathBuf>) -> Result<ProviderConfig, ConfigError> {
        let kind = match self.provider {
            Some(kind) => kind,
            None if self.anthropic_api_key.is_some() => ProviderKind::Anthropic,
            None if self.openai_api_key.is_some() || self.openai_base_url.is_some() => ProviderKind::OpenAi,
            None => ProviderKind::Scripted,
        };
        Ok(match kind {
            ProviderKind::Anthropic => ProviderConfig::Anthropic {
                base_url: self.anthropic_base_url.clone().unwrap_or_else(|| DEFAULT_ANTHROPIC_BASE_URL.into()),
                api_key: self.anthropic_api_key.clone().ok_or_else(|| {
                    ConfigError::Invalid("the anthropic provider needs an API key: set ANTHROPIC_API_KEY".into())
                })?,
                model: self.model.clone().unwrap_or_else(|| DEFAULT_ANTHROPIC_MODEL.into()),
                max_tokens: self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            },
            ProviderKind::OpenAi => ProviderConfig::OpenAi {
                base_url: self.openai_base_url.clone().unwrap_or_else(|| DEFAULT_OPENAI_BASE_URL.into()),
                api_key: self.openai_api_key.clone(),
                model: self.model.clone().unwrap_or_else(|| DEFAULT_OPENAI_MODEL.into()),
            },
            ProviderKind::Scripted => ProviderConfig::Scripted {
                script: self.script.clone().or_else(|| default_script.map(ScriptSource::Path)).ok_or_else(|| {
                    ConfigError::Invalid(
                        "no model provider configured: set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL, \
                         or RAILYARD_SCRIPT for the offline scripted provider"
                            .into(),
                    )
                })?,
            },
        })
    }
}

impl WorkerConfig {
    /// Loads `file` (if any), the environment and `flags`, in rising precedence, and resolves.
    pub fn load(
        file: Option<&Path>,
        flags: ConfigLayer,
        default_script: Option<PathBuf>,
    ) -> Result<WorkerConfig, ConfigError> {
        let base = match file {
            Some(path) => ConfigLayer::from_file(path)?,
            None => ConfigLayer::default(),
        };
        base.merge(ConfigLayer::from_env()?)
            .merge(flags)
            .resolve(default_script)
    }
}

/// Splits a comma-separated queue list, dropping blanks.
pub fn split_queues(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(str::to_string)
        .collect()
}

/// `hostname:pid`, the hostname from the kernel or `HOSTNAME`.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "worker".to_string());
    format!("{host}:{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> ConfigLayer {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ConfigLayer::from_env_with(|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn file_env_flags_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker.json");
        std::fs::write(
            &path,
            r#"{"slots": 2, "queues": ["a"], "namespace": "ns", "workspace": "ws",
            "shutdown_grace_secs": 1.5}"#,
        )
        .unwrap();
        let file = ConfigLayer::from_file(&path).unwrap();
        let env = env(&[
            ("RAILYARD_SLOTS", "3"),
            ("RAILYARD_QUEUES", "b, c,"),
            ("ANTHROPIC_API_KEY", "k"),
        ]);
        let flags = ConfigLayer {
            slots: Some(5),
            ..Default::default()
        };
        let cfg = file.merge(env).merge(flags).resolve(None).unwrap();
        assert_eq!(cfg.slots, 5);
        assert_eq!(cfg.queues, vec!["b", "c"]);
        assert_eq!(cfg.namespace, "ns");
        assert_eq!(cfg.workspace, dir.path().join("ws"));
        assert_eq!(cfg.shutdown_grace, Duration::from_millis(1500));
        assert!(matches!(&cfg.provider, ProviderConfig::Anthropic { api_key, .. } if api_key == "k"));
        assert!(
            !format!("{:?}", cfg.provider).contains("\"k\""),
            "key must be redacted"
        );
        assert!(cfg.identity.contains(':'));
    }

    #[test]
    fn file_errors_name_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, r#"{"slots": "four"}"#).unwrap();
        let err = ConfigLayer::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("bad.json") && err.contains("`slots`"), "{err}");
        std::fs::write(&path, r#"{"slotz": 4}"#).unwrap();
        let err = ConfigLayer::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("bad.json") && err.contains("slotz"), "{err}");
    }

    #[test]
    fn provider_selection() {
        let scripted = ConfigLayer::default()
            .resolve(Some("demo.script.json".into()))
            .unwrap();
        assert_eq!(
            scripted.provider,
            ProviderConfig::Scripted {
                script: ScriptSource::Path("demo.script.json".into())
            }
        );
        assert!(ConfigLayer::default().resolve(None).is_err());
        let local = env(&[
            ("OPENAI_BASE_URL", "http://localhost:11434/v1"),
            ("RAILYARD_MODEL", "llama3"),
        ])
        .resolve(None)
        .unwrap();
        assert!(
            matches!(local.provider, ProviderConfig::OpenAi { api_key: None, ref model, .. } if model == "llama3")
        );
        let err = env(&[("RAILYARD_PROVIDER", "anthropic")])
            .resolve(None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
        let bad = ConfigLayer::from_env_with(|k| (k == "RAILYARD_SLOTS").then(|| "0".to_string()));
        assert!(bad.unwrap_err().to_string().contains("RAILYARD_SLOTS"));
    }
}
