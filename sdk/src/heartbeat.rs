//! A leased step's heartbeat, built by [`StepWorker::heartbeat`] and sent by
//! [`Heartbeat::send`].

use std::borrow::Cow;

use railyard_proto::v1::{
    CoordinatorNote, HeartbeatStepTaskRequest, HeartbeatStepTaskResponse, StuckReport, TokenUsage,
};

use crate::checkpoint::{CheckpointSync, Send, is_base_mismatch};
use crate::{Client, ClientError, StepWorker};

/// One heartbeat of a leased step: extends the lease and, with what it was given,
/// stores the checkpoint, delivers notes, acknowledges signals and reports usage.
/// Only the task token is required; [`Heartbeat::send`] answers pending signals,
/// whether cancellation or a pause was requested, and what checkpoint the server holds.
///
/// ```no_run
/// # use railyard_sdk::{CheckpointSync, ClientError, StepWorker};
/// # async fn demo(worker: &StepWorker, token: &str, transcript: &[u8]) -> Result<(), ClientError> {
/// // Keeps the lease; nothing else.
/// worker.heartbeat(token).send().await?;
///
/// // The transcript, sent as what it gained since the last heartbeat.
/// let mut sync = CheckpointSync::new().growing();
/// let answer = worker.heartbeat(token).checkpoint(transcript).sync(&mut sync).send().await?;
/// if let Some(last) = answer.signals.last() {
///     worker.heartbeat(token).ack_signals(last.event_id).send().await?;
/// }
/// # Ok(()) }
/// ```
#[must_use = "a heartbeat does nothing until it is sent"]
pub struct Heartbeat<'a> {
    worker: &'a StepWorker,
    task_token: &'a str,
    checkpoint: Cow<'a, [u8]>,
    sync: Option<&'a mut CheckpointSync>,
    notes: Vec<CoordinatorNote>,
    acked_signal_event_id: u64,
    usage: Option<TokenUsage>,
    model: String,
    stuck: Vec<StuckReport>,
}

impl<'a> Heartbeat<'a> {
    pub(crate) fn new(worker: &'a StepWorker, task_token: &'a str) -> Self {
        Self {
            worker,
            task_token,
            checkpoint: Cow::Borrowed(&[]),
            sync: None,
            notes: Vec::new(),
            acked_signal_event_id: 0,
            usage: None,
            model: String::new(),
            stuck: Vec::new(),
        }
    }

    /// The checkpoint to store (empty: keep the stored one), sent whole unless
    /// [`Heartbeat::sync`] says what the server already holds.
    pub fn checkpoint(mut self, checkpoint: impl Into<Cow<'a, [u8]>>) -> Self {
        self.checkpoint = checkpoint.into();
        self
    }

    /// Sends the checkpoint as an append to what `sync` says the server acknowledged
    /// when it extends that, and whole otherwise; `sync` then records what the server
    /// acknowledged. A server that refuses the append's base (a heartbeat lost or
    /// reordered: `FAILED_PRECONDITION`, "checkpoint base mismatch") gets it whole at
    /// once; against an older server every checkpoint goes whole. With a `sync` made
    /// [`CheckpointSync::growing`], nothing is compared and no copy is kept.
    pub fn sync(mut self, sync: &'a mut CheckpointSync) -> Self {
        self.sync = Some(sync);
        self
    }

    /// Notes for the coordinator.
    pub fn notes(mut self, notes: Vec<CoordinatorNote>) -> Self {
        self.notes = notes;
        self
    }

    /// Acknowledges the signals up to and including event `event_id`: they are not
    /// delivered again.
    pub fn ack_signals(mut self, event_id: u64) -> Self {
        self.acked_signal_event_id = event_id;
        self
    }

    /// The attempt's token usage so far (cumulative) and the model it is from.
    pub fn usage(mut self, usage: TokenUsage, model: impl Into<String>) -> Self {
        self.usage = Some(usage);
        self.model = model.into();
        self
    }

    /// Signs of a stuck agent since the last heartbeat.
    pub fn stuck(mut self, stuck: Vec<StuckReport>) -> Self {
        self.stuck = stuck;
        self
    }

    /// Sends the heartbeat (retried while the server is unreachable).
    pub async fn send(self) -> Result<HeartbeatStepTaskResponse, ClientError> {
        let req = HeartbeatStepTaskRequest {
            task_token: self.task_token.into(),
            identity: self.worker.identity().into(),
            notes: self.notes,
            acked_signal_event_id: self.acked_signal_event_id,
            usage: self.usage,
            model: self.model,
            stuck: self.stuck,
            ..Default::default()
        };
        let client = self.worker.client();
        match self.sync {
            Some(sync) => appending(client, req, sync, &self.checkpoint).await,
            None => {
                let req = HeartbeatStepTaskRequest {
                    checkpoint: self.checkpoint.into_owned(),
                    ..req
                };
                client.heartbeat_step_task(req).await
            }
        }
    }
}

/// Sends `req` with `checkpoint` (empty: none) as an append on what `sync` holds,
/// or whole (see [`Heartbeat::sync`]).
async fn appending(
    client: &Client,
    mut req: HeartbeatStepTaskRequest,
    sync: &mut CheckpointSync,
    checkpoint: &[u8],
) -> Result<HeartbeatStepTaskResponse, ClientError> {
    let plan = if checkpoint.is_empty() {
        Send::Nothing
    } else {
        sync.plan(checkpoint)
    };
    let expected = match plan {
        Send::Nothing => return client.heartbeat_step_task(req).await,
        Send::Whole(d) => {
            req.checkpoint = checkpoint.to_vec();
            sync.stats.whole += 1;
            sync.stats.bytes += checkpoint.len() as u64;
            d
        }
        Send::Append(append, d) => {
            sync.stats.appends += 1;
            sync.stats.bytes += append.bytes.len() as u64;
            req.checkpoint_append = Some(append);
            d
        }
    };
    let appending = req.checkpoint_append.is_some();
    let resp = match client.heartbeat_step_task(req.clone()).await {
        Err(e) if appending && is_base_mismatch(&e) => {
            tracing::debug!(error = %e, "checkpoint append refused; sending it whole");
            sync.reset();
            sync.stats.refused += 1;
            sync.stats.whole += 1;
            sync.stats.bytes += checkpoint.len() as u64;
            req.checkpoint_append = None;
            req.checkpoint = checkpoint.to_vec();
            let whole = railyard_proto::checkpoint::full(checkpoint);
            let resp = client.heartbeat_step_task(req).await?;
            sync.answered(checkpoint, whole, false, &resp);
            return Ok(resp);
        }
        // Whether it was stored is unknown: the acknowledged base stays, so the next
        // append names it, and the server refuses it if this one was stored after all.
        Err(e) => return Err(e),
        Ok(resp) => resp,
    };
    sync.answered(checkpoint, expected, appending, &resp);
    Ok(resp)
}
