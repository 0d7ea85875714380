//! An interval spec: `every 15m offset 2m` fires at every multiple of 15 minutes
//! since the Unix epoch, plus 2 minutes (:02, :17, :32, :47), like Temporal's.

use crate::Millis;

/// Longest interval text, in bytes.
pub const MAX_INTERVAL_TEXT: usize = 64;
/// Longest interval: 366 days. Longer periods are a cron expression's job.
pub const MAX_INTERVAL_MS: Millis = 366 * DAY_MS;

const SECOND_MS: Millis = 1000;
const MINUTE_MS: Millis = 60 * SECOND_MS;
const HOUR_MS: Millis = 60 * MINUTE_MS;
const DAY_MS: Millis = 24 * HOUR_MS;

/// Why an interval was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntervalProblem {
    /// The text is too long.
    #[error("{len} bytes; at most {MAX_INTERVAL_TEXT}")]
    TooLong {
        /// Its length, in bytes.
        len: usize,
    },
    #[error(
        "expected `every <duration>` or `every <duration> offset <duration>`, like `every 15m offset 2m`"
    )]
    /// Not `every <duration> [offset <duration>]`.
    Syntax,
    #[error(
        "{text:?} is not a duration: {reason} (write numbers with units ms, s, m, h, d, w, like 90s or 1h30m)"
    )]
    /// A duration that does not parse.
    Duration {
        /// The duration as written.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The interval is zero.
    #[error("the interval is zero")]
    Zero,
    /// The interval is shorter than one second.
    #[error("the interval is shorter than one second")]
    TooShort,
    /// The interval is longer than 366 days.
    #[error("the interval is longer than 366 days; use a cron expression")]
    TooLarge,
    /// The offset is not smaller than the interval.
    #[error("the offset ({offset}) is not smaller than the interval ({every})")]
    OffsetNotSmaller {
        /// The interval as written.
        every: String,
        /// The offset as written.
        offset: String,
    },
}

/// A checked interval with its offset, both in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    every: Millis,
    offset: Millis,
}

impl Interval {
    /// Parses `every <duration> [offset <duration>]` (keywords in any case).
    pub fn parse(text: &str) -> Result<Self, IntervalProblem> {
        if text.len() > MAX_INTERVAL_TEXT {
            return Err(IntervalProblem::TooLong { len: text.len() });
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let (every_text, offset_text) = match words[..] {
            [kw, every] if kw.eq_ignore_ascii_case("every") => (every, None),
            [kw, every, ofs, offset]
                if kw.eq_ignore_ascii_case("every") && ofs.eq_ignore_ascii_case("offset") =>
            {
                (every, Some(offset))
            }
            _ => return Err(IntervalProblem::Syntax),
        };
        let every = parse_duration(every_text)?;
        if every == 0 {
            return Err(IntervalProblem::Zero);
        }
        if every < 1000 {
            return Err(IntervalProblem::TooShort);
        }
        if every > MAX_INTERVAL_MS {
            return Err(IntervalProblem::TooLarge);
        }
        let offset = offset_text.map(parse_duration).transpose()?.unwrap_or(0);
        if offset >= every {
            return Err(IntervalProblem::OffsetNotSmaller {
                every: every_text.to_string(),
                offset: offset_text.unwrap_or_default().to_string(),
            });
        }
        Ok(Self { every, offset })
    }

    /// The interval in milliseconds.
    pub fn every_ms(&self) -> Millis {
        self.every
    }

    /// The offset in milliseconds.
    pub fn offset_ms(&self) -> Millis {
        self.offset
    }

    /// The first `k * every + offset` strictly after `after`.
    pub fn next_after(&self, after: Millis) -> Option<Millis> {
        let k = after
            .checked_sub(self.offset)?
            .div_euclid(self.every)
            .checked_add(1)?;
        k.checked_mul(self.every)?.checked_add(self.offset)
    }
}

/// A duration in the one syntax ([`crate::duration`]), in milliseconds.
fn parse_duration(text: &str) -> Result<Millis, IntervalProblem> {
    let d = crate::duration::parse(text).map_err(|e| IntervalProblem::Duration {
        text: text.to_string(),
        reason: e.reason(),
    })?;
    Millis::try_from(d.as_millis()).map_err(|_| IntervalProblem::TooLarge)
}
