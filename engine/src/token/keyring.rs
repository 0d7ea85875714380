//! [`Keyring`]: the server's task-token keys, and where they are reloaded from.
//!
//! A key added elsewhere (a rotation: another server's database keys, or a rewritten
//! `keys.json`) reaches this server two ways: a token naming a key id it does not
//! know makes it reload at once (at most once per [`MISS_RELOAD_EVERY`]), so a token
//! another server signed with the new key verifies here; and the server's reload task
//! ([`reload_every`]) reloads every [`RELOAD_EVERY`], after which this server signs
//! with the new key too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use railyard_model::token::TokenClaims;
use railyard_store::Store;
use tokio::sync::watch;

use super::{Denied, KeyError, TokenKeys};
use crate::error::ApiError;

/// How often the server reloads its keys.
pub const RELOAD_EVERY: Duration = Duration::from_secs(60);

/// The shortest time between two reloads made by tokens naming an unknown key id:
/// forged tokens cannot make the server read its keys more often than this.
pub const MISS_RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Where the keys come from.
enum Source {
    /// Made in memory: nothing to reload.
    Fixed,
    /// `<dir>/keys.json`.
    File(PathBuf),
    /// The database (`Backend::shared_keys`).
    Store(Store),
}

/// The keys that sign and verify task tokens, reloaded from their source.
pub struct Keyring {
    current: RwLock<Arc<TokenKeys>>,
    source: Source,
    /// When a token naming an unknown key id last made a reload.
    last_miss: Mutex<Option<Instant>>,
}

impl Keyring {
    /// Keys that are never reloaded (a core built without a source).
    pub fn fixed(keys: TokenKeys) -> Self {
        Self::new(keys, Source::Fixed)
    }

    /// The keys of a server on `store`: the database's when it keeps them, else
    /// `<dir>/keys.json` (made with a fresh key when absent).
    pub fn open(store: &Store, dir: &std::path::Path) -> Result<Self, KeyError> {
        match store.backend().shared_keys()? {
            Some(shared) => {
                let keys = TokenKeys::from_shared(shared)?;
                tracing::info!(
                    active = keys.active(),
                    keys = keys.len(),
                    "task-token keys read from the database"
                );
                Ok(Self::new(keys, Source::Store(store.clone())))
            }
            None => Ok(Self::new(
                TokenKeys::load_or_create(dir)?,
                Source::File(dir.to_path_buf()),
            )),
        }
    }

    fn new(keys: TokenKeys, source: Source) -> Self {
        Self {
            current: RwLock::new(Arc::new(keys)),
            source,
            last_miss: Mutex::new(None),
        }
    }

