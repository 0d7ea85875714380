//! The one configuration loader of Railyard: the server's and the worker's settings
//! both go through it.
//!
//! Three layers, each overriding the one before: a config file (TOML, or JSON when its
//! name ends in `.json`), environment variables (a fixed list, each naming one key),
//! and command-line flags. They are merged with `figment` and extracted once into the
//! caller's settings type; every error names the key and where its value came from
//! (the file's path, the environment variable, the flag).
//!
//! ```no_run
//! # use railyard_config::{EnvVar, Loader};
//! #[derive(serde::Deserialize, serde::Serialize, Default)]
//! #[serde(deny_unknown_fields)]
//! struct Settings { slots: Option<u32> }
//! const ENV: &[EnvVar] = &[EnvVar { var: "RAILYARD_SLOTS", key: "slots" }];
//!
//! # fn f() -> Result<(), railyard_config::ConfigError> {
//! let loaded = Loader::new()
//!     .file(Some(std::path::Path::new("worker.toml")))?
//!     .env(ENV, |k| std::env::var(k).ok())
//!     .flags(&Settings { slots: Some(4) }, &[])?
//!     .load::<Settings>()?;
//! if loaded.value.slots == Some(0) {
//!     return Err(loaded.invalid("slots", "must be at least 1"));
//! }
//! # Ok(()) }
//! ```
//!
//! A config file must be a regular file of at most [`MAX_FILE_BYTES`]: its metadata is
//! checked before it is opened, and it is opened non-blocking, so naming a FIFO or a
//! directory is refused at once instead of hanging.

#![warn(missing_docs)]

use std::fmt;
use std::path::{Path, PathBuf};

use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Largest config file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// One environment variable and the key (dotted for sections: `server.listen`) it sets.
#[derive(Debug, Clone, Copy)]
pub struct EnvVar {
    /// The variable's name (`RAILYARD_LISTEN`).
    pub var: &'static str,
    /// The key it sets.
    pub key: &'static str,
}

/// Why settings could not be loaded. Each names the file, or the key and its origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The config file is missing, unreadable, not a regular file or too large.
    #[error("config file {path}: {reason}")]
    File {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The config file is not valid TOML / JSON.
    #[error("config file {path}: {message}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// The parser's message, with the line and column.
        message: String,
    },
    /// A key has a value of the wrong type or out of range, or is not a known key.
    #[error("{origin}: `{key}`: {message}")]
    Key {
        /// The key, dotted for sections.
        key: String,
        /// Where the value came from: `config file PATH`, `environment variable VAR`,
        /// `flag --NAME`, or `default`.
        origin: String,
        /// What is wrong with the value.
        message: String,
    },
    /// The settings do not fit together, or are incomplete.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The file's format, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Toml,
    Json,
}

impl Format {
    fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Self::Json,
            _ => Self::Toml,
        }
    }
}

/// One layer: a dict of settings and where they came from.
struct Layer {
    metadata: Metadata,
    data: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<figment::value::Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.data.clone()))
    }
}

/// Builds the layers, lowest precedence first, then [`Loader::load`]s them.
#[derive(Default)]
pub struct Loader {
    layers: Vec<Layer>,
}

/// Settings extracted by a [`Loader`], with what is needed to say where each came from.
#[derive(Debug)]
pub struct Loaded<T> {
    /// The settings.
    pub value: T,
    figment: Figment,
}

impl Loader {
    /// No layers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the config file at `path`, if any (TOML; JSON when it ends in `.json`).
    pub fn file(mut self, path: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = path else { return Ok(self) };
        let text = read_file(path)?;
        let parse_error = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        };
        let data: Dict = match Format::of(path) {
            Format::Toml => toml_to_dict(&text).map_err(parse_error)?,
            Format::Json => json_to_dict(&text).map_err(parse_error)?,
        };
        let name = match Format::of(path) {
            Format::Toml => "TOML file",
            Format::Json => "JSON file",
        };
        self.layers.push(Layer {
            metadata: Metadata::from(name, Source::File(path.to_path_buf())),
            data,
        });
        Ok(self)
    }

    /// Adds the variables of `vars` that `get` finds. A blank value counts as unset.
    /// Values stay text; numbers and booleans are read from it when the key wants one.
    pub fn env(mut self, vars: &'static [EnvVar], get: impl Fn(&str) -> Option<String>) -> Self {
        let mut data = Dict::new();
        for v in vars {
            if let Some(value) = get(v.var).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()) {
                insert(&mut data, v.key, Value::from(value));
            }
        }
        let metadata =
            Metadata::named("environment variable").interpolater(move |_: &Profile, path: &[&str]| {
                let key = path.join(".");
                vars.iter()
                    .find(|v| v.key == key)
                    .map(|v| v.var.to_string())
                    .unwrap_or(key)
            });
        self.layers.push(Layer { metadata, data });
        self
    }

    /// Adds the flags that were given: `flags` serialized, unset (`None`) ones left out.
    /// `names` maps keys to flag names where `--key-with-dashes` is not the flag.
    pub fn flags<F: Serialize>(
        mut self,
        flags: &F,
        names: &'static [(&'static str, &'static str)],
    ) -> Result<Self, ConfigError> {
        let value = Value::serialize(flags).map_err(|e| ConfigError::Invalid(format!("flags: {e}")))?;
        let data = prune(value).and_then(Value::into_dict).unwrap_or_default();
        let metadata = Metadata::named("flag").interpolater(move |_: &Profile, path: &[&str]| {
            let key = path.join(".");
            match names.iter().find(|(k, _)| *k == key) {
                Some((_, flag)) => flag.to_string(),
                None => format!("--{}", path.last().unwrap_or(&"").replace('_', "-")),
            }
        });
        self.layers.push(Layer { metadata, data });
        Ok(self)
    }

    /// Merges the layers (later ones win) and extracts `T`, reading numbers and
    /// booleans from text where `T` wants them (environment values are text).
    pub fn load<T: DeserializeOwned>(self) -> Result<Loaded<T>, ConfigError> {
        let figment = self
            .layers
            .into_iter()
            .fold(Figment::new(), |f, layer| f.merge(layer));
        match figment.extract_lossy::<T>() {
            Ok(value) => Ok(Loaded { value, figment }),
            Err(e) => Err(from_figment(e)),
        }
    }
}

