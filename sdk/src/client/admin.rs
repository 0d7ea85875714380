//! The `Admin` calls of [`Client`]: API keys, namespaces and their settings,
//! subscriptions and search attributes, result redelivery, and the store's export.

use std::time::Duration;

use railyard_proto::v1::*;
use tonic::{Code, Status};

use super::{Client, ClientError, missing};

impl Client {
    /// Creates an API key; the answer holds the whole key, shown this once. Tried
    /// once only: a retry after a lost answer would make a second key.
    pub async fn create_api_key(
        &self,
        req: CreateApiKeyRequest,
    ) -> Result<CreateApiKeyResponse, ClientError> {
        let deadline = self.opts.request_timeout;
        match tokio::time::timeout(deadline, self.admin().create_api_key(req)).await {
            Ok(r) => r
                .map(tonic::Response::into_inner)
                .map_err(|s| ClientError::from_status(&self.url, s)),
            Err(_) => Err(ClientError::DeadlineExceeded(format!(
                "no answer within {deadline:?}"
            ))),
        }
    }

    pub async fn list_api_keys(&self, req: ListApiKeysRequest) -> Result<ListApiKeysResponse, ClientError> {
        self.retrying(Duration::ZERO, || {
            let (mut c, r) = (self.admin(), req.clone());
            async move { c.list_api_keys(r).await }
        })
        .await
    }

