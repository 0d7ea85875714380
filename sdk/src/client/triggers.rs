//! The `Triggers` calls of [`Client`]: webhook triggers (create, describe, list,
//! update, delete). Each is safe to retry: a create that was applied before its
//! answer was lost answers `ALREADY_EXISTS`, reported as it is.

use railyard_proto::v1::{
    CreateTriggerRequest, DeleteTriggerRequest, DescribeTriggerRequest, ListTriggersRequest,
    ListTriggersResponse, TriggerInfo, UpdateTriggerRequest,
};
use tonic::Code;

use super::{Client, ClientError, stub};

fn no_trigger() -> ClientError {
    ClientError::Other {
        code: Code::Internal,
        message: "the server's answer is missing the trigger".into(),
    }
}

impl Client {
    /// Creates a trigger; answers it as stored.
    pub async fn create_trigger(&self, req: CreateTriggerRequest) -> Result<TriggerInfo, ClientError> {
        let resp = self.call(stub::Triggers::create_trigger, req).await?;
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
        let resp = self.call(stub::Triggers::describe_trigger, req).await?;
        resp.trigger.ok_or_else(no_trigger)
    }

    /// One page of a namespace's triggers.
    pub async fn list_triggers(&self, req: ListTriggersRequest) -> Result<ListTriggersResponse, ClientError> {
        self.call(stub::Triggers::list_triggers, req).await
    }

    /// Replaces a trigger's spec; answers it as stored.
    pub async fn update_trigger(&self, req: UpdateTriggerRequest) -> Result<TriggerInfo, ClientError> {
        let resp = self.call(stub::Triggers::update_trigger, req).await?;
        resp.trigger.ok_or_else(no_trigger)
    }

    /// Deletes a trigger. A retry that finds it gone after a try whose answer was
    /// lost counts as done.
    pub async fn delete_trigger(&self, req: DeleteTriggerRequest) -> Result<(), ClientError> {
        self.call_delete(stub::Triggers::delete_trigger, req).await
    }
}
