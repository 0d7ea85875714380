//! The backend's own tokio runtime, and how a synchronous call waits on it.
//!
//! The storage trait is synchronous, and it is called both from the writer's own OS
//! thread and from inside tokio tasks of the server's runtime (service reads), while
//! the driver is async. `Runtime::block_on` and `Handle::block_on` panic on a thread
//! that is already inside a runtime, so they cannot serve the second kind of caller.
//! Instead every call is spawned onto this small runtime, which the backend owns,
//! and the calling thread waits for the answer on a std channel: no runtime is ever
//! nested, and the call works the same from any thread. Blocking the caller for the
//! length of the call is what the synchronous trait already means (the redb backend
//! blocks on its file the same way).

use std::future::Future;

use railyard_store::StorageError;
use tokio::runtime::{Builder, Handle, Runtime};

/// Worker threads of the runtime: the connections' I/O and the pool's timers only.
const THREADS: usize = 2;

/// A multi-thread runtime the backend's connections live on.
pub(crate) struct Runner {
    handle: Handle,
    /// Taken by `Drop`.
    runtime: Option<Runtime>,
}

impl Runner {
    /// Starts the runtime's threads.
    pub(crate) fn new() -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(THREADS)
            .thread_name("railyard-postgres")
            .enable_all()
            .build()?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// Runs `fut` on the runtime and waits for its output on this thread.
    pub(crate) fn block<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, StorageError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            // The caller may be gone (it never is: it waits below); nothing to do then.
            let _ = tx.send(fut.await);
        });
        // The sender is dropped unanswered only if the task panicked or the runtime
        // shut down.
        rx.recv()
            .map_err(|_| StorageError::Backend("the database runtime stopped before answering".into()))
    }

    /// Runs `fut` on the runtime without waiting for it.
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(fut);
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which panics when the last handle
        // goes away inside an async context (a test, a server task); shutting down
        // in the background never waits. Open connections are closed with it.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
