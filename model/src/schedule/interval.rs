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
    #[error("{len} bytes; at most {MAX_INTERVAL_TEXT}")]
    TooLong { len: usize },
    #[error(
        "expected `every <duration>` or `every <duration> offset <duration>`, like `every 15m offset 2m`"
    )]
    Syntax,
    #[error("{text:?} is not a duration: {reason} (write numbers with units s, m, h, d, like 90s or 1h30m)")]
    Duration { text: String, reason: &'static str },
    #[error("the interval is zero")]
    Zero,
    #[error("the interval is longer than 366 days; use a cron expression")]
    TooLarge,
    #[error("the offset ({offset}) is not smaller than the interval ({every})")]
    OffsetNotSmaller { every: String, offset: String },
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

/// `90s`, `15m`, `1h30m`, `2d`: numbers each followed by a unit.
fn parse_duration(text: &str) -> Result<Millis, IntervalProblem> {
    let bad = |reason| IntervalProblem::Duration {
        text: text.to_string(),
        reason,
    };
    let mut total: Millis = 0;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad("it is empty"));
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("a unit must follow a number"));
        }
        // Nine digits of days is far past the 366-day cap, and cannot overflow below.
        if digits > 9 {
            return Err(bad("a number is too long"));
        }
        let n: Millis = rest[..digits].parse().map_err(|_| bad("a number is too long"))?;
        let unit = match rest.as_bytes().get(digits) {
            Some(b's') => SECOND_MS,
            Some(b'm') => MINUTE_MS,
            Some(b'h') => HOUR_MS,
            Some(b'd') => DAY_MS,
            Some(_) => return Err(bad("unknown unit")),
            None => return Err(bad("a number needs a unit")),
        };
        total = total.saturating_add(n.saturating_mul(unit));
        rest = &rest[digits + 1..];
    }
    Ok(total)
}
