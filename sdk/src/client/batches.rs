//! The `Batches` calls of [`Client`]: batch operations (start, describe, list,
//! stop). Each is safe to retry: a start names its batch id (one is made when the
//! request has none), and starting again with the id, action and query of an
//! existing batch answers that batch.

use railyard_proto::v1::{
    DescribeBatchRequest, DescribeBatchResponse, ListBatchesRequest, ListBatchesResponse, StartBatchRequest,
    StartBatchResponse, StopBatchRequest, StopBatchResponse,
};

use super::{Client, ClientError, stub};

impl Client {
    /// Starts a batch (or, with `dry_run`, answers what it would match).
    pub async fn start_batch(&self, mut req: StartBatchRequest) -> Result<StartBatchResponse, ClientError> {
        if req.batch_id.is_empty() && !req.dry_run {
            req.batch_id = uuid::Uuid::now_v7().to_string();
        }
        self.call(stub::Batches::start_batch, req).await
    }

    /// A batch's progress and the runs it skipped or failed on.
    pub async fn describe_batch(
        &self,
        namespace: &str,
        batch_id: &str,
    ) -> Result<DescribeBatchResponse, ClientError> {
        let req = DescribeBatchRequest {
            namespace: namespace.into(),
            batch_id: batch_id.into(),
        };
        self.call(stub::Batches::describe_batch, req).await
    }

    /// One page of a namespace's batches.
    pub async fn list_batches(&self, req: ListBatchesRequest) -> Result<ListBatchesResponse, ClientError> {
        self.call(stub::Batches::list_batches, req).await
    }

    /// Stops a batch; one already ended is answered as it is.
    pub async fn stop_batch(&self, req: StopBatchRequest) -> Result<StopBatchResponse, ClientError> {
        self.call(stub::Batches::stop_batch, req).await
    }
}
