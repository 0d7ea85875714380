//! The `Admin` calls of [`Client`]: API keys, namespaces and their settings,
//! subscriptions and search attributes, result redelivery, and the store's export.

use railyard_proto::v1::*;
use tonic::Code;

use super::{Client, ClientError, missing, stub};

impl Client {
    /// Creates an API key; the answer holds the whole key, shown this once. Tried
    /// once only: a retry after a lost answer would make a second key.
    pub async fn create_api_key(
        &self,
        req: CreateApiKeyRequest,
    ) -> Result<CreateApiKeyResponse, ClientError> {
        self.call_once(stub::Admin::create_api_key, req).await
    }

    /// The API keys the request asks for (never the keys themselves).
    pub async fn list_api_keys(&self, req: ListApiKeysRequest) -> Result<ListApiKeysResponse, ClientError> {
        self.call(stub::Admin::list_api_keys, req).await
    }

    /// Revokes a key (again is a no-op); answers the key as stored.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<ApiKeyInfo, ClientError> {
        let req = RevokeApiKeyRequest {
            key_id: key_id.into(),
        };
        let resp = self.call(stub::Admin::revoke_api_key, req).await?;
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
        let resp = self.call_once(stub::Admin::create_namespace, req).await?;
        resp.namespace.ok_or_else(missing)
    }

    /// A namespace's settings.
    pub async fn describe_namespace(&self, name: &str) -> Result<NamespaceInfo, ClientError> {
        let req = DescribeNamespaceRequest { name: name.into() };
        let resp = self.call(stub::Admin::describe_namespace, req).await?;
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
        let resp = self.call(stub::Admin::add_search_attribute, req).await?;
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
        let resp = self.call(stub::Admin::list_search_attributes, req).await?;
        Ok(resp.search_attributes)
    }

    /// Removes the declaration of search attribute `name` (runs keep their values).
    /// Tried once, within the request timeout: a repeat after a lost answer would be
    /// NOT_FOUND.
    pub async fn remove_search_attribute(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<railyard_proto::v1::SearchAttributeDeclaration>, ClientError> {
        let req = railyard_proto::v1::RemoveSearchAttributeRequest {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.call_once(stub::Admin::remove_search_attribute, req)
            .await
            .map(|r| r.search_attributes)
    }

    /// Sets a flow-control rule on a key of `namespace` (a concurrency limit, a
    /// fairness weight; 0 leaves one unset), replacing the key's rule. Answers the
    /// namespace's rules. Setting the same rule again changes nothing, so it is
    /// retried.
    pub async fn set_key_rule(
        &self,
        namespace: &str,
        rule: railyard_proto::v1::KeyRule,
    ) -> Result<Vec<railyard_proto::v1::KeyRule>, ClientError> {
        let req = railyard_proto::v1::SetKeyRuleRequest {
            namespace: namespace.into(),
            rule: Some(rule),
        };
        Ok(self.call(stub::Admin::set_key_rule, req).await?.rules)
    }

    /// The flow-control rules of `namespace`, each exact key with its runs holding
    /// a slot.
    pub async fn list_key_rules(
        &self,
        namespace: &str,
    ) -> Result<Vec<railyard_proto::v1::KeyRule>, ClientError> {
        let req = railyard_proto::v1::ListKeyRulesRequest {
            namespace: namespace.into(),
        };
        Ok(self.call(stub::Admin::list_key_rules, req).await?.rules)
    }

    /// Removes the rule on `key`. Tried once: a repeat after a lost answer would be
    /// NOT_FOUND.
    pub async fn remove_key_rule(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<Vec<railyard_proto::v1::KeyRule>, ClientError> {
        let req = railyard_proto::v1::RemoveKeyRuleRequest {
            namespace: namespace.into(),
            key: key.into(),
        };
        self.call_once(stub::Admin::remove_key_rule, req)
            .await
            .map(|r| r.rules)
    }

    /// Every namespace the client's key reaches.
    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceInfo>, ClientError> {
        let resp = self
            .call(stub::Admin::list_namespaces, ListNamespacesRequest {})
            .await?;
        Ok(resp.namespaces)
    }

    /// The whole store as a dump, read by the server (`Admin.ExportStore`): its
    /// chunks in order, the last carrying the summary. Not retried: a broken stream
    /// is a broken dump.
    pub async fn export_store(
        &self,
    ) -> Result<tonic::Streaming<railyard_proto::v1::ExportStoreChunk>, ClientError> {
        self.call_untimed(
            stub::Admin::export_store,
            railyard_proto::v1::ExportStoreRequest {},
        )
        .await
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
        let resp = self.call(stub::Admin::update_namespace, req).await?;
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
        let resp = self.call_once(stub::Admin::subscribe_namespace, req).await?;
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
        let resp = self.call_once(stub::Admin::unsubscribe_namespace, req).await?;
        resp.namespace.ok_or_else(missing)
    }

    /// Retries a closed run's failed result delivery; answers the targets requeued.
    /// Tried once: a retry after a lost answer would find nothing failed.
    pub async fn redeliver_result(&self, req: RedeliverResultRequest) -> Result<Vec<String>, ClientError> {
        let resp = self.call_once(stub::History::redeliver_result, req).await?;
        Ok(resp.targets)
    }

    /// Deletes an empty namespace and revokes its keys.
    pub async fn delete_namespace(&self, name: &str) -> Result<(), ClientError> {
        let req = DeleteNamespaceRequest { name: name.into() };
        self.call(stub::Admin::delete_namespace, req).await.map(drop)
    }
}
