//! Task tokens: `payload.signature`, where the signature is HMAC-SHA256 over the
//! payload with a server key. The payload names namespace, run, step, attempt,
//! lease sequence and key id, so a token is good for exactly one lease.
//!
//! Keys live in `<data-dir>/keys.json` (mode 0600), created on first start, or in the
//! database when it keeps them (PostgreSQL, shared by every server on it:
//! `Backend::shared_keys`). Every key listed verifies; the `active` one signs, so a
//! key is rotated by adding a new one and making it active ([`rotate_file`], or the
//! Postgres backend's `rotate_token_key`). The server holds them in a [`Keyring`],
//! which reloads them from where they came from.

pub mod keyring;

pub use keyring::Keyring;

use railyard_model::Rejection;
use std::collections::BTreeMap;
use std::path::Path;

use railyard_store::{SharedKeys, StorageError};

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
    /// The database's keys could not be read.
    #[error("reading the keys from the database: {0}")]
    Storage(#[from] StorageError),
}

/// Where the database's keys are named in errors.
const DATABASE_KEYS: &str = "the database's token_keys";

/// The signing and verifying keys.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenKeys {
    active: String,
    keys: BTreeMap<String, Vec<u8>>,
}

/// Largest key file read: far more than any number of keys needs.
pub const MAX_KEY_FILE_BYTES: u64 = 1 << 20;

