//! Revoke an API key: its row stays, marked with the time it was revoked, so that
//! listings show it and it is refused from the next request on.
//!
//! command: RevokeApiKey(RevokeApiKey)

use super::*;
use railyard_model::auth::ApiKey;

/// Revoke the key stored under `key_id`.
#[derive(Debug)]
pub struct RevokeApiKey {
    pub key_id: String,
}

impl Apply for RevokeApiKey {
    type Output = ApiKey;
    const NAME: &'static str = "revoke_api_key";

    fn apply(self, cx: &mut Cx) -> Result<Result<ApiKey, Rejection>, StorageError> {
        let Some(mut key) = cx.tx.api_key(&self.key_id)? else {
            return Ok(Err(Rejection::NotFound(format!(
                "API key {} not found",
                self.key_id
            ))));
        };
        // Revoking twice keeps the first time.
        if key.revoked_ms.is_none() {
            key.revoked_ms = Some(cx.now());
            cx.tx.put_api_key(&key)?;
        }
        Ok(Ok(key))
    }
}