impl<T> Loaded<T> {
    /// Where `key`'s value came from: `config file PATH`, `environment variable VAR`,
    /// `flag --NAME`, or `default` when no layer set it.
    pub fn origin(&self, key: &str) -> String {
        match self.figment.find_metadata(key) {
            Some(md) => describe(md, &key.split('.').collect::<Vec<_>>()),
            None => "default".to_string(),
        }
    }

    /// The config file `key` was set in, if it was set in one (relative paths in a file
    /// are taken from the file's directory).
    pub fn file_of(&self, key: &str) -> Option<&Path> {
        self.figment.find_metadata(key)?.source.as_ref()?.file_path()
    }

    /// An error saying `key` is wrong, naming where its value came from.
    pub fn invalid(&self, key: &str, message: impl fmt::Display) -> ConfigError {
        ConfigError::Key {
            key: key.to_string(),
            origin: self.origin(key),
            message: message.to_string(),
        }
    }
}

/// `config file PATH` / `environment variable VAR` / `flag --NAME`.
fn describe(md: &Metadata, path: &[&str]) -> String {
    match &md.source {
        Some(Source::File(p)) => format!("config file {}", p.display()),
        _ => format!("{} {}", md.name, md.interpolate(&Profile::Default, path)),
    }
}

/// The first of figment's errors (the one a person fixes first), as a [`ConfigError`].
fn from_figment(e: figment::Error) -> ConfigError {
    let message = e.kind.to_string();
    let path: Vec<&str> = e.path.iter().map(String::as_str).collect();
    match (&e.metadata, path.is_empty()) {
        (Some(md), false) => ConfigError::Key {
            key: path.join("."),
            origin: describe(md, &path),
            message,
        },
        (None, false) => ConfigError::Key {
            key: path.join("."),
            origin: "configuration".to_string(),
            message,
        },
        (Some(md), true) => ConfigError::Invalid(format!("{}: {message}", describe(md, &path))),
        (None, true) => ConfigError::Invalid(message),
    }
}

/// Sets `key` (dotted: `server.listen`) in `dict`, making the sections on the way.
fn insert(dict: &mut Dict, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            dict.insert(key.to_string(), value);
        }
        Some((section, rest)) => {
            let entry = dict
                .entry(section.to_string())
                .or_insert_with(|| Value::from(Dict::new()));
            if let Value::Dict(_, inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

/// Drops unset values (`None`), and sections left empty, so a flag not given does
/// not hide the layers below it.
fn prune(value: Value) -> Option<Value> {
    match value {
        Value::Empty(..) => None,
        Value::Dict(tag, dict) => {
            let dict: Dict = dict
                .into_iter()
                .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                .collect();
            (!dict.is_empty()).then_some(Value::Dict(tag, dict))
        }
        other => Some(other),
    }
}

fn toml_to_dict(text: &str) -> Result<Dict, String> {
    use figment::providers::Format as _;
    figment::providers::Toml::from_str::<Dict>(text).map_err(|e| e.to_string().trim_end().to_string())
}

fn json_to_dict(text: &str) -> Result<Dict, String> {
    use figment::providers::Format as _;
    figment::providers::Json::from_str::<Dict>(text).map_err(|e| e.to_string())
}

/// Reads a config file: a regular file of at most [`MAX_FILE_BYTES`], in UTF-8, read
/// without blocking ([`railyard_files::read_regular_text`]).
fn read_file(path: &Path) -> Result<String, ConfigError> {
    railyard_files::read_regular_text(path, MAX_FILE_BYTES).map_err(|e| ConfigError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
