//! The HTTP plumbing both real providers share: JSON POST with retries on 429 / 5xx /
//! transport errors (honouring `retry-after`), and status → [`ProviderError`] mapping.
//!
//! The pauses and the list of transient statuses are Railyard's shared ones
//! ([`railyard_sdk::retry`]).

use std::time::Duration;

use backon::Retryable;
use railyard_sdk::RetryPolicy;
use railyard_sdk::retry::is_transient_http_status;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::{ProviderError, excerpt};

/// How a model call is retried unless a provider is given another policy: five tries,
/// pauses from 1 s with jitter, none a minute long (a `retry-after` is capped there too).
const MODEL_CALL_RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 5,
    initial_backoff: Duration::from_secs(1),
    max_backoff: Duration::from_secs(60),
};

/// One failed try of a model call: whether to try again, and the pause the server
/// asked for.
struct Failed {
    error: ProviderError,
    again: bool,
    retry_after: Option<Duration>,
}

impl From<ProviderError> for Failed {
    fn from(error: ProviderError) -> Self {
        Self {
            again: error.is_retryable(),
            error,
            retry_after: None,
        }
    }
}

const BODY_EXCERPT: usize = 500;

/// Default cap on a model response body: far above any real answer (output tokens are
/// bounded by `max_tokens`), far below what would hurt the worker.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: u64 = 32 << 20;

/// Of an error answer (non-2xx) only this much is read: it is only shown as an excerpt.
const ERROR_BODY_CAP: u64 = 64 << 10;

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
    /// Longest success body read; a longer one fails the call.
    pub max_response_bytes: u64,
}

impl Endpoint {
    pub(crate) fn new(
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
            retry: MODEL_CALL_RETRY,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        })
    }

    /// POSTs `body` and returns the parsed JSON answer, retrying what can be retried
    /// ([`ProviderError::is_retryable`]) by the endpoint's policy; a `retry-after`
    /// replaces the policy's pause. A success answer that is not JSON is not retried
    /// here (the step's own retry policy decides).
    pub(crate) async fn post(&self, body: &Value) -> Result<Value, ProviderError> {
        let policy = self.retry;
        let mut attempt = 0u32;
        (|| self.post_once(body))
            .retry(policy.builder())
            .when(|f: &Failed| f.again)
            .adjust(|f: &Failed, pause: Option<Duration>| {
                pause.map(|p| f.retry_after.map_or(p, |asked| policy.honour(asked)))
            })
            .notify(|f: &Failed, pause: Duration| {
                attempt += 1;
                tracing::warn!(attempt, max_attempts = policy.max_attempts, delay_ms = pause.as_millis() as u64,
                    error = %f.error, "model call failed; retrying");
            })
            .await
            .map_err(|f| f.error)
    }

    /// One try: the answer, or why it failed and how long the server asked us to wait.
    async fn post_once(&self, body: &Value) -> Result<Value, Failed> {
        let url = self.url.as_str();
        let resp = self
            .client
            .post(url)
            .headers(self.headers.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| ProviderError::Transport {
                url: url.to_string(),
                message: error_chain(&e),
            })?;
        let status = resp.status().as_u16();
        let retry_after = parse_retry_after(resp.headers());
        let success = (200..300).contains(&status);
        // Of an error answer only an excerpt is shown; the rest is not worth reading.
        let limit = if success {
            self.max_response_bytes
        } else {
            ERROR_BODY_CAP
        };
        let (text, complete) = read_capped(resp, limit, url).await?;
        if success && !complete {
            return Err(ProviderError::ResponseTooLarge {
                url: url.to_string(),
                limit,
            }
            .into());
        }
        if success {
            return serde_json::from_str(&text).map_err(|e| Failed {
                error: ProviderError::BadResponse(format!(
                    "invalid JSON ({e}): {}",
                    excerpt(&text, BODY_EXCERPT)
                )),
                again: false,
                retry_after: None,
            });
        }
        Err(Failed {
            retry_after,
            ..Failed::from(classify(status, &text, self.key_env, &self.model))
        })
    }
}

/// Reads at most `limit` bytes of the body, chunk by chunk (chunked or not, after any
/// decoding), so a runaway or hostile endpoint cannot grow the worker; `false` when it
/// stopped at the limit (or the declared length is over it) with more to come.
async fn read_capped(mut resp: reqwest::Response, limit: u64, url: &str) -> Result<(String, bool), Failed> {
    let mut complete = resp.content_length().is_none_or(|len| len <= limit);
    let mut body = Vec::new();
    while complete {
        // An answer cut off mid-body is as transient as a refused connection.
        let chunk = resp.chunk().await.map_err(|e| ProviderError::Transport {
            url: url.to_string(),
            message: format!("reading the response body: {}", error_chain(&e)),
        })?;
        let Some(chunk) = chunk else { break };
        let room = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            complete = false;
        } else {
            body.extend_from_slice(&chunk);
        }
    }
    Ok((String::from_utf8_lossy(&body).into_owned(), complete))
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
        _ => ProviderError::Http {
            status,
            body: body_excerpt,
            retryable: is_transient_http_status(status),
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
