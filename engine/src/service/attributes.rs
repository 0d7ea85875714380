//! Search attributes (`railyard_model::attributes`) at the service layer: a
//! namespace's declarations (`Admin.AddSearchAttribute`, `ListSearchAttributes`,
//! `RemoveSearchAttribute`, an admin key of the namespace), and a step setting its
//! run's attributes mid-step (`Tasks.UpsertSearchAttributes`, under the step's
//! lease). Starts and completions carry theirs to the writer as text, read there by
//! the declarations in the same transaction. The spec is
//! `docs/search-and-queries.md`.

use railyard_model::Rejection;
use std::collections::BTreeMap;

use railyard_model::query::{AttributeTypes, ValueType};
use railyard_model::token::TokenClaims;

use super::Core;
use super::caller::{self, Caller, Credentials};
use super::namespaces::admin;
use crate::error::ApiError;
use crate::writer::{ChangeAttribute, UpsertAttributes};

/// The search attributes `ns` declares (none for a namespace that is gone).
pub fn declared(core: &Core, ns: &str) -> Result<AttributeTypes, ApiError> {
    Ok(core
        .store
        .namespace(ns)?
        .map(|n| n.attributes)
        .unwrap_or_default())
}

/// Declares `name` of type `type_name` in namespace `ns` (again with the same type:
/// no change). Answers the namespace's declarations.
pub async fn add(
    core: &Core,
    credentials: &Credentials,
    ns: &str,
    name: &str,
    type_name: &str,
) -> Result<AttributeTypes, ApiError> {
    let ns = caller::namespace_name(ns);
    let principal = admin(core, credentials, ns)?;
    let ty = ValueType::parse(type_name).ok_or_else(|| {
        ApiError::field(
            "type",
            format!(
                "{} is not a type: keyword, text, int, double, bool, datetime or keyword_list",
                railyard_model::echo(type_name)
            ),
        )
    })?;
    railyard_model::attributes::check_name(name).map_err(|e| ApiError::field("name", e))?;
    let decl = core
        .writer
        .call(ChangeAttribute {
            namespace: ns.to_string(),
            name: name.to_string(),
            declare: Some(ty),
        })
        .await?;
    tracing::info!(namespace = %ns, attribute = %name, r#type = ty.name(), by = ?principal, "search attribute declared");
    Ok(decl)
}

/// Removes the declaration of `name` from namespace `ns`; runs keep their values.
pub async fn remove(
    core: &Core,
    credentials: &Credentials,
    ns: &str,
    name: &str,
) -> Result<AttributeTypes, ApiError> {
    let ns = caller::namespace_name(ns);
    let principal = admin(core, credentials, ns)?;
    let decl = core
        .writer
        .call(ChangeAttribute {
            namespace: ns.to_string(),
            name: name.to_string(),
            declare: None,
        })
        .await?;
    tracing::info!(namespace = %ns, attribute = %railyard_model::echo(name), by = ?principal, "search attribute removed");
    Ok(decl)
}

/// The declarations of namespace `ns`.
pub fn list(core: &Core, credentials: &Credentials, ns: &str) -> Result<AttributeTypes, ApiError> {
    let ns = caller::namespace_name(ns);
    admin(core, credentials, ns)?;
    core.store.namespace(ns)?.map(|n| n.attributes).ok_or_else(|| {
        ApiError::Rejected(Rejection::NotFound(format!(
            "namespace {:?} does not exist",
            caller::short(ns)
        )))
    })
}

/// Sets attributes of the run whose step `claims` leases, mid-step. Answers how
/// many changed.
pub async fn upsert(
    core: &Core,
    caller: &Caller,
    claims: TokenClaims,
    attributes: BTreeMap<String, String>,
) -> Result<usize, ApiError> {
    let (run_id, step) = (claims.run_id.clone(), claims.step.clone());
    let changed = core
        .writer
        .call(UpsertAttributes {
            claims,
            identity: caller.identity.clone(),
            attributes,
        })
        .await?;
    tracing::info!(%run_id, %step, changed, "search attributes upserted");
    Ok(changed)
}
