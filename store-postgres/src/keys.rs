//! The task-token signing keys in the database (`token_keys`), shared by every server
//! on it, so that a token one server signs verifies on every other. The opening that
//! finds the table empty makes the first key, in its transaction (two servers racing
//! end with one key: the second's insert does nothing); every server reads them
//! ([`crate::PostgresBackend`]'s `Backend::shared_keys`); [`rotate_token_key`] adds
//! the next, which signs from then on while the older keep verifying.
//!
//! The keys are opaque bytes here: the server signs with them.

use deadpool_postgres::Pool;
use railyard_store::{SharedKeys, StorageError};
use tokio_postgres::error::SqlState;

use crate::conn::{Conn, db_error, describe, params};
use crate::{OpenError, PostgresOptions, schema};

/// Bytes of a new key.
const KEY_BYTES: usize = 32;

/// The first key, when the table has none. `$1`: its bytes.
pub(crate) const FIRST: &str = "INSERT INTO token_keys (n, kid, secret)
    SELECT 1, 'k1', $1 WHERE NOT EXISTS (SELECT 1 FROM token_keys)
    ON CONFLICT DO NOTHING";

/// Every key, oldest first: the last signs.
const READ: &str = "SELECT kid, secret FROM token_keys ORDER BY n";

/// The next key after the newest; no row when a racing rotation took its number.
const ADD: &str = "INSERT INTO token_keys (n, kid, secret)
    SELECT last.n + 1, 'k' || (last.n + 1), $1
    FROM (SELECT coalesce(max(n), 0) AS n FROM token_keys) last
    ON CONFLICT DO NOTHING
    RETURNING kid";

const COUNT: &str = "SELECT count(*) FROM token_keys";

/// A new random key from the operating system's random source.
pub(crate) fn new_secret() -> Result<Vec<u8>, String> {
    let mut key = vec![0u8; KEY_BYTES];
    getrandom::fill(&mut key).map_err(|e| format!("cannot draw a random key: {e}"))?;
    Ok(key)
}

/// Every key, read in the transaction of `conn`.
pub(crate) fn read(conn: &Conn) -> Result<SharedKeys, StorageError> {
    let rows = conn.query(READ, params![])?;
    let mut keys = Vec::with_capacity(rows.len());
    for row in &rows {
        keys.push((
            row.try_get::<_, String>(0).map_err(db_error)?,
            row.try_get::<_, Vec<u8>>(1).map_err(db_error)?,
        ));
    }
    let Some((active, _)) = keys.last() else {
        return Err(StorageError::Corrupt {
            what: "token_keys",
            source: "the table holds no key (a server makes one when it starts on a database without any)"
                .into(),
        });
    };
    Ok(SharedKeys {
        active: active.clone(),
        keys,
    })
}

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotatedKey {
    /// The new key's id: it signs from now on.
    pub kid: String,
    /// Keys in the database now, the new one included: every one verifies.
    pub keys: i64,
}

/// Adds a new random task-token key to the database at `url` and makes it the one
/// that signs; the older keys keep verifying. Takes no writer lease, so it works
/// beside running servers, which pick the key up on their next reload. The database
/// must hold this build's schema (a server of this build has started on it).
pub fn rotate_token_key(url: &str, options: &PostgresOptions) -> Result<RotatedKey, OpenError> {
    let crate::Connected { db, shown, .. } = crate::connect(url, options)?;
    let failed = |problem: String| OpenError::Keys {
        url: shown.clone(),
        problem,
    };
    let attempts = options.write_attempts.max(1);
    let pool = db.pool.clone();
    db.runner
        .block(rotate(pool, attempts))
        .map_err(|e| failed(e.to_string()))?
        .map_err(failed)
}

async fn rotate(pool: Pool, attempts: usize) -> Result<RotatedKey, String> {
    let mut client = pool
        .get()
        .await
        .map_err(|e| format!("no database connection: {e}"))?;
    let mut attempt = 1;
    loop {
        let secret = new_secret()?;
        let outcome = async {
            let tx = client.transaction().await?;
            let found: Option<i64> = match tx.query_opt(schema::READ_VERSION, &[]).await? {
                Some(row) => row.try_get(0)?,
                None => None,
            };
            if found != Some(schema::latest()) {
                return Ok(Err(found));
            }
            let Some(row) = tx.query_opt(ADD, &[&secret]).await? else {
                return Ok(Ok(None));
            };
            let kid: String = row.try_get(0)?;
            let keys: i64 = tx.query_one(COUNT, &[]).await?.try_get(0)?;
            tx.commit().await?;
            Ok::<_, tokio_postgres::Error>(Ok(Some(RotatedKey { kid, keys })))
        }
        .await;
        match outcome {
            Ok(Ok(Some(rotated))) => return Ok(rotated),
            Ok(Err(found)) => {
                return Err(match found {
                    None => "the database has no railyard tables: start a server on it first".into(),
                    Some(v) if v < schema::latest() => format!(
                        "the database has schema version {v}, this build's is {}: start a server of this \
                         build on it first (it migrates the tables)",
                        schema::latest()
                    ),
                    Some(v) => format!(
                        "the database has schema version {v}, this build knows versions up to {}; it was \
                         written by a newer Railyard",
                        schema::latest()
                    ),
                });
            }
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                return Err("the database has no railyard tables: start a server on it first".into());
            }
            // A racing rotation took the number (`Ok(Ok(None))`), or the database
            // asks to retry: again, with a fresh key.
            Ok(Ok(None)) if attempt < attempts => {}
            Err(e) if crate::conn::asks_retry(&e) && attempt < attempts => {}
            Ok(Ok(None)) => return Err("racing rotations took every attempt; try again".into()),
            Err(e) => return Err(describe(&e)),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20 * attempt as u64)).await;
        attempt += 1;
    }
}
