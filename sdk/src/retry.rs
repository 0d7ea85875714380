//! The one retry policy of Railyard, and the one definition of which errors are worth
//! another try.
//!
//! The client SDK (calls that met `UNAVAILABLE`), the worker (reconnecting its polls,
//! re-sending a step's result) and the model providers (429 / 5xx / transport errors)
//! all pause by a [`RetryPolicy`]: exponential backoff with jitter, built on `backon`.
//! Jitter matters after a server restart: every worker lost its connection at the
//! same instant, and without it they would all come back in lockstep, every time.
//!
//! Which errors are transient is decided here, one function per error domain:
//! [`is_transient_grpc`] for gRPC statuses; `railyard_model::retry` decides for the
//! HTTP answers of model APIs and delivery URLs. (A transport error of an HTTP call,
//! no answer at all, is always transient.)

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tonic::Code;

/// How often, and how far apart, a call is tried.
///
/// Pause `k` (from 0) before try `k + 2` is drawn from `[b, 2b)`, where
/// `b = min(initial_backoff * 2^k, max_backoff / 2)`: the base doubles, jitter adds up
/// to as much again, and no pause reaches `max_backoff`. Two policies with the same
/// settings draw different pauses, so clients that failed together do not retry
/// together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (`u32::MAX`: practically forever).
    pub max_attempts: u32,
    /// The shortest first pause.
    pub initial_backoff: Duration,
    /// No pause is this long or longer (a server's `retry-after` is capped to it).
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// The builder `backon` retries with.
    pub fn builder(&self) -> ExponentialBuilder {
        self.builder_unseeded().with_jitter()
    }

    /// Like [`Self::builder`] but with a fixed jitter seed, so tests can check the
    /// pauses exactly.
    pub fn builder_with_seed(&self, seed: u64) -> ExponentialBuilder {
        self.builder().with_jitter_seed(seed)
    }

    fn builder_unseeded(&self) -> ExponentialBuilder {
        let cap = self.max_backoff / 2;
        let retries = usize::try_from(self.max_attempts.saturating_sub(1)).unwrap_or(usize::MAX);
        ExponentialBuilder::new()
            .with_factor(2.0)
            .with_min_delay(self.initial_backoff.min(cap))
            .with_max_delay(cap)
            .with_max_times(retries)
    }

    /// The pauses between tries, in order: one fewer than [`Self::max_attempts`].
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Send + use<> {
        self.builder().build()
    }

    /// The pause to take when the other side asked for `asked` (a `retry-after`):
    /// that, capped at [`Self::max_backoff`].
    pub fn honour(&self, asked: Duration) -> Duration {
        asked.min(self.max_backoff)
    }

    /// The bounds pause `k` (from 0) is drawn from, as documented on the type.
    pub fn bounds(&self, k: u32) -> (Duration, Duration) {
        let cap = self.max_backoff / 2;
        let base = self
            .initial_backoff
            .min(cap)
            .saturating_mul(2u32.saturating_pow(k.min(31)))
            .min(cap);
        (base, base.saturating_mul(2))
    }
}

/// Whether a gRPC failure is worth repeating the same call for: the server could not
/// be reached or is restarting (`UNAVAILABLE`), or the connection dropped before an
/// answer came (tonic reports that as `UNKNOWN` "transport error"). Every Railyard
/// call the SDK repeats is safe to repeat (requests carry ids, completions of a lease
/// are refused the second time without a change), so the only question is whether a
/// later try can get a different answer.
///
/// `DEADLINE_EXCEEDED` is transient too, but the SDK does not repeat a call that
/// already waited its whole deadline; callers that can wait longer (the worker, for a
/// step's result) retry those themselves, through [`is_transient_grpc_or_timeout`].
pub fn is_transient_grpc(code: Code, message: &str) -> bool {
    match code {
        Code::Unavailable => true,
        Code::Unknown => message.starts_with("transport error"),
        _ => false,
    }
}

