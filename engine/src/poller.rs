//! The poller's HTTP side: one poll of one polled trigger's source (GitHub's or
//! GitLab's REST listing), bounded in pages, items, bytes and time. It asks for
//! what changed since the cursor, oldest first, sends the first page's `ETag`
//! back (`If-None-Match`: an unchanged listing is a `304` and costs no rate
//! limit), follows `Link: rel="next"` on the same origin only, and reads the
//! rate-limit headers (`X-RateLimit-Remaining` / `-Reset`, GitLab's
//! `RateLimit-*`, `Retry-After` on a `403` or `429`). It connects only where result
//! delivery may (`delivery::destination`: no internal address unless
//! `delivery.allow_networks` lists it, never the server's own listeners), through
//! no proxy. What it found is handed back; `service::polls` renders it and
//! commits it through the writer.

use std::sync::Arc;
use std::time::Duration;

use crate::delivery::destination::{Destinations, Resolver};

use railyard_model::Millis;
use railyard_model::trigger::poll::{MAX_BACKOFF_MS, PollSource, PollState, next_link};
use serde_json::Value;

/// The bounds on polling (`[hooks]` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollLimits {
    /// Polls in flight at once on this server.
    pub max_pollers: usize,
    /// Items taken from one poll; the rest wait for the next.
    pub items_per_poll: usize,
    /// Pages fetched in one poll.
    pub pages_per_poll: usize,
    /// Largest page body read.
    pub max_page_bytes: usize,
    /// Time for one request, answer included.
    pub request_timeout: Duration,
    /// Time for a request's connection and the first byte of its answer (its
    /// status and headers): an API that never answers holds a poll slot this long.
    pub first_byte_timeout: Duration,
}

impl PollLimits {
    /// Polls in flight at once for one namespace's triggers: half of
    /// `max_pollers`, at least 1.
    pub fn per_namespace(&self) -> usize {
        (self.max_pollers / 2).max(1)
    }

    /// Polls in flight at once to one API (scheme, host and port): half of
    /// `max_pollers`, at least 1.
    pub fn per_host(&self) -> usize {
        (self.max_pollers / 2).max(1)
    }
}

impl Default for PollLimits {
    fn default() -> Self {
        Self {
            max_pollers: 4,
            items_per_poll: 100,
            pages_per_poll: 10,
            max_page_bytes: 4 << 20,
            request_timeout: Duration::from_secs(30),
            first_byte_timeout: Duration::from_secs(10),
        }
    }
}

/// Items a page asks for (the APIs' largest).
const PER_PAGE: u32 = 100;
/// Most bytes of an error answer quoted in the trigger's last error.
const ERROR_BODY: usize = 200;

/// What one poll fetched.
#[derive(Debug, Default)]
pub struct Fetched {
    /// The items, in the API's order (oldest change first), at most
    /// [`PollLimits::items_per_poll`].
    pub items: Vec<Value>,
    /// The first page answered `304 Not Modified`.
    pub not_modified: bool,
    /// The first page's URL and `ETag`.
    pub etag: Option<(String, String)>,
    /// Pages fetched.
    pub pages: usize,
    /// A rate limit says: not before then.
    pub not_before: Option<Millis>,
    /// Why the poll stopped short (the items before it are kept).
    pub error: Option<String>,
}

