//! The one duration syntax, for the command line and for schedules: one or more
//! `<number><unit>` parts with units `ms`, `s`, `m`, `h`, `d`, `w` (`250ms`, `90s`,
//! `15m`, `1h30m`, `2d`, `1w`).

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text is empty.
    #[error("it is empty")]
    Empty,
    /// A unit without a number before it.
    #[error("a unit must follow a number")]
    NoNumber,
    /// A number without a unit.
    #[error("a number needs a unit")]
    NoUnit,
    /// A unit that is not one of `ms`, `s`, `m`, `h`, `d`, `w`.
    #[error("unknown unit")]
    UnknownUnit,
    /// The text is too long.
    #[error("it is too long")]
    TooLong,
}

impl DurationError {
    /// The reason, as a static string (for errors that carry one).
    pub fn reason(self) -> &'static str {
        match self {
            Self::Empty => "it is empty",
            Self::NoNumber => "a unit must follow a number",
            Self::NoUnit => "a number needs a unit",
            Self::UnknownUnit => "unknown unit",
            Self::TooLong => "it is too long",
        }
    }
}

/// Parses `text` (no surrounding space) as a duration.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::NoNumber);
        }
        let value: u64 = rest[..digits].parse().map_err(|_| DurationError::TooLong)?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit_ms: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "" => return Err(DurationError::NoUnit),
            _ => return Err(DurationError::UnknownUnit),
        };
        rest = &rest[unit_len..];
        total = value
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or(DurationError::TooLong)?;
    }
    Ok(Duration::from_millis(total))
}

/// [`parse`] for a command-line flag: surrounding spaces are ignored, and the error
/// quotes the value and shows the syntax.
pub fn parse_flag(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    parse(s).map_err(|e| format!("{e} in {s:?} (expected a duration such as 30s, 15m, 1h30m or 2d)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_and_sums_parts() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse("1w"), Ok(Duration::from_secs(604_800)));
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(parse("h"), Err(DurationError::NoNumber));
        assert_eq!(parse("10"), Err(DurationError::NoUnit));
        assert_eq!(parse("5x"), Err(DurationError::UnknownUnit));
        assert_eq!(parse("-5m"), Err(DurationError::NoNumber));
        assert_eq!(parse("1.5h"), Err(DurationError::NoUnit));
        assert_eq!(parse("99999999999999999999s"), Err(DurationError::TooLong));
        assert_eq!(parse("99999999999999w"), Err(DurationError::TooLong));
    }
}
