//! The server's error type. Its variants are the gRPC status codes the design fixes;
//! the mapping onto `tonic::Status` is the gRPC layer's (`grpc::status`), so nothing
//! below it depends on a transport.

use std::sync::Arc;

/// An error a request ends in. The message is for a person: it names the field,
/// the run or the lease that is wrong.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// A stale lease, a replayed token, or an illegal state change.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A forged or unverifiable token, or a caller not allowed to do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// Missing or unknown credentials.
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    ResourceExhausted(String),
    /// An internal failure other than storage.
    #[error("{0}")]
    Internal(String),
    /// Storage failed; nothing of the request was committed. Shared, because a
    /// failed batch gives the same error to every caller in it.
    #[error(transparent)]
    Storage(Arc<StorageError>),
    /// The server is shutting down.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
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
    let mut end = ECHO_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &value[..end], value.len())
}

/// A storage failure, with its source: the database's own error, a record that
/// cannot be read or written, or a failure injected by a test backend.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage error: {0}")]
    Redb(#[from] redb::Error),
    /// A stored record that does not decode.
    #[error("corrupt {what} record: {source}")]
    Corrupt {
        what: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A record that does not encode.
    #[error("cannot encode record: {0}")]
    Encode(Box<dyn std::error::Error + Send + Sync>),
    /// A failure injected by the in-memory backend's fault plan.
    #[error("storage error: injected fault: {0}")]
    Injected(String),
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        ApiError::Storage(Arc::new(e))
    }
}

macro_rules! redb_error {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(e: $t) -> Self {
                StorageError::Redb(e.into())
            }
        }
    )*};
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

redb_error!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError
);
