//! Result delivery: when a run closes, the server POSTs its result, signed, to the
//! run's callback URL and to every namespace subscription that matches it, and
//! retries with backoff until a 2xx answer or the retry budget runs out.
//!
//! The parts: the state of each target lives in the run ([`railyard_model::run::delivery`]);
//! attempts are driven by durable `timers` rows (`Timer::Delivery`), armed in the
//! transaction that closes the run; the writer starts an attempt when its row fires
//! and hands it, after commit, to the sender (`engine::sender`), a task outside the writer that
//! makes the HTTP call with bounded concurrency and records the outcome through a
//! writer command. The JSON posted is the model's
//! (`railyard_model::run::delivery::payload`); [`sign`] is its signature.

pub mod destination;
pub mod sign;
pub mod slots;

use std::time::Duration;

use tokio::sync::mpsc;

use railyard_model::run::{Attempt, DeliveryPolicy};

pub use sign::SigningSecret;

/// The error history records for an attempt that got no HTTP answer, whatever the
/// cause (the server log names it).
pub const UNREACHABLE: &str = "the receiver could not be reached (the server log has the cause)";

/// Attempts waiting for the sender, at most; past this an attempt is dropped and
/// its deadline retries it.
pub const QUEUE_CAPACITY: usize = 4096;

/// How the server delivers results: `[delivery]` in the configuration.
#[derive(Clone)]
pub struct DeliverySettings {
    /// The HMAC-SHA256 key of the `Railyard-Signature` header. Without one, runs
    /// with a callback URL and subscriptions are refused, and pending attempts fail.
    pub signing_secret: Option<SigningSecret>,
    /// Tries per round (the first included).
    pub max_attempts: u32,
    /// No attempt of a round is planned later than this after the round began.
    pub max_elapsed: Duration,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Timeout of one HTTP call, connect to last byte.
    pub request_timeout: Duration,
    /// Most HTTP calls in flight at once, over every run.
    pub max_concurrent: usize,
    /// Most calls in flight to one target (scheme, host and port); `None`: a quarter
    /// of `max_concurrent` (at least 1).
    pub max_per_target: Option<usize>,
    /// Most calls in flight for one namespace's runs; `None`: half of
    /// `max_concurrent` (at least 1).
    pub max_per_namespace: Option<usize>,
    /// Internal networks deliveries may reach besides public addresses
    /// (`delivery.allow_networks`; see [`destination`]). Empty: none.
    pub allow_networks: Vec<destination::Network>,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        let p = DeliveryPolicy::default();
        Self {
            signing_secret: None,
            max_attempts: p.max_attempts,
            max_elapsed: p.max_elapsed,
            initial_backoff: p.initial_backoff,
            max_backoff: p.max_backoff,
            request_timeout: Duration::from_secs(10),
            max_concurrent: 32,
            max_per_target: None,
            max_per_namespace: None,
            allow_networks: Vec::new(),
        }
    }
}

impl std::fmt::Debug for DeliverySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliverySettings")
            .field("signing_secret", &self.signing_secret.as_ref().map(|_| "<set>"))
            .field("max_attempts", &self.max_attempts)
            .field("max_elapsed", &self.max_elapsed)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("request_timeout", &self.request_timeout)
            .field("max_concurrent", &self.max_concurrent)
            .field("max_per_target", &self.max_per_target)
            .field("max_per_namespace", &self.max_per_namespace)
            .field("allow_networks", &self.allow_networks)
            .finish()
    }
}

impl DeliverySettings {
    /// The sender's limits, each at least 1 and at most `max_concurrent`.
    pub fn slot_limits(&self) -> slots::SlotLimits {
        let total = self.max_concurrent.max(1);
        let or = |v: Option<usize>, default: usize| v.unwrap_or(default).clamp(1, total);
        slots::SlotLimits {
            total,
            per_target: or(self.max_per_target, total / 4),
            per_namespace: or(self.max_per_namespace, total / 2),
        }
    }

    /// The policy the run state follows.
    pub fn policy(&self) -> DeliveryPolicy {
        DeliveryPolicy {
            max_attempts: self.max_attempts.max(1),
            max_elapsed: self.max_elapsed,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
            // An attempt starts only with a slot (`slots`), so it never waits for one;
            // two request timeouts and a margin leave room for a busy writer. Past
            // it, an attempt whose outcome never came (the server was killed
            // mid-send) counts as failed, so a restart retries it this soon.
            attempt_deadline: self
                .request_timeout
                .saturating_mul(2)
                .saturating_add(Duration::from_secs(1)),
        }
    }
}

/// An attempt for the sender: whom to POST what.
#[derive(Debug)]
pub struct Job {
    pub attempt: Attempt,
    /// The payload JSON ([`railyard_model::run::delivery::payload::body`]).
    pub body: Vec<u8>,
    /// The sender's slot, taken when the attempt started; freed when the call ends.
    pub slot: Option<slots::Slot>,
}

/// How long an attempt that found no free slot waits before its timer tries again
/// (it is not started, so the wait uses up nothing).
pub const SLOT_RETRY: Duration = Duration::from_secs(1);

/// What the writer needs of delivery: the policy, the slots, and where attempts go.
#[derive(Clone, Default)]
pub struct DeliveryHook {
    pub policy: DeliveryPolicy,
    /// `None`: no sender (attempts then wait for their deadline and count as failed).
    pub jobs: Option<mpsc::Sender<Job>>,
    /// `None`: no limit (no sender either).
    pub slots: Option<std::sync::Arc<slots::Slots>>,
}

impl DeliveryHook {
    /// A slot for a call to `url` for a run of `namespace`: `Some(None)` when there is
    /// no limit, `None` when every slot this call could use is taken.
    pub fn take_slot(&self, namespace: &str, url: &str) -> Option<Option<slots::Slot>> {
        match &self.slots {
            None => Some(None),
            Some(s) => s.try_take(namespace, &slots::origin(url)).map(Some),
        }
    }

    /// Hands an attempt to the sender; never blocks the writer. A full or closed
    /// queue drops it (freeing its slot): its deadline timer counts it failed and
    /// plans the next.
    pub fn send(&self, job: Job) {
        let Some(jobs) = &self.jobs else {
            return;
        };
        if let Err(e) = jobs.try_send(job) {
            let job = match e {
                mpsc::error::TrySendError::Full(j) | mpsc::error::TrySendError::Closed(j) => j,
            };
            tracing::warn!(
                run_id = %job.attempt.run_id,
                target = %job.attempt.target.name(),
                attempt = job.attempt.attempt,
                "delivery queue full or closed; the attempt is retried after its deadline"
            );
        }
    }
}
