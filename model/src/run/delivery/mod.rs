//! Result delivery, as run state: each closed run holds one [`Delivery`] per target
//! (its callback URL, each namespace subscription that matched), and these methods
//! move them, appending `Delivery*` events and timer effects like every other
//! transition. Delivery never changes the run's status: a COMPLETED run whose
//! delivery failed stays COMPLETED, with its delivery FAILED.
//!
//! One timer kind drives a target ([`Timer::Delivery`], carrying the attempt it is
//! for): when the target waits for attempt `n`, it starts attempt `n`; when attempt
//! `n` is in flight, it is that attempt's deadline (the outcome never came: the server
//! stopped during the send, or the sender dropped it), and counts as a failed
//! attempt. Anything else is stale and does nothing. Pure: the backoff's jitter is a
//! hash of run, target and attempt, so no randomness and no clock.

pub mod payload;
pub mod url;

use std::hash::{Hash, Hasher};
use std::time::Duration;

use super::{Effect, EventKind, Out, RunState, Timer};
use crate::Millis;
use crate::error::Rejection;

/// Whom a delivery goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryTarget {
    /// The run's `callback_url`.
    Callback,
    /// A namespace notification subscription, by id.
    Subscription(String),
    /// Issue number `issue` (1-based, in `RunState::issues`) of the run, to the
    /// subscription `subscription` (one that takes `issue.reported`).
    Issue {
        /// The subscription's id.
        subscription: String,
        /// The issue's number, from 1.
        issue: u32,
    },
}

impl DeliveryTarget {
    /// The target's name in the API, events and headers: `callback` or
    /// `subscription:<id>`.
    pub fn name(&self) -> String {
        match self {
            Self::Callback => "callback".into(),
            Self::Subscription(id) => format!("subscription:{id}"),
            Self::Issue { subscription, issue } => format!("issue:{issue}:{subscription}"),
        }
    }

    /// The target a name stands for.
    pub fn parse(name: &str) -> Option<Self> {
        if let Some(rest) = name.strip_prefix("issue:") {
            let (n, id) = rest.split_once(':')?;
            let issue = n.parse().ok().filter(|n| *n > 0)?;
            return (!id.is_empty()).then(|| Self::Issue {
                subscription: id.to_string(),
                issue,
            });
        }
        match name {
            "callback" => Some(Self::Callback),
            _ => name
                .strip_prefix("subscription:")
                .filter(|id| !id.is_empty())
                .map(|id| Self::Subscription(id.to_string())),
        }
    }
}

/// Where one target's delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Attempts remain (or one is in flight).
    Pending,
    /// The target answered with a 2xx status.
    Succeeded,
    /// The round's attempts ran out, or the failure was not transient.
    Failed,
}

impl DeliveryStatus {
    /// The status's name, as in the API (`PENDING` ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
        }
    }
}

/// The delivery of a closed run's result to one target.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Where it goes.
    pub target: DeliveryTarget,
    /// The URL it is posted to.
    pub url: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made, over every round.
    pub attempts: u32,
    /// Attempts made before the current round began (a redelivery starts a round).
    pub round_base: u32,
    /// When the current round began.
    pub round_started_ms: Millis,
    /// Attempt `attempts` has been handed to the sender and its outcome is not in.
    pub in_flight: bool,
    /// The last failed attempt's error (empty: none).
    pub last_error: String,
    /// When the last attempt was made.
    pub last_attempt_ms: Option<Millis>,
    /// When the next attempt is due; none while pending means it waits for another
    /// target's attempt in flight (one per run).
    pub next_attempt_ms: Option<Millis>,
}

/// How hard a target is tried: the retry budget of one round and the shape of the
/// pauses (the shape of the one retry policy, `backoff_bounds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Tries in one round, the first included.
    pub max_attempts: u32,
    /// No attempt of a round is planned later than this after the round began.
    pub max_elapsed: Duration,
    /// The shortest first pause.
    pub initial_backoff: Duration,
    /// No pause is this long or longer.
    pub max_backoff: Duration,
    /// How long an attempt may stay in flight before it counts as failed (the HTTP
    /// timeout plus time in the sender's queue).
    pub attempt_deadline: Duration,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            max_elapsed: Duration::from_secs(3600),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(600),
            attempt_deadline: Duration::from_secs(60),
        }
    }
}

