//! The storage error: what every backend's failure becomes at the boundary.

/// A storage failure, with its source: the backend's own error, a record that
/// cannot be read or written, or a failure injected by a test backend.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The backend failed (I/O, the database engine); its error is the source.
    #[error("storage error: {0}")]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// A stored record that does not decode.
    #[error("corrupt {what} record: {source}")]
    Corrupt {
        what: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A record that does not encode.
    #[error("cannot encode record: {0}")]
    Encode(Box<dyn std::error::Error + Send + Sync>),
    /// This server no longer holds the database's writer lease: another node claimed
    /// it (this one paused, or lost the database, past its lease). Nothing of the
    /// write was kept, and no later write of this server is.
    #[error("this server lost its claim on the database to node {holder}; it stops writing")]
    Fenced { holder: String },
    /// The database cannot be reached now: a networked backend has no connection (or
    /// lost it, or the database is shutting down), or the disk under redb failed a
    /// write or a sync (redb is reopened once it can be). Nothing of the call was
    /// acknowledged, though a commit whose answer was lost (a `COMMIT` reply, a
    /// failed sync after its pages were written) may yet be found; trying again later
    /// may succeed.
    #[error("the database cannot be reached: {0}")]
    Unavailable(String),
    /// A failure injected by the in-memory backend's fault plan.
    #[error("storage error: injected fault: {0}")]
    Injected(String),
}
