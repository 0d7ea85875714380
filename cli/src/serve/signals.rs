//! The signals that stop the long-running commands: SIGTERM and Ctrl-C (SIGINT).

use anyhow::Context;

/// The signals that stop the server: SIGTERM and Ctrl-C (SIGINT).
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
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
