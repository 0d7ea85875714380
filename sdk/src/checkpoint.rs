//! Heartbeats that send only what a step's checkpoint gained: [`CheckpointSync`]
//! remembers what the server acknowledged, and a heartbeat given it
//! ([`crate::Heartbeat::sync`]) sends the new bytes as a `CheckpointAppend` on that
//! base when the checkpoint extends it, and whole otherwise (the first heartbeat, a
//! server that keeps no digests, a checkpoint rewritten or cut, a base the server
//! refused).
//!
//! Finding out whether a checkpoint extends the acknowledged one means comparing the
//! two, which costs the transcript at every heartbeat (a long agent's clients spent a
//! fifth of the machine in that `memcmp`). A caller that knows its checkpoint only
//! grows makes its sync [`CheckpointSync::growing`]: no comparison and no copy, only
//! the acknowledged length and digest.

use railyard_proto::checkpoint::{self as digest, BASE_MISMATCH, CheckpointDigest};
use railyard_proto::v1::{CheckpointAppend, HeartbeatStepTaskResponse, StepTask};

use crate::ClientError;

/// What the server has acknowledged of one step's checkpoint.
#[derive(Debug, Clone, Default)]
pub struct CheckpointSync {
    /// What the server last acknowledged; none: send whole.
    acked: Option<Acked>,
    /// The caller vouches that each checkpoint extends the one before it.
    grown: bool,
    /// What was sent, for tests and benchmarks.
    pub stats: CheckpointStats,
}

/// A checkpoint the server acknowledged.
#[derive(Debug, Clone)]
struct Acked {
    len: usize,
    digest: CheckpointDigest,
    /// Its bytes, to compare the next checkpoint with; none when the caller vouches
    /// for growth.
    copy: Option<Vec<u8>>,
}

/// Counts of how checkpoints were sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Heartbeats that sent the checkpoint whole.
    pub whole: u64,
    /// Heartbeats that sent an append.
    pub appends: u64,
    /// Appends the server refused for their base, each resent whole.
    pub refused: u64,
    /// Checkpoint bytes sent, whole or appended.
    pub bytes: u64,
}

/// How the next checkpoint goes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Send {
    /// Nothing new since the acknowledged one.
    Nothing,
    /// The whole checkpoint; its digest once stored.
    Whole(CheckpointDigest),
    /// An append; the digest once appended.
    Append(CheckpointAppend, CheckpointDigest),
}

impl CheckpointSync {
    /// Nothing acknowledged yet: the first checkpoint goes whole.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts from the checkpoint a leased task carries, when the server sent its
    /// digest: the first heartbeat can then append to it.
    pub fn from_task(task: &StepTask) -> Self {
        let acked = <CheckpointDigest>::try_from(task.checkpoint_digest.as_slice())
            .ok()
            .filter(|_| !task.checkpoint.is_empty())
            .map(|digest| Acked {
                len: task.checkpoint.len(),
                digest,
                copy: Some(task.checkpoint.clone()),
            });
        Self {
            acked,
            grown: false,
            stats: CheckpointStats::default(),
        }
    }

    /// For a caller whose checkpoint only grows at its end from one heartbeat to the
    /// next (an agent's transcript as JSON lines): the bytes past the acknowledged
    /// length are appended without comparing the rest with a copy, which would cost
    /// the whole transcript at every heartbeat, and no copy is kept. Such a caller
    /// calls [`CheckpointSync::reset`] before it rewrites or cuts its checkpoint, so
    /// that one goes whole.
    pub fn growing(mut self) -> Self {
        self.grown = true;
        if let Some(a) = &mut self.acked {
            a.copy = None;
        }
        self
    }

    /// Forgets the acknowledged base: the next checkpoint goes whole.
    pub fn reset(&mut self) {
        self.acked = None;
    }

    /// How `checkpoint` (non-empty) goes on the wire.
    pub(crate) fn plan(&self, checkpoint: &[u8]) -> Send {
        let extends = |a: &Acked| match &a.copy {
            _ if self.grown => checkpoint.len() >= a.len,
            Some(copy) => checkpoint.starts_with(copy),
            None => false,
        };
        match &self.acked {
            Some(a) if extends(a) => {
                if checkpoint.len() == a.len {
                    return Send::Nothing;
                }
                let bytes = checkpoint[a.len..].to_vec();
                let after = digest::extend(&a.digest, &bytes);
                Send::Append(
                    CheckpointAppend {
                        base_length: a.len as u64,
                        base_digest: a.digest.to_vec(),
                        bytes,
                    },
                    after,
                )
            }
            _ => Send::Whole(digest::full(checkpoint)),
        }
    }

