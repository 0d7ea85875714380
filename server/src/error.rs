//! The server's error type, mapped onto gRPC status codes as the design fixes them.

use tonic::{Code, Status};

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
    /// A forged or unverifiable token.
    #[error("{0}")]
    PermissionDenied(String),
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

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        let code = match &e {
            ApiError::InvalidArgument(_) => Code::InvalidArgument,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::AlreadyExists(_) => Code::AlreadyExists,
            ApiError::FailedPrecondition(_) => Code::FailedPrecondition,
            ApiError::PermissionDenied(_) => Code::PermissionDenied,
            ApiError::ResourceExhausted(_) => Code::ResourceExhausted,
            ApiError::Internal(_) => Code::Internal,
            ApiError::Unavailable(_) => Code::Unavailable,
        };
        Status::new(code, e.to_string())
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
