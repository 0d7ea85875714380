//! What a task token claims: the one lease of one step attempt it stands for. The
//! token's signing and verification are the server's (`railyard_engine::token`).

use serde::{Deserialize, Serialize};

/// What a task token says about the lease it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The run's namespace.
    #[serde(rename = "ns")]
    pub namespace: String,
    /// The run.
    #[serde(rename = "run")]
    pub run_id: String,
    /// The step's id.
    pub step: String,
    /// The attempt, from 1.
    #[serde(rename = "att")]
    pub attempt: u32,
    /// The lease's number.
    pub lease: u64,
    /// The id of the key that signed it.
    pub kid: String,
}

impl TokenClaims {
    /// The key of the run the lease is on.
    pub fn run_key(&self) -> crate::RunKey {
        crate::RunKey::new(&self.namespace, &self.run_id)
    }
}
