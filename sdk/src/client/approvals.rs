//! The approval calls of [`Client`]: approve or reject the result a
//! `requireConfirmation` step holds. Retried while the server is unreachable; a
//! repeat of one that was applied before its answer was lost is refused
//! (`FAILED_PRECONDITION`: the run no longer awaits approval) and changes nothing.

use railyard_proto::v1::{ApproveStepRequest, RejectStepRequest};

use super::{Client, ClientError, stub};

impl Client {
    /// Approves the held result: the step completes with it.
    pub async fn approve_step(&self, req: ApproveStepRequest) -> Result<(), ClientError> {
        self.call(stub::History::approve_step, req).await.map(drop)
    }

    /// Rejects the held result with feedback: the step re-opens on the same transcript.
    pub async fn reject_step(&self, req: RejectStepRequest) -> Result<(), ClientError> {
        self.call(stub::History::reject_step, req).await.map(drop)
    }
}
