//! The sender: the task that makes each delivery's HTTP call, outside the writer.
//! At most `max_concurrent` calls at once; each has the configured timeout, reads
//! at most [`MAX_ANSWER_BYTES`] of the answer (then drops it), follows no
//! redirects, and records its outcome through the writer ([`RecordDelivery`]).

use std::sync::Arc;
use std::time::Duration;

use railyard_sdk::retry::is_transient_http_status;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::engine::delivery::sign::{SIGNATURE_HEADER, sign};
use crate::engine::delivery::{DeliverySettings, Job, QUEUE_CAPACITY, SigningSecret};
use crate::engine::writer::{RecordDelivery, Writer};
use railyard_model::run::AttemptOutcome;

/// Most bytes of a receiver's answer read (and discarded).
pub const MAX_ANSWER_BYTES: usize = 64 << 10;

/// Most bytes of an error recorded in history.
const MAX_ERROR_BYTES: usize = 512;

/// The queue the writer hands attempts to, and what reads it.
pub struct Sender {
    client: reqwest::Client,
    secret: Option<SigningSecret>,
    clock: Arc<dyn Clock>,
    writer: Writer,
    slots: Arc<Semaphore>,
    /// One HTTP call at most ([`DeliverySettings::request_timeout`]), in ms.
    request_ms: i64,
}

/// The channel attempts go into (give its sending half to the writer's
/// [`crate::engine::delivery::DeliveryHook`]) and its receiving half.
pub fn channel() -> (mpsc::Sender<Job>, mpsc::Receiver<Job>) {
    mpsc::channel(QUEUE_CAPACITY)
}

/// Why the sender cannot start.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the delivery HTTP client: {0}")]
pub struct SenderError(String);

impl Sender {
    /// A sender for `settings`, recording outcomes through `writer`.
    pub fn new(
        settings: &DeliverySettings,
        writer: Writer,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, SenderError> {
        let client = reqwest::Client::builder()
            .timeout(settings.request_timeout)
            .connect_timeout(settings.request_timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("railyard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SenderError(e.to_string()))?;
        Ok(Self {
            client,
            secret: settings.signing_secret.clone(),
            clock,
            writer,
            slots: Arc::new(Semaphore::new(settings.max_concurrent.max(1))),
            request_ms: i64::try_from(settings.request_timeout.as_millis()).unwrap_or(i64::MAX),
        })
    }

    /// Runs until shutdown: each attempt waits for a slot, then is sent in a task
    /// of its own. One that could no longer finish before its deadline (on the
    /// server's clock) is dropped; its deadline timer retries it.
    pub fn spawn(self, mut jobs: mpsc::Receiver<Job>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
        let me = Arc::new(self);
        tokio::spawn(async move {
            loop {
                let job = tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    job = jobs.recv() => match job { Some(j) => j, None => break },
                };
                let permit = tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    p = me.slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                };
                if me.clock.now_ms().saturating_add(me.request_ms) > job.deadline_ms {
                    tracing::warn!(run_id = %job.attempt.run_id, attempt = job.attempt.attempt, "delivery attempt waited too long for a slot; left to its deadline");
                    continue;
                }
                let me = me.clone();
                tokio::spawn(async move {
                    me.deliver(job).await;
                    drop(permit);
                });
            }
        })
    }

    async fn deliver(&self, job: Job) {
        let a = &job.attempt;
        let target = a.target.name();
        let outcome = self.send(&job).await;
        match &outcome {
            AttemptOutcome::Delivered { http_status } => {
                tracing::info!(run_id = %a.run_id, target, attempt = a.attempt, http_status, "result delivered")
            }
            AttemptOutcome::Failed { error, transient } => {
                tracing::warn!(run_id = %a.run_id, target, attempt = a.attempt, error, transient, "result delivery attempt failed")
            }
        }
        let cmd = RecordDelivery {
            ns: a.namespace.clone(),
            run_id: a.run_id.clone(),
            target,
            attempt: a.attempt,
            outcome,
        };
        if let Err(e) = self.writer.record_delivery(cmd).await {
            tracing::warn!(run_id = %a.run_id, attempt = a.attempt, error = %e, "could not record a delivery outcome; its deadline retries it");
        }
    }

    async fn send(&self, job: &Job) -> AttemptOutcome {
        let Some(secret) = &self.secret else {
            return AttemptOutcome::Failed {
                error: "this server has no delivery signing secret (delivery.signing_secret, or \
                        RAILYARD_DELIVERY_SIGNING_SECRET)"
                    .into(),
                transient: true,
            };
        };
        let a = &job.attempt;
        let t = self.clock.now_ms().div_euclid(1000);
        let request = self
            .client
            .post(&a.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, sign(secret, t, &job.body))
            .header(
                "railyard-delivery-id",
                format!("{}/{}/{}", a.namespace, a.run_id, a.target.name()),
            )
            .header("railyard-delivery-attempt", a.attempt.to_string())
            .body(job.body.clone());
        let mut resp = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                return AttemptOutcome::Failed {
                    error: bounded(error_chain(&e.without_url())),
                    transient: true,
                };
            }
        };
        let status = resp.status().as_u16();
        // Read a bounded part of the answer so the connection ends cleanly; its
        // content is not used.
        let mut read = 0usize;
        while read < MAX_ANSWER_BYTES {
            match resp.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        if (200..300).contains(&status) {
            AttemptOutcome::Delivered { http_status: status }
        } else {
            AttemptOutcome::Failed {
                error: format!("HTTP {status}"),
                transient: is_transient_http_status(status),
            }
        }
    }
}

/// reqwest's top-level message hides the cause; keep the chain. A cause whose text
/// the message already ends with is not repeated: hyper's and std's errors often
/// print their source in their own message ("tcp connect error: X", then "X").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !msg.ends_with(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

fn bounded(s: String) -> String {
    if s.len() <= MAX_ERROR_BYTES {
        return s;
    }
    railyard_model::text::prefix(&s, MAX_ERROR_BYTES).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that prints its cause in its own message, as hyper's connect error does.
    #[derive(Debug)]
    struct Wrapping(std::io::Error);

    impl std::fmt::Display for Wrapping {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "tcp connect error: {}", self.0)
        }
    }

    impl std::error::Error for Wrapping {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Outer(#[source] Wrapping);

    #[test]
    fn an_error_chain_names_each_cause_once() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = Outer(Wrapping(refused));
        assert_eq!(
            error_chain(&e),
            "client error (Connect): tcp connect error: Connection refused"
        );
    }
}
