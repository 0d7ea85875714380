//! Why the model refuses a request, and how an error message repeats a caller's value.
//!
//! A [`Rejection`] names its gRPC-style code so the service layer can map it without
//! reading the message; it carries no transport type.

/// A request the model (definitions, limits, the state machine, a writer command's
/// checks) refuses. The message is for a person: it names the field, run or lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_quotes_short_values_and_cuts_long_ones() {
        assert_eq!(echo("a\nb"), "\"a\\nb\"");
        let long = "é".repeat(1 << 20);
        let shown = echo(&long);
        assert!(shown.len() < 2 * ECHO_BYTES, "{shown}");
        assert!(shown.ends_with(&format!("… ({} bytes)", long.len())), "{shown}");
    }
}
