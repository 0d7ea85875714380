//! What a task token claims: the one lease of one step attempt it stands for. The
//! token's signing and verification are the server's (`railyard_engine::token`).

use serde::{Deserialize, Serialize};

/// What a task token says about the lease it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    #[serde(rename = "ns")]
    pub namespace: String,
    #[serde(rename = "run")]
    pub run_id: String,
    pub step: String,
    #[serde(rename = "att")]
    pub attempt: u32,
    pub lease: u64,
    pub kid: String,
}

impl TokenClaims {
    /// The key of the run the lease is on.
    pub fn run_key(&self) -> crate::RunKey {
        crate::RunKey::new(&self.namespace, &self.run_id)
    }
}
