//! Times and durations on the command line: RFC 3339 (UTC) formatting and parsing of
//! unix-millisecond timestamps (chrono), and durations such as `90s`, `1h30m` or `2d`
//! in the one syntax the schedules use too (`railyard_model::duration`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime};
use railyard_view::{DurationStyle, TimeStyle};

/// The current time in unix milliseconds.
#[expect(
    clippy::disallowed_methods,
    reason = "a client command's \"now\" (ages, --since) is the user's wall clock, not the server's"
)]
pub(crate) fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Formats unix milliseconds as RFC 3339 in UTC, to the second (`2024-05-01T12:00:00Z`).
/// Zero, the wire's "unset", prints as `-`.
pub(crate) fn rfc3339(unix_ms: i64) -> String {
    format_ms(unix_ms, false)
}

/// Like [`rfc3339`] with milliseconds (`2024-05-01T12:00:00.250Z`).
pub(crate) fn rfc3339_millis(unix_ms: i64) -> String {
    format_ms(unix_ms, true)
}

/// [`rfc3339_millis`] for JSON output: `null` when the time is unset (zero).
pub(crate) fn rfc3339_or_null(unix_ms: i64) -> serde_json::Value {
    if unix_ms == 0 {
        serde_json::Value::Null
    } else {
        rfc3339_millis(unix_ms).into()
    }
}

fn format_ms(unix_ms: i64, millis: bool) -> String {
    if unix_ms == 0 {
        return "-".to_string();
    }
    let style = if millis {
        TimeStyle::Rfc3339Millis
    } else {
        TimeStyle::Rfc3339
    };
    railyard_view::time(unix_ms, style).unwrap_or_else(|| format!("{unix_ms} ms"))
}

/// Parses an RFC 3339 timestamp (`2024-05-01T12:00:00Z`, `2024-05-01T14:00:00.5+02:00`,
/// a space instead of `T` is accepted) or a plain date (`2024-05-01`, midnight UTC)
/// into unix milliseconds.
pub(crate) fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let s = text.trim();
    let bad = |what: &str| format!("{what} in {s:?} (expected RFC 3339 such as 2024-05-01T12:00:00Z)");
    // chrono's `%Y` takes a sign and `%m`/`%d` one digit, so the date's shape is checked here.
    let b = s.as_bytes();
    let date_shape = b.len() >= 10
        && b[4] == b'-'
        && b[7] == b'-'
        && [0..4, 5..7, 8..10]
            .iter()
            .all(|r| b[r.clone()].iter().all(u8::is_ascii_digit));
    if !date_shape {
        return Err(bad("no YYYY-MM-DD date"));
    }
    if b.len() == 10 {
        let date = NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|e| bad(&e.to_string()))?;
        return Ok(date.and_time(NaiveTime::MIN).and_utc().timestamp_millis());
    }
    match DateTime::parse_from_rfc3339(s) {
        Ok(t) => Ok(t.timestamp_millis()),
        Err(e) => {
            let local = NaiveDateTime::parse_from_str(&s.replace(['t', ' '], "T"), "%Y-%m-%dT%H:%M:%S%.f");
            let why = if local.is_ok() {
                "missing time zone (add Z for UTC)".to_string()
            } else {
                e.to_string()
            };
            Err(bad(&why))
        }
    }
}

/// Parses a duration in the one syntax (`railyard_model::duration`: `90s`, `15m`,
/// `1h30m`, `2d`; units `ms`, `s`, `m`, `h`, `d`, `w`).
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
    fn formats_utc() {
        assert_eq!(rfc3339(1), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(0), "-");
        assert_eq!(rfc3339(1_714_564_800_000), "2024-05-01T12:00:00Z");
        assert_eq!(rfc3339_millis(1_714_564_800_250), "2024-05-01T12:00:00.250Z");
        // Leap day and end of a leap year.
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_599_000), "2024-12-31T23:59:59Z");
        // Before the epoch.
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_rfc3339() {
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00Z"), Ok(1_714_564_800_000));
        assert_eq!(parse_rfc3339("2024-05-01t12:00:00z"), Ok(1_714_564_800_000));
        assert_eq!(parse_rfc3339("2024-05-01 12:00:00Z"), Ok(1_714_564_800_000));
        assert_eq!(parse_rfc3339("2024-05-01T14:00:00+02:00"), Ok(1_714_564_800_000));
        assert_eq!(parse_rfc3339("2024-05-01T11:30:00-00:30"), Ok(1_714_564_800_000));
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00.25Z"), Ok(1_714_564_800_250));
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.123456Z"),
            Ok(1_714_564_800_123)
        );
        assert_eq!(parse_rfc3339("2024-05-01"), Ok(1_714_521_600_000));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(0));
    }

    #[test]
    fn round_trips() {
        for ms in [
            1,
            86_399_999,
            951_782_400_000,
            1_714_564_800_250,
            4_102_444_800_000,
        ] {
            assert_eq!(parse_rfc3339(&rfc3339_millis(ms)), Ok(ms));
        }
    }

    #[test]
    fn rejects_bad_timestamps() {
        for bad in [
            "",
            "yesterday",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:00:00",
            "2024-05-01T12:00:00+0200",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00Z",
            "2024-5-1",
            "+024-05-01",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad:?} should not parse");
        }
        let msg = parse_rfc3339("2024-05-01T12:00:00").unwrap_err();
        assert!(msg.contains("time zone"), "{msg}");
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "h", "10", "5x", "-5m", "1.5h", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(Duration::from_micros(850)), "850 µs");
        assert_eq!(human_duration(Duration::from_micros(4_200)), "4.20 ms");
        assert_eq!(human_duration(Duration::from_millis(3_210)), "3.21 s");
    }
}
