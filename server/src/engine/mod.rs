//! The engine: everything that changes stored state or waits on time.
//!
//! - [`writer`]: the one writer task; every mutation is a command applied in a
//!   batch under one commit, callers answered only after it.
//! - [`matching`]: ready tasks and parked long-polls, in memory, rebuilt at start.
//! - [`timers`]: the timer loop (durable timers) and lease deadlines.
//! - [`watch`]: wakes watchers of a run when it changes.
//! - [`retention`]: the purge of closed runs past their namespace's retention.
//! - [`delivery`]: the result-delivery sender (HTTP POSTs, signed).

pub mod delivery;
pub mod matching;
pub mod retention;
pub mod timers;
pub mod watch;
pub mod writer;
