//! [`CoreBuilder`]: the one way a [`Core`] is made. The real server
//! (`RunningServer::start`) and every test that drives the service layer or the
//! writer without a transport build it here, so a test's core is wired exactly as
//! the server's is: matching and lease deadlines rebuilt from the store, metrics
//! reading the live state, the writer thread handing delivery attempts to a queue.
//!
//! What differs between the two is only what is set: the server gives its clock,
//! keys, loaded definitions and configuration; a test takes the defaults and sets
//! the clock (a `ManualClock`) and the definitions it needs.

use railyard_model::RunKey;
use std::sync::Arc;
use std::thread::JoinHandle;

use prometheus_client::collector::Collector;
use tokio::sync::{Notify, mpsc, watch};

use super::Core;
use crate::clock::{Clock, SystemClock};
use crate::delivery::{DeliveryHook, DeliverySettings, Job};
use crate::leases::LeaseDeadlines;
use crate::matching::Matching;
use crate::metrics::{Metrics, StateSources};
use crate::output::{OutputHub, OutputSettings};
use crate::registry::WorkflowRegistry;
use crate::sender;
use crate::token::{KeyError, Keyring, TokenKeys};
use crate::watch::Watchers;
use crate::writer::{ChildLimits, Hooks, WriteError, Writer};
use railyard_store::{StorageError, Store};

/// Makes a [`Core`] over a store. Every setting has a default fit for a server:
/// the system clock, no definitions, fresh random token keys (kept in memory only),
/// auth off, the default child-run bounds and delivery settings.
pub struct CoreBuilder {
    store: Store,
    clock: Arc<dyn Clock>,
    workflows: Arc<WorkflowRegistry>,
    keys: Option<Arc<Keyring>>,
    auth: bool,
    child_limits: ChildLimits,
    delivery: DeliverySettings,
    output: OutputSettings,
    kept_checkpoint_bytes: u64,
    collectors: Vec<Box<dyn Collector>>,
    secrets: crate::secrets::SecretPolicy,
}

/// A built [`Core`], and what its owner runs beside it or stops it with.
pub struct CoreParts {
    /// The service's state.
    pub core: Arc<Core>,
    /// Sending `true` tells long waits (polls, watches) the server is stopping.
    /// Keep it as long as the core: once it is dropped, every wait reads as a
    /// shutdown.
    pub shutdown: watch::Sender<bool>,
    /// The writer thread; it ends once every handle to the writer is dropped.
    pub writer_thread: JoinHandle<()>,
    /// Lease deadlines, rebuilt from the store; the timer loop watches them.
    pub leases: Arc<LeaseDeadlines>,
    /// Woken by the writer when it commits a timer row; the timer loop waits on it.
    pub timer_wake: Arc<Notify>,
    /// Delivery attempts the writer started, for the sender. Dropped (no sender),
    /// an attempt waits for its deadline and counts as failed.
    pub deliveries: mpsc::Receiver<Job>,
}

