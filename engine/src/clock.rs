//! Time, read through a clock the tests can control.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// The server's source of time. Timers and deadlines use nothing else.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now_ms(&self) -> Millis;

    /// Resolves once `now_ms() >= due` (or earlier; callers re-check).
    fn sleep_until(&self, due: Millis) -> futures::future::BoxFuture<'static, ()>;
}

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[expect(
        clippy::disallowed_methods,
        reason = "the one wall-clock read of the server: everything else asks its Clock"
    )]
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0)
    }

    fn sleep_until(&self, due: Millis) -> futures::future::BoxFuture<'static, ()> {
        let wait = (due - self.now_ms()).max(0) as u64;
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// A clock that moves only when told to, for tests of timeouts and retries.
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
    tick: watch::Sender<Millis>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Millis) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start)),
            tick: watch::channel(start).0,
        }
    }

    /// Moves the clock forward and wakes every sleeper whose time has come.
    pub fn advance(&self, by: Duration) {
        let now = self.now.fetch_add(by.as_millis() as Millis, Ordering::SeqCst) + by.as_millis() as Millis;
        self.tick.send_replace(now);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, due: Millis) -> futures::future::BoxFuture<'static, ()> {
        let mut rx = self.tick.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|now| *now >= due).await;
        })
    }
}
