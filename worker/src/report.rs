//! Delivering a step's result to the server: retried while the server is unreachable
//! or slow, as both the runner and the lease keeper (which reports a completion from
//! inside the agent loop) send results.

use std::future::Future;
use std::time::Duration;

use backon::Retryable;
use railyard_sdk::{ClientError, Completion, CompletionReply, RetryPolicy, StepWorker};
use tracing::warn;

/// Tries (each with the SDK's own retries) to deliver a step's result.
const REPORT: RetryPolicy = RetryPolicy {
    max_attempts: 6,
    initial_backoff: Duration::from_secs(1),
    max_backoff: Duration::from_secs(16),
};

/// The answer to a completion sent: the next step when one was leased with it (eager
/// dispatch) and whether the result is held for approval, or why it was not accepted.
pub(crate) type Reported = Result<CompletionReply, ClientError>;

/// Retries a report while the server is unreachable or slow to answer
/// ([`ClientError::is_transient`]), by the [`REPORT`] policy. A repeated report is
/// safe: the server refuses a second one for the same lease without changing anything.
pub(crate) async fn with_retries<T, F, Fut>(what: &str, call: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut attempt = 0u32;
    call.retry(REPORT.builder())
        .when(ClientError::is_transient)
        .notify(|e: &ClientError, pause: Duration| {
            attempt += 1;
            warn!(attempt, retry_in = ?pause, error = %e, "{what} not delivered; retrying");
        })
        .await
}

/// Sends a completion (with `checkpoint`, the transcript that proposed it, for a step
/// that requires confirmation), with retries while the server is unreachable; with
/// `take_next`, asks for the run's next step in the same call (eager dispatch).
pub(crate) async fn send_completion(
    worker: &StepWorker,
    task_token: &str,
    c: &Completion,
    checkpoint: Vec<u8>,
    take_next: bool,
) -> Reported {
    with_retries("completion", || {
        let (c, checkpoint) = (c.clone(), checkpoint.clone());
        async move {
            worker
                .complete_with_checkpoint(task_token, c, checkpoint, take_next)
                .await
        }
    })
    .await
}