/// Why a [`Core`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Reading what matching, lease deadlines and the namespace set are rebuilt from.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The writer could not start.
    #[error(transparent)]
    Writer(#[from] WriteError),
    /// No token keys were given and none could be made.
    #[error(transparent)]
    Keys(#[from] KeyError),
}

impl Core {
    /// A builder of a core over `store` (redb: `Store::open`; the in-memory
    /// reference: `Store::new(Arc::new(MemoryBackend::default()))`).
    pub fn builder(store: Store) -> CoreBuilder {
        CoreBuilder {
            store,
            clock: Arc::new(SystemClock),
            workflows: Arc::default(),
            keys: None,
            auth: false,
            child_limits: ChildLimits::default(),
            delivery: DeliverySettings::default(),
            output: OutputSettings::default(),
            kept_checkpoint_bytes: crate::writer::DEFAULT_KEPT_CHECKPOINT_BYTES,
            collectors: Vec::new(),
            secrets: Default::default(),
        }
    }
}

impl CoreBuilder {
    /// The clock every deadline, backoff and schedule reads.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The workflow definitions runs start from.
    pub fn workflows(mut self, workflows: WorkflowRegistry) -> Self {
        self.workflows = Arc::new(workflows);
        self
    }

    /// The keys task tokens are signed and verified with.
    pub fn keys(mut self, keys: Arc<Keyring>) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Whether every request must present an API key.
    pub fn auth(mut self, auth: bool) -> Self {
        self.auth = auth;
        self
    }

    /// Bounds on trees of child runs.
    pub fn child_limits(mut self, limits: ChildLimits) -> Self {
        self.child_limits = limits;
        self
    }

    /// Bytes of finished steps' checkpoints a run keeps (0: none).
    pub fn kept_checkpoint_bytes(mut self, bytes: u64) -> Self {
        self.kept_checkpoint_bytes = bytes;
        self
    }

    /// Live output: its caps, retention and flush interval.
    pub fn output(mut self, output: OutputSettings) -> Self {
        self.output = output;
        self
    }

    /// A collector `/metrics` renders beside the engine's own (the server's gRPC
    /// latency table).
    pub fn collector(mut self, collector: Box<dyn Collector>) -> Self {
        self.collectors.push(collector);
        self
    }

    /// The environment variables triggers may name as secrets.
    pub fn secrets(mut self, secrets: crate::secrets::SecretPolicy) -> Self {
        self.secrets = secrets;
        self
    }

    /// Result delivery: the signing secret, the retry policy.
    pub fn delivery(mut self, delivery: DeliverySettings) -> Self {
        self.delivery = delivery;
        self
    }

    /// What the writer touches after a commit: matching and lease deadlines
    /// rebuilt from the store, fresh watchers, metrics whose gauges read them.
    /// [`Self::build`] hands them to the writer thread; the writer's tests drive a
    /// writer loop with them directly.
    pub fn hooks(&mut self) -> Result<Hooks, StorageError> {
        let store = &self.store;
        let matching = Arc::new(Matching::default());
        let ready = crate::matching::rebuild(&matching, &*store.snapshot()?)?;
        tracing::info!(ready, "matching rebuilt from storage");
        let leases = Arc::new(LeaseDeadlines::default());
        for (due, ns, run_id, lease) in store.lease_deadlines()? {
            leases.set(RunKey::new(ns, run_id), Some((due, lease)));
        }
        tracing::info!(leases = leases.len(), "lease deadlines rebuilt from storage");
        let open_runs_store = store.clone();
        let schedules_store = store.clone();
        let metrics = Arc::new(Metrics::with_state(
            StateSources {
                queues: Box::new({
                    let matching = matching.clone();
                    move || matching.queue_gauges()
                }),
                leases: Box::new({
                    let leases = leases.clone();
                    move || leases.count_by_namespace()
                }),
                open_runs: Box::new(move || open_runs_store.open_run_counts()),
                schedules: Box::new(move || schedules_store.schedule_counts()),
                storage: Box::new({
                    let store = store.clone();
                    move || store.backend().stats()
                }),
            },
            std::mem::take(&mut self.collectors),
        ));
        Ok(Hooks {
            matching,
            watchers: Arc::new(Watchers::default()),
            timer_wake: Arc::new(Notify::new()),
            leases,
            metrics,
            clock: self.clock.clone(),
            workflows: self.workflows.clone(),
            kept_checkpoint_bytes: self.kept_checkpoint_bytes,
        })
    }

    /// Starts the writer thread and makes the core. Needs no async runtime.
    pub fn build(mut self) -> Result<CoreParts, BuildError> {
        let keys = match self.keys.take() {
            Some(keys) => keys,
            None => Arc::new(Keyring::fixed(TokenKeys::generate()?)),
        };
        let hooks = self.hooks()?;
        let (matching, watchers, metrics) = (
            hooks.matching.clone(),
            hooks.watchers.clone(),
            hooks.metrics.clone(),
        );
        let (leases, timer_wake) = (hooks.leases.clone(), hooks.timer_wake.clone());
        let (jobs, deliveries) = sender::channel();
        let delivery_hook = DeliveryHook {
            policy: self.delivery.policy(),
            jobs: Some(jobs),
            slots: Some(crate::delivery::slots::Slots::new(self.delivery.slot_limits())),
        };
        let (writer, writer_thread) = Writer::spawn_with_delivery(self.store.clone(), hooks, delivery_hook)?;
        let namespaces: std::collections::HashSet<String> = self.store.namespaces()?.into_iter().collect();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let output = Arc::new(OutputHub::new(
            self.store.clone(),
            self.clock.clone(),
            self.output,
        ));
        let core = Arc::new(Core {
            output,
            store: self.store,
            writer,
            matching,
            watchers,
            metrics,
            clock: self.clock,
            keys,
            workflows: self.workflows,
            namespaces: namespaces.into(),
            auth: self.auth,
            shutdown: shutdown_rx,
            child_limits: self.child_limits,
            delivery: Arc::new(self.delivery),
            batch_wake: Arc::new(Notify::new()),
            poll_wake: Default::default(),
            hook_refusals: Default::default(),
            secrets: Arc::new(self.secrets),
            watch_slots: Default::default(),
        });
        Ok(CoreParts {
            core,
            shutdown,
            writer_thread,
            leases,
            timer_wake,
            deliveries,
        })
    }
}
