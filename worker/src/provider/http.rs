//! The HTTP plumbing both real providers share: a POST with retries on 429 / 5xx /
//! transport errors (honouring `retry-after`), status → [`ProviderError`] mapping,
//! and the two ways of reading the answer: one JSON document, or a Server-Sent Events
//! stream fed event by event to a [`TurnDecoder`].
//!
//! The pauses and the list of transient statuses are Railyard's shared ones
//! ([`railyard_sdk::retry`]).

use std::future::Future;
use std::time::Duration;

use backon::Retryable;
use railyard_model::retry::is_transient_http_status;
use railyard_sdk::RetryPolicy;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::rate_limit;
use super::sse::{SseEvent, SseParser};
use super::{ModelTurn, ProviderError, chunks, excerpt};
use crate::output::{OutputChunk, OutputSink};

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

impl Failed {
    /// A failure not tried again within this call (the step's retry policy decides).
    fn final_(error: ProviderError) -> Self {
        Self {
            error,
            again: false,
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

/// The longest answer that does not stream: also the longest wait for a streamed
/// answer's first byte (its headers), so streaming waits no less than before.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest a streamed answer may last in all. It is mostly bounded by the idle
/// timeout and the response cap; this is the last word.
const MAX_STREAM_DURATION: Duration = Duration::from_secs(3600);

/// Default longest pause between two reads of a streamed answer before it counts as
/// stalled (a retryable transport error).
pub(crate) const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest line, and the longest event, of a streamed answer (model APIs send
/// small deltas; a server that sends a whole tool call at once stays far below).
const MAX_SSE_EVENT_BYTES: usize = 8 << 20;

/// Builds the reqwest client both providers use. Model calls can legitimately take
/// minutes, so only the connect step has a short timeout.
fn client() -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))
}

/// Assembles one streamed answer from its events, pushing live output as it goes. A
/// fresh decoder reads each try of a call.
pub(crate) trait TurnDecoder: Send {
    /// Takes one event; `Ok(true)` when it ended the answer. An `Err` fails this try
    /// (an `error` event: the error the same failure has without streaming).
    fn event(&mut self, event: &SseEvent, out: &dyn OutputSink) -> Result<bool, ProviderError>;

