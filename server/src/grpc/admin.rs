//! `railyard.v1.Admin`: API keys. Each handler converts its request to a
//! [`railyard_engine::service::keys`] call and the answer back.

use super::status;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use railyard_proto::v1::{self, admin_server::Admin};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::*;
use railyard_engine::service::export::{self, ExportPiece};
use railyard_engine::service::{attributes, flow, keys, namespaces, subscriptions};
use railyard_model::auth::{ApiKey, Role};
use railyard_model::namespace::{Namespace, NamespaceChange, Subscription};

type ExportStream = Pin<Box<dyn Stream<Item = Result<v1::ExportStoreChunk, Status>> + Send>>;

/// A piece of the export on the wire.
fn export_chunk(piece: ExportPiece) -> v1::ExportStoreChunk {
    match piece {
        ExportPiece::Bytes(data) => v1::ExportStoreChunk { data, summary: None },
        ExportPiece::Done(s) => v1::ExportStoreChunk {
            data: Vec::new(),
            summary: Some(v1::ExportStoreSummary {
                source_backend: s.source_backend,
                source_layout: s.source_layout,
                rows: s.rows,
                value_bytes: s.value_bytes,
                dump_bytes: s.dump_bytes,
                sha256: s.sha256,
                tables: s
                    .tables
                    .into_iter()
                    .map(|(name, n)| {
                        (
                            name,
                            v1::ExportTableCount {
                                rows: n.rows,
                                bytes: n.bytes,
                            },
                        )
                    })
                    .collect(),
            }),
        },
    }
}

/// The `Admin` service.
pub struct AdminService {
    pub core: Arc<Core>,
}

fn role_to_proto(r: Role) -> v1::ApiKeyRole {
    match r {
        Role::Worker => v1::ApiKeyRole::Worker,
        Role::Client => v1::ApiKeyRole::Client,
        Role::Developer => v1::ApiKeyRole::Developer,
        Role::Admin => v1::ApiKeyRole::Admin,
    }
}

fn role_from_proto(value: i32) -> Result<Option<Role>, ApiError> {
    match v1::ApiKeyRole::try_from(value) {
        Ok(v1::ApiKeyRole::Unspecified) => Ok(None),
        Ok(v1::ApiKeyRole::Worker) => Ok(Some(Role::Worker)),
        Ok(v1::ApiKeyRole::Client) => Ok(Some(Role::Client)),
        Ok(v1::ApiKeyRole::Developer) => Ok(Some(Role::Developer)),
        Ok(v1::ApiKeyRole::Admin) => Ok(Some(Role::Admin)),
        Err(_) => Err(ApiError::field("role", format!("unknown value {value}"))),
    }
}

/// A stored key on the wire: never its secret or hash.
pub fn key_info(k: &ApiKey) -> v1::ApiKeyInfo {
    v1::ApiKeyInfo {
        key_id: k.key_id.clone(),
        namespace: k.namespace.clone(),
        role: role_to_proto(k.role) as i32,
        task_queues: k.queues.clone(),
        create_time_unix_ms: k.created_ms,
        expire_time_unix_ms: k.expires_ms.unwrap_or(0),
        revoke_time_unix_ms: k.revoked_ms.unwrap_or(0),
        created_by: k.created_by.clone(),
        description: k.description.clone(),
    }
}

fn namespace_info(ns: &Namespace) -> v1::NamespaceInfo {
    v1::NamespaceInfo {
        name: ns.name.clone(),
        description: ns.description.clone(),
        create_time_unix_ms: ns.created_ms,
        update_time_unix_ms: ns.updated_ms,
        retention_seconds: ns.retention_ms / 1000,
        limits: Some(v1::NamespaceLimits {
            max_open_runs: ns.limits.max_open_runs,
            max_starts_per_second: ns.limits.max_starts_per_second,
            max_pending_signals: ns.limits.max_pending_signals,
        }),
        subscriptions: ns.subscriptions.iter().map(subscription_info).collect(),
        principles: ns.principles.as_ref().map(|p| p.text.clone()).unwrap_or_default(),
        principles_mode: ns
            .principles
            .as_ref()
            .map(|p| p.mode.name().to_string())
            .unwrap_or_default(),
        search_attributes: declarations(&ns.attributes),
    }
}

