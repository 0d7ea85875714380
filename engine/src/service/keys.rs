//! API keys: creating, listing and revoking them (the `Admin` service), and the
//! first admin key of a server that starts with auth on ([`bootstrap`]).
//!
//! Every call needs a key whose role permits [`Operation::ManageApiKeys`] (an
//! admin) and that covers the namespace of the keys it touches; keys of every
//! namespace (`*`) are managed only by an admin of `*`, so no key can make a
//! key with more reach than its own. Nor one that lasts longer: a key made by an
//! expiring key expires no later ([`create`]), and revoking a key revokes every key
//! made from it (the writer's `RevokeApiKey`).

use railyard_model::Rejection;
use std::path::{Path, PathBuf};

use super::Core;
use super::caller::{self, Credentials, Operation, Principal};
use crate::error::ApiError;
use crate::writer::{WriteError, Writer};
use railyard_model::Millis;
use railyard_model::auth::{self, ALL_NAMESPACES, ApiKey, Role};
use railyard_model::limits::{self, check_count, check_len, check_name};
use railyard_store::{StorageError, Store};

/// The file a server with auth on writes its first admin key to, in its data directory.
pub const ADMIN_KEY_FILE: &str = "admin.key";
/// Most task queues one worker key may name.
pub const MAX_KEY_QUEUES: usize = 64;
/// Longest a key may be made to last: 100 years.
pub const MAX_EXPIRES_SECS: u64 = 100 * 365 * 24 * 3600;
/// Listing page size when the request names none, and the largest.
pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;

/// A key to create.
#[derive(Debug, Clone)]
pub struct CreateKey {
    /// Empty: `default`; `*`: every namespace.
    pub namespace: String,
    pub role: Option<Role>,
    pub queues: Vec<String>,
    /// 0: never expires.
    pub expires_in_secs: u64,
    pub description: String,
}

/// A created key: the whole key, to show this once, and what is stored.
pub struct CreatedKey {
    pub secret_key: String,
    pub key: ApiKey,
}

/// A listing of keys.
#[derive(Debug, Clone, Default)]
pub struct ListKeys {
    /// Empty: `default`; `*`: every namespace's keys.
    pub namespace: String,
    pub include_revoked: bool,
    pub page_size: u32,
    /// Empty, or the key id the last page ended at.
    pub page_token: String,
}

/// Who may manage the keys of namespace `ns` (`*` or an existing one).
fn key_admin(core: &Core, credentials: &Credentials, ns: &str) -> Result<Principal, ApiError> {
    let principal = caller::authenticate(core, credentials)?;
    let ns = caller::namespace_name(ns);
    caller::authorize(&principal, ns, Operation::ManageApiKeys)?;
    if ns != ALL_NAMESPACES {
        caller::existing_namespace(core, ns)?;
    }
    Ok(principal)
}

fn created_by(p: &Principal) -> String {
    match p {
        Principal::Key(k) => k.key_id.clone(),
        _ => "anonymous".to_string(),
    }
}

/// Creates a key; the answer holds the whole key, which is stored only as a hash.
pub async fn create(core: &Core, credentials: &Credentials, req: CreateKey) -> Result<CreatedKey, ApiError> {
    let principal = key_admin(core, credentials, &req.namespace)?;
    let role = req
        .role
        .ok_or_else(|| ApiError::field("role", "must be worker, client or admin"))?;
    check_count("task_queues", req.queues.len(), MAX_KEY_QUEUES)?;
    for (i, q) in req.queues.iter().enumerate() {
        check_name(&format!("task_queues[{i}]"), q)?;
    }
    if !req.queues.is_empty() && role != Role::Worker {
        return Err(ApiError::field(
            "task_queues",
            "only worker keys are limited to task queues",
        ));
    }
    check_len("description", &req.description, limits::MESSAGE)?;
    if req.expires_in_secs > MAX_EXPIRES_SECS {
        return Err(ApiError::field(
            "expires_in_seconds",
            format!("at most {MAX_EXPIRES_SECS} (100 years)"),
        ));
    }
    let now = core.clock.now_ms();
    let expires_ms = delegated_expiry(&principal, now, req.expires_in_secs)?;
    let new = generate()?;
    let mut queues = req.queues;
    queues.sort();
    queues.dedup();
    let key = ApiKey {
        key_id: new.key_id.clone(),
        namespace: caller::namespace_name(&req.namespace).to_string(),
        role,
        queues,
        hash: new.hash,
        created_ms: now,
        expires_ms,
        revoked_ms: None,
        created_by: created_by(&principal),
        description: req.description,
    };
    let key = core.writer.call(crate::writer::CreateApiKey { key }).await?;
    tracing::info!(key_id = %key.key_id, namespace = %key.namespace, role = key.role.name(), by = %key.created_by, "API key created");
    Ok(CreatedKey {
        secret_key: new.secret_key,
        key,
    })
}

