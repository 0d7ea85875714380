//! Revoke an API key and every key made from it: the rows stay, marked with the time
//! they were revoked, so that listings show them and they are refused from the next
//! request on.

use super::*;
use railyard_model::auth::ApiKey;

/// Revoke the key stored under `key_id`, and, in the same commit, every active key it
/// made (`created_by`), and every key those made: a key's grant ends with its
/// maker's, so a key that leaked cannot leave behind keys of its own that outlive it.
#[derive(Debug)]
pub struct RevokeApiKey {
    pub key_id: String,
}

impl Apply for RevokeApiKey {
    type Output = ApiKey;
    const NAME: &'static str = "revoke_api_key";

    fn apply(self, cx: &mut Cx) -> Result<ApiKey, CommandError> {
        let Some(mut key) = cx.tx.api_key(&self.key_id)? else {
            return Err(Rejection::NotFound(format!("API key {} not found", self.key_id)).into());
        };
        let now = cx.now();
        // Revoking twice keeps the first time.
        if key.revoked_ms.is_none() {
            key.revoked_ms = Some(now);
            cx.tx.put_api_key(&key)?;
        }
        // The keys made from it, transitively. One pass over the keys builds the
        // maker → made map; keys are few (each made by an admin's request).
        let mut made: std::collections::HashMap<String, Vec<ApiKey>> = Default::default();
        cx.tx.api_keys("", &mut |k| {
            made.entry(k.created_by.clone()).or_default().push(k);
            true
        })?;
        let mut queue = vec![self.key_id.clone()];
        let mut cascaded = 0usize;
        while let Some(maker) = queue.pop() {
            for mut child in made.remove(&maker).unwrap_or_default() {
                queue.push(child.key_id.clone());
                if child.revoked_ms.is_none() {
                    child.revoked_ms = Some(now);
                    cx.tx.put_api_key(&child)?;
                    cascaded += 1;
                }
            }
        }
        if cascaded > 0 {
            tracing::info!(key_id = %self.key_id, cascaded, "revoked the keys made from the revoked key");
        }
        Ok(key)
    }
}
