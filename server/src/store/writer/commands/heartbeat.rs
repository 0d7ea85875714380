//! A worker's heartbeat: checkpoint, notes, acknowledged signals.

use super::*;

/// A heartbeat on the lease `claims` names.
#[derive(Debug)]
pub struct Heartbeat {
    pub claims: TokenClaims,
    pub identity: String,
    pub checkpoint: Vec<u8>,
    pub notes: Vec<(String, String)>,
    /// The last signal event the worker has consumed.
    pub acked: u64,
}

impl Apply for Heartbeat {
    type Output = HeartbeatReply;
    const NAME: &'static str = "heartbeat";

    fn apply(self, cx: &mut Cx) -> Result<Result<HeartbeatReply, ApiError>, StorageError> {
        let Self {
            claims,
            identity,
            checkpoint,
            notes,
            acked,
        } = self;
        cx.with_run(&claims.namespace, &claims.run_id, |run, out| {
            let signals = run.heartbeat(&claims, &identity, checkpoint, notes, acked, out)?;
            Ok(HeartbeatReply {
                cancel_requested: run.cancel_requested,
                signals,
                pause_requested: run.paused,
            })
        })
    }
}