/// When a key made now by `maker` with `expires_in_secs` (0: never) expires. A key
/// never outlives the key that makes it: with no expiry asked, it gets its maker's;
/// an expiry later than its maker's is refused, naming the field and the latest
/// allowed.
fn delegated_expiry(
    maker: &Principal,
    now: Millis,
    expires_in_secs: u64,
) -> Result<Option<Millis>, ApiError> {
    let asked = (expires_in_secs > 0).then(|| now.saturating_add(expires_in_secs as Millis * 1000));
    let Principal::Key(k) = maker else {
        return Ok(asked);
    };
    let Some(limit) = k.expires_ms else {
        return Ok(asked);
    };
    match asked {
        None => Ok(Some(limit)),
        Some(at) if at <= limit => Ok(Some(at)),
        Some(_) => Err(ApiError::field(
            "expires_in_seconds",
            format!(
                "at most {} here: a key may not outlive the key that makes it ({} expires at {})",
                (limit.saturating_sub(now) / 1000).max(0),
                k.key_id,
                caller::time(limit)
            ),
        )),
    }
}

/// Keys of a namespace (of every namespace for `*`), in key id order.
pub fn list(
    core: &Core,
    credentials: &Credentials,
    req: ListKeys,
) -> Result<(Vec<ApiKey>, String), ApiError> {
    key_admin(core, credentials, &req.namespace)?;
    if !req.page_token.is_empty() && !auth::is_key_id(&req.page_token) {
        return Err(ApiError::field("page_token", "not a token this server gave out"));
    }
    let ns = caller::namespace_name(&req.namespace);
    let limit = match req.page_size as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    };
    let (keys, next) = core.store.api_keys(&req.page_token, limit, |k| {
        (ns == ALL_NAMESPACES || k.namespace == ns) && (req.include_revoked || k.revoked_ms.is_none())
    })?;
    Ok((keys, next.unwrap_or_default()))
}

/// Revokes a key; a revoked key is refused from the next request on.
pub async fn revoke(core: &Core, credentials: &Credentials, key_id: &str) -> Result<ApiKey, ApiError> {
    let principal = caller::authenticate(core, credentials)?;
    if let Principal::Key(k) = &principal
        && !caller::permits(k.role, Operation::ManageApiKeys)
    {
        // Before the lookup, so that only admins learn which key ids exist.
        caller::authorize(&principal, &k.namespace, Operation::ManageApiKeys)?;
    }
    if !auth::is_key_id(key_id) {
        return Err(ApiError::field(
            "key_id",
            format!("{:?} is not a key id (16 hex digits)", caller::short(key_id)),
        ));
    }
    let key = core
        .store
        .api_key(key_id)?
        .ok_or_else(|| ApiError::Rejected(Rejection::NotFound(format!("API key {key_id} not found"))))?;
    caller::authorize(&principal, &key.namespace, Operation::ManageApiKeys)?;
    let key = core
        .writer
        .call(crate::writer::RevokeApiKey {
            key_id: key_id.to_string(),
        })
        .await?;
    tracing::info!(key_id, namespace = %key.namespace, by = %created_by(&principal), "API key revoked");
    Ok(key)
}

/// Errors making the first admin key.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("cannot read the stored keys: {0}")]
    Storage(#[from] StorageError),
    #[error("cannot store the admin key: {0}")]
    Store(#[from] WriteError),
    #[error("cannot write the admin key to {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("cannot create the admin key: {0}")]
    Api(#[from] ApiError),
}

/// With auth on and no active admin key for every namespace, makes one and writes
/// it to `<data_dir>/admin.key` (mode 0600, replacing an older file), so that whoever
/// runs the server can start managing keys. The file is written before the key is
/// stored: if storing fails, the next start makes another. Answers the file's path
/// when it made a key.
pub async fn bootstrap(
    store: &Store,
    writer: &Writer,
    now: Millis,
    data_dir: &Path,
) -> Result<Option<PathBuf>, BootstrapError> {
    let (admins, _) = store.api_keys("", 1, |k| {
        k.role == Role::Admin && k.namespace == ALL_NAMESPACES && k.is_active(now)
    })?;
    if !admins.is_empty() {
        return Ok(None);
    }
    let new = generate()?;
    let path = data_dir.join(ADMIN_KEY_FILE);
    let write_err = |source| BootstrapError::Write {
        path: path.display().to_string(),
        source,
    };
    let tmp = data_dir.join(format!("{ADMIN_KEY_FILE}.tmp"));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(write_err(e)),
    }
    crate::token::write_private(&tmp, format!("{}\n", new.secret_key).as_bytes()).map_err(write_err)?;
    std::fs::rename(&tmp, &path).map_err(write_err)?;
    let key = ApiKey {
        key_id: new.key_id,
        namespace: ALL_NAMESPACES.to_string(),
        role: Role::Admin,
        queues: Vec::new(),
        hash: new.hash,
        created_ms: now,
        expires_ms: None,
        revoked_ms: None,
        created_by: "bootstrap".to_string(),
        description: "made by the server at its first start with auth on".to_string(),
    };
    let key = writer.call(crate::writer::CreateApiKey { key }).await?;
    tracing::warn!(
        key_id = %key.key_id,
        path = %path.display(),
        "auth is on and there was no admin key: wrote a new one to {} (mode 0600); use it with \
         RAILYARD_API_KEY=$(cat {}) railyard key create ...",
        path.display(),
        path.display()
    );
    Ok(Some(path))
}

/// Makes a new key from the OS's randomness.
fn generate() -> Result<auth::NewKey, ApiError> {
    let mut random = [0u8; auth::RANDOM_BYTES];
    getrandom::fill(&mut random).map_err(|e| ApiError::Internal(format!("no randomness for a key: {e}")))?;
    Ok(auth::key_from(&random))
}
