//! Rows of the `api_keys` table: a key's hash and what it may do, never its secret.

use serde::{Deserialize, Serialize};

use super::{Record, corrupt, decode_record, encode_record, v1};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::auth::{ApiKey, Role};

#[derive(Debug, Serialize, Deserialize)]
struct ApiKeyRecord {
    #[serde(default = "v1")]
    v: u32,
    key_id: String,
    namespace: String,
    /// `worker`, `client` or `admin`.
    role: String,
    #[serde(default)]
    queues: Vec<String>,
    /// SHA-256 of the whole key, hex.
    sha256: String,
    #[serde(default)]
    created_ms: Millis,
    #[serde(default)]
    expires_ms: Option<Millis>,
    #[serde(default)]
    revoked_ms: Option<Millis>,
    #[serde(default)]
    created_by: String,
    #[serde(default)]
    description: String,
}

impl Record for ApiKeyRecord {
    const WHAT: &'static str = "api key";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes an API key's row (`api_keys`, by key id).
pub fn encode_api_key(key: &ApiKey) -> Result<Vec<u8>, StorageError> {
    encode_record(&ApiKeyRecord {
        v: ApiKeyRecord::VERSION,
        key_id: key.key_id.clone(),
        namespace: key.namespace.clone(),
        role: key.role.name().to_string(),
        queues: key.queues.clone(),
        sha256: hex::encode(key.hash),
        created_ms: key.created_ms,
        expires_ms: key.expires_ms,
        revoked_ms: key.revoked_ms,
        created_by: key.created_by.clone(),
        description: key.description.clone(),
    })
}

/// Decodes an API key's row.
pub fn decode_api_key(bytes: &[u8]) -> Result<ApiKey, StorageError> {
    let r: ApiKeyRecord = decode_record(bytes)?;
    let what = ApiKeyRecord::WHAT;
    let role = Role::from_name(&r.role).ok_or_else(|| corrupt(what, format!("unknown role {:?}", r.role)))?;
    let hash = hex::decode(&r.sha256)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| corrupt(what, "sha256 is not 64 hex digits"))?;
    Ok(ApiKey {
        key_id: r.key_id,
        namespace: r.namespace,
        role,
        queues: r.queues,
        hash,
        created_ms: r.created_ms,
        expires_ms: r.expires_ms,
        revoked_ms: r.revoked_ms,
        created_by: r.created_by,
        description: r.description,
    })
}