    /// The keys now.
    pub fn current(&self) -> Arc<TokenKeys> {
        // A panic while the lock was held cannot leave an `Arc` half-written.
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Signs claims with the active key.
    pub fn sign(&self, claims: &TokenClaims) -> String {
        self.current().sign(claims)
    }

    /// Checks a token's signature ([`TokenKeys::verify`]); one naming a key id not
    /// loaded yet makes a reload first, when the last such reload is old enough.
    pub fn verify(&self, token: &str) -> Result<TokenClaims, ApiError> {
        match self.current().check(token) {
            Err(Denied::UnknownKey(e)) => {
                if !self.may_reload_on_miss() {
                    return Err(e);
                }
                if let Err(error) = self.reload() {
                    tracing::warn!(%error, "could not reload the task-token keys for a token naming an unknown key");
                    return Err(e);
                }
                self.current().verify(token)
            }
            other => other.map_err(Denied::into_error),
        }
    }

    fn may_reload_on_miss(&self) -> bool {
        if matches!(self.source, Source::Fixed) {
            return false;
        }
        let mut last = self.last_miss.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < MISS_RELOAD_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Reads the keys again from their source; answers whether they changed. Keys
    /// that cannot be read, or a file gone, leave the loaded ones in use.
    pub fn reload(&self) -> Result<bool, KeyError> {
        let loaded = match &self.source {
            Source::Fixed => return Ok(false),
            Source::File(dir) => match TokenKeys::load(dir)? {
                Some(keys) => keys,
                None => return Ok(false),
            },
            Source::Store(store) => match store.backend().shared_keys()? {
                Some(shared) => TokenKeys::from_shared(shared)?,
                None => return Ok(false),
            },
        };
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if **current == loaded {
            return Ok(false);
        }
        tracing::info!(
            active = loaded.active(),
            keys = loaded.len(),
            was_active = current.active(),
            "task-token keys reloaded"
        );
        *current = Arc::new(loaded);
        Ok(true)
    }

    /// Whether there is anywhere to reload from.
    pub fn reloads(&self) -> bool {
        !matches!(self.source, Source::Fixed)
    }
}

/// Reloads `keys` every `every` until shutdown (the server's task).
pub async fn reload_every(keys: Arc<Keyring>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    if !keys.reloads() {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let keys = keys.clone();
        // Reading the database blocks: off the runtime's workers.
        match tokio::task::spawn_blocking(move || keys.reload()).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "could not reload the task-token keys; keeping those loaded")
            }
            Err(error) => tracing::warn!(%error, "the task-token key reload stopped"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use railyard_model::token::TokenClaims;
    use railyard_store::Store;
    use railyard_store_postgres::testing::{TestSchema, skipped, test_url};

    use super::Keyring;
    use crate::token::rotate_file;

    fn claims(lease: u64) -> TokenClaims {
        TokenClaims {
            namespace: "default".into(),
            run_id: "r1".into(),
            step: "s".into(),
            attempt: 1,
            lease,
            kid: String::new(),
        }
    }

    /// The key id a token names (its payload is not secret).
    fn kid(token: &str) -> String {
        use base64::Engine;
        let payload = token.split('.').next().unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap();
        serde_json::from_slice::<TokenClaims>(&json).unwrap().kid
    }

    fn memory() -> Store {
        Store::new(Arc::new(railyard_store::memory::MemoryBackend::default()))
    }

    #[test]
    fn a_rotated_key_file_signs_after_a_reload_and_the_old_key_keeps_verifying() {
        let dir = tempfile::tempdir().unwrap();
        let ring = Keyring::open(&memory(), dir.path()).unwrap();
        let old = ring.sign(&claims(1));
        assert_eq!(kid(&old), "k1");
        assert_eq!(rotate_file(dir.path()).unwrap(), ("k2".to_string(), 2));
        // A server reading the file now signs with the new key...
        let fresh = Keyring::open(&memory(), dir.path()).unwrap();
        let new = fresh.sign(&claims(2));
        assert_eq!(kid(&new), "k2");
        assert_eq!(fresh.verify(&old).unwrap().lease, 1, "the old key still verifies");
        // ...and the running one accepts its tokens at once (an unknown key id
        // reloads), then signs with it too.
        assert_eq!(ring.verify(&new).unwrap().lease, 2);
        assert_eq!(kid(&ring.sign(&claims(3))), "k2");
        assert!(!ring.reload().unwrap(), "nothing changed since");
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

    #[test]
    fn forged_key_ids_reload_at_most_once_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let ring = Keyring::open(&memory(), dir.path()).unwrap();
        let token = ring.sign(&claims(1));
        assert!(ring.verify(&token).is_ok());
        let forged = |kid: &str| {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let json = serde_json::to_vec(&TokenClaims {
                kid: kid.into(),
                ..claims(1)
            })
            .unwrap();
            format!("{}.AAAA", b64.encode(json))
        };
        assert!(ring.verify(&forged("x1")).is_err());
        // The first miss reloaded; a rotation now is not seen by a second miss
        // within the second, only by the periodic reload.
        rotate_file(dir.path()).unwrap();
        assert!(ring.verify(&forged("x2")).is_err());
        assert_eq!(kid(&ring.sign(&claims(1))), "k1");
        assert!(ring.reload().unwrap());
        assert_eq!(kid(&ring.sign(&claims(1))), "k2");
    }

    #[test]
    fn tokens_signed_on_one_open_of_a_postgres_database_verify_on_another_and_survive_a_rotation() {
        let Some(url) = test_url() else {
            eprintln!(
                "{}",
                skipped("tokens_signed_on_one_open_of_a_postgres_database_verify_on_another")
            );
            return;
        };
        let s = TestSchema::create(&url).unwrap();
        // Each server has a local directory of its own: the keys are not there.
        let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = Store::new(Arc::new(s.open().unwrap()));
        let ring_a = Keyring::open(&a, dir_a.path()).unwrap();
        let old = ring_a.sign(&claims(1));
        assert!(!dir_a.path().join("keys.json").exists());
        drop(ring_a);
        drop(a);

        let b = Store::new(Arc::new(s.open().unwrap()));
        let ring_b = Keyring::open(&b, dir_b.path()).unwrap();
        assert_eq!(ring_b.verify(&old).unwrap().lease, 1, "another open verifies it");
        assert_eq!(kid(&ring_b.sign(&claims(2))), "k1");

        // Rotated beside the running server: it accepts the new key's tokens at
        // once, signs with it after its reload, and the old token still verifies.
        let rotated = railyard_store_postgres::rotate_token_key(&url, &s.options()).unwrap();
        assert_eq!(rotated.kid, "k2");
        let other = Keyring::open(&b, dir_a.path()).unwrap();
        let new = other.sign(&claims(3));
        assert_eq!(kid(&new), "k2");
        assert_eq!(ring_b.verify(&new).unwrap().lease, 3);
        assert_eq!(kid(&ring_b.sign(&claims(4))), "k2");
        assert_eq!(ring_b.verify(&old).unwrap().lease, 1);
    }
}
