//! Railyard's model: what a run is and how it may change, with no I/O.
//!
//! - [`run`]: the run state machine. Each transition takes the run's state and a
//!   request, and returns the events to append and the effects to carry out, as
//!   data; a refusal changes nothing.
//! - [`workflow`], [`contract`], [`approval`], [`budgets`]: workflow definitions and
//!   their validation (file and JSON path in every error).
//! - [`template`]: the one engine for `{{...}}` placeholders, and the three
//!   vocabularies on it: prompts, webhook payloads, schedule fires.
//! - [`schedule`], [`trigger`], [`namespace`], [`auth`], [`token`]: the other
//!   durable things a server keeps, as plain data with their rules.
//! - [`limits`], [`ids`], [`key`], [`error`], [`text`]: request bounds, names, a run's
//!   key, the model's error type and the one text-cutting helper.
//!
//! This crate knows nothing of tokio, gRPC, HTTP or storage: the store crate keeps
//! its types, the server crate drives it.

#![warn(missing_docs)]

pub mod agent;
pub mod approval;
pub mod attributes;
pub mod auth;
pub mod batch;
pub mod budgets;
pub use railyard_wire::checkpoint;
pub mod contract;
pub mod duration;
pub mod error;
pub mod flow;
pub mod ids;
pub mod key;
pub mod limits;
pub mod mcp;
pub mod namespace;
pub mod net;
pub mod output;
pub mod principles;
pub mod query;
pub mod retry;
pub mod run;
pub mod schedule;
pub mod template;
/// The one text-cutting helper, [`railyard_text`], here for the model's users.
pub use railyard_text as text;
pub mod token;
pub mod tools;
pub mod trace;
pub mod trigger;
pub mod workflow;

#[cfg(test)]
mod attributes_tests;

/// A point in time as milliseconds since the Unix epoch, or a span of milliseconds.
pub type Millis = i64;

pub use error::{Rejection, echo};
pub use key::RunKey;
