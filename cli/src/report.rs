//! How a failed command ends: one `error: ...` line on stderr, a hint for errors people
//! commonly meet, and exit code 1; stdout closing under the command is no failure.

use std::io::Write;
use std::process::ExitCode;

use crate::client::output;

/// Exit code of a command that failed (server error, bad input, I/O).
pub(crate) const EXIT_ERROR: u8 = 1;

/// Reports `e` on stderr and returns the exit code of the failed command.
pub(crate) fn failed(e: &anyhow::Error) -> ExitCode {
    if is_broken_pipe(e) {
        return ExitCode::SUCCESS;
    }
    // Server errors may quote what clients stored: escaped like all human output.
    // writeln!, not eprintln!: a closed stderr must not turn the error into a panic.
    let mut err = std::io::stderr();
    let _ = writeln!(err, "error: {}", output::escape(&message(e)));
    if let Some(hint) = hint_for(e) {
        let _ = writeln!(err, "hint: {hint}");
    }
    ExitCode::from(EXIT_ERROR)
}

/// The error and its causes, joined by `: `. A cause whose text the message already
/// holds is left out: many library errors say their source in their own text too,
/// and anyhow's `{:#}` would print it twice ("X: X").
fn message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// A next step for errors people commonly meet.
fn hint_for(e: &anyhow::Error) -> Option<&'static str> {
    match e.downcast_ref::<railyard_sdk::ClientError>()? {
        // Reached, but the connection closed: the message already says what to check.
        railyard_sdk::ClientError::Unavailable { message, .. } if message.contains("client certificate") => {
            None
        }
        railyard_sdk::ClientError::Unavailable { .. } => {
            Some("is `railyard server` running there? Point --server (or RAILYARD_SERVER) at it.")
        }
        railyard_sdk::ClientError::Unauthenticated(_) => Some(
            "the server wants an API key and refused the credentials sent (or none were): pass --api-key or \
             set RAILYARD_API_KEY (a server's first admin key is in <data-dir>/admin.key).",
        ),
        _ => None,
    }
}

/// Whether the error is stdout closing under us (`railyard run history X | head`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_prints_its_own_hint() {
        use railyard_sdk::ClientError;
        let e = anyhow::Error::from(ClientError::Unauthenticated("no token".into()));
        assert_eq!(format!("{e:#}"), "unauthenticated: no token");
        assert!(hint_for(&e).is_some_and(|h| h.contains("credentials")));
        let denied = anyhow::Error::from(ClientError::PermissionDenied("bad signature".into()));
        assert_eq!(format!("{denied:#}"), "permission denied: bad signature");
        assert!(hint_for(&denied).is_none());
    }

    #[test]
    fn a_cause_the_message_already_says_is_not_repeated() {
        // A library error that says its source in its own text, as many do.
        #[derive(Debug)]
        struct DataDir(std::io::Error);
        impl std::fmt::Display for DataDir {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot create data directory /tmp/f/d: {}", self.0)
            }
        }
        impl std::error::Error for DataDir {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::NotADirectory, "Not a directory");
        let e = anyhow::Error::from(DataDir(io)).context("cannot start the server");
        assert_eq!(
            message(&e),
            "cannot start the server: cannot create data directory /tmp/f/d: Not a directory"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(message(&plain), "outer: inner");
    }
}
