//! The sender: the task that makes each delivery's HTTP call, outside the writer.
//! Each call holds the slot its attempt started with (`delivery::slots`: at most
//! `max_concurrent` in all, and a share per target and per namespace); each has the
//! configured timeout, reads at most [`MAX_ANSWER_BYTES`] of the answer (then drops
//! it), follows no redirects, uses no proxy, connects only where
//! `delivery::destination` allows, and records its outcome through the writer
//! ([`RecordDelivery`]).
//!
//! History (which clients read) keeps an HTTP status as it is, and every failure to
//! get one as `delivery::UNREACHABLE`: telling "connection refused" from a DNS failure or a
//! refused destination would let a client key map networks. The cause is in the
//! server log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use railyard_model::retry::is_transient_http_status;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::delivery::destination::{Destinations, Resolver};
use crate::delivery::sign::{SIGNATURE_HEADER, sign};
use crate::delivery::{DeliverySettings, Job, QUEUE_CAPACITY, SigningSecret, UNREACHABLE};
use crate::writer::{RecordDelivery, Writer};
use railyard_model::run::AttemptOutcome;

/// Most bytes of a receiver's answer read (and discarded).
pub const MAX_ANSWER_BYTES: usize = 64 << 10;

/// Most bytes of an error logged.
const MAX_ERROR_BYTES: usize = 512;

/// Why an attempt got no HTTP status.
enum Failure {
    /// The server cannot sign (told to clients: it is the server's setting).
    NoSecret,
    /// No answer; the cause is for the log only.
    NoAnswer(String),
}

/// The queue the writer hands attempts to, and what reads it.
pub struct Sender {
    client: reqwest::Client,
    secret: Option<SigningSecret>,
    clock: Arc<dyn Clock>,
    writer: Writer,
    destinations: Arc<Destinations>,
}

/// The channel attempts go into (give its sending half to the writer's
/// [`crate::delivery::DeliveryHook`]) and its receiving half.
pub fn channel() -> (mpsc::Sender<Job>, mpsc::Receiver<Job>) {
    mpsc::channel(QUEUE_CAPACITY)
}

/// Why the sender cannot start.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the delivery HTTP client: {0}")]
pub struct SenderError(String);

impl Sender {
    /// A sender for `settings`, recording outcomes through `writer`; `own` are the
    /// server's listen addresses, never delivered to.
    pub fn new(
        settings: &DeliverySettings,
        writer: Writer,
        clock: Arc<dyn Clock>,
        own: Vec<SocketAddr>,
    ) -> Result<Self, SenderError> {
        let destinations = Arc::new(Destinations::new(settings.allow_networks.clone(), own));
        let client = reqwest::Client::builder()
            .timeout(settings.request_timeout)
            .connect_timeout(settings.request_timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would pick the address connected to: the check would be moot.
            .no_proxy()
            .dns_resolver(Resolver(destinations.clone()))
            .user_agent(concat!("railyard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SenderError(e.to_string()))?;
        Ok(Self {
            client,
            secret: settings.signing_secret.clone(),
            clock,
            writer,
            destinations,
        })
    }

    /// Runs until shutdown: each attempt is sent in a task of its own, holding the
    /// slot it started with until its outcome is recorded.
    pub fn spawn(self, mut jobs: mpsc::Receiver<Job>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
        let me = Arc::new(self);
        tokio::spawn(async move {
            loop {
                let job = tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break,
                    job = jobs.recv() => match job { Some(j) => j, None => break },
                };
                let me = me.clone();
                tokio::spawn(async move { me.deliver(job).await });
            }
        })
    }

    async fn deliver(&self, mut job: Job) {
        let slot = job.slot.take();
        let a = &job.attempt;
        let target = a.target.name();
        let outcome = match self.send(&job).await {
            Err(Failure::NoSecret) => AttemptOutcome::Failed {
                error: "this server has no delivery signing secret (delivery.signing_secret, or \
                        RAILYARD_DELIVERY_SIGNING_SECRET)"
                    .into(),
                transient: true,
            },
            Ok(status) if (200..300).contains(&status) => {
                tracing::info!(namespace = %a.namespace, run_id = %a.run_id, target, attempt = a.attempt, http_status = status, "result delivered");
                AttemptOutcome::Delivered { http_status: status }
            }
            Ok(status) => {
                let transient = is_transient_http_status(status);
                tracing::warn!(namespace = %a.namespace, run_id = %a.run_id, target, attempt = a.attempt, http_status = status, transient, "result delivery attempt failed");
                AttemptOutcome::Failed {
                    error: format!("HTTP {status}"),
                    transient,
                }
            }
            Err(Failure::NoAnswer(cause)) => {
                tracing::warn!(namespace = %a.namespace, run_id = %a.run_id, target, attempt = a.attempt, error = %cause, "result delivery attempt failed: no answer");
                AttemptOutcome::Failed {
                    error: UNREACHABLE.into(),
                    transient: true,
                }
            }
        };
        let cmd = RecordDelivery {
            ns: a.namespace.clone(),
            run_id: a.run_id.clone(),
            target,
            attempt: a.attempt,
            outcome,
        };
        if let Err(e) = self.writer.call(cmd).await {
            tracing::warn!(run_id = %a.run_id, attempt = a.attempt, error = %e, "could not record a delivery outcome; its deadline retries it");
        }
        drop(slot);
    }

    /// The receiver's HTTP status, or why there was none.
    async fn send(&self, job: &Job) -> Result<u16, Failure> {
        let Some(secret) = &self.secret else {
            return Err(Failure::NoSecret);
        };
        let a = &job.attempt;
        let url = reqwest::Url::parse(&a.url).map_err(|e| Failure::NoAnswer(format!("invalid URL: {e}")))?;
        self.destinations
            .check_url(&url)
            .await
            .map_err(|e| Failure::NoAnswer(e.to_string()))?;
        let t = self.clock.now_ms().div_euclid(1000);
        let request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, sign(secret, t, &job.body))
            .header(
                "railyard-delivery-id",
                format!("{}/{}/{}", a.namespace, a.run_id, a.target.name()),
            )
            .header("railyard-delivery-attempt", a.attempt.to_string())
            .body(job.body.clone());
        let mut resp = request
            .send()
            .await
            .map_err(|e| Failure::NoAnswer(bounded(error_chain(&e.without_url()))))?;
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
        Ok(status)
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
