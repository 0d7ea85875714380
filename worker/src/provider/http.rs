//! The HTTP plumbing both real providers share: JSON POST with retries on 429 / 5xx /
//! transport errors (honouring `retry-after`), and status → [`ProviderError`] mapping.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::{ProviderError, excerpt};

/// How a provider retries one model call.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Tries in all, the first included.
    pub max_attempts: u32,
    /// First pause when the server gave no `retry-after`; doubles each time.
    pub initial_backoff: Duration,
    /// Cap on any one pause, `retry-after` included.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

const BODY_EXCERPT: usize = 500;

/// Builds the reqwest client both providers use. Model calls can legitimately take
/// minutes, so only the connect step has a short timeout.
fn client() -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))
}

/// One model API endpoint: where to POST, with which headers, for which model, and
/// how to retry.
pub(crate) struct Endpoint {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    /// The environment variable to suggest when credentials are refused.
    key_env: &'static str,
    pub model: String,
    pub retry: RetryPolicy,
}

impl Endpoint {
    pub fn new(
        url: String,
        headers: HeaderMap,
        key_env: &'static str,
        model: &str,
    ) -> Result<Self, ProviderError> {
        Ok(Self {
            client: client()?,
            url,
            headers,
            key_env,
            model: model.to_string(),
            retry: RetryPolicy::default(),
        })
    }

    /// POSTs `body` and returns the parsed JSON answer, retrying what can be retried.
    pub async fn post(&self, body: &Value) -> Result<Value, ProviderError> {
        let (client, url, policy) = (&self.client, self.url.as_str(), &self.retry);
        let mut backoff = policy.initial_backoff;
        let mut attempt = 1;
        loop {
            let sent = client
                .post(url)
                .headers(self.headers.clone())
                .json(body)
                .send()
                .await;
            let (error, server_delay) = match sent {
                Err(e) => (
                    ProviderError::Transport {
                        url: url.to_string(),
                        message: error_chain(&e),
                    },
                    None,
                ),
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = parse_retry_after(resp.headers());
                    let text = resp.text().await.map_err(|e| ProviderError::Transport {
                        url: url.to_string(),
                        message: format!("reading the response body: {}", error_chain(&e)),
                    });
                    let text = match text {
                        Ok(t) => t,
                        Err(e) => {
                            // The answer was cut off mid-body: as transient as a refused connection.
                            if attempt >= policy.max_attempts {
                                return Err(e);
                            }
                            tracing::warn!(attempt, error = %e, "provider answer cut off; retrying");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(policy.max_backoff);
                            attempt += 1;
                            continue;
                        }
                    };
                    if (200..300).contains(&status) {
                        return serde_json::from_str(&text).map_err(|e| {
                            ProviderError::BadResponse(format!(
                                "invalid JSON ({e}): {}",
                                excerpt(&text, BODY_EXCERPT)
                            ))
                        });
                    }
                    let error = classify(status, &text, self.key_env, &self.model);
                    if !error.is_retryable() {
                        return Err(error);
                    }
                    (error, retry_after)
                }
            };
            if attempt >= policy.max_attempts {
                return Err(error);
            }
            let delay = server_delay.unwrap_or(backoff).min(policy.max_backoff);
            tracing::warn!(attempt, max_attempts = policy.max_attempts, delay_ms = delay.as_millis() as u64,
            error = %error, "model call failed; retrying");
            tokio::time::sleep(delay).await;
            backoff = (backoff * 2).min(policy.max_backoff);
            attempt += 1;
        }
    }
}

/// Maps an error status to a typed error.
fn classify(status: u16, body: &str, key_env: &'static str, model: &str) -> ProviderError {
    let body_excerpt = excerpt(body, BODY_EXCERPT);
    match status {
        401 | 403 => ProviderError::Auth {
            key_env,
            status,
            body: body_excerpt,
        },
        404 => ProviderError::UnknownModel {
            model: model.to_string(),
            body: body_excerpt,
        },
        400 | 422 if mentions_missing_model(body) => ProviderError::UnknownModel {
            model: model.to_string(),
            body: body_excerpt,
        },
        // 408 (request timeout) and 409 (Anthropic's transient conflicts) are worth another try too.
        408 | 409 | 429 | 500..=599 => ProviderError::Http {
            status,
            body: body_excerpt,
            retryable: true,
        },
        _ => ProviderError::Http {
            status,
            body: body_excerpt,
            retryable: false,
        },
    }
}

/// OpenAI-compatible servers report an unknown model in several ways; vLLM uses a 400.
fn mentions_missing_model(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    lower.contains("model_not_found")
        || (lower.contains("model")
            && (lower.contains("not found")
                || lower.contains("does not exist")
                || lower.contains("not exist")))
}

/// Reads `retry-after` given in seconds (the form model APIs use; HTTP dates are ignored).
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let raw = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let secs: f64 = raw.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// reqwest's top-level message ("error sending request") hides the cause; keep the chain.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_statuses() {
        let ctx = ("ANTHROPIC_API_KEY", "m1");
        let classify = |status, body| classify(status, body, ctx.0, ctx.1);
        let auth = classify(401, "{}");
        assert!(!auth.is_retryable());
        assert!(
            auth.to_string()
                .starts_with("authentication failed (check ANTHROPIC_API_KEY)")
        );
        assert!(classify(404, "").to_string().starts_with("unknown model m1"));
        assert!(matches!(
            classify(400, r#"{"error":"The model `m1` does not exist."}"#),
            ProviderError::UnknownModel { .. }
        ));
        assert!(classify(429, "slow down").is_retryable());
        assert!(classify(529, "overloaded").is_retryable());
        let bad = classify(400, "prompt too long");
        assert!(!bad.is_retryable());
        assert!(bad.to_string().contains("400 (not retryable): prompt too long"));
    }

    #[test]
    fn parses_retry_after_seconds_only() {
        let mut h = HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(
            reqwest::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(parse_retry_after(&h), None);
    }
}