fn declarations(d: &railyard_model::query::AttributeTypes) -> Vec<v1::SearchAttributeDeclaration> {
    d.iter()
        .map(|(name, ty)| v1::SearchAttributeDeclaration {
            name: name.clone(),
            r#type: ty.name().to_string(),
        })
        .collect()
}

/// A namespace's new principles, checked by field.
fn principles_layer(
    text: Option<String>,
    mode: &str,
) -> Result<Option<railyard_model::principles::Layer>, ApiError> {
    use railyard_model::principles::{Layer, Mode, check_text};
    let mode = match mode {
        "" | "extend" => Mode::Extend,
        "replace" => Mode::Replace,
        other => {
            return Err(ApiError::field(
                "principles_mode",
                format!("must be extend or replace, got {}", railyard_model::echo(other)),
            ));
        }
    };
    let Some(text) = text else { return Ok(None) };
    check_text(&text).map_err(|e| ApiError::field("principles", e))?;
    Ok(Some(Layer { text, mode }))
}

/// Retention in seconds on the wire, in ms here; refused when it cannot be.
fn retention_ms(seconds: Option<i64>) -> Result<Option<i64>, ApiError> {
    seconds
        .map(|s| {
            if s < 0 {
                return Err(ApiError::field("retention_seconds", "must not be negative"));
            }
            s.checked_mul(1000)
                .ok_or_else(|| ApiError::field("retention_seconds", format!("{s} s is too long")))
        })
        .transpose()
}

fn subscription_info(s: &Subscription) -> v1::Subscription {
    v1::Subscription {
        id: s.id.clone(),
        url: s.url.clone(),
        workflows: s.workflows.clone(),
        outcomes: s.outcomes.iter().map(|o| status_to_proto(*o) as i32).collect(),
        create_time_unix_ms: s.created_ms,
        events: s.events.clone(),
    }
}

