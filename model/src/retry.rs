//! Which failures of an outbound HTTP call are worth the same request again: the
//! result-delivery sender and the worker's model providers classify by this.

/// Whether an HTTP error status may go away if the same request is sent again: 408
/// (request timeout), 409 (Anthropic's transient conflicts), 429 (rate limited) and
/// every 5xx (529 is Anthropic's "overloaded").
pub fn is_transient_http_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500..=599)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_conflicts_rate_limits_and_server_errors_are_transient() {
        for s in [408, 409, 429, 500, 503, 529] {
            assert!(is_transient_http_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!is_transient_http_status(s), "{s}");
        }
    }
}
