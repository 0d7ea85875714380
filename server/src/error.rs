//! The server's error type. Its variants are the gRPC status codes the design fixes;
//! the mapping onto `tonic::Status` is the gRPC layer's (`grpc::status`), so nothing
//! below it depends on a transport.

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
    /// Storage failed; nothing of the request was committed.
    #[error("{0}")]
    Internal(String),
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

macro_rules! storage_error {
    ($($t:ty),*) => {$(
        impl From<$t> for ApiError {
            fn from(e: $t) -> Self {
                ApiError::Internal(format!("storage error: {e}"))
            }
        }
    )*};
}
storage_error!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError
);