fn subscription_from_proto(s: v1::Subscription) -> Result<Subscription, ApiError> {
    let mut outcomes = Vec::with_capacity(s.outcomes.len().min(8));
    for (i, o) in s.outcomes.iter().enumerate() {
        match status_from_proto(*o) {
            Ok(Some(st)) => outcomes.push(st),
            _ => {
                return Err(ApiError::field(
                    &format!("subscription.outcomes[{i}]"),
                    format!("{o} is not a run status"),
                ));
            }
        }
        if outcomes.len() > 8 {
            return Err(ApiError::field(
                "subscription.outcomes",
                "lists more than the 5 closed statuses",
            ));
        }
    }
    if s.events.len() > railyard_model::namespace::EVENT_KINDS.len() {
        return Err(ApiError::field(
            "subscription.events",
            "lists more than the event kinds there are",
        ));
    }
    for (i, e) in s.events.iter().enumerate() {
        if !railyard_model::namespace::EVENT_KINDS.contains(&e.as_str()) {
            return Err(ApiError::field(
                &format!("subscription.events[{i}]"),
                format!(
                    "{} is not an event kind (run.closed, issue.reported)",
                    railyard_model::echo(e)
                ),
            ));
        }
    }
    Ok(Subscription {
        id: s.id,
        url: s.url,
        workflows: s.workflows,
        outcomes,
        created_ms: 0,
        events: s.events,
    })
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn subscribe_namespace(
        &self,
        req: Request<v1::SubscribeNamespaceRequest>,
    ) -> Result<Response<v1::SubscribeNamespaceResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let sub = r
            .subscription
            .ok_or_else(|| ApiError::field("subscription", "is required"))
            .map_err(status)?;
        let sub = subscription_from_proto(sub).map_err(status)?;
        let ns = subscriptions::subscribe(&self.core, &credentials(&metadata), &r.namespace, sub)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::SubscribeNamespaceResponse {
            namespace: Some(namespace_info(&ns)),
        }))
    }

    async fn unsubscribe_namespace(
        &self,
        req: Request<v1::UnsubscribeNamespaceRequest>,
    ) -> Result<Response<v1::UnsubscribeNamespaceResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let ns = subscriptions::unsubscribe(
            &self.core,
            &credentials(&metadata),
            &r.namespace,
            &r.subscription_id,
        )
        .await
        .map_err(status)?;
        Ok(Response::new(v1::UnsubscribeNamespaceResponse {
            namespace: Some(namespace_info(&ns)),
        }))
    }

    async fn create_namespace(
        &self,
        req: Request<v1::CreateNamespaceRequest>,
    ) -> Result<Response<v1::CreateNamespaceResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let settings = NamespaceChange {
            description: Some(r.description),
            retention_ms: retention_ms(r.retention_seconds).map_err(status)?,
            max_open_runs: r.max_open_runs,
            max_starts_per_second: r.max_starts_per_second,
            max_pending_signals: r.max_pending_signals,
            principles: None,
        };
        let ns = namespaces::create(&self.core, &credentials(&metadata), &r.name, settings)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::CreateNamespaceResponse {
            namespace: Some(namespace_info(&ns)),
        }))
    }

    async fn add_search_attribute(
        &self,
        req: Request<v1::AddSearchAttributeRequest>,
    ) -> Result<Response<v1::AddSearchAttributeResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let d = attributes::add(
            &self.core,
            &credentials(&metadata),
            &r.namespace,
            &r.name,
            &r.r#type,
        )
        .await
        .map_err(status)?;
        Ok(Response::new(v1::AddSearchAttributeResponse {
            search_attributes: declarations(&d),
        }))
    }

    async fn list_search_attributes(
        &self,
        req: Request<v1::ListSearchAttributesRequest>,
    ) -> Result<Response<v1::ListSearchAttributesResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let d = attributes::list(&self.core, &credentials(&metadata), &r.namespace).map_err(status)?;
        Ok(Response::new(v1::ListSearchAttributesResponse {
            search_attributes: declarations(&d),
        }))
    }

    async fn remove_search_attribute(
        &self,
        req: Request<v1::RemoveSearchAttributeRequest>,
    ) -> Result<Response<v1::RemoveSearchAttributeResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let d = attributes::remove(&self.core, &credentials(&metadata), &r.namespace, &r.name)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::RemoveSearchAttributeResponse {
            search_attributes: declarations(&d),
        }))
    }

    async fn set_key_rule(
        &self,
        req: Request<v1::SetKeyRuleRequest>,
    ) -> Result<Response<v1::SetKeyRuleResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let rule = r.rule.unwrap_or_default();
        let rules = flow::set(
            &self.core,
            &credentials(&metadata),
            &r.namespace,
            flow::RuleRequest {
                key: rule.key,
                concurrency: rule.concurrency,
                weight: rule.weight,
                requests_per_minute: rule.requests_per_minute,
                tokens_per_minute: rule.tokens_per_minute,
            },
        )
        .await
        .map_err(status)?;
        Ok(Response::new(v1::SetKeyRuleResponse {
            rules: key_rules(&self.core, &r.namespace, &rules),
        }))
    }

    async fn list_key_rules(
        &self,
        req: Request<v1::ListKeyRulesRequest>,
    ) -> Result<Response<v1::ListKeyRulesResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let rules = flow::list(&self.core, &credentials(&metadata), &r.namespace).map_err(status)?;
        Ok(Response::new(v1::ListKeyRulesResponse {
            rules: key_rules(&self.core, &r.namespace, &rules),
        }))
    }

    async fn remove_key_rule(
        &self,
        req: Request<v1::RemoveKeyRuleRequest>,
    ) -> Result<Response<v1::RemoveKeyRuleResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let rules = flow::remove(&self.core, &credentials(&metadata), &r.namespace, &r.key)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::RemoveKeyRuleResponse {
            rules: key_rules(&self.core, &r.namespace, &rules),
        }))
    }

    async fn describe_namespace(
        &self,
        req: Request<v1::DescribeNamespaceRequest>,
    ) -> Result<Response<v1::DescribeNamespaceResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let ns = namespaces::describe(&self.core, &credentials(&metadata), &r.name).map_err(status)?;
        Ok(Response::new(v1::DescribeNamespaceResponse {
            namespace: Some(namespace_info(&ns)),
        }))
    }

    async fn list_namespaces(
        &self,
        req: Request<v1::ListNamespacesRequest>,
    ) -> Result<Response<v1::ListNamespacesResponse>, Status> {
        let (metadata, _, _) = req.into_parts();
        let found = namespaces::list(&self.core, &credentials(&metadata)).map_err(status)?;
        Ok(Response::new(v1::ListNamespacesResponse {
            namespaces: found.iter().map(namespace_info).collect(),
        }))
    }

    async fn update_namespace(
        &self,
        req: Request<v1::UpdateNamespaceRequest>,
    ) -> Result<Response<v1::UpdateNamespaceResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let change = NamespaceChange {
            description: r.description,
            retention_ms: retention_ms(r.retention_seconds).map_err(status)?,
            max_open_runs: r.max_open_runs,
            max_starts_per_second: r.max_starts_per_second,
            max_pending_signals: r.max_pending_signals,
            principles: principles_layer(r.principles, &r.principles_mode).map_err(status)?,
        };
        let ns = namespaces::update(&self.core, &credentials(&metadata), &r.name, change)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::UpdateNamespaceResponse {
            namespace: Some(namespace_info(&ns)),
        }))
    }

    async fn delete_namespace(
        &self,
        req: Request<v1::DeleteNamespaceRequest>,
    ) -> Result<Response<v1::DeleteNamespaceResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        namespaces::delete(&self.core, &credentials(&metadata), &r.name)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::DeleteNamespaceResponse {}))
    }

    async fn create_api_key(
        &self,
        req: Request<v1::CreateApiKeyRequest>,
    ) -> Result<Response<v1::CreateApiKeyResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let create = keys::CreateKey {
            namespace: r.namespace,
            role: role_from_proto(r.role).map_err(status)?,
            queues: r.task_queues,
            expires_in_secs: r.expires_in_seconds,
            description: r.description,
        };
        let created = keys::create(&self.core, &credentials(&metadata), create)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::CreateApiKeyResponse {
            api_key: created.secret_key,
            key: Some(key_info(&created.key)),
        }))
    }

    async fn list_api_keys(
        &self,
        req: Request<v1::ListApiKeysRequest>,
    ) -> Result<Response<v1::ListApiKeysResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let list = keys::ListKeys {
            namespace: r.namespace,
            include_revoked: r.include_revoked,
            page_size: r.page_size,
            page_token: r.page_token,
        };
        let (found, next_page_token) =
            keys::list(&self.core, &credentials(&metadata), list).map_err(status)?;
        Ok(Response::new(v1::ListApiKeysResponse {
            keys: found.iter().map(key_info).collect(),
            next_page_token,
        }))
    }

    async fn revoke_api_key(
        &self,
        req: Request<v1::RevokeApiKeyRequest>,
    ) -> Result<Response<v1::RevokeApiKeyResponse>, Status> {
        let (metadata, _, r) = req.into_parts();
        let key = keys::revoke(&self.core, &credentials(&metadata), &r.key_id)
            .await
            .map_err(status)?;
        Ok(Response::new(v1::RevokeApiKeyResponse {
            key: Some(key_info(&key)),
        }))
    }

    type ExportStoreStream = ExportStream;

    async fn export_store(
        &self,
        req: Request<v1::ExportStoreRequest>,
    ) -> Result<Response<Self::ExportStoreStream>, Status> {
        let (metadata, _, _) = req.into_parts();
        let pieces = export::start(&self.core, &credentials(&metadata)).map_err(status)?;
        let stream = ReceiverStream::new(pieces).map(|p| p.map(export_chunk).map_err(status));
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A namespace's rules on the wire, each exact key with its runs holding a slot.
fn key_rules(
    core: &railyard_engine::service::Core,
    ns: &str,
    rules: &railyard_model::flow::KeyRules,
) -> Vec<v1::KeyRule> {
    rules
        .iter()
        .map(|(key, r)| v1::KeyRule {
            key: key.clone(),
            concurrency: r.concurrency.map(i64::from).unwrap_or(0),
            weight: r.weight.map(i64::from).unwrap_or(0),
            requests_per_minute: r.requests_per_minute.map(|v| v as i64).unwrap_or(0),
            tokens_per_minute: r.tokens_per_minute.map(|v| v as i64).unwrap_or(0),
            running: if key.ends_with('*') {
                0
            } else {
                flow::load(core, ns, key).running
            },
        })
        .collect()
}
