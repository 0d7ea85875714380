//! How wire values look, written once for the CLI, the MCP gateway and the web
//! console: run status names, search attributes as typed JSON, unix-millisecond
//! times (in UTC or a schedule's zone), durations, a run's elapsed time. Where the
//! callers show a value differently on purpose (the console's lowercase status names
//! in URLs, its plain times in tables), one function takes the style as a parameter.
#![warn(missing_docs)]

use std::borrow::Cow;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat};
use chrono_tz::Tz;
use railyard_proto::v1::{RunInfo, RunStatus, SearchAttribute};
use serde_json::Value;

/// The letter case of a status name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// `RUNNING`, `TIMED_OUT` (the CLI, the gateway, the wire's short names);
    /// `UNSPECIFIED`, and `UNKNOWN(9)` for a number this build does not know.
    Upper,
    /// `running`, `timed_out` (the console, in URLs and class names); `unknown` for
    /// an unset or unknown status.
    Lower,
}

/// The name of a wire run status number, in `case`.
pub fn run_status(status: i32, case: Case) -> Cow<'static, str> {
    let known = RunStatus::try_from(status);
    match case {
        Case::Upper => match known {
            Ok(s) => Cow::Borrowed(s.short_name()),
            Err(_) => Cow::Owned(format!("UNKNOWN({status})")),
        },
        Case::Lower => Cow::Borrowed(match known.unwrap_or(RunStatus::Unspecified) {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Canceled => "canceled",
            RunStatus::Terminated => "terminated",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Unspecified => "unknown",
        }),
    }
}

/// A run's search attributes as a JSON object, each value by its declared type: a
/// number, a boolean, a list of strings, else (and whenever it does not parse) the text.
pub fn attributes_json(attrs: &[SearchAttribute]) -> Value {
    let typed = |a: &SearchAttribute| -> Value {
        let parsed = match a.r#type.as_str() {
            "int" | "double" | "bool" | "keyword_list" => serde_json::from_str(&a.value).ok(),
            _ => None,
        };
        parsed.unwrap_or_else(|| Value::String(a.value.clone()))
    };
    Value::Object(attrs.iter().map(|a| (a.name.clone(), typed(a))).collect())
}

/// How a time is written: in UTC, or in a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeStyle {
    /// RFC 3339 to the second: `2024-05-01T12:00:00Z`.
    Rfc3339,
    /// RFC 3339 with milliseconds: `2024-05-01T12:00:00.250Z`.
    Rfc3339Millis,
    /// For tables people read: `2024-05-01 12:00:00`.
    Plain,
    /// In a zone, for schedules: `2026-03-22 10:00:00 CET`, or with the offset,
    /// `2026-03-22 10:00:00 +01:00`.
    InZone(Tz, ZoneMark),
}

/// How a time in a zone names the zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneMark {
    /// Its abbreviation: `CET`, `UTC`.
    Abbreviation,
    /// Its offset from UTC: `+01:00`.
    Offset,
}

/// Unix milliseconds as a time in `style`; `None` for zero (the wire's "unset") and
/// for a time past what can be written.
pub fn time(unix_ms: i64, style: TimeStyle) -> Option<String> {
    if unix_ms == 0 {
        return None;
    }
    let t = DateTime::from_timestamp_millis(unix_ms)?;
    Some(match style {
        TimeStyle::Rfc3339 => t.to_rfc3339_opts(SecondsFormat::Secs, true),
        TimeStyle::Rfc3339Millis => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        TimeStyle::Plain => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        TimeStyle::InZone(zone, mark) => {
            let format = match mark {
                ZoneMark::Abbreviation => "%Y-%m-%d %H:%M:%S %Z",
                ZoneMark::Offset => "%Y-%m-%d %H:%M:%S %:z",
            };
            t.with_timezone(&zone).format(format).to_string()
        }
    })
}

/// How a duration is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationStyle {
    /// A measurement, to three figures: `850 µs`, `4.20 ms`, `3.21 s`.
    Measured,
    /// An elapsed time at a glance, two units: `1h02m`, `3m04s`, `5.2s`, and
    /// under a second in milliseconds: `42ms`.
    Clock,
    /// Exactly, as the duration flags are written: `90s` is `1m30s`, `1h30m`,
    /// `1s500ms`, `365d`; zero is `0s`.
    Exact,
}

/// `d` written in `style`.
pub fn duration(d: Duration, style: DurationStyle) -> String {
    match style {
        DurationStyle::Measured => {
            let micros = d.as_micros();
            if micros < 1_000 {
                format!("{micros} µs")
            } else if micros < 1_000_000 {
                format!("{:.2} ms", d.as_secs_f64() * 1_000.0)
            } else {
                format!("{:.2} s", d.as_secs_f64())
            }
        }
        DurationStyle::Clock => {
            let s = d.as_secs();
            if s >= 3600 {
                format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
            } else if s >= 60 {
                format!("{}m{:02}s", s / 60, s % 60)
            } else if s == 0 {
                format!("{}ms", d.subsec_millis())
            } else {
                format!("{}.{}s", s, d.subsec_millis() / 100)
            }
        }
        DurationStyle::Exact => {
            let mut rest = d.as_millis();
            if rest == 0 {
                return "0s".to_string();
            }
            let mut out = String::new();
            for (unit, size) in [
                ("d", 86_400_000),
                ("h", 3_600_000),
                ("m", 60_000),
                ("s", 1_000),
                ("ms", 1),
            ] {
                if rest >= size {
                    out.push_str(&format!("{}{unit}", rest / size));
                    rest %= size;
                }
            }
            out
        }
    }
}

