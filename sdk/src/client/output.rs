//! The live-output calls of [`Client`]: a worker appending its step's output chunks
//! (`Tasks.AppendStepOutput`), and a watcher following a run's output from an offset
//! (`History.WatchOutput`).

use railyard_proto::v1::{
    AppendStepOutputRequest, AppendStepOutputResponse, WatchOutputRequest, WatchOutputResponse,
};
use tonic::Status;

use super::{Client, ClientError};

impl Client {
    /// Appends chunks to the output of the step attempt the request's token leases.
    /// Tried once, never retried: a repeat after a lost answer would add the chunks
    /// twice, and output is for watching, so a failed batch is the caller's to drop.
    pub async fn append_step_output(
        &self,
        req: AppendStepOutputRequest,
    ) -> Result<AppendStepOutputResponse, ClientError> {
        let deadline = self.opts.request_timeout;
        let mut c = self.tasks();
        match tokio::time::timeout(deadline, c.append_step_output(req)).await {
            Ok(r) => r
                .map(tonic::Response::into_inner)
                .map_err(|status| ClientError::from_status(&self.url, status)),
            Err(_) => Err(ClientError::from_status(
                &self.url,
                Status::deadline_exceeded(format!("no answer within {deadline:?}")),
            )),
        }
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
        self.history()
            .watch_output(req)
            .await
            .map(|r| r.into_inner())
            .map_err(|s| ClientError::from_status(&self.url, s))
    }
}
