//! Store a new API key (its hash; the secret was shown to the caller only).

use super::*;
use railyard_model::auth::ApiKey;

/// A new API key to store.
#[derive(Debug)]
pub struct CreateApiKey {
    pub key: ApiKey,
}

impl Apply for CreateApiKey {
    type Output = ApiKey;
    const NAME: &'static str = "create_api_key";

    fn apply(self, cx: &mut Cx) -> Result<ApiKey, CommandError> {
        if cx.tx.api_key(&self.key.key_id)?.is_some() {
            return Err(
                Rejection::AlreadyExists(format!("API key {} already exists", self.key.key_id)).into(),
            );
        }
        cx.tx.put_api_key(&self.key)?;
        Ok(self.key)
    }
}
