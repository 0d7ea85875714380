//! The signals that stop the long-running commands: SIGTERM and Ctrl-C (SIGINT). The
//! first asks for a drain; a second during it stops at once ([`Signals::drain`]).

use std::future::Future;

use anyhow::Context;

/// The signals that stop the server: SIGTERM and Ctrl-C (SIGINT).
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens for the stop signals from now on.
    pub(crate) fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
            Ok(Self { term })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the next stop signal and names it.
    pub(crate) async fn next(&mut self) -> anyhow::Result<&'static str> {
        #[cfg(unix)]
        {
            tokio::select! {
                r = tokio::signal::ctrl_c() => r.map(|()| "SIGINT").context("cannot listen for Ctrl-C"),
                _ = self.term.recv() => Ok("SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c()
                .await
                .context("cannot listen for Ctrl-C")?;
            Ok("Ctrl-C")
        }
    }
}

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained<T> {
    /// The graceful work finished, with its output.
    Finished(T),
    /// A second stop signal came first (named): stop at once.
    Again(&'static str),
}

impl Signals {
    /// Waits for `graceful` (a drain after the first stop signal) to finish, unless a
    /// second stop signal comes first.
    pub(crate) async fn drain<T>(&mut self, graceful: impl Future<Output = T>) -> anyhow::Result<Drained<T>> {
        race(graceful, self.next()).await
    }
}

/// [`Signals::drain`] over any source of the second signal.
async fn race<T>(
    graceful: impl Future<Output = T>,
    again: impl Future<Output = anyhow::Result<&'static str>>,
) -> anyhow::Result<Drained<T>> {
    tokio::select! {
        out = graceful => Ok(Drained::Finished(out)),
        signal = again => Ok(Drained::Again(signal?)),
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;

    use super::*;

    #[tokio::test]
    async fn a_drain_that_finishes_gives_its_output() {
        let drained = race(async { 7 }, pending()).await.unwrap();
        assert_eq!(drained, Drained::Finished(7));
    }

    #[tokio::test]
    async fn a_second_signal_stops_the_drain_at_once() {
        let drained = race(pending::<()>(), async { Ok("SIGTERM") }).await.unwrap();
        assert_eq!(drained, Drained::Again("SIGTERM"));
    }

    #[tokio::test]
    async fn a_failed_listener_is_an_error() {
        let drained = race(pending::<()>(), async { Err(anyhow::anyhow!("cannot listen")) }).await;
        assert!(drained.unwrap_err().to_string().contains("cannot listen"));
    }
}
