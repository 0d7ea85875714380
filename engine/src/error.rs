//! The service layer's error type. Its variants are the gRPC status codes the design
//! fixes; the mapping onto `tonic::Status` is the gRPC layer's (`grpc::status`), so
//! nothing below it depends on a transport. The model's [`Rejection`]s, the writer's
//! command errors and the store's [`StorageError`]s become it here, in one place.

use std::sync::Arc;

use railyard_model::Rejection;
use railyard_store::StorageError;

use crate::writer::WriteError;

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

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        match r {
            Rejection::InvalidArgument(m) => Self::InvalidArgument(m),
            Rejection::NotFound(m) => Self::NotFound(m),
            Rejection::AlreadyExists(m) => Self::AlreadyExists(m),
            Rejection::FailedPrecondition(m) => Self::FailedPrecondition(m),
            Rejection::PermissionDenied(m) => Self::PermissionDenied(m),
            Rejection::ResourceExhausted(m) => Self::ResourceExhausted(m),
        }
    }
}

impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Rejected(r) => r.into(),
            WriteError::Storage(e) => e.into(),
            WriteError::Stopped => Self::Unavailable(e.to_string()),
            WriteError::Internal(m) => Self::Internal(m),
        }
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        Arc::new(e).into()
    }
}

impl From<Arc<StorageError>> for ApiError {
    /// A server fenced off its database (another node writes to it now) is
    /// `UNAVAILABLE`: the request may succeed on the node that holds the database;
    /// so is a database that cannot be reached now; any other storage failure is
    /// `INTERNAL`.
    fn from(e: Arc<StorageError>) -> Self {
        match &*e {
            StorageError::Fenced { .. } | StorageError::Unavailable(_) => {
                ApiError::Unavailable(e.to_string())
            }
            _ => ApiError::Storage(e),
        }
    }
}
