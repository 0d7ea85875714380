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
    let _ = writeln!(err, "error: {}", output::escape(&format!("{e:#}")));
    if let Some(hint) = hint_for(e) {
        let _ = writeln!(err, "hint: {hint}");
    }
    ExitCode::from(EXIT_ERROR)
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
}
