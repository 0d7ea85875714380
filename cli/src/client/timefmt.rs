//! Time handling without a calendar crate: RFC 3339 (UTC) formatting and parsing of
//! unix-millisecond timestamps, and short durations such as `90s`, `1h30m` or `2d`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MS_PER_DAY: i64 = 86_400_000;

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
    let days = unix_ms.div_euclid(MS_PER_DAY);
    let ms_of_day = unix_ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let secs = ms_of_day / 1000;
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    if millis {
        format!(
            "{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{:03}Z",
            ms_of_day % 1000
        )
    } else {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
    }
}

/// Parses an RFC 3339 timestamp (`2024-05-01T12:00:00Z`, `2024-05-01T14:00:00.5+02:00`,
/// a space instead of `T` is accepted) or a plain date (`2024-05-01`, midnight UTC)
/// into unix milliseconds.
pub(crate) fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let s = text.trim();
    let bad = |what: &str| format!("{what} in {s:?} (expected RFC 3339 such as 2024-05-01T12:00:00Z)");
    let b = s.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad("no YYYY-MM-DD date"));
    }
    let year = digits(&s[0..4]).ok_or_else(|| bad("bad year"))?;
    let month = digits(&s[5..7]).ok_or_else(|| bad("bad month"))?;
    let day = digits(&s[8..10]).ok_or_else(|| bad("bad day"))?;
    if !(1..=12).contains(&month) {
        return Err(bad("month out of range"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(bad("day out of range"));
    }
    let date_ms = days_from_civil(year, month, day) * MS_PER_DAY;
    if b.len() == 10 {
        return Ok(date_ms);
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 19 || b[13] != b':' || b[16] != b':' {
        return Err(bad("no HH:MM:SS time"));
    }
    let hour = digits(&s[11..13]).ok_or_else(|| bad("bad hour"))?;
    let minute = digits(&s[14..16]).ok_or_else(|| bad("bad minute"))?;
    let second = digits(&s[17..19]).ok_or_else(|| bad("bad second"))?;
    // A leap second (60) is read as the last second of the minute.
    if hour > 23 || minute > 59 || second > 60 {
        return Err(bad("time out of range"));
    }
    let mut rest = &s[19..];
    let mut frac_ms = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(bad("empty fraction of a second"));
        }
        let padded = format!("{:0<3}", &frac[..n.min(3)]);
        frac_ms = digits(&padded).ok_or_else(|| bad("bad fraction"))?;
        rest = &frac[n..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        "" => return Err(bad("missing time zone (add Z for UTC)")),
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return Err(bad("bad time zone")),
            };
            let off = &rest[1..];
            if off.len() != 5 || off.as_bytes()[2] != b':' {
                return Err(bad("bad time zone offset (expected +HH:MM)"));
            }
            let oh = digits(&off[0..2]).ok_or_else(|| bad("bad time zone hour"))?;
            let om = digits(&off[3..5]).ok_or_else(|| bad("bad time zone minute"))?;
            if oh > 23 || om > 59 {
                return Err(bad("time zone offset out of range"));
            }
            sign * (oh * 60 + om)
        }
    };
    let secs_of_day = hour * 3600 + minute * 60 + second.min(59);
    Ok(date_ms + secs_of_day * 1000 + frac_ms - offset_min * 60_000)
}

/// Parses a short duration: one or more `<number><unit>` parts with units `ms`, `s`,
/// `m`, `h`, `d`, `w` (`90s`, `15m`, `1h30m`, `2d`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let bad = |what: &str| format!("{what} in {s:?} (expected a duration such as 30s, 15m, 1h30m or 2d)");
    if s.is_empty() {
        return Err(bad("empty duration"));
    }
    let mut total: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(bad("expected a number"));
        }
        let value: u64 = rest[..n].parse().map_err(|_| bad("number too large"))?;
        rest = &rest[n..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit_ms: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "" => return Err(bad("missing unit")),
            _ => return Err(bad("unknown unit")),
        };
        rest = &rest[unit_len..];
        total = value
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| bad("duration too large"))?;
    }
    Ok(Duration::from_millis(total))
}

/// A short human rendering of an elapsed time: `850 µs`, `4.20 ms`, `3.21 s`.
pub(crate) fn human_duration(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1_000 {
        format!("{micros} µs")
    } else if micros < 1_000_000 {
        format!("{:.2} ms", d.as_secs_f64() * 1_000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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
