//! Namespaces: create, describe, list, update, delete (the `Admin` service).
//!
//! Creating, listing every one and deleting need a key whose role permits
//! [`Operation::ManageNamespaces`] (an admin) for `*`; describing and updating, an
//! admin key of the namespace. Each namespace has a retention (closed runs are
//! purged that long after they closed, by `crate::retention`) and limits (open
//! runs, starts per second, pending signals per run), checked by the writer where
//! every start and signal passes.

use super::Core;
use super::caller::{self, Credentials, Operation, Principal};
use crate::error::ApiError;
use railyard_model::Rejection;
use railyard_model::auth::ALL_NAMESPACES;
use railyard_model::limits::{self, check_len, check_name};
use railyard_model::namespace::{MAX_LIMIT, MAX_RETENTION_MS, MIN_RETENTION_MS, Namespace, NamespaceChange};

/// Authenticates the caller and checks it may manage namespace `scope`.
pub(super) fn admin(core: &Core, credentials: &Credentials, scope: &str) -> Result<Principal, ApiError> {
    let principal = caller::authenticate(core, credentials)?;
    caller::authorize(&principal, scope, Operation::ManageNamespaces)?;
    Ok(principal)
}

/// Checks every setting a create or update gives.
fn check_change(c: &NamespaceChange) -> Result<(), ApiError> {
    if let Some(d) = &c.description {
        check_len("description", d, limits::MESSAGE)?;
    }
    if let Some(r) = c.retention_ms
        && r != 0
        && !(MIN_RETENTION_MS..=MAX_RETENTION_MS).contains(&r)
    {
        return Err(ApiError::field(
            "retention_seconds",
            format!(
                "{} s is outside {} s to {} s (100 years); 0 keeps closed runs for good",
                r / 1000,
                MIN_RETENTION_MS / 1000,
                MAX_RETENTION_MS / 1000
            ),
        ));
    }
    for (field, value) in [
        ("max_open_runs", c.max_open_runs),
        ("max_starts_per_second", c.max_starts_per_second),
        ("max_pending_signals", c.max_pending_signals),
    ] {
        if let Some(v) = value
            && v > MAX_LIMIT
        {
            return Err(ApiError::field(
                field,
                format!("{v} is more than {MAX_LIMIT}; 0 means no limit"),
            ));
        }
    }
    Ok(())
}

/// Creates a namespace.
pub async fn create(
    core: &Core,
    credentials: &Credentials,
    name: &str,
    settings: NamespaceChange,
) -> Result<Namespace, ApiError> {
    let principal = admin(core, credentials, ALL_NAMESPACES)?;
    check_name("name", name)?;
    check_change(&settings)?;
    let ns = core
        .writer
        .call(crate::writer::CreateNamespace {
            name: name.to_string(),
            settings,
        })
        .await?;
    core.namespaces.insert(ns.name.clone());
    tracing::info!(namespace = %ns.name, by = ?principal, "namespace created");
    Ok(ns)
}

/// One namespace.
pub fn describe(core: &Core, credentials: &Credentials, name: &str) -> Result<Namespace, ApiError> {
    admin(core, credentials, caller::namespace_name(name))?;
    let name = caller::namespace_name(name);
    core.store.namespace(name)?.ok_or_else(|| {
        ApiError::Rejected(Rejection::NotFound(format!(
            "namespace {:?} does not exist",
            caller::short(name)
        )))
    })
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

/// Changes the settings a request gives of a namespace; the others stay. A new
/// limit holds from the next start or signal; a new retention from the next sweep
/// of the purge.
pub async fn update(
    core: &Core,
    credentials: &Credentials,
    name: &str,
    change: NamespaceChange,
) -> Result<Namespace, ApiError> {
    let name = caller::namespace_name(name);
    let principal = admin(core, credentials, name)?;
    check_change(&change)?;
    let ns = core
        .writer
        .call(crate::writer::UpdateNamespace {
            name: name.to_string(),
            change,
        })
        .await?;
    tracing::info!(
        namespace = %ns.name, retention_ms = ns.retention_ms, limits = ?ns.limits, by = ?principal,
        "namespace updated"
    );
    Ok(ns)
}

/// Deletes an empty namespace (no runs, no schedules) and revokes its keys;
/// `default` stays.
pub async fn delete(core: &Core, credentials: &Credentials, name: &str) -> Result<(), ApiError> {
    let principal = admin(core, credentials, ALL_NAMESPACES)?;
    check_name("name", name)?;
    // A start racing the deletion is refused by the start command itself, which
    // checks the namespace in its own transaction.
    core.writer
        .call(crate::writer::DeleteNamespace {
            name: name.to_string(),
        })
        .await?;
    core.namespaces.remove(name);
    tracing::info!(namespace = %name, by = ?principal, "namespace deleted");
    Ok(())
}