    /// Revokes a key (again is a no-op); answers the key as stored.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<ApiKeyInfo, ClientError> {
        let req = RevokeApiKeyRequest {
            key_id: key_id.into(),
        };
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.admin(), req.clone());
                async move { c.revoke_api_key(r).await }
            })
            .await?;
        resp.key.ok_or_else(|| ClientError::Other {
            code: Code::Internal,
            message: "the server answered without the key".into(),
        })
    }

    /// Creates a namespace (needs an admin key of every namespace, `*`), with the
    /// default retention and limits.
    pub async fn create_namespace(
        &self,
        name: &str,
        description: &str,
    ) -> Result<NamespaceInfo, ClientError> {
        self.create_namespace_with(CreateNamespaceRequest {
            name: name.into(),
            description: description.into(),
            ..Default::default()
        })
        .await
    }

    /// Creates a namespace with the settings `req` gives (retention, limits).
    pub async fn create_namespace_with(
        &self,
        req: CreateNamespaceRequest,
    ) -> Result<NamespaceInfo, ClientError> {
        // A retried create after a lost answer meets ALREADY_EXISTS: tried once.
        let deadline = self.opts.request_timeout;
        let resp = match tokio::time::timeout(deadline, self.admin().create_namespace(req)).await {
            Ok(r) => r
                .map(tonic::Response::into_inner)
                .map_err(|s| ClientError::from_status(&self.url, s))?,
            Err(_) => {
                return Err(ClientError::DeadlineExceeded(format!(
                    "no answer within {deadline:?}"
                )));
            }
        };
        resp.namespace.ok_or_else(missing)
    }

    pub async fn describe_namespace(&self, name: &str) -> Result<NamespaceInfo, ClientError> {
        let req = DescribeNamespaceRequest { name: name.into() };
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.admin(), req.clone());
                async move { c.describe_namespace(r).await }
            })
            .await?;
        resp.namespace.ok_or_else(missing)
    }

    /// Declares search attribute `name` of type `type_name` in `namespace`
    /// (`Admin.AddSearchAttribute`); answers the declarations. Retried: declaring
    /// again with the same type changes nothing.
    pub async fn add_search_attribute(
        &self,
        namespace: &str,
        name: &str,
        type_name: &str,
    ) -> Result<Vec<railyard_proto::v1::SearchAttributeDeclaration>, ClientError> {
        let req = railyard_proto::v1::AddSearchAttributeRequest {
            namespace: namespace.into(),
            name: name.into(),
            r#type: type_name.into(),
        };
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.admin(), req.clone());
                async move { c.add_search_attribute(r).await }
            })
            .await?;
        Ok(resp.search_attributes)
    }

    /// The search attributes `namespace` declares.
    pub async fn list_search_attributes(
        &self,
        namespace: &str,
    ) -> Result<Vec<railyard_proto::v1::SearchAttributeDeclaration>, ClientError> {
        let req = railyard_proto::v1::ListSearchAttributesRequest {
            namespace: namespace.into(),
        };
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.admin(), req.clone());
                async move { c.list_search_attributes(r).await }
            })
            .await?;
        Ok(resp.search_attributes)
    }

    /// Removes the declaration of search attribute `name` (runs keep their values).
    /// Tried once: a repeat after a lost answer would be NOT_FOUND.
    pub async fn remove_search_attribute(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<railyard_proto::v1::SearchAttributeDeclaration>, ClientError> {
        let req = railyard_proto::v1::RemoveSearchAttributeRequest {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.admin()
            .remove_search_attribute(req)
            .await
            .map(|r| r.into_inner().search_attributes)
            .map_err(|s| ClientError::from_status(&self.url, s))
    }

    /// Every namespace the client's key reaches.
    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceInfo>, ClientError> {
        let resp = self
            .retrying(Duration::ZERO, || {
                let mut c = self.admin();
                async move { c.list_namespaces(ListNamespacesRequest {}).await }
            })
            .await?;
        Ok(resp.namespaces)
    }

    /// The whole store as a dump, read by the server (`Admin.ExportStore`): its
    /// chunks in order, the last carrying the summary. Not retried: a broken stream
    /// is a broken dump.
    pub async fn export_store(
        &self,
    ) -> Result<tonic::Streaming<railyard_proto::v1::ExportStoreChunk>, ClientError> {
        self.admin()
            .export_store(railyard_proto::v1::ExportStoreRequest {})
            .await
            .map(|r| r.into_inner())
            .map_err(|s| ClientError::from_status(&self.url, s))
    }

    /// Changes a namespace's description.
    pub async fn update_namespace(
        &self,
        name: &str,
        description: &str,
    ) -> Result<NamespaceInfo, ClientError> {
        self.update_namespace_with(UpdateNamespaceRequest {
            name: name.into(),
            description: Some(description.into()),
            ..Default::default()
        })
        .await
    }

    /// Changes the settings `req` gives of a namespace (description, retention,
    /// limits); those it leaves unset stay.
    pub async fn update_namespace_with(
        &self,
        req: UpdateNamespaceRequest,
    ) -> Result<NamespaceInfo, ClientError> {
        let resp = self
            .retrying(Duration::ZERO, || {
                let (mut c, r) = (self.admin(), req.clone());
                async move { c.update_namespace(r).await }
            })
            .await?;
        resp.namespace.ok_or_else(missing)
    }

    /// Adds a notification subscription to a namespace (an admin key of it). Tried
    /// once: a retry after a lost answer would meet ALREADY_EXISTS.
    pub async fn subscribe_namespace(
        &self,
        namespace: &str,
        subscription: Subscription,
    ) -> Result<NamespaceInfo, ClientError> {
        let req = SubscribeNamespaceRequest {
            namespace: namespace.into(),
            subscription: Some(subscription),
        };
        let resp = self.once(self.admin().subscribe_namespace(req)).await?;
        resp.namespace.ok_or_else(missing)
    }

    /// Removes a namespace's notification subscription. Tried once.
    pub async fn unsubscribe_namespace(
        &self,
        namespace: &str,
        subscription_id: &str,
    ) -> Result<NamespaceInfo, ClientError> {
        let req = UnsubscribeNamespaceRequest {
            namespace: namespace.into(),
            subscription_id: subscription_id.into(),
        };
        let resp = self.once(self.admin().unsubscribe_namespace(req)).await?;
        resp.namespace.ok_or_else(missing)
    }

    /// Retries a closed run's failed result delivery; answers the targets requeued.
    /// Tried once: a retry after a lost answer would find nothing failed.
    pub async fn redeliver_result(&self, req: RedeliverResultRequest) -> Result<Vec<String>, ClientError> {
        let resp = self.once(self.history().redeliver_result(req)).await?;
        Ok(resp.targets)
    }

    /// One call, within the request timeout, never repeated.
    async fn once<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, ClientError> {
        let deadline = self.opts.request_timeout;
        match tokio::time::timeout(deadline, call).await {
            Ok(r) => r
                .map(tonic::Response::into_inner)
                .map_err(|s| ClientError::from_status(&self.url, s)),
            Err(_) => Err(ClientError::DeadlineExceeded(format!(
                "no answer within {deadline:?}"
            ))),
        }
    }

    /// Deletes an empty namespace and revokes its keys.
    pub async fn delete_namespace(&self, name: &str) -> Result<(), ClientError> {
        let req = DeleteNamespaceRequest { name: name.into() };
        self.retrying(Duration::ZERO, || {
            let (mut c, r) = (self.admin(), req.clone());
            async move { c.delete_namespace(r).await }
        })
        .await
        .map(drop)
    }
}
