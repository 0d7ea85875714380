//! The rules for a delivery URL (a run's `callback_url`, a subscription's `url`), and
//! the form in which history and listings show it.

use crate::error::Rejection;
use crate::limits;

/// Checks a delivery URL: at most [`limits::URL`] bytes, `http://` or `https://` (in
/// any case: schemes are case-insensitive, RFC 3986 section 3.1), a host, and no
/// `user:password@`. The error names `field` and never repeats the URL (it may carry
/// a secret in its path or query). Which addresses the host may reach is the
/// sender's check, made on the address it connects to.
pub fn check(field: &str, url: &str) -> Result<(), Rejection> {
    limits::check_len(field, url, limits::URL)?;
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return Err(Rejection::field(field, "must be an http:// or https:// URL"));
    }
    let parsed =
        url::Url::parse(url).map_err(|e| Rejection::field(field, format!("is not a valid URL: {e}")))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Rejection::field(field, "must name a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Rejection::field(
            field,
            "must not carry credentials (user:password@); the server signs each delivery instead",
        ));
    }
    Ok(())
}

/// The URL as history and listings show it: scheme, host and port, with the path and
/// query (where webhook URLs keep their secrets) left out.
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => {
            let origin = u.origin().ascii_serialization();
            if u.path() == "/" && u.query().is_none() {
                origin
            } else {
                format!("{origin}/…")
            }
        }
        Err(_) => "<invalid URL>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_and_redaction() {
        let msg = |u: &str| check("callback_url", u).unwrap_err().to_string();
        assert!(check("callback_url", "https://hooks.example:8443/a/b?c=d").is_ok());
        assert!(check("callback_url", "http://127.0.0.1:9/").is_ok());
        // The scheme in any case (RFC 3986 section 3.1).
        assert!(check("callback_url", "HTTP://hooks.example/x").is_ok());
        assert!(check("callback_url", "Https://hooks.example/x").is_ok());
        assert_eq!(
            msg("httpx://x"),
            "callback_url: must be an http:// or https:// URL"
        );
        assert_eq!(msg("http:x"), "callback_url: must be an http:// or https:// URL");
        assert_eq!(msg("ftp://x"), "callback_url: must be an http:// or https:// URL");
        let m = msg("https://bob:hunter2@example.com/x");
        assert!(m.contains("credentials") && !m.contains("hunter2"), "{m}");
        assert!(msg("https://bob@example.com/").contains("credentials"));
        assert!(msg("http://").starts_with("callback_url: "));
        assert!(msg(&format!("https://x/{}", "a".repeat(3000))).contains("limit"));
        assert_eq!(
            redacted("https://hooks.slack.com/services/T/B/secret"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(redacted("http://127.0.0.1:9000/"), "http://127.0.0.1:9000");
    }
}
