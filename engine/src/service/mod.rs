//! The service layer: what every request does, whatever transport it came by.
//!
//! Plain async functions over typed inputs and outputs (Rust types, not wire
//! types), one module per area. Each takes the request's [`Caller`], resolved once
//! by [`caller::resolve`] before anything else, checks its fields (naming them),
//! applies the limits and policies, and reads through the [`Store`] or mutates
//! through the [`Writer`]. The gRPC handlers in
//! `grpc/` only convert wire types to these and back; the HTTP side, the schedule
//! loop and `spawn_agent` call the same functions. Nothing here depends on tonic:
//! errors are [`ApiError`](crate::error::ApiError), which the front end maps.

pub mod approvals;
pub mod attributes;
pub mod batches;
mod builder;
pub mod caller;
pub mod checkpoint;
pub mod children;
pub mod export;
pub mod flow;
pub mod hook_refusals;
pub mod issues;
pub mod keys;

pub mod namespaces;
pub mod output;
pub mod polls;
pub mod queries;
pub mod reset;
pub mod runs;
pub mod schedules;
pub mod subscriptions;
pub mod tasks;
pub mod triggers;
pub mod workflows;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::clock::Clock;
use crate::matching::Matching;
use crate::metrics::Metrics;
use crate::registry::WorkflowRegistry;
use crate::watch::Watchers;
use crate::writer::Writer;
use railyard_store::Store;

pub use builder::{BuildError, CoreBuilder, CoreParts};
pub use caller::{Caller, CallerInput, Credentials, Operation};

/// The service's state: what every request shares.
pub struct Core {
    pub store: Store,
    pub writer: Writer,
    pub matching: Arc<Matching>,
    pub watchers: Arc<Watchers>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
    pub keys: Arc<crate::token::Keyring>,
    pub workflows: Arc<WorkflowRegistry>,
    /// Names of the namespaces that exist (changed by [`namespaces`] after each commit).
    pub namespaces: railyard_model::namespace::NamespaceSet,
    /// Whether requests must present an API key ([`caller::authenticate`]).
    pub auth: bool,
    /// Turns true when the server shuts down; long waits end early on it.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Bounds on trees of child runs (depth, children per run).
    pub child_limits: crate::writer::ChildLimits,
    /// Result delivery settings (whether a signing secret is configured).
    pub delivery: Arc<crate::delivery::DeliverySettings>,
    /// Live output: appends, bounds, the flusher, live channels.
    pub output: Arc<crate::output::OutputHub>,
    /// Wakes the batch task ([`crate::batches`]) when a batch starts or stops.
    pub batch_wake: Arc<tokio::sync::Notify>,
    /// Wakes the poller when a trigger is created or changed ([`polls`]).
    pub poll_wake: Arc<tokio::sync::Notify>,
    /// Webhook deliveries refused lately, per trigger, in memory ([`hook_refusals`]).
    pub hook_refusals: Arc<hook_refusals::HookRefusals>,
    /// Output watchers in flight, bounded per run, per key and in all ([`output`]).
    pub watch_slots: Arc<output::WatchSlots>,
    /// The environment variables triggers may name as secrets ([`crate::secrets`]).
    pub secrets: Arc<crate::secrets::SecretPolicy>,
}

impl Core {
    /// Resolves when the server starts shutting down.
    pub async fn shutting_down(&self) {
        let mut rx = self.shutdown.clone();
        let _ = rx.wait_for(|s| *s).await;
    }
}
