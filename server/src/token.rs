//! Task tokens: `payload.signature`, where the signature is HMAC-SHA256 over the
//! payload with a server key. The payload names namespace, run, step, attempt,
//! lease sequence and key id, so a token is good for exactly one lease.
//!
//! Keys live in `<data-dir>/keys.json` (mode 0600), created on first start. Every key
//! listed there verifies; the `active` one signs, so a key can be rotated by adding a
//! new one and making it active.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use railyard_model::token::TokenClaims;

use crate::error::ApiError;

type HmacSha256 = Hmac<Sha256>;

#[derive(Serialize, Deserialize)]
struct KeyFile {
    active: String,
    /// Key id → base64 key bytes.
    keys: BTreeMap<String, String>,
}

/// Errors loading the key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {problem}")]
    Invalid { path: String, problem: String },
    /// No random key could be drawn for [`TokenKeys::generate`].
    #[error("cannot draw a random key: {0}")]
    Random(String),
}

/// The signing and verifying keys.
#[derive(Clone)]
pub struct TokenKeys {
    active: String,
    keys: BTreeMap<String, Vec<u8>>,
}

/// Largest key file read: far more than any number of keys needs.
pub(crate) const MAX_KEY_FILE_BYTES: u64 = 1 << 20;

impl TokenKeys {
    /// Loads `<dir>/keys.json`, creating it with a fresh random key (mode 0600) when absent.
    pub fn load_or_create(dir: &Path) -> Result<Self, KeyError> {
        let path = dir.join("keys.json");
        let shown = path.display().to_string();
        let io = |source| KeyError::Io {
            path: shown.clone(),
            source,
        };
        let invalid = |problem: String| KeyError::Invalid {
            path: shown.clone(),
            problem,
        };
        match railyard_files::read_regular_text(&path, MAX_KEY_FILE_BYTES) {
            Ok(text) => {
                let file: KeyFile = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
                let mut keys = BTreeMap::new();
                for (kid, b64) in file.keys {
                    let bytes = B64
                        .decode(b64.trim_end_matches('='))
                        .map_err(|e| invalid(format!("keys.{kid}: {e}")))?;
                    if bytes.len() < 16 {
                        return Err(invalid(format!("keys.{kid}: key shorter than 16 bytes")));
                    }
                    keys.insert(kid, bytes);
                }
                if !keys.contains_key(&file.active) {
                    return Err(invalid(format!(
                        "active: key id {:?} is not in keys",
                        file.active
                    )));
                }
                Ok(Self {
                    active: file.active,
                    keys,
                })
            }
            Err(e) if e.is_not_found() => {
                let key = random_key().map_err(|e| io(std::io::Error::other(e.to_string())))?;
                let kid = "k1".to_string();
                let file = KeyFile {
                    active: kid.clone(),
                    keys: BTreeMap::from([(kid.clone(), B64.encode(&key))]),
                };
                let text = serde_json::to_string_pretty(&file).map_err(|e| invalid(e.to_string()))?;
                write_private(&path, text.as_bytes()).map_err(io)?;
                Ok(Self {
                    active: kid.clone(),
                    keys: BTreeMap::from([(kid, key)]),
                })
            }
            Err(e) => Err(invalid(e.to_string())),
        }
    }

    /// One fresh random key, held in memory only: the tokens it signs are good
    /// until the process ends. What a core built without keys gets
    /// ([`crate::service::CoreBuilder`]); the server loads its keys from disk.
    pub(crate) fn generate() -> Result<Self, KeyError> {
        let key = random_key().map_err(|e| KeyError::Random(e.to_string()))?;
        let kid = "k1".to_string();
        Ok(Self {
            active: kid.clone(),
            keys: BTreeMap::from([(kid, key)]),
        })
    }

