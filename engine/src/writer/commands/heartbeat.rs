//! A worker's heartbeat: checkpoint (whole or appended), notes, acknowledged signals.

use super::*;
use railyard_model::checkpoint::{self as digest, BASE_MISMATCH, CheckpointDigest};
use railyard_model::run::{CheckpointUpdate, HeartbeatNote, StuckNote, Usage};

/// A heartbeat on the lease `claims` names.
#[derive(Debug)]
pub struct Heartbeat {
    pub claims: TokenClaims,
    pub identity: String,
    pub checkpoint: BeatCheckpoint,
    pub notes: Vec<HeartbeatNote>,
    /// The last signal event the worker has consumed.
    pub acked: u64,
    pub report: UsageReport,
}

/// The checkpoint a heartbeat carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum BeatCheckpoint {
    /// None: the stored one stays.
    #[default]
    None,
    /// The whole checkpoint, replacing the stored one.
    Full(Vec<u8>),
    /// Bytes to append to the stored checkpoint, which must be the base named.
    Append {
        base_len: u64,
        base_digest: CheckpointDigest,
        bytes: Vec<u8>,
    },
}

impl From<Vec<u8>> for BeatCheckpoint {
    /// Empty bytes are no checkpoint.
    fn from(bytes: Vec<u8>) -> Self {
        if bytes.is_empty() {
            Self::None
        } else {
            Self::Full(bytes)
        }
    }
}

/// What a heartbeat says of the agent: its token usage and signs of it being stuck.
#[derive(Debug, Clone, Default)]
pub struct UsageReport {
    /// The attempt's running total (none: not reported).
    pub usage: Option<Usage>,
    pub model: String,
    pub stuck: Vec<StuckNote>,
}

/// How an appending heartbeat's base compares with the stored checkpoint.
enum Base {
    /// What to write, and the stored checkpoint's (length, digest) after it.
    Write(CheckpointUpdate, Option<(u64, CheckpointDigest)>),
    /// Neither the base nor base + bytes: refused after the lease check.
    Stale { stored_len: u64 },
}

impl Heartbeat {
    fn base(cx: &Cx, claims: &TokenClaims, checkpoint: BeatCheckpoint) -> Result<Base, StorageError> {
        Ok(match checkpoint {
            BeatCheckpoint::None => Base::Write(CheckpointUpdate::Keep, None),
            BeatCheckpoint::Full(bytes) => {
                let after = (bytes.len() as u64, digest::full(&bytes));
                Base::Write(CheckpointUpdate::from(bytes), Some(after))
            }
            BeatCheckpoint::Append {
                base_len,
                base_digest,
                bytes,
            } => {
                // The base is the step in flight's (a run that is gone has none: the
                // lease check refuses it).
                let stored = match cx.load(&claims.run_key())? {
                    Some(run) => {
                        let at = cx.checkpoint_at(&run)?;
                        cx.checkpoint_base(&claims.run_key(), at)?
                    }
                    None => (0, digest::EMPTY_DIGEST),
                };
                let after = (
                    base_len + bytes.len() as u64,
                    digest::extend(&base_digest, &bytes),
                );
                if stored == (base_len, base_digest) {
                    Base::Write(CheckpointUpdate::Append(bytes), Some(after))
                } else if stored == after {
                    // A repeat of an append already applied (its answer was lost).
                    Base::Write(CheckpointUpdate::Keep, Some(after))
                } else {
                    Base::Stale { stored_len: stored.0 }
                }
            }
        })
    }
}

impl Apply for Heartbeat {
    type Output = HeartbeatReply;
    const NAME: &'static str = "heartbeat";

    fn apply(self, cx: &mut Cx) -> Result<HeartbeatReply, CommandError> {
        let Self {
            claims,
            identity,
            checkpoint,
            notes,
            acked,
            report,
        } = self;
        let (update, stored) = match Self::base(cx, &claims, checkpoint)? {
            Base::Write(update, stored) => (update, stored),
            Base::Stale { stored_len } => {
                // A lease that is gone is the answer that matters; else the base.
                let Some(run) = cx.load(&claims.run_key())? else {
                    return Err(super::super::cx::not_found(&claims.run_key()).into());
                };
                if let Err(refusal) = run.check_lease(&claims) {
                    return Err(Rejection::from(refusal).into());
                }
                return Err(Rejection::FailedPrecondition(format!(
                    "{BASE_MISMATCH}: the stored checkpoint is {stored_len} bytes with another \
                     digest; send the checkpoint whole"
                ))
                .into());
            }
        };
        cx.with_run(&claims.run_key(), |run, out| {
            let signals = run.heartbeat(&claims, &identity, update, notes, acked, out)?;
            let recorded = run.record_usage(&claims, report.usage, &report.model, report.stuck, out)?;
            Ok(HeartbeatReply {
                cancel_requested: run.cancel_requested,
                signals,
                pause_requested: run.paused,
                usage_added: recorded.added,
                workflow_id: run.workflow_id.clone(),
                budget_exceeded: recorded.budget_exceeded,
                checkpoint: stored,
            })
        })
    }
}
