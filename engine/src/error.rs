//! The service layer's error type: the model's [`Rejection`] (six of the gRPC status
//! codes the design fixes) and the failures that are the server's own. The mapping
//! onto `tonic::Status` is the gRPC layer's (`grpc::status`), so nothing below it
//! depends on a transport. The writer's errors and the store's [`StorageError`]s
//! become it here, in one place.

use std::sync::Arc;

use railyard_model::Rejection;
use railyard_store::StorageError;

use crate::writer::WriteError;

/// An error a request ends in. The message is for a person: it names the field,
/// the run or the lease that is wrong.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The request is refused for what it asks: a bad field, a run not found, a
    /// stale lease, a forged token, a caller not allowed, a limit reached.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// Missing or unknown credentials.
    #[error("{0}")]
    Unauthenticated(String),
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

/// What a client is told of a storage failure: its own words are the database's,
/// for the server log only.
pub const STORAGE_FAILED: &str =
    "the server's storage failed; nothing of the request was done (the server log has the cause)";

impl ApiError {
    /// The words a client is told: the error's own, but for a storage failure
    /// ([`STORAGE_FAILED`]), whose words are the backend's.
    pub fn client_message(&self) -> String {
        match self {
            Self::Storage(_) => STORAGE_FAILED.to_string(),
            e => e.to_string(),
        }
    }

    /// `INVALID_ARGUMENT` naming `field`.
    pub fn field(field: &str, problem: impl std::fmt::Display) -> Self {
        Rejection::field(field, problem).into()
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
