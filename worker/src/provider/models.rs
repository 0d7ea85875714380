//! The models a worker can serve: its default provider, and others built on demand
//! for a step that names a model (or a provider) of its own, or for its fallbacks,
//! from the providers the worker has credentials for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Provider, ProviderConfig, ProviderError, from_config};

/// Most providers built for other models and kept.
const MAX_BUILT: usize = 32;

/// A model the worker can call, or why not.
pub struct Models {
    default: Arc<dyn Provider>,
    /// The worker's configured real providers (their default models), the templates
    /// for other models.
    configs: Vec<ProviderConfig>,
    built: Mutex<HashMap<(String, String), Arc<dyn Provider>>>,
}

impl Models {
    /// Only `default`: another model is served only by a scripted default (which has
    /// no model at all).
    pub fn single(default: Arc<dyn Provider>) -> Self {
        Self::new(default, Vec::new())
    }

    /// `default`, and other models on `configs`.
    pub fn new(default: Arc<dyn Provider>, configs: Vec<ProviderConfig>) -> Self {
        Self {
            default,
            configs,
            built: Mutex::new(HashMap::new()),
        }
    }

    /// The default provider.
    pub fn default_provider(&self) -> &Arc<dyn Provider> {
        &self.default
    }

    /// The provider for `model` on `provider` (either empty: the default's).
    pub fn get(&self, provider: &str, model: &str) -> Result<Arc<dyn Provider>, String> {
        let d = &self.default;
        if d.name() == "scripted" {
            return Ok(d.clone());
        }
        let kind = if provider.is_empty() { d.name() } else { provider };
        let model = if model.is_empty() && kind == d.name() {
            d.model()
        } else {
            model
        };
        if kind == d.name() && model == d.model() {
            return Ok(d.clone());
        }
        let key = (kind.to_string(), model.to_string());
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = built.get(&key) {
            return Ok(p.clone());
        }
        let config = self
            .configs
            .iter()
            .find_map(|c| with_model(c, kind, model))
            .ok_or_else(|| {
                format!("this worker has no {kind} provider configured (no API key) for the model {model:?}")
            })?;
        let p = from_config(&config).map_err(|e: ProviderError| e.to_string())?;
        if built.len() >= MAX_BUILT {
            built.clear();
        }
        built.insert(key, p.clone());
        Ok(p)
    }
}

/// `config` with `model`, when it is a provider of `kind` (`model` empty: its own).
fn with_model(config: &ProviderConfig, kind: &str, model: &str) -> Option<ProviderConfig> {
    let mut c = config.clone();
    match (&mut c, kind) {
        (ProviderConfig::Anthropic { model: m, .. }, "anthropic")
        | (ProviderConfig::OpenAi { model: m, .. }, "openai") => {
            if !model.is_empty() {
                *m = model.to_string();
            }
            Some(c)
        }
        _ => None,
    }
}

/// Whether `e` is the provider refusing for load (429, 529, 503, Anthropic's
/// `overloaded_error`, OpenAI's `rate_limit_exceeded`) or not answering in time, after
/// the provider's own retries: the cases another model may serve.
pub fn is_overload(e: &ProviderError) -> bool {
    match e {
        ProviderError::Http { status, body, .. } => {
            matches!(status, 429 | 503 | 529)
                || body.contains("overloaded_error")
                || body.contains("rate_limit_exceeded")
        }
        ProviderError::Transport { .. } | ProviderError::RateLimited { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ScriptSource, StreamSettings};

    fn anthropic(model: &str) -> ProviderConfig {
        ProviderConfig::Anthropic {
            base_url: "http://127.0.0.1:9".into(),
            api_key: "k".into(),
            model: model.into(),
            max_tokens: 100,
            max_response_bytes: 1 << 20,
            stream: StreamSettings::default(),
        }
    }

    #[test]
    fn models_come_from_the_configured_providers() {
        let default = from_config(&anthropic("a")).unwrap();
        let models = Models::new(default, vec![anthropic("a")]);
        assert_eq!(models.get("", "").unwrap().model(), "a");
        assert_eq!(models.get("", "b").unwrap().model(), "b");
        assert_eq!(models.get("anthropic", "c").unwrap().model(), "c");
        let e = models.get("openai", "gpt-4o").err().unwrap();
        assert!(e.contains("no openai provider") && e.contains("gpt-4o"), "{e}");
        let scripted = ScriptSource::BuiltIn(crate::provider::BuiltInScript {
            name: "<built-in>/s.json",
            text: r#"{"default": [{"text": "hi"}]}"#,
        });
        let s = from_config(&ProviderConfig::Scripted { script: scripted }).unwrap();
        assert_eq!(Models::single(s).get("openai", "x").unwrap().name(), "scripted");
    }

    #[test]
    fn overload_is_what_another_model_may_serve() {
        let http = |status, body: &str| ProviderError::Http {
            status,
            body: body.into(),
            retryable: true,
        };
        assert!(is_overload(&http(529, "")));
        assert!(is_overload(&http(429, "")));
        assert!(is_overload(&http(
            500,
            r#"{"error":{"type":"overloaded_error"}}"#
        )));
        assert!(!is_overload(&http(400, "bad request")));
        assert!(!is_overload(&ProviderError::UnknownModel {
            model: "m".into(),
            body: String::new()
        }));
    }
}
