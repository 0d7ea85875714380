//! `[output]` of the server's configuration: live output's caps, retention and
//! flush interval, checked against their bounds; and `[batches]`, the other
//! retention beside it.

use railyard_config::ConfigError;
use railyard_engine::output::OutputSettings;

use super::file::{BatchesSection, OutputSection};

/// Bounds of the caps: 4 KiB to 1 GiB.
const CAP_BYTES: std::ops::RangeInclusive<u64> = 4096..=(1 << 30);
/// Bounds of the flush interval: 10 ms to 10 s.
const FLUSH_MS: std::ops::RangeInclusive<u64> = 10..=10_000;
/// Longest retention: ten years.
const MAX_RETENTION_SECS: u64 = 10 * 365 * 86_400;

/// The settings `[output]` says, the defaults for what it leaves out; `invalid`
/// makes the error naming a key.
pub(super) fn resolve(
    o: &OutputSection,
    invalid: impl Fn(&str, String) -> ConfigError,
) -> Result<OutputSettings, ConfigError> {
    let mut out = OutputSettings::default();
    let cap = |key: &str, v: Option<u64>, default: u64| -> Result<u64, ConfigError> {
        let v = v.unwrap_or(default);
        if !CAP_BYTES.contains(&v) {
            return Err(invalid(
                key,
                format!("{v} is not between 4096 and 1073741824 bytes"),
            ));
        }
        Ok(v)
    };
    out.attempt_cap_bytes = cap(
        "output.attempt_cap_bytes",
        o.attempt_cap_bytes,
        out.attempt_cap_bytes,
    )?;
    out.run_cap_bytes = cap("output.run_cap_bytes", o.run_cap_bytes, out.run_cap_bytes)?;
    if let Some(secs) = o.retention_secs {
        if secs > MAX_RETENTION_SECS {
            return Err(invalid(
                "output.retention_secs",
                format!("{secs} is more than ten years ({MAX_RETENTION_SECS})"),
            ));
        }
        out.retention_ms = (secs * 1000) as i64;
    }
    if let Some(ms) = o.flush_interval_ms {
        if !FLUSH_MS.contains(&ms) {
            return Err(invalid(
                "output.flush_interval_ms",
                format!("{ms} is not between 10 and 10000"),
            ));
        }
        out.flush_interval_ms = ms;
    }
    if let Some(n) = o.watch_buffer {
        if !(1..=65_536).contains(&n) {
            return Err(invalid(
                "output.watch_buffer",
                format!("{n} is not between 1 and 65536"),
            ));
        }
        out.watch_buffer = n;
    }
    Ok(out)
}

/// `[batches] retention_secs`, else 30 days; at most ten years, 0 keeps batches for good.
pub(super) fn batch_retention(
    b: &BatchesSection,
    invalid: impl Fn(&str, String) -> ConfigError,
) -> Result<std::time::Duration, ConfigError> {
    let default = railyard_engine::retention::DEFAULT_BATCH_RETENTION_MS as u64 / 1000;
    let secs = b.retention_secs.unwrap_or(default);
    if secs > MAX_RETENTION_SECS {
        return Err(invalid(
            "batches.retention_secs",
            format!("{secs} is more than ten years ({MAX_RETENTION_SECS})"),
        ));
    }
    Ok(std::time::Duration::from_secs(secs))
}