    /// Takes the server's answer to a heartbeat that sent `checkpoint` expecting
    /// `expected` (`appended`: as an append to the acknowledged one, which `plan` found
    /// it extends): acknowledged when the server reports that digest; a server that
    /// reports none (an older one) gets whole checkpoints from then on. Unless the
    /// caller vouches for growth, the copy later checkpoints are compared with grows
    /// in place by what was appended: copying it whole at every heartbeat made a long step's heartbeats
    /// cost its transcript (a fresh multi-megabyte buffer, page faults and all, each
    /// turn).
    pub(crate) fn answered(
        &mut self,
        checkpoint: &[u8],
        expected: CheckpointDigest,
        appended: bool,
        resp: &HeartbeatStepTaskResponse,
    ) {
        let ok = resp.checkpoint_digest.as_slice() == expected.as_slice()
            && resp.checkpoint_length == checkpoint.len() as u64;
        let previous = self.acked.take().filter(|_| ok);
        if !ok {
            return;
        }
        let copy = (!self.grown).then(|| match previous.and_then(|a| a.copy) {
            Some(mut bytes) if appended && bytes.len() <= checkpoint.len() => {
                bytes.extend_from_slice(&checkpoint[bytes.len()..]);
                bytes
            }
            Some(mut bytes) => {
                bytes.clear();
                bytes.extend_from_slice(checkpoint);
                bytes
            }
            None => checkpoint.to_vec(),
        });
        self.acked = Some(Acked {
            len: checkpoint.len(),
            digest: expected,
            copy,
        });
    }
}

/// Whether an error is the server refusing an append's base.
pub(crate) fn is_base_mismatch(e: &ClientError) -> bool {
    matches!(e, ClientError::FailedPrecondition(m) if m.starts_with(BASE_MISMATCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_only_to_what_was_acknowledged() {
        let mut s = CheckpointSync::new();
        let Send::Whole(d1) = s.plan(b"ab") else {
            panic!("first goes whole")
        };
        let resp = |len: u64, d: CheckpointDigest| HeartbeatStepTaskResponse {
            checkpoint_length: len,
            checkpoint_digest: d.to_vec(),
            ..Default::default()
        };
        s.answered(b"ab", d1, false, &resp(2, d1));
        assert_eq!(s.plan(b"ab"), Send::Nothing);
        let Send::Append(a, d2) = s.plan(b"abcd") else {
            panic!("an extension appends")
        };
        assert_eq!((a.base_length, a.bytes.as_slice()), (2, &b"cd"[..]));
        assert_eq!(d2, digest::extend(&d1, b"cd"));
        // A checkpoint that does not extend the acknowledged one goes whole.
        assert!(matches!(s.plan(b"xbcd"), Send::Whole(_)));
        // The append acknowledged: the next one extends it.
        s.answered(b"abcd", d2, true, &resp(4, d2));
        let Send::Append(a, d3) = s.plan(b"abcdef") else {
            panic!("an extension appends")
        };
        assert_eq!((a.base_length, a.bytes.as_slice()), (4, &b"ef"[..]));
        // Sent whole (a rewrite), acknowledged: the buffer holds the rewrite.
        let Send::Whole(w) = s.plan(b"xy") else {
            panic!("a rewrite goes whole")
        };
        s.answered(b"xy", w, false, &resp(2, w));
        assert_eq!(s.plan(b"xy"), Send::Nothing);
        assert!(matches!(s.plan(b"xyz"), Send::Append(..)));
        // An older server reports no digest: whole from then on.
        s.answered(b"abcdef", d3, true, &HeartbeatStepTaskResponse::default());
        assert!(matches!(s.plan(b"abcde"), Send::Whole(_)));
    }

    #[test]
    fn a_growing_checkpoint_appends_without_a_copy() {
        let resp = |len: u64, d: CheckpointDigest| HeartbeatStepTaskResponse {
            checkpoint_length: len,
            checkpoint_digest: d.to_vec(),
            ..Default::default()
        };
        let mut s = CheckpointSync::new().growing();
        let Send::Whole(d1) = s.plan(b"ab") else {
            panic!("first goes whole")
        };
        s.answered(b"ab", d1, false, &resp(2, d1));
        assert!(s.acked.as_ref().is_some_and(|a| a.copy.is_none()));
        assert_eq!(s.plan(b"ab"), Send::Nothing);
        // Not compared: the caller vouched the first two bytes are as acknowledged.
        let Send::Append(a, d2) = s.plan(b"xbcd") else {
            panic!("a vouched extension appends")
        };
        assert_eq!((a.base_length, a.bytes.as_slice()), (2, &b"cd"[..]));
        assert_eq!(d2, digest::extend(&d1, b"cd"));
        s.answered(b"abcd", d2, true, &resp(4, d2));
        // Shorter than acknowledged: whole.
        assert!(matches!(s.plan(b"abc"), Send::Whole(_)));
        // A refused base (reset) sends the next whole.
        s.reset();
        assert!(matches!(s.plan(b"abcdef"), Send::Whole(_)));
    }
}
