//! A worker's heartbeat: checkpoint, notes, acknowledged signals.
//!
//! command: Heartbeat(Heartbeat)

use super::*;
use railyard_model::run::{StuckNote, Usage};

/// A heartbeat on the lease `claims` names.
#[derive(Debug)]
pub struct Heartbeat {
    pub claims: TokenClaims,
    pub identity: String,
    pub checkpoint: Vec<u8>,
    pub notes: Vec<(String, String)>,
    /// The last signal event the worker has consumed.
    pub acked: u64,
    pub report: UsageReport,
}

/// What a heartbeat says of the agent: its token usage and signs of it being stuck.
#[derive(Debug, Clone, Default)]
pub struct UsageReport {
    /// The attempt's running total (none: not reported).
    pub usage: Option<Usage>,
    pub model: String,
    pub stuck: Vec<StuckNote>,
}

impl Apply for Heartbeat {
    type Output = HeartbeatReply;
    const NAME: &'static str = "heartbeat";

    fn apply(self, cx: &mut Cx) -> Result<Result<HeartbeatReply, Rejection>, StorageError> {
        let Self {
            claims,
            identity,
            checkpoint,
            notes,
            acked,
            report,
        } = self;
        cx.with_run(&claims.namespace, &claims.run_id, |run, out| {
            let signals = run.heartbeat(&claims, &identity, checkpoint, notes, acked, out)?;
            let recorded = run.record_usage(&claims, report.usage, &report.model, report.stuck, out)?;
            Ok(HeartbeatReply {
                cancel_requested: run.cancel_requested,
                signals,
                pause_requested: run.paused,
                usage_added: recorded.added,
                workflow_id: run.workflow_id.clone(),
                budget_exceeded: recorded.budget_exceeded,
            })
        })
    }
}
