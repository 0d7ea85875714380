//! Times and durations in the bench's flags and output: durations in the one syntax
//! (`railyard_model::duration`: `30s`, `1m`), elapsed times for people, and the wall
//! clock the schedule bench measures fire lag against.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use railyard_view::{DurationStyle, TimeStyle};

/// The current time in unix milliseconds.
#[expect(
    clippy::disallowed_methods,
    reason = "the schedule bench measures a server process's fires against the machine's wall clock"
)]
pub(crate) fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Unix milliseconds as RFC 3339 in UTC, to the second; zero (unset) as `-`.
pub(crate) fn rfc3339(unix_ms: i64) -> String {
    if unix_ms == 0 {
        return "-".to_string();
    }
    railyard_view::time(unix_ms, TimeStyle::Rfc3339).unwrap_or_else(|| format!("{unix_ms} ms"))
}

/// Parses a duration flag (`90s`, `15m`, `1h30m`; units `ms`, `s`, `m`, `h`, `d`, `w`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    railyard_model::duration::parse_flag(text)
}

/// A short human rendering of an elapsed time: `850 µs`, `4.20 ms`, `3.21 s`.
pub(crate) fn human_duration(d: Duration) -> String {
    railyard_view::duration(d, DurationStyle::Measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_times_and_durations() {
        assert_eq!(rfc3339(0), "-");
        assert_eq!(rfc3339(1_714_564_800_000), "2024-05-01T12:00:00Z");
        assert_eq!(human_duration(Duration::from_micros(850)), "850 µs");
        assert_eq!(human_duration(Duration::from_micros(4_200)), "4.20 ms");
        assert_eq!(parse_duration(" 1m "), Ok(Duration::from_secs(60)));
        assert!(parse_duration("soon").is_err());
    }
}