/// An attempt to send now: what the sender needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The run's namespace.
    pub namespace: String,
    /// The run.
    pub run_id: String,
    /// Where it goes.
    pub target: DeliveryTarget,
    /// The URL to post to.
    pub url: String,
    /// Its number, over every round, from 1.
    pub attempt: u32,
}

/// How an attempt went, as the sender saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    /// A 2xx answer with this status.
    Delivered {
        /// The answer's status.
        http_status: u16,
    },
    /// No 2xx answer; `transient` when a later try may get a different one.
    Failed {
        /// What went wrong.
        error: String,
        /// Whether a later try may get a different answer.
        transient: bool,
    },
}

fn ms(d: Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

impl RunState {
    /// Plans the first attempt to each target; called once, as the run closes.
    pub fn arm_deliveries(&mut self, targets: Vec<(DeliveryTarget, String)>, out: &mut Out) {
        for (target, url) in targets {
            out.effects.push(Effect::Timer {
                due_ms: out.now,
                timer: self.delivery_timer(&target, 1),
            });
            self.deliveries.push(Delivery {
                target,
                url,
                status: DeliveryStatus::Pending,
                attempts: 0,
                round_base: 0,
                round_started_ms: out.now,
                in_flight: false,
                last_error: String::new(),
                last_attempt_ms: None,
                next_attempt_ms: Some(out.now),
            });
        }
    }

    fn delivery_timer(&self, target: &DeliveryTarget, attempt: u32) -> Timer {
        Timer::Delivery {
            namespace: self.namespace.clone(),
            run_id: self.run_id.clone(),
            target: target.name(),
            attempt,
        }
    }

    /// A delivery timer for `attempt` of `target` fired: starts that attempt (and
    /// answers it, for the sender), or ends it as lost when it is still in flight.
    /// A stale timer does nothing.
    pub fn delivery_timer_fired(
        &mut self,
        target: &str,
        attempt: u32,
        policy: &DeliveryPolicy,
        out: &mut Out,
    ) -> Option<Attempt> {
        let i = self.deliveries.iter().position(|d| d.target.name() == target)?;
        let d = &self.deliveries[i];
        if d.status != DeliveryStatus::Pending {
            return None;
        }
        if d.in_flight && d.attempts == attempt {
            // A wait's timer for this attempt number may come before its deadline.
            let started = d.last_attempt_ms.unwrap_or(out.now);
            if out.now < started.saturating_add(ms(policy.attempt_deadline)) {
                return None;
            }
            let error = format!(
                "no outcome within {} s (the server stopped during the attempt, or it waited too long to be sent)",
                policy.attempt_deadline.as_secs()
            );
            self.delivery_failed(i, error, true, policy, out);
            return None;
        }
        if d.in_flight || d.attempts + 1 != attempt {
            return None;
        }
        // One attempt in flight per run: while another target's is, this one waits
        // for it (woken when that attempt ends, at its deadline at the latest).
        if let Some(busy_until) = self
            .deliveries
            .iter()
            .filter(|o| o.in_flight)
            .filter_map(|o| o.last_attempt_ms)
            .map(|at| at.saturating_add(ms(policy.attempt_deadline)))
            .max()
        {
            let timer = self.delivery_timer(&self.deliveries[i].target, attempt);
            // None while pending and not in flight: waiting for the run's slot.
            self.deliveries[i].next_attempt_ms = None;
            out.effects.push(Effect::Timer {
                due_ms: busy_until,
                timer,
            });
            return None;
        }
        let due = out.now.saturating_add(ms(policy.attempt_deadline));
        let timer = self.delivery_timer(&d.target, attempt);
        let d = &mut self.deliveries[i];
        d.attempts = attempt;
        d.in_flight = true;
        d.last_attempt_ms = Some(out.now);
        d.next_attempt_ms = None;
        let job = Attempt {
            namespace: self.namespace.clone(),
            run_id: self.run_id.clone(),
            target: d.target.clone(),
            url: d.url.clone(),
            attempt,
        };
        out.effects.push(Effect::Timer { due_ms: due, timer });
        self.push(
            out,
            "server",
            EventKind::DeliveryAttempted {
                target: job.target.name(),
                // History is readable by clients: the path and query (where webhook
                // URLs keep their secrets) stay out of it.
                url: crate::run::delivery::url::redacted(&job.url),
                attempt,
            },
        );
        Some(job)
    }

    /// Records the outcome of attempt `attempt` of `target`. Answers false (and
    /// changes nothing) when that attempt is no longer the one in flight: its
    /// deadline already counted it as failed.
    pub fn delivery_outcome(
        &mut self,
        target: &str,
        attempt: u32,
        outcome: AttemptOutcome,
        policy: &DeliveryPolicy,
        out: &mut Out,
    ) -> bool {
        let Some(i) = self.deliveries.iter().position(|d| {
            d.target.name() == target
                && d.status == DeliveryStatus::Pending
                && d.in_flight
                && d.attempts == attempt
        }) else {
            return false;
        };
        match outcome {
            AttemptOutcome::Delivered { http_status } => {
                let d = &mut self.deliveries[i];
                d.status = DeliveryStatus::Succeeded;
                d.in_flight = false;
                d.last_error.clear();
                d.next_attempt_ms = None;
                let target = d.target.name();
                self.push(
                    out,
                    "server",
                    EventKind::DeliverySucceeded {
                        target,
                        attempt,
                        http_status,
                    },
                );
                self.wake_waiting(out);
            }
            AttemptOutcome::Failed { error, transient } => {
                self.delivery_failed(i, error, transient, policy, out)
            }
        }
        true
    }

    /// Ends the attempt in flight of delivery `i` as failed, and plans the next one
    /// while the round's budget lasts.
    fn delivery_failed(
        &mut self,
        i: usize,
        error: String,
        transient: bool,
        policy: &DeliveryPolicy,
        out: &mut Out,
    ) {
        let d = &self.deliveries[i];
        let in_round = d.attempts.saturating_sub(d.round_base);
        let next_at = (transient && in_round < policy.max_attempts)
            .then(|| {
                out.now
                    .saturating_add(backoff_ms(policy, &self.run_id, &d.target, d.attempts))
            })
            .filter(|at| *at <= d.round_started_ms.saturating_add(ms(policy.max_elapsed)));
        let timer = self.delivery_timer(&d.target, d.attempts + 1);
        let d = &mut self.deliveries[i];
        d.in_flight = false;
        d.last_error = error.clone();
        d.next_attempt_ms = next_at;
        if next_at.is_none() {
            d.status = DeliveryStatus::Failed;
        }
        let (target, attempt) = (d.target.name(), d.attempts);
        if let Some(due_ms) = next_at {
            out.effects.push(Effect::Timer { due_ms, timer });
        }
        self.push(
            out,
            "server",
            EventKind::DeliveryFailed {
                target,
                attempt,
                error,
                will_retry: next_at.is_some(),
                next_attempt_at_ms: next_at,
            },
        );
        self.wake_waiting(out);
    }

    /// An attempt ended: the targets that were waiting for the run's one attempt
    /// in flight (`next_attempt_ms` none while pending) get a timer now. The first
    /// to fire starts; the others find it in flight and wait again.
    fn wake_waiting(&mut self, out: &mut Out) {
        for i in 0..self.deliveries.len() {
            let d = &self.deliveries[i];
            if d.status != DeliveryStatus::Pending || d.in_flight || d.next_attempt_ms.is_some() {
                continue;
            }
            let timer = self.delivery_timer(&d.target, d.attempts + 1);
            self.deliveries[i].next_attempt_ms = Some(out.now);
            out.effects.push(Effect::Timer {
                due_ms: out.now,
                timer,
            });
        }
    }

    /// Starts a new round, with a fresh budget, for every FAILED delivery (or the one
    /// named `target`); answers the targets requeued. Refused, naming why, when the
    /// run is open or nothing has failed.
    pub fn redeliver(&mut self, target: &str, out: &mut Out) -> Result<Vec<String>, Rejection> {
        let refuse = |why: String| Err(Rejection::FailedPrecondition(why));
        if self.status.is_open() {
            return refuse(format!(
                "run {} is {}: its result is delivered when it closes",
                self.run_id,
                self.status.name()
            ));
        }
        if self.deliveries.is_empty() {
            return refuse(format!(
                "run {} has nothing to deliver: it had no callback URL and no namespace subscription matched it",
                self.run_id
            ));
        }
        if !target.is_empty() && !self.deliveries.iter().any(|d| d.target.name() == target) {
            let known: Vec<String> = self.deliveries.iter().map(|d| d.target.name()).collect();
            return refuse(format!(
                "run {} has no delivery target {} (its targets: {})",
                self.run_id,
                crate::error::echo(target),
                known.join(", ")
            ));
        }
        let chosen = |d: &Delivery| target.is_empty() || d.target.name() == target;
        if !self
            .deliveries
            .iter()
            .any(|d| chosen(d) && d.status == DeliveryStatus::Failed)
        {
            let states: Vec<String> = self
                .deliveries
                .iter()
                .filter(|d| chosen(d))
                .map(|d| format!("{} is {}", d.target.name(), d.status.name()))
                .collect();
            return refuse(format!(
                "run {} has no failed delivery to retry: {}",
                self.run_id,
                states.join(", ")
            ));
        }
        let mut requeued = Vec::new();
        for i in 0..self.deliveries.len() {
            let d = &self.deliveries[i];
            if !chosen(d) || d.status != DeliveryStatus::Failed {
                continue;
            }
            let timer = self.delivery_timer(&d.target, d.attempts + 1);
            let d = &mut self.deliveries[i];
            d.status = DeliveryStatus::Pending;
            d.round_base = d.attempts;
            d.round_started_ms = out.now;
            d.next_attempt_ms = Some(out.now);
            requeued.push(d.target.name());
            out.effects.push(Effect::Timer {
                due_ms: out.now,
                timer,
            });
        }
        Ok(requeued)
    }
}

/// The bounds pause `k` (from 0) is drawn from: `[b, 2b)` with
/// `b = min(initial_backoff * 2^k, max_backoff / 2)`, the shape of the SDK's retry
/// policy (`railyard_sdk::RetryPolicy`), so deliveries back off like every client.
fn backoff_bounds(policy: &DeliveryPolicy, k: u32) -> (Duration, Duration) {
    let cap = policy.max_backoff / 2;
    let base = policy
        .initial_backoff
        .min(cap)
        .saturating_mul(2u32.saturating_pow(k.min(31)))
        .min(cap);
    (base, base.saturating_mul(2))
}

/// The pause after failed attempt `attempt` (the `k`-th of its round counts from
/// [`backoff_bounds`]): drawn from `[b, 2b)` by a hash of the run, the
/// target and the attempt, so it never changes when recomputed.
fn backoff_ms(policy: &DeliveryPolicy, run_id: &str, target: &DeliveryTarget, attempt: u32) -> Millis {
    let (lo, hi) = backoff_bounds(policy, attempt.saturating_sub(1));
    let (lo, hi) = (ms(lo), ms(hi));
    let mut h = std::hash::DefaultHasher::new();
    (run_id, target.name(), attempt).hash(&mut h);
    let span = u64::try_from(hi.saturating_sub(lo)).unwrap_or(0);
    let jitter = if span == 0 { 0 } else { h.finish() % span };
    lo.saturating_add(Millis::try_from(jitter).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_round_trip() {
        for t in [
            DeliveryTarget::Callback,
            DeliveryTarget::Subscription("pager".into()),
            DeliveryTarget::Issue {
                subscription: "pager".into(),
                issue: 3,
            },
        ] {
            assert_eq!(DeliveryTarget::parse(&t.name()), Some(t));
        }
        assert_eq!(DeliveryTarget::parse("issue:0:pager"), None);
        assert_eq!(DeliveryTarget::parse("issue:1:"), None);
        assert_eq!(DeliveryTarget::parse("subscription:"), None);
        assert_eq!(DeliveryTarget::parse("other"), None);
    }

    #[test]
    fn backoff_follows_the_retry_shape() {
        let p = DeliveryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            ..DeliveryPolicy::default()
        };
        for attempt in 1..10 {
            let d = backoff_ms(&p, "r", &DeliveryTarget::Callback, attempt);
            let (lo, hi) = backoff_bounds(&p, attempt - 1);
            assert!(d >= ms(lo) && d < ms(hi), "attempt {attempt}: {d}");
            assert_eq!(d, backoff_ms(&p, "r", &DeliveryTarget::Callback, attempt));
        }
    }
}

#[cfg(test)]
mod transitions {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::run::{EventKind, RunStatus, StartParams};
    use crate::workflow::parse_definition;

    const DEF: &str = r#"{"id":"wf","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#;

    fn closed_run(seq: &mut u64) -> RunState {
        let def = Arc::new(parse_definition(DEF).unwrap());
        let mut out = Out::new(1_000, seq);
        let params = StartParams {
            namespace: "ns".into(),
            run_id: "r".into(),
            callback_url: "https://cb.example/x".into(),
            context: BTreeMap::new(),
            ..Default::default()
        };
        let mut run = RunState::start(params, def, &mut out);
        run.terminate("ops", "stop".into(), &mut out).unwrap();
        run
    }

    fn policy() -> DeliveryPolicy {
        DeliveryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            ..DeliveryPolicy::default()
        }
    }

    fn timers(out: &Out) -> Vec<(Millis, u32)> {
        out.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Timer {
                    due_ms,
                    timer: Timer::Delivery { attempt, .. },
                } => Some((*due_ms, *attempt)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn fails_twice_then_succeeds_and_the_run_keeps_its_status() {
        let mut seq = 0;
        let mut run = closed_run(&mut seq);
        let p = policy();
        let mut out = Out::new(2_000, &mut seq);
        run.arm_deliveries(
            vec![(DeliveryTarget::Callback, run.callback_url.clone())],
            &mut out,
        );
        assert_eq!(timers(&out), vec![(2_000, 1)]);
        let mut now = 2_000;
        for attempt in 1..=3 {
            let mut out = Out::new(now, &mut seq);
            let job = run
                .delivery_timer_fired("callback", attempt, &p, &mut out)
                .unwrap();
            assert_eq!(job.attempt, attempt);
            // Firing the same timer again does nothing: one attempt in flight.
            let mut again = Out::new(now, &mut seq);
            assert!(
                run.delivery_timer_fired("callback", attempt + 1, &p, &mut again)
                    .is_none()
            );
            assert!(again.events.is_empty() && again.effects.is_empty());
            let mut out = Out::new(now + 50, &mut seq);
            let outcome = if attempt < 3 {
                AttemptOutcome::Failed {
                    error: "HTTP 503".into(),
                    transient: true,
                }
            } else {
                AttemptOutcome::Delivered { http_status: 200 }
            };
            assert!(run.delivery_outcome("callback", attempt, outcome.clone(), &p, &mut out));
            assert!(
                !run.delivery_outcome("callback", attempt, outcome, &p, &mut out),
                "recorded once"
            );
            if attempt < 3 {
                let next = timers(&out);
                assert_eq!(next.len(), 1);
                assert_eq!(next[0].1, attempt + 1);
                now = next[0].0;
            }
        }
        let d = &run.deliveries[0];
        assert_eq!(
            (d.status, d.attempts, d.in_flight),
            (DeliveryStatus::Succeeded, 3, false)
        );
        assert_eq!(run.status, RunStatus::Terminated);
    }

    #[test]
    fn the_budget_ends_in_failed_and_redeliver_starts_a_round() {
        let mut seq = 0;
        let mut run = closed_run(&mut seq);
        let p = policy();
        let mut out = Out::new(2_000, &mut seq);
        let e = run.redeliver("", &mut out).unwrap_err().to_string();
        assert!(e.contains("nothing to deliver"), "{e}");
        run.arm_deliveries(
            vec![(DeliveryTarget::Callback, run.callback_url.clone())],
            &mut out,
        );
        let e = run.redeliver("", &mut out).unwrap_err().to_string();
        assert!(e.contains("callback is PENDING"), "{e}");
        let mut now = 2_000;
        let mut last = None;
        for attempt in 1..=3 {
            let mut out = Out::new(now, &mut seq);
            run.delivery_timer_fired("callback", attempt, &p, &mut out)
                .unwrap();
            // The attempt never answers: its deadline counts it as failed.
            let deadline = timers(&out)[0].0;
            let mut out = Out::new(deadline, &mut seq);
            assert!(
                run.delivery_timer_fired("callback", attempt, &p, &mut out)
                    .is_none()
            );
            last = out.events.last().cloned();
            if let Some(&(at, _)) = timers(&out).first() {
                now = at;
            }
        }
        match last.map(|e| e.kind) {
            Some(EventKind::DeliveryFailed {
                will_retry: false,
                attempt: 3,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(run.deliveries[0].status, DeliveryStatus::Failed);
        let mut out = Out::new(now, &mut seq);
        let e = run.redeliver("subscription:x", &mut out).unwrap_err().to_string();
        assert!(e.contains("no delivery target"), "{e}");
        assert_eq!(run.redeliver("", &mut out).unwrap(), vec!["callback".to_string()]);
        assert_eq!(timers(&out), vec![(now, 4)]);
        let d = &run.deliveries[0];
        assert_eq!((d.status, d.round_base), (DeliveryStatus::Pending, 3));
    }

    #[test]
    fn one_attempt_per_run_is_in_flight_and_the_next_target_starts_when_it_ends() {
        let mut seq = 0;
        let mut run = closed_run(&mut seq);
        let p = policy();
        let mut out = Out::new(2_000, &mut seq);
        run.arm_deliveries(
            vec![
                (DeliveryTarget::Callback, run.callback_url.clone()),
                (
                    DeliveryTarget::Subscription("pager".into()),
                    "https://p.example/".into(),
                ),
            ],
            &mut out,
        );
        assert_eq!(timers(&out), vec![(2_000, 1), (2_000, 1)]);
        let mut out = Out::new(2_000, &mut seq);
        assert!(run.delivery_timer_fired("callback", 1, &p, &mut out).is_some());
        // The subscription's timer finds the callback's attempt in flight: it waits,
        // at the latest until that attempt's deadline.
        let mut out = Out::new(2_000, &mut seq);
        assert!(
            run.delivery_timer_fired("subscription:pager", 1, &p, &mut out)
                .is_none()
        );
        let deadline = 2_000 + ms(p.attempt_deadline);
        assert_eq!(timers(&out), vec![(deadline, 1)]);
        assert!(out.events.is_empty());
        assert_eq!(run.deliveries[1].next_attempt_ms, None);
        // The callback's attempt ends: the subscription is woken at once.
        let mut out = Out::new(2_300, &mut seq);
        let ok = AttemptOutcome::Delivered { http_status: 204 };
        assert!(run.delivery_outcome("callback", 1, ok, &p, &mut out));
        assert_eq!(timers(&out), vec![(2_300, 1)]);
        let mut out = Out::new(2_300, &mut seq);
        assert!(
            run.delivery_timer_fired("subscription:pager", 1, &p, &mut out)
                .is_some()
        );
        // The deadline-time timer of the wait is stale by then.
        let mut out = Out::new(deadline, &mut seq);
        assert!(
            run.delivery_timer_fired("subscription:pager", 1, &p, &mut out)
                .is_none()
        );
        assert!(
            out.events.is_empty() && out.effects.is_empty(),
            "{:?}",
            out.events
        );
        assert!(run.deliveries[1].in_flight);
    }

    #[test]
    fn a_permanent_failure_is_not_retried() {
        let mut seq = 0;
        let mut run = closed_run(&mut seq);
        let p = policy();
        let mut out = Out::new(2_000, &mut seq);
        run.arm_deliveries(
            vec![(DeliveryTarget::Callback, run.callback_url.clone())],
            &mut out,
        );
        run.delivery_timer_fired("callback", 1, &p, &mut out).unwrap();
        let mut out = Out::new(2_100, &mut seq);
        let failed = AttemptOutcome::Failed {
            error: "HTTP 404".into(),
            transient: false,
        };
        assert!(run.delivery_outcome("callback", 1, failed, &p, &mut out));
        assert!(timers(&out).is_empty());
        assert_eq!(run.deliveries[0].status, DeliveryStatus::Failed);
    }
}