/// [`is_transient_grpc`], or the call ran out of time.
pub fn is_transient_grpc_or_timeout(code: Code, message: &str) -> bool {
    code == Code::DeadlineExceeded || is_transient_grpc(code, message)
}

/// Whether a server stream (`WatchRun`) that ended in `code` is worth reopening from
/// the last event it delivered: besides what [`is_transient_grpc`] counts, a stream
/// cut mid-way by a server restart surfaces as `UNKNOWN`, `CANCELLED` or `INTERNAL`
/// (an HTTP/2 reset), and reopening is a read, so always safe.
pub fn is_transient_stream_break(code: Code, message: &str) -> bool {
    is_transient_grpc(code, message) || matches!(code, Code::Unknown | Code::Cancelled | Code::Internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 9,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }

    fn delays(b: ExponentialBuilder) -> Vec<Duration> {
        b.build().collect()
    }

    #[test]
    fn each_pause_stays_within_its_bounds() {
        let p = policy();
        for seed in 0..200 {
            let got = delays(p.builder_with_seed(seed));
            assert_eq!(got.len(), 8, "one pause fewer than tries");
            for (k, d) in got.iter().enumerate() {
                let (lo, hi) = p.bounds(k as u32);
                assert!(
                    *d >= lo && *d < hi,
                    "seed {seed} pause {k}: {d:?} not in [{lo:?}, {hi:?})"
                );
                assert!(*d < p.max_backoff, "{d:?}");
            }
        }
        assert_eq!(
            p.bounds(0),
            (Duration::from_millis(100), Duration::from_millis(200))
        );
        assert_eq!(
            p.bounds(3),
            (Duration::from_millis(800), Duration::from_millis(1600))
        );
        assert_eq!(p.bounds(4), (Duration::from_secs(1), Duration::from_secs(2)));
        assert_eq!(p.bounds(40), (Duration::from_secs(1), Duration::from_secs(2)));
    }

    #[test]
    fn two_clients_do_not_retry_in_lockstep() {
        let p = policy();
        let (a, b) = (delays(p.builder_with_seed(1)), delays(p.builder_with_seed(2)));
        assert_eq!(a.len(), b.len());
        assert!(
            a.iter().zip(&b).all(|(x, y)| x != y),
            "every pause differs: {a:?} vs {b:?}"
        );
        // Unseeded policies (what clients use) draw their own seeds.
        let (c, d): (Vec<_>, Vec<_>) = (p.delays().collect(), p.delays().collect());
        assert_ne!(c, d);
        for (k, x) in c.iter().chain(&d).enumerate() {
            let (lo, hi) = p.bounds((k % 8) as u32);
            assert!(*x >= lo && *x < hi);
        }
    }

    #[test]
    fn attempts_and_caps() {
        let once = RetryPolicy {
            max_attempts: 1,
            ..policy()
        };
        assert_eq!(once.delays().count(), 0, "one try, no pause");
        let forever = RetryPolicy {
            max_attempts: u32::MAX,
            ..policy()
        };
        assert!(forever.delays().take(100).all(|d| d < forever.max_backoff));
        // A first pause longer than the cap allows is brought under it.
        let odd = RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(1),
        };
        assert!(odd.delays().all(|d| d < Duration::from_secs(1)));
        assert_eq!(policy().honour(Duration::from_secs(90)), Duration::from_secs(2));
        assert_eq!(policy().honour(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn transient_errors() {
        assert!(is_transient_grpc(Code::Unavailable, "connection refused"));
        assert!(is_transient_grpc(Code::Unknown, "transport error"));
        assert!(!is_transient_grpc(Code::Unknown, "boom"));
        assert!(!is_transient_grpc(Code::DeadlineExceeded, ""));
        assert!(is_transient_grpc_or_timeout(Code::DeadlineExceeded, ""));
        for code in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::ResourceExhausted,
        ] {
            assert!(!is_transient_grpc_or_timeout(code, "transport error"), "{code:?}");
        }
    }
}