    /// The assembled answer once the stream is over; `ended` tells whether its end
    /// event came (a stream cut short is a retryable transport error unless the
    /// decoder can tell the answer was whole).
    fn finish(self, ended: bool, url: &str) -> Result<ModelTurn, ProviderError>;
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
    /// Whether calls use the provider's streaming API.
    pub stream: bool,
    /// Longest pause between two reads of a streamed answer.
    pub idle_timeout: Duration,
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
            stream: true,
            idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
        })
    }

    /// Runs `once` until it succeeds or fails for good, by the endpoint's policy
    /// ([`ProviderError::is_retryable`]; a `retry-after` replaces the policy's pause).
    /// Every failed try is told to `out`, so a watcher knows a retried turn restarts.
    async fn call<T, F, Fut>(&self, out: &dyn OutputSink, once: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Failed>>,
    {
        let policy = self.retry;
        let mut attempt = 0u32;
        let result = once
            .retry(policy.builder())
            .when(|f: &Failed| f.again)
            .adjust(|f: &Failed, pause: Option<Duration>| {
                pause.map(|p| f.retry_after.map_or(p, |asked| policy.honour(asked)))
            })
            .notify(|f: &Failed, pause: Duration| {
                attempt += 1;
                tracing::warn!(attempt, max_attempts = policy.max_attempts, delay_ms = pause.as_millis() as u64,
                    error = %f.error, "model call failed; retrying");
                out.push(OutputChunk::Error(format!(
                    "{} (try {attempt} of {}; retrying)",
                    excerpt(&f.error.to_string(), BODY_EXCERPT),
                    policy.max_attempts
                )));
            })
            .await
            .map_err(|f| f.error);
        if let Err(e) = &result {
            out.push(OutputChunk::Error(excerpt(&e.to_string(), BODY_EXCERPT)));
        }
        result
    }

    /// POSTs `body` and returns the parsed JSON answer, retrying what can be retried.
    /// A success answer that is not JSON is not retried here (the step's own retry
    /// policy decides).
    pub(crate) async fn post(&self, body: &Value, out: &dyn OutputSink) -> Result<Value, ProviderError> {
        self.call(out, || self.post_once(body)).await
    }

    /// POSTs `body` (which asks for a stream) and assembles the streamed answer with
    /// a fresh decoder per try, retrying what can be retried: an `error` event as its
    /// status would be, a cut or stalled stream as a transport error. A server that
    /// answers with plain JSON instead (it ignored `stream`) is read by `whole`.
    pub(crate) async fn stream<D: TurnDecoder>(
        &self,
        body: &Value,
        out: &dyn OutputSink,
        decoder: impl Fn() -> D,
        whole: fn(&Value) -> Result<ModelTurn, ProviderError>,
    ) -> Result<ModelTurn, ProviderError> {
        self.call(out, || self.stream_once(body, out, decoder(), whole))
            .await
    }

    /// The model's next turn for `body`: streamed when this endpoint streams (a fresh
    /// `decoder` per try), else read whole with `whole` and pushed to `out` as chunks.
    pub(crate) async fn turn<D: TurnDecoder>(
        &self,
        body: &Value,
        out: &dyn OutputSink,
        decoder: impl Fn() -> D,
        whole: fn(&Value) -> Result<ModelTurn, ProviderError>,
    ) -> Result<ModelTurn, ProviderError> {
        if self.stream {
            return self.stream(body, out, decoder, whole).await;
        }
        let turn = whole(&self.post(body, out).await?)
            .inspect_err(|e| out.push(OutputChunk::Error(e.to_string())))?;
        chunks::emit_turn(&turn, out, 1);
        Ok(turn)
    }

    /// Sends the request and maps an error status; `Ok` is a 2xx answer.
    async fn send(&self, body: &Value, timeout: Duration) -> Result<reqwest::Response, Failed> {
        let url = self.url.as_str();
        let request = self
            .client
            .post(url)
            .headers(self.headers.clone())
            .timeout(timeout)
            .json(body)
            .send();
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, request)
            .await
            .map_err(|_| ProviderError::Transport {
                url: url.to_string(),
                message: format!("no answer within {REQUEST_TIMEOUT:?}"),
            })?
            .map_err(|e| ProviderError::Transport {
                url: url.to_string(),
                message: error_chain(&e),
            })?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(resp);
        }
        let retry_after = if status == 429 {
            rate_limit::reset_in(resp.headers(), rate_limit::wall_clock())
        } else {
            rate_limit::retry_after(resp.headers())
        };
        // Of an error answer only an excerpt is shown; the rest is not worth reading.
        let (text, _) = read_capped(resp, ERROR_BODY_CAP, url).await?;
        if let Some(reset_in) = retry_after.filter(|r| status == 429 && *r > rate_limit::PARK_AFTER) {
            // Too long to wait holding the step's slot: the step parks instead.
            return Err(Failed::final_(ProviderError::RateLimited {
                reset_in,
                body: excerpt(&text, BODY_EXCERPT),
            }));
        }
        Err(Failed {
            retry_after,
            ..Failed::from(classify(status, &text, self.key_env, &self.model))
        })
    }

    /// One try: the answer, or why it failed and how long the server asked us to wait.
    async fn post_once(&self, body: &Value) -> Result<Value, Failed> {
        let resp = self.send(body, REQUEST_TIMEOUT).await?;
        self.read_json(resp).await
    }

    /// Reads a whole 2xx answer as JSON, within the response cap.
    async fn read_json(&self, resp: reqwest::Response) -> Result<Value, Failed> {
        let url = self.url.as_str();
        let limit = self.max_response_bytes;
        let (text, complete) = read_capped(resp, limit, url).await?;
        if !complete {
            return Err(ProviderError::ResponseTooLarge {
                url: url.to_string(),
                limit,
            }
            .into());
        }
        serde_json::from_str(&text).map_err(|e| {
            Failed::final_(ProviderError::BadResponse(format!(
                "invalid JSON ({e}): {}",
                excerpt(&text, BODY_EXCERPT)
            )))
        })
    }

    /// One try of a streamed call.
    async fn stream_once<D: TurnDecoder>(
        &self,
        body: &Value,
        out: &dyn OutputSink,
        mut decoder: D,
        whole: fn(&Value) -> Result<ModelTurn, ProviderError>,
    ) -> Result<ModelTurn, Failed> {
        let url = self.url.as_str();
        let mut resp = self.send(body, MAX_STREAM_DURATION).await?;
        let event_stream = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });
        if !event_stream {
            let turn = whole(&self.read_json(resp).await?).map_err(Failed::final_)?;
            chunks::emit_turn(&turn, out, 1);
            return Ok(turn);
        }
        let limit = self.max_response_bytes;
        let mut parser =
            SseParser::new(MAX_SSE_EVENT_BYTES.min(usize::try_from(limit).unwrap_or(usize::MAX)));
        let mut events = Vec::new();
        let mut read = 0u64;
        let transport = |message: String| ProviderError::Transport {
            url: url.to_string(),
            message,
        };
        loop {
            let chunk = tokio::time::timeout(self.idle_timeout, resp.chunk())
                .await
                .map_err(|_| {
                    transport(format!(
                        "the answer's stream stalled: nothing came for {:?}",
                        self.idle_timeout
                    ))
                })?
                // A stream cut off mid-answer is as transient as a refused connection.
                .map_err(|e| transport(format!("reading the answer's stream: {}", error_chain(&e))))?;
            let Some(chunk) = chunk else {
                let turn = decoder.finish(false, url).map_err(decode_failure)?;
                chunks::emit_end(&turn, out);
                return Ok(turn);
            };
            read = read.saturating_add(chunk.len() as u64);
            if read > limit {
                return Err(ProviderError::ResponseTooLarge {
                    url: url.to_string(),
                    limit,
                }
                .into());
            }
            parser.feed(&chunk, &mut events).map_err(|e| {
                Failed::from(ProviderError::StreamEventTooLarge {
                    url: url.to_string(),
                    limit: e.limit as u64,
                })
            })?;
            for event in events.drain(..) {
                if decoder.event(&event, out).map_err(decode_failure)? {
                    let turn = decoder.finish(true, url).map_err(decode_failure)?;
                    chunks::emit_end(&turn, out);
                    return Ok(turn);
                }
            }
        }
    }
}

/// A decoder's error as a failed try: an answer that does not decode is, like JSON
/// that does not parse, not tried again within the call; any other error (an `error`
/// event, a cut stream) by its retryability.
fn decode_failure(error: ProviderError) -> Failed {
    match error {
        bad @ ProviderError::BadResponse(_) => Failed::final_(bad),
        other => Failed::from(other),
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

/// The error an `error` event of a stream stands for, given the HTTP status the same
/// failure has without streaming: retryable as that status would be.
pub(crate) fn stream_error(status: u16, body: &str) -> ProviderError {
    ProviderError::Http {
        status,
        body: excerpt(body, BODY_EXCERPT),
        retryable: is_transient_http_status(status),
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
}
