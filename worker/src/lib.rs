//! Railyard worker.
