//! When a provider's rate limit resets, read from a 429's headers: `retry-after`
//! (seconds), Anthropic's `anthropic-ratelimit-*-reset` (RFC 3339 times) and OpenAI's
//! `x-ratelimit-reset-*` (durations such as `6m0s` or `20ms`). A reset further ahead
//! than a call's own retries should wait ([`PARK_AFTER`]) ends the call with
//! [`super::ProviderError::RateLimited`], so the step can park without its slot.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

/// A reset further ahead than this parks the step rather than waiting in the call.
pub const PARK_AFTER: Duration = Duration::from_secs(5);

/// The longest reset believed: a header further ahead is taken as this.
const MAX_RESET: Duration = Duration::from_secs(24 * 3600);

/// The limits Anthropic and OpenAI name in their reset headers.
const KINDS: [&str; 4] = ["requests", "tokens", "input-tokens", "output-tokens"];

/// How long until the limit a 429 hit resets, as of `now`: `retry-after` when given,
/// else the latest reset of a limit whose `*-remaining` is 0, else the earliest
/// reset named. `None` when no header says.
pub(crate) fn reset_in(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(after) = retry_after(headers) {
        return Some(after.min(MAX_RESET));
    }
    let mut spent: Option<Duration> = None;
    let mut earliest: Option<Duration> = None;
    for kind in KINDS {
        let anthropic = header(headers, &format!("anthropic-ratelimit-{kind}-reset"))
            .and_then(|v| until_rfc3339(v, now))
            .map(|d| {
                (
                    d,
                    header(headers, &format!("anthropic-ratelimit-{kind}-remaining")),
                )
            });
        let openai = header(headers, &format!("x-ratelimit-reset-{kind}"))
            .and_then(go_duration)
            .map(|d| (d, header(headers, &format!("x-ratelimit-remaining-{kind}"))));
        for (reset, remaining) in anthropic.into_iter().chain(openai) {
            let reset = reset.min(MAX_RESET);
            earliest = Some(earliest.map_or(reset, |e| e.min(reset)));
            if remaining.is_some_and(|r| r.trim() == "0") {
                spent = Some(spent.map_or(reset, |s| s.max(reset)));
            }
        }
    }
    spent.or(earliest)
}

/// The wall clock, to turn a provider's reset into a wait and a wait into a time.
#[expect(
    clippy::disallowed_methods,
    reason = "a provider's resets and the server's answers are wall-clock times; the worker has no Clock"
)]
pub(crate) fn wall_clock() -> SystemTime {
    SystemTime::now()
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_unix_ms() -> i64 {
    wall_clock()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

/// `retry-after` given in seconds (the form model APIs use; HTTP dates are ignored).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: f64 = header(headers, reqwest::header::RETRY_AFTER.as_str())?
        .trim()
        .parse()
        .ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(MAX_RESET.as_secs_f64())))
}

/// How long from `now` until an RFC 3339 time (zero when past).
fn until_rfc3339(value: &str, now: SystemTime) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(value.trim()).ok()?;
    let at_ms = u64::try_from(at.timestamp_millis()).ok()?;
    let now_ms = u64::try_from(now.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    Some(Duration::from_millis(at_ms.saturating_sub(now_ms)))
}

/// A Go-style duration (`1h2m3.5s`, `6m0s`, `20ms`), as OpenAI writes its resets.
fn go_duration(value: &str) -> Option<Duration> {
    let mut rest = value.trim();
    if rest.is_empty() || rest.len() > 32 {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total.min(MAX_RESET.as_secs_f64())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn reads_each_providers_reset() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            reset_in(&headers(&[("retry-after", "20")]), now),
            Some(Duration::from_secs(20))
        );
        // 2023-11-14T22:13:20Z is 1_700_000_000.
        let anthropic = headers(&[
            ("anthropic-ratelimit-requests-remaining", "3"),
            ("anthropic-ratelimit-requests-reset", "2023-11-14T22:13:21Z"),
            ("anthropic-ratelimit-tokens-remaining", "0"),
            ("anthropic-ratelimit-tokens-reset", "2023-11-14T22:13:50Z"),
        ]);
        assert_eq!(
            reset_in(&anthropic, now),
            Some(Duration::from_secs(30)),
            "the spent limit's"
        );
        let openai = headers(&[
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(
            reset_in(&openai, now),
            Some(Duration::from_secs(1)),
            "the earliest"
        );
        assert_eq!(go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(go_duration("1h2m3.5s"), Some(Duration::from_secs_f64(3723.5)));
        assert_eq!(go_duration("soon"), None);
        assert_eq!(
            reset_in(&headers(&[("retry-after", "9999999")]), now),
            Some(MAX_RESET)
        );
        assert_eq!(reset_in(&HeaderMap::new(), now), None);
        let date = headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]);
        assert_eq!(retry_after(&date), None, "HTTP dates are ignored");
    }
}