/// A client for polling: no redirects, no proxy, the request timeout, and only
/// the addresses `destinations` allows.
pub fn client(limits: &PollLimits, destinations: Arc<Destinations>) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .timeout(limits.request_timeout)
        .connect_timeout(limits.first_byte_timeout.min(limits.request_timeout))
        .redirect(reqwest::redirect::Policy::none())
        // A proxy would pick the address connected to: the check would be moot.
        .no_proxy()
        .dns_resolver(Resolver(destinations))
        .user_agent(concat!("railyard/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())
}

fn header_num(h: &reqwest::header::HeaderMap, names: &[&str]) -> Option<i64> {
    names
        .iter()
        .find_map(|n| h.get(*n))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The path of `url`, for messages (never its query: it may name labels only,
/// but a message stays short).
fn path_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.path().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Fetches what changed since `state`'s cursor. `token` is the token's value.
pub async fn fetch(
    client: &reqwest::Client,
    destinations: &Destinations,
    src: &PollSource,
    token: Option<&str>,
    state: &PollState,
    limits: &PollLimits,
    now: Millis,
) -> Fetched {
    let mut out = Fetched::default();
    let origin = url::Url::parse(src.base_url()).map(|u| u.origin()).ok();
    let mut url = src.first_page_url(&state.since, PER_PAGE);
    loop {
        let mut req = client.get(&url).header(
            reqwest::header::ACCEPT,
            if src.kind.is_gitlab() {
                "application/json"
            } else {
                "application/vnd.github+json"
            },
        );
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let first = out.pages == 0;
        if first && !state.etag.is_empty() && state.etag_url == url {
            req = req.header(reqwest::header::IF_NONE_MATCH, &state.etag);
        }
        let checked = match url::Url::parse(&url) {
            Ok(u) => destinations.check_url(&u).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("invalid URL: {e}")),
        };
        if let Err(e) = checked {
            out.error = Some(format!("GET {}: {e}", path_of(&url)));
            return out;
        }
        let resp = match tokio::time::timeout(limits.first_byte_timeout, req.send()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                out.error = Some(format!("GET {}: {}", path_of(&url), error_chain(&e)));
                return out;
            }
            Err(_) => {
                out.error = Some(format!(
                    "GET {}: no answer within {} s",
                    path_of(&url),
                    limits.first_byte_timeout.as_secs_f64()
                ));
                return out;
            }
        };
        out.pages += 1;
        let status = resp.status();
        let h = resp.headers();
        let remaining = header_num(h, &["x-ratelimit-remaining", "ratelimit-remaining"]);
        let reset = header_num(h, &["x-ratelimit-reset", "ratelimit-reset"]);
        let retry_after = header_num(h, &["retry-after"]);
        // When the limit is spent: Retry-After, else the reset time, else a minute;
        // never later than the longest wait (as the trigger's status is).
        let limit_until = || {
            let until = match (retry_after, reset) {
                (Some(s), _) => now.saturating_add(s.clamp(0, 86_400) * 1000),
                (None, Some(r)) => (r.saturating_mul(1000)).max(now),
                (None, None) => now + 60_000,
            };
            until.min(now.saturating_add(MAX_BACKOFF_MS as i64))
        };
        if status == reqwest::StatusCode::NOT_MODIFIED && first {
            out.not_modified = true;
            return out;
        }
        let limited = status == reqwest::StatusCode::TOO_MANY_REQUESTS
            || (status == reqwest::StatusCode::FORBIDDEN && (retry_after.is_some() || remaining == Some(0)));
        if limited {
            let until = limit_until();
            out.not_before = Some(until);
            out.error = Some(format!(
                "rate limited (HTTP {}) on {}: next poll in {} s",
                status.as_u16(),
                path_of(&url),
                (until - now).max(0) / 1000
            ));
            return out;
        }
        if !status.is_success() {
            let body = read_bounded(resp, ERROR_BODY).await.unwrap_or_default();
            let body = String::from_utf8_lossy(&body);
            out.error = Some(format!(
                "HTTP {} from {}: {}",
                status.as_u16(),
                path_of(&url),
                railyard_model::text::prefix(body.trim(), ERROR_BODY)
            ));
            return out;
        }
        if remaining == Some(0) {
            out.not_before = Some(limit_until());
        }
        let etag = h
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let next = h
            .get_all(reqwest::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(next_link);
        let body = match read_bounded(resp, limits.max_page_bytes).await {
            Ok(b) if b.len() <= limits.max_page_bytes => b,
            Ok(_) => {
                out.error = Some(format!(
                    "a page of {} is over {} bytes",
                    path_of(&url),
                    limits.max_page_bytes
                ));
                return out;
            }
            Err(e) => {
                out.error = Some(format!("GET {}: {e}", path_of(&url)));
                return out;
            }
        };
        let page: Vec<Value> = match serde_json::from_slice(&body) {
            Ok(Value::Array(items)) => items,
            _ => {
                out.error = Some(format!(
                    "{} answered something other than a JSON list",
                    path_of(&url)
                ));
                return out;
            }
        };
        if first && let Some(e) = etag {
            out.etag = Some((url.clone(), e));
        }
        let room = limits.items_per_poll.saturating_sub(out.items.len());
        let full = page.len() >= room;
        out.items.extend(page.into_iter().take(room));
        let Some(next) = next else { return out };
        if full || out.pages >= limits.pages_per_poll {
            return out;
        }
        match (url::Url::parse(&next), &origin) {
            (Ok(n), Some(o)) if &n.origin() == o => url = next,
            _ => {
                out.error = Some(format!(
                    "the next page is not on {} (the token goes nowhere else)",
                    src.base_url()
                ));
                return out;
            }
        }
    }
}

/// Reads at most `max + 1` bytes of a body (one more tells it is longer).
async fn read_bounded(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| error_chain(&e))? {
        let room = (max + 1).saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if buf.len() > max {
            break;
        }
    }
    Ok(buf)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    railyard_model::text::prefix(&s, 300).to_string()
}