/// How long a run has taken in milliseconds: to its close, or to `now_ms` while it
/// is open; never negative.
pub fn run_elapsed_ms(run: &RunInfo, now_ms: i64) -> i64 {
    let end = if run.close_time_unix_ms > 0 {
        run.close_time_unix_ms
    } else {
        now_ms
    };
    (end - run.start_time_unix_ms).max(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn status_names_in_both_cases() {
        let running = RunStatus::Running as i32;
        let timed_out = RunStatus::TimedOut as i32;
        assert_eq!(run_status(running, Case::Upper), "RUNNING");
        assert_eq!(run_status(timed_out, Case::Upper), "TIMED_OUT");
        assert_eq!(run_status(0, Case::Upper), "UNSPECIFIED");
        assert_eq!(run_status(99, Case::Upper), "UNKNOWN(99)");
        assert_eq!(run_status(running, Case::Lower), "running");
        assert_eq!(run_status(timed_out, Case::Lower), "timed_out");
        assert_eq!(run_status(0, Case::Lower), "unknown");
        assert_eq!(run_status(99, Case::Lower), "unknown");
        // The lowercase names are the short names lowercased.
        for s in [
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Canceled,
            RunStatus::Terminated,
        ] {
            assert_eq!(
                run_status(s as i32, Case::Lower),
                s.short_name().to_ascii_lowercase()
            );
        }
    }

    #[test]
    fn attributes_are_typed_json() {
        let attr = |name: &str, ty: &str, value: &str| SearchAttribute {
            name: name.into(),
            r#type: ty.into(),
            value: value.into(),
        };
        let attrs = [
            attr("priority", "int", "2"),
            attr("score", "double", "0.5"),
            attr("urgent", "bool", "true"),
            attr("labels", "keyword_list", r#"["a","b"]"#),
            attr("customer", "keyword", "42"),
            attr("broken", "int", "not a number"),
        ];
        assert_eq!(
            attributes_json(&attrs),
            json!({
                "priority": 2, "score": 0.5, "urgent": true, "labels": ["a", "b"],
                "customer": "42", "broken": "not a number",
            })
        );
        assert_eq!(attributes_json(&[]), json!({}));
    }

    #[test]
    fn times_in_each_style() {
        let t = 1_714_564_800_250;
        assert_eq!(
            time(t, TimeStyle::Rfc3339).as_deref(),
            Some("2024-05-01T12:00:00Z")
        );
        assert_eq!(
            time(t, TimeStyle::Rfc3339Millis).as_deref(),
            Some("2024-05-01T12:00:00.250Z")
        );
        assert_eq!(time(t, TimeStyle::Plain).as_deref(), Some("2024-05-01 12:00:00"));
        assert_eq!(
            time(-1, TimeStyle::Rfc3339Millis).as_deref(),
            Some("1969-12-31T23:59:59.999Z")
        );
        let berlin = TimeStyle::InZone(chrono_tz::Europe::Berlin, ZoneMark::Abbreviation);
        assert_eq!(
            time(1_774_170_000_000, berlin).as_deref(),
            Some("2026-03-22 10:00:00 CET")
        );
        let offset = TimeStyle::InZone(chrono_tz::Europe::Berlin, ZoneMark::Offset);
        assert_eq!(
            time(1_774_170_000_000, offset).as_deref(),
            Some("2026-03-22 10:00:00 +01:00")
        );
        assert_eq!(time(0, berlin), None);
        assert_eq!(time(0, TimeStyle::Rfc3339), None);
        assert_eq!(time(i64::MAX, TimeStyle::Plain), None);
    }

    #[test]
    fn durations_in_each_style() {
        let ms = Duration::from_millis;
        assert_eq!(
            duration(Duration::from_micros(850), DurationStyle::Measured),
            "850 µs"
        );
        assert_eq!(
            duration(Duration::from_micros(4_200), DurationStyle::Measured),
            "4.20 ms"
        );
        assert_eq!(duration(ms(3_210), DurationStyle::Measured), "3.21 s");
        assert_eq!(duration(ms(5_250), DurationStyle::Clock), "5.2s");
        assert_eq!(duration(ms(1_000), DurationStyle::Clock), "1.0s");
        assert_eq!(duration(ms(42), DurationStyle::Clock), "42ms");
        assert_eq!(duration(ms(0), DurationStyle::Clock), "0ms");
        assert_eq!(duration(ms(184_000), DurationStyle::Clock), "3m04s");
        assert_eq!(duration(ms(3_720_000), DurationStyle::Clock), "1h02m");
        assert_eq!(duration(ms(0), DurationStyle::Exact), "0s");
        assert_eq!(duration(ms(5_400_000), DurationStyle::Exact), "1h30m");
        assert_eq!(duration(ms(1_500), DurationStyle::Exact), "1s500ms");
        assert_eq!(duration(ms(31_536_000_000), DurationStyle::Exact), "365d");
    }

    #[test]
    fn elapsed_to_the_close_or_to_now() {
        let mut run = RunInfo {
            start_time_unix_ms: 1_000,
            ..Default::default()
        };
        assert_eq!(run_elapsed_ms(&run, 4_000), 3_000);
        assert_eq!(run_elapsed_ms(&run, 500), 0);
        run.close_time_unix_ms = 2_500;
        assert_eq!(run_elapsed_ms(&run, 4_000), 1_500);
    }
}
