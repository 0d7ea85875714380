//! The engine: everything that changes stored state or waits on time.
//!
//! - [`writer`]: the one writer task; every mutation is a command applied in a
//!   batch under one commit, callers answered only after it.
//! - [`matching`]: ready tasks and parked long-polls, in memory, rebuilt at start.
//! - [`timers`]: the timer loop (durable timer rows and lease deadlines).
//! - [`leases`]: the deadline of every lease in flight, in memory.
//! - [`watch`]: wakes watchers of a run when it changes.
//! - [`retention`]: the purge of closed runs past their namespace's retention.
//! - [`output`]: live output, numbered, bounded and batched apart from the writer.
//! - [`delivery`]: result-delivery settings, the attempt queue and signatures.
//! - [`sender`]: the result-delivery sender (HTTP POSTs, signed, bounded).
//! - [`batches`]: works through running batch operations at their rates.

pub(crate) mod batches;
pub mod delivery;
pub(crate) mod leases;
pub(crate) mod matching;
pub mod output;
pub mod poller;
pub mod retention;
pub(crate) mod sender;
pub(crate) mod timers;
pub(crate) mod watch;
pub(crate) mod writer;

// The writer's types other crates name: the bounds a server is configured with,
// and the error a failed start can carry. Re-exported here so that the writer
// module itself stays internal.
pub use writer::{ChildLimits, WriteError};
