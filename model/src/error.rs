//! Why the model refuses a request, and how an error message repeats a caller's value.
//!
//! A [`Rejection`] names its gRPC-style code so the service layer can map it without
//! reading the message; it carries no transport type.

/// A request the model (definitions, limits, the state machine, a writer command's
/// checks) refuses. The message is for a person: it names the field, run or lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The request is wrong; the message names the field.
    #[error("{0}")]
    InvalidArgument(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What a create names exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// A stale lease, a replayed token, or an illegal state change.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A caller not allowed to do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// A limit or quota reached.
    #[error("{0}")]
    ResourceExhausted(String),
}

impl Rejection {
    /// `INVALID_ARGUMENT` naming `field`.
    pub fn field(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::InvalidArgument(format!("{field}: {problem}"))
    }
}

/// Most bytes of a caller's value that an error message repeats.
pub const ECHO_BYTES: usize = 64;

/// A value a caller sent, as an error message shows it: quoted and escaped (`{:?}`),
/// cut to its first [`ECHO_BYTES`] bytes with its full length noted, so a 10 MiB
/// field never makes a 10 MiB error. Every message that repeats client input uses it.
pub fn echo(value: &str) -> String {
    if value.len() <= ECHO_BYTES {
        return format!("{value:?}");
    }
    format!(
        "{:?}… ({} bytes)",
        crate::text::prefix(value, ECHO_BYTES),
        value.len()
    )
}

/// Longest message [`parser_message`] gives.
pub const PARSER_MESSAGE_BYTES: usize = 400;

/// A parser's message (serde's) as an error repeats it: serde quotes the value it
/// refused whole (`invalid type: string "…", expected …`, ``unknown field `…` ``), so
/// each quoted part over [`ECHO_BYTES`] is cut to its prefix, marked `…`, and the whole
/// to [`PARSER_MESSAGE_BYTES`]. Found by fuzzing: a spec that was one long JSON string
/// made an error of its length.
pub fn parser_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(PARSER_MESSAGE_BYTES));
    let mut rest = message;
    while let Some(open) = rest.find(['"', '`']) {
        let quote = rest.as_bytes()[open];
        out.push_str(&rest[..=open]);
        let inner = &rest[open + 1..];
        // A Debug-quoted string escapes its quotes; a backticked name has none.
        let close = inner
            .char_indices()
            .scan(false, |escaped, (i, c)| {
                let at = (!*escaped && c as u32 == u32::from(quote)).then_some(i);
                *escaped = !*escaped && c == '\\' && quote == b'"';
                Some(at)
            })
            .flatten()
            .next()
            .unwrap_or(inner.len());
        let quoted = &inner[..close];
        if quoted.len() > ECHO_BYTES {
            out.push_str(crate::text::prefix(quoted, ECHO_BYTES));
            out.push('…');
        } else {
            out.push_str(quoted);
        }
        rest = inner.get(close..).unwrap_or_default();
        if let Some(after) = rest.strip_prefix(quote as char) {
            out.push(quote as char);
            rest = after;
        }
        if out.len() > PARSER_MESSAGE_BYTES {
            break;
        }
    }
    out.push_str(rest);
    crate::text::cut(&out, PARSER_MESSAGE_BYTES, "…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsers_message_cuts_what_it_quotes() {
        let long = "x".repeat(10_000);
        let m = parser_message(&format!(
            "invalid type: string \"{long}\", expected a spec at line 1 column 10002"
        ));
        assert!(m.len() < 150, "{m}");
        assert!(m.starts_with("invalid type: string \"xxx"), "{m}");
        assert!(m.ends_with("…\", expected a spec at line 1 column 10002"), "{m}");
        let m = parser_message(&format!("unknown field `{long}`, expected `cron` or `interval`"));
        assert!(m.ends_with("…`, expected `cron` or `interval`"), "{m}");
        // An escaped quote does not end the quoted part; short messages are unchanged.
        let short = r#"invalid type: string "a\"b", expected x"#;
        assert_eq!(parser_message(short), short);
        assert!(parser_message(&"\"é".repeat(50_000)).len() <= PARSER_MESSAGE_BYTES + 3);
    }

    #[test]
    fn echo_quotes_short_values_and_cuts_long_ones() {
        assert_eq!(echo("a\nb"), "\"a\\nb\"");
        let long = "é".repeat(1 << 20);
        let shown = echo(&long);
        assert!(shown.len() < 2 * ECHO_BYTES, "{shown}");
        assert!(shown.ends_with(&format!("… ({} bytes)", long.len())), "{shown}");
    }
}