    /// Keys for tests: one fixed key.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Self {
            active: "test".into(),
            keys: BTreeMap::from([("test".into(), vec![7u8; 32])]),
        }
    }

    fn mac(&self, kid: &str, payload: &[u8]) -> Option<HmacSha256> {
        let key = self.keys.get(kid)?;
        let mut mac = HmacSha256::new_from_slice(key).ok()?;
        mac.update(payload);
        Some(mac)
    }

    /// Signs claims (their `kid` is set to the active key).
    pub fn sign(&self, claims: &TokenClaims) -> String {
        let claims = TokenClaims {
            kid: self.active.clone(),
            ..claims.clone()
        };
        // Serializing a struct of strings and integers cannot fail.
        let json = serde_json::to_vec(&claims).unwrap_or_default();
        let payload = B64.encode(json);
        let sig = self
            .mac(&self.active, payload.as_bytes())
            .map(|m| m.finalize().into_bytes().to_vec())
            .unwrap_or_default();
        format!("{payload}.{}", B64.encode(sig))
    }

    /// Checks the signature and returns the claims. Any token that does not verify is
    /// `PERMISSION_DENIED`; whether its lease is current is for the caller to check.
    pub fn verify(&self, token: &str) -> Result<TokenClaims, ApiError> {
        if token.is_empty() {
            return Err(ApiError::field("task_token", "must not be empty"));
        }
        let denied = || ApiError::PermissionDenied("task_token: signature does not verify".into());
        let (payload, sig) = token.split_once('.').ok_or_else(denied)?;
        let sig = B64.decode(sig).map_err(|_| denied())?;
        let json = B64.decode(payload).map_err(|_| denied())?;
        let claims: TokenClaims = serde_json::from_slice(&json).map_err(|_| denied())?;
        // The key id comes from the token, unverified: echo only a prefix of it.
        let mac = self.mac(&claims.kid, payload.as_bytes()).ok_or_else(|| {
            ApiError::PermissionDenied(format!(
                "task_token: unknown key id {:?}",
                railyard_model::text::clip(&claims.kid)
            ))
        })?;
        mac.verify_slice(&sig).map_err(|_| denied())?;
        Ok(claims)
    }
}

/// A new 32-byte key from the operating system's random source.
fn random_key() -> Result<Vec<u8>, getrandom::Error> {
    let mut key = vec![0u8; 32];
    getrandom::fill(&mut key)?;
    Ok(key)
}

pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> TokenClaims {
        TokenClaims {
            namespace: "default".into(),
            run_id: "r1".into(),
            step: "s".into(),
            attempt: 1,
            lease: 3,
            kid: String::new(),
        }
    }

    #[test]
    fn round_trip_and_tamper() {
        let keys = TokenKeys::for_tests();
        let token = keys.sign(&claims());
        assert_eq!(keys.verify(&token).ok().map(|c| c.lease), Some(3));
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let forged = String::from_utf8(bytes).unwrap();
            if forged != token {
                assert!(
                    matches!(keys.verify(&forged), Err(ApiError::PermissionDenied(_))),
                    "byte {i}"
                );
            }
        }
        let other = TokenKeys {
            active: "test".into(),
            keys: BTreeMap::from([("test".into(), vec![8u8; 32])]),
        };
        assert!(matches!(other.verify(&token), Err(ApiError::PermissionDenied(_))));
    }

    #[test]
    fn an_unknown_key_id_is_echoed_short() {
        // Found by fuzzing: a forged payload's key id came back whole in the error.
        let payload = format!(
            r#"{{"ns":"default","run":"r","step":"s","att":1,"lease":1,"kid":"{}"}}"#,
            "k".repeat(100_000)
        );
        let token = format!("{}.AAAA", B64.encode(payload));
        match TokenKeys::for_tests().verify(&token) {
            Err(ApiError::PermissionDenied(m)) => {
                assert!(
                    m.starts_with("task_token: unknown key id \"kkk") && m.len() < 200,
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn key_file_is_created_private_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let a = TokenKeys::load_or_create(dir.path()).unwrap();
        let b = TokenKeys::load_or_create(dir.path()).unwrap();
        let token = a.sign(&claims());
        assert!(b.verify(&token).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("keys.json"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
