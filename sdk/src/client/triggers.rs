//! The `Triggers` calls of [`Client`]: webhook triggers (create, describe, list,
//! update, delete). Each is safe to retry: a create that was applied before its
//! answer was lost answers `ALREADY_EXISTS`, reported as it is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use railyard_proto::v1::triggers_client::TriggersClient;
use railyard_proto::v1::{
    CreateTriggerRequest, DeleteTriggerRequest, DescribeTriggerRequest, ListTriggersRequest,
    ListTriggersResponse, TriggerInfo, UpdateTriggerRequest,
};
use tonic::Code;

use super::{Authed, Client, ClientError};

fn no_trigger() -> ClientError {
    ClientError::Other {
        code: Code::Internal,
        message: "the server's answer is missing the trigger".into(),
    }
}

impl Client {
    fn triggers(&self) -> TriggersClient<Authed> {
        TriggersClient::with_interceptor(self.channel.clone(), self.auth.clone())
            .max_decoding_message_size(railyard_proto::MAX_MESSAGE_BYTES)
    }

    /// Creates a trigger; answers it as stored.
    pub async fn create_trigger(&self, req: CreateTriggerRequest) -> Result<TriggerInfo, ClientError> {
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.triggers(), req.clone());
                async move { c.create_trigger(r).await }
            })
            .await?;
        resp.trigger.ok_or_else(no_trigger)
    }

    /// A trigger.
    pub async fn describe_trigger(
        &self,
        namespace: &str,
        trigger_id: &str,
    ) -> Result<TriggerInfo, ClientError> {
        let req = DescribeTriggerRequest {
            namespace: namespace.into(),
            trigger_id: trigger_id.into(),
        };
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.triggers(), req.clone());
                async move { c.describe_trigger(r).await }
            })
            .await?;
        resp.trigger.ok_or_else(no_trigger)
    }

    /// One page of a namespace's triggers.
    pub async fn list_triggers(&self, req: ListTriggersRequest) -> Result<ListTriggersResponse, ClientError> {
        self.retrying(Duration::ZERO, || {
            let (mut c, r) = (self.triggers(), req.clone());
            async move { c.list_triggers(r).await }
        })
        .await
    }

    /// Replaces a trigger's spec; answers it as stored.
    pub async fn update_trigger(&self, req: UpdateTriggerRequest) -> Result<TriggerInfo, ClientError> {
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.triggers(), req.clone());
                async move { c.update_trigger(r).await }
            })
            .await?;
        resp.trigger.ok_or_else(no_trigger)
    }

    /// Deletes a trigger. A retry that finds it gone after a try whose answer was
    /// lost counts as done.
    pub async fn delete_trigger(&self, req: DeleteTriggerRequest) -> Result<(), ClientError> {
        let retried = AtomicBool::new(false);
        let outcome = self
            .retrying_noting(Duration::ZERO, &retried, || {
                let (mut c, r) = (self.triggers(), req.clone());
                async move { c.delete_trigger(r).await }
            })
            .await;
        match outcome {
            Ok(_) => Ok(()),
            Err(ClientError::NotFound(_)) if retried.load(Ordering::Relaxed) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