impl TokenKeys {
    /// Loads `<dir>/keys.json`, creating it with a fresh random key (mode 0600) when absent.
    pub fn load_or_create(dir: &Path) -> Result<Self, KeyError> {
        if let Some(keys) = Self::load(dir)? {
            return Ok(keys);
        }
        let path = dir.join("keys.json");
        let key = random_key().map_err(|e| KeyError::Io {
            path: path.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let keys = Self {
            active: "k1".into(),
            keys: BTreeMap::from([("k1".to_string(), key)]),
        };
        keys.write_new(&path)?;
        Ok(keys)
    }

    /// Loads `<dir>/keys.json`; `None` when there is none.
    pub fn load(dir: &Path) -> Result<Option<Self>, KeyError> {
        let path = dir.join("keys.json");
        let shown = path.display().to_string();
        let text = match railyard_files::read_regular_text(&path, MAX_KEY_FILE_BYTES) {
            Ok(text) => text,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => {
                return Err(KeyError::Invalid {
                    path: shown,
                    problem: e.to_string(),
                });
            }
        };
        let invalid = |problem: String| KeyError::Invalid {
            path: shown.clone(),
            problem,
        };
        let file: KeyFile = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let mut keys = Vec::new();
        for (kid, b64) in file.keys {
            let bytes = B64
                .decode(b64.trim_end_matches('='))
                .map_err(|e| invalid(format!("keys.{kid}: {e}")))?;
            keys.push((kid, bytes));
        }
        Self::checked(file.active, keys, &shown).map(Some)
    }

    /// The keys the database keeps.
    pub fn from_shared(shared: SharedKeys) -> Result<Self, KeyError> {
        Self::checked(shared.active, shared.keys, DATABASE_KEYS)
    }

    /// Keys whose every key is long enough and whose active one is among them.
    fn checked(active: String, list: Vec<(String, Vec<u8>)>, source: &str) -> Result<Self, KeyError> {
        let invalid = |problem: String| KeyError::Invalid {
            path: source.to_string(),
            problem,
        };
        let mut keys = BTreeMap::new();
        for (kid, bytes) in list {
            if bytes.len() < 16 {
                return Err(invalid(format!("keys.{kid}: key shorter than 16 bytes")));
            }
            keys.insert(kid, bytes);
        }
        if !keys.contains_key(&active) {
            return Err(invalid(format!("active: key id {active:?} is not in keys")));
        }
        Ok(Self { active, keys })
    }

    /// The id of the key that signs.
    pub fn active(&self) -> &str {
        &self.active
    }

    /// How many keys verify.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is no key (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Writes these keys to `path`, which must not exist yet (mode 0600).
    fn write_new(&self, path: &Path) -> Result<(), KeyError> {
        let shown = path.display().to_string();
        let file = KeyFile {
            active: self.active.clone(),
            keys: self
                .keys
                .iter()
                .map(|(k, v)| (k.clone(), B64.encode(v)))
                .collect(),
        };
        let text = serde_json::to_string_pretty(&file).map_err(|e| KeyError::Invalid {
            path: shown.clone(),
            problem: e.to_string(),
        })?;
        write_private(path, text.as_bytes()).map_err(|source| KeyError::Io { path: shown, source })
    }

    /// One fresh random key, held in memory only: the tokens it signs are good
    /// until the process ends. What a core built without keys gets
    /// ([`crate::service::CoreBuilder`]); the server loads its keys from disk.
    pub fn generate() -> Result<Self, KeyError> {
        let key = random_key().map_err(|e| KeyError::Random(e.to_string()))?;
        let kid = "k1".to_string();
        Ok(Self {
            active: kid.clone(),
            keys: BTreeMap::from([(kid, key)]),
        })
    }

    /// Keys for tests: one fixed key.
    #[cfg(test)]
    pub fn for_tests() -> Self {
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
        self.check(token).map_err(Denied::into_error)
    }

    /// [`TokenKeys::verify`], telling a key id these keys do not know apart.
    fn check(&self, token: &str) -> Result<TokenClaims, Denied> {
        if token.is_empty() {
            return Err(Denied::Other(ApiError::field("task_token", "must not be empty")));
        }
        let denied = || {
            Denied::Other(ApiError::Rejected(Rejection::PermissionDenied(
                "task_token: signature does not verify".into(),
            )))
        };
        let (payload, sig) = token.split_once('.').ok_or_else(denied)?;
        let sig = B64.decode(sig).map_err(|_| denied())?;
        let json = B64.decode(payload).map_err(|_| denied())?;
        let claims: TokenClaims = serde_json::from_slice(&json).map_err(|_| denied())?;
        // The key id comes from the token, unverified: echo only a prefix of it.
        let mac = self.mac(&claims.kid, payload.as_bytes()).ok_or_else(|| {
            Denied::UnknownKey(ApiError::Rejected(Rejection::PermissionDenied(format!(
                "task_token: unknown key id {:?}",
                railyard_model::text::clip(&claims.kid)
            ))))
        })?;
        mac.verify_slice(&sig).map_err(|_| denied())?;
        Ok(claims)
    }
}

/// Why a token does not verify.
enum Denied {
    /// It names a key id these keys do not have: one added since they were loaded,
    /// perhaps.
    UnknownKey(ApiError),
    Other(ApiError),
}

impl Denied {
    fn into_error(self) -> ApiError {
        match self {
            Self::UnknownKey(e) | Self::Other(e) => e,
        }
    }
}

/// Adds a new random key to `<dir>/keys.json` and makes it active (the older keep
/// verifying); answers the new key's id, `k<n>` past the highest such id. The file is
/// replaced whole (a new file renamed over it), so a reader never sees half of it.
pub fn rotate_file(dir: &Path) -> Result<(String, usize), KeyError> {
    let path = dir.join("keys.json");
    let mut keys = TokenKeys::load(dir)?.ok_or_else(|| KeyError::Invalid {
        path: path.display().to_string(),
        problem: "no such file: a server makes it at its first start".into(),
    })?;
    let next = keys
        .keys
        .keys()
        .filter_map(|kid| kid.strip_prefix('k')?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        + 1;
    let kid = format!("k{next}");
    keys.keys.insert(
        kid.clone(),
        random_key().map_err(|e| KeyError::Random(e.to_string()))?,
    );
    keys.active = kid.clone();
    let tmp = dir.join("keys.json.new");
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| KeyError::Io { path, source }
    };
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&tmp)(e)),
        _ => {}
    }
    keys.write_new(&tmp)?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    // The rename is durable once the directory is.
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok((kid, keys.keys.len()))
}

/// A new 32-byte key from the operating system's random source.
fn random_key() -> Result<Vec<u8>, getrandom::Error> {
    let mut key = vec![0u8; 32];
    getrandom::fill(&mut key)?;
    Ok(key)
}

pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
                    matches!(
                        keys.verify(&forged),
                        Err(ApiError::Rejected(Rejection::PermissionDenied(_)))
                    ),
                    "byte {i}"
                );
            }
        }
        let other = TokenKeys {
            active: "test".into(),
            keys: BTreeMap::from([("test".into(), vec![8u8; 32])]),
        };
        assert!(matches!(
            other.verify(&token),
            Err(ApiError::Rejected(Rejection::PermissionDenied(_)))
        ));
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
            Err(ApiError::Rejected(Rejection::PermissionDenied(m))) => {
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
