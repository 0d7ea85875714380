//! API keys: their format, how they are made and checked, and what is stored of them.
//!
//! A key is `ry_<key id>_<secret>`: the key id (16 hex digits) names the stored
//! record, the secret (64 hex digits, 256 random bits) proves the holder. Only the
//! SHA-256 of the whole key is stored, compared in constant time; the secret is
//! shown once, when the key is created. Which operations a role allows is the
//! service layer's (`railyard_engine::service::caller`).

use sha2::{Digest, Sha256};

use crate::Millis;

/// Every key starts with this.
pub const KEY_PREFIX: &str = "ry_";
/// A key's namespace that stands for every namespace.
pub const ALL_NAMESPACES: &str = "*";
/// Hex digits of a key id.
const KEY_ID_LEN: usize = 16;
/// Hex digits of a key's secret.
const SECRET_LEN: usize = 64;

/// What a key may do: one role per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Poll task queues and report on the leases it got.
    Worker,
    /// Start, read and steer runs; list workflows.
    Client,
    /// A client's rights, plus registering workflow definitions in its namespace.
    Developer,
    /// Everything in its namespace, plus keys, schedules and triggers.
    Admin,
}

impl Role {
    /// The role's name, as typed on the command line and stored.
    pub fn name(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Client => "client",
            Self::Developer => "developer",
            Self::Admin => "admin",
        }
    }

    /// Parses a role name.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Worker, Self::Client, Self::Developer, Self::Admin]
            .into_iter()
            .find(|r| r.name() == name)
    }
}

/// A stored API key: everything but its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Its id, the public part of the key.
    pub key_id: String,
    /// The namespace it acts in, or [`ALL_NAMESPACES`].
    pub namespace: String,
    /// What it may do.
    pub role: Role,
    /// Task queues a worker key is limited to (empty: any).
    pub queues: Vec<String>,
    /// SHA-256 of the whole key.
    pub hash: [u8; 32],
    /// When it was created.
    pub created_ms: Millis,
    /// When it expires (none: never).
    pub expires_ms: Option<Millis>,
    /// When it was revoked (none: it was not).
    pub revoked_ms: Option<Millis>,
    /// The key id of whoever created it, or `bootstrap`.
    pub created_by: String,
    /// What it is for.
    pub description: String,
}

impl ApiKey {
    /// Whether the key acts in `ns`.
    pub fn covers(&self, ns: &str) -> bool {
        self.namespace == ALL_NAMESPACES || self.namespace == ns
    }

    /// Whether the key may be used at `now` (not revoked, not expired).
    pub fn is_active(&self, now: Millis) -> bool {
        self.revoked_ms.is_none() && self.expires_ms.is_none_or(|e| now < e)
    }

    /// Whether `presented` is this key: its hash matches, compared in constant time.
    pub fn verifies(&self, presented: &str) -> bool {
        constant_time_eq(&hash(presented), &self.hash)
    }
}

/// A new key: the whole key (to show once) and the id it is stored under.
pub struct NewKey {
    /// Its id.
    pub key_id: String,
    /// The whole key, shown once.
    pub secret_key: String,
    /// SHA-256 of the whole key.
    pub hash: [u8; 32],
}

impl std::fmt::Debug for NewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewKey")
            .field("key_id", &self.key_id)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// Bytes of randomness a new key is made of: its id, then its secret.
pub const RANDOM_BYTES: usize = (KEY_ID_LEN + SECRET_LEN) / 2;

/// Makes a key of `random` bytes; the server draws them from the OS.
pub fn key_from(random: &[u8; RANDOM_BYTES]) -> NewKey {
    let (id, secret) = random.split_at(KEY_ID_LEN / 2);
    let key_id = hex::encode(id);
    let secret_key = format!("{KEY_PREFIX}{key_id}_{}", hex::encode(secret));
    NewKey {
        hash: hash(&secret_key),
        key_id,
        secret_key,
    }
}

/// Why a presented key is not even of the right shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFormatError {
    /// It does not start with the prefix.
    #[error("an API key starts with {KEY_PREFIX:?}")]
    Prefix,
    /// It is not prefix, id and secret of the right lengths.
    #[error("an API key is {KEY_PREFIX}<{KEY_ID_LEN} hex digits>_<{SECRET_LEN} hex digits>")]
    Shape,
}

/// The key id of a presented key, if the key has the right shape.
pub fn key_id_of(presented: &str) -> Result<&str, KeyFormatError> {
    let rest = presented.strip_prefix(KEY_PREFIX).ok_or(KeyFormatError::Prefix)?;
    let (id, secret) = rest.split_once('_').ok_or(KeyFormatError::Shape)?;
    let is_hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_hex(id, KEY_ID_LEN) || !is_hex(secret, SECRET_LEN) {
        return Err(KeyFormatError::Shape);
    }
    Ok(id)
}

/// Whether `text` has the shape of a key id.
pub fn is_key_id(text: &str) -> bool {
    text.len() == KEY_ID_LEN && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Compares two digests without stopping at the first difference, so the time
/// taken says nothing about how much of a guessed key was right.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    subtle::ConstantTimeEq::ct_eq(&a[..], &b[..]).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_has_the_documented_shape_and_verifies() {
        let k = key_from(&[7; RANDOM_BYTES]);
        assert_eq!(key_id_of(&k.secret_key), Ok(k.key_id.as_str()));
        assert!(is_key_id(&k.key_id));
        let stored = ApiKey {
            key_id: k.key_id.clone(),
            namespace: "default".into(),
            role: Role::Client,
            queues: vec![],
            hash: k.hash,
            created_ms: 0,
            expires_ms: None,
            revoked_ms: None,
            created_by: String::new(),
            description: String::new(),
        };
        assert!(stored.verifies(&k.secret_key));
        let mut wrong = k.secret_key.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == '0' { '1' } else { '0' });
        assert!(!stored.verifies(&wrong));
        assert!(
            !format!("{k:?}").contains(&k.secret_key[20..]),
            "Debug never shows the secret"
        );
        assert_ne!(key_from(&[8; RANDOM_BYTES]).key_id, k.key_id);
    }

    #[test]
    fn malformed_keys_are_told_apart() {
        assert_eq!(key_id_of("sk-abc"), Err(KeyFormatError::Prefix));
        assert_eq!(key_id_of("ry_abc"), Err(KeyFormatError::Shape));
        assert_eq!(key_id_of("ry_0123456789abcdef_xyz"), Err(KeyFormatError::Shape));
        let ok = format!("ry_0123456789abcdef_{}", "a".repeat(64));
        assert_eq!(key_id_of(&ok), Ok("0123456789abcdef"));
    }

    #[test]
    fn activity_follows_revocation_and_expiry() {
        let mut k = ApiKey {
            key_id: "0123456789abcdef".into(),
            namespace: ALL_NAMESPACES.into(),
            role: Role::Admin,
            queues: vec![],
            hash: [0; 32],
            created_ms: 0,
            expires_ms: Some(100),
            revoked_ms: None,
            created_by: String::new(),
            description: String::new(),
        };
        assert!(k.covers("anything"));
        assert!(k.is_active(99) && !k.is_active(100));
        k.expires_ms = None;
        k.revoked_ms = Some(5);
        assert!(!k.is_active(0));
        assert_eq!(Role::from_name("worker"), Some(Role::Worker));
        assert_eq!(Role::from_name("root"), None);
    }
}
