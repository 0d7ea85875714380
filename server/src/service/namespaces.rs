//! Namespaces: create, describe, list, update, delete (the `Admin` service).
//!
//! Creating, listing every one and deleting need a key whose role permits
//! [`Operation::ManageNamespaces`] (an admin) for `*`; describing and updating, an
//! admin key of the namespace. Retention and per-namespace limits are not built yet.

use super::Core;
use super::caller::{self, Credentials, Operation, Principal};
use super::limits::{self, check_len, check_name};
use crate::auth::ALL_NAMESPACES;
use crate::error::ApiError;
use crate::namespace::Namespace;

/// Authenticates the caller and checks it may manage namespace `scope`.
pub(super) fn admin(core: &Core, credentials: &Credentials, scope: &str) -> Result<Principal, ApiError> {
    let principal = caller::authenticate(core, credentials)?;
    caller::authorize(&principal, scope, Operation::ManageNamespaces)?;
    Ok(principal)
}

fn check_description(d: &str) -> Result<(), ApiError> {
    check_len("description", d, limits::MESSAGE)
}

/// Creates a namespace.
pub async fn create(
    core: &Core,
    credentials: &Credentials,
    name: &str,
    description: String,
) -> Result<Namespace, ApiError> {
    let principal = admin(core, credentials, ALL_NAMESPACES)?;
    check_name("name", name)?;
    check_description(&description)?;
    let ns = core
        .writer
        .create_namespace(name.to_string(), description)
        .await?;
    core.namespaces.insert(ns.name.clone());
    tracing::info!(namespace = %ns.name, by = ?principal, "namespace created");
    Ok(ns)
}

/// One namespace.
pub fn describe(core: &Core, credentials: &Credentials, name: &str) -> Result<Namespace, ApiError> {
    admin(core, credentials, caller::namespace_name(name))?;
    let name = caller::namespace_name(name);
    core.store
        .namespace(name)?
        .ok_or_else(|| ApiError::NotFound(format!("namespace {:?} does not exist", caller::short(name))))
}

/// Every namespace the caller's key reaches, by name.
pub fn list(core: &Core, credentials: &Credentials) -> Result<Vec<Namespace>, ApiError> {
    let principal = caller::authenticate(core, credentials)?;
    let scope = match &principal {
        Principal::Key(k) => k.namespace.clone(),
        _ => ALL_NAMESPACES.to_string(),
    };
    caller::authorize(&principal, &scope, Operation::ManageNamespaces)?;
    let mut out = Vec::new();
    for name in core.store.namespaces()? {
        if (scope == ALL_NAMESPACES || scope == name)
            && let Some(ns) = core.store.namespace(&name)?
        {
            out.push(ns);
        }
    }
    Ok(out)
}

/// Changes a namespace's description.
pub async fn update(
    core: &Core,
    credentials: &Credentials,
    name: &str,
    description: String,
) -> Result<Namespace, ApiError> {
    let name = caller::namespace_name(name);
    admin(core, credentials, name)?;
    check_description(&description)?;
    core.writer.update_namespace(name.to_string(), description).await
}

/// Deletes an empty namespace (no runs) and revokes its keys; `default` stays.
pub async fn delete(core: &Core, credentials: &Credentials, name: &str) -> Result<(), ApiError> {
    let principal = admin(core, credentials, ALL_NAMESPACES)?;
    check_name("name", name)?;
    // A start racing the deletion is refused by the start command itself, which
    // checks the namespace in its own transaction.
    core.writer.delete_namespace(name.to_string()).await?;
    core.namespaces.remove(name);
    tracing::info!(namespace = %name, by = ?principal, "namespace deleted");
    Ok(())
}
