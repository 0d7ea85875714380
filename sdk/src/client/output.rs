//! The live-output calls of [`Client`]: a worker appending its step's output chunks
//! (`Tasks.AppendStepOutput`), and a watcher following a run's output from an offset
//! (`History.WatchOutput`).

use super::{Client, ClientError, stub};
use railyard_proto::v1::{
    AppendStepOutputRequest, AppendStepOutputResponse, WatchOutputRequest, WatchOutputResponse,
};

impl Client {
    /// Appends chunks to the output of the step attempt the request's token leases.
    /// Tried once, never retried: a repeat after a lost answer would add the chunks
    /// twice, and output is for watching, so a failed batch is the caller's to drop.
    pub async fn append_step_output(
        &self,
        req: AppendStepOutputRequest,
    ) -> Result<AppendStepOutputResponse, ClientError> {
        self.call_once(stub::Tasks::append_step_output, req).await
    }

    /// A live stream of a run's output from `from_offset` (0: from the start); it
    /// ends once the run is closed and its last chunk sent.
    pub async fn watch_output(
        &self,
        namespace: &str,
        run_id: &str,
        from_offset: u64,
    ) -> Result<tonic::Streaming<WatchOutputResponse>, ClientError> {
        self.watch_output_with(WatchOutputRequest {
            namespace: namespace.into(),
            run_id: run_id.into(),
            from_offset,
            from_end: 0,
        })
        .await
    }

    /// [`Client::watch_output`] with every field of the request (`from_end`: a tail).
    pub async fn watch_output_with(
        &self,
        req: WatchOutputRequest,
    ) -> Result<tonic::Streaming<WatchOutputResponse>, ClientError> {
        self.call_untimed(stub::History::watch_output, req).await
    }
}
