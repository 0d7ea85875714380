//! Fresh schemas and databases for tests, on the server the environment variable
//! [`TEST_DATABASE_VAR`] names (a connection URL to a database the tests may create
//! schemas and databases in). Each is dropped, with every connection to it, when its
//! guard is. Tests skip, saying so, when the variable is not set.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_postgres::{Client, NoTls};

use crate::runtime::Runner;
use crate::{OpenError, PostgresBackend, PostgresOptions, redact};

/// The environment variable holding the test server's connection URL.
pub const TEST_DATABASE_VAR: &str = "RAILYARD_TEST_POSTGRES";

/// The test server's URL, when one is configured.
pub fn test_url() -> Option<String> {
    std::env::var(TEST_DATABASE_VAR)
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// The line a test prints when it skips for want of a database.
pub fn skipped(test: &str) -> String {
    format!("skipped {test}: {TEST_DATABASE_VAR} is not set (a postgres:// URL runs the Postgres tests)")
}

/// A name no other test of any process is using: `rytest_<pid>_<n>_<random>`.
fn unique_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let random = RandomState::new().build_hasher().finish() & 0xffff_ffff;
    format!("rytest_{}_{n}_{random:08x}", std::process::id())
}

/// A connection for making and dropping schemas and databases.
struct Admin {
    client: Arc<Client>,
    runner: Runner,
}

impl Admin {
    fn connect(url: &str) -> Result<Self, String> {
        let shown = redact(url);
        let config = tokio_postgres::Config::from_str(url).map_err(|e| format!("{shown}: {e}"))?;
        let runner = Runner::new().map_err(|e| e.to_string())?;
        let client = runner
            .block(async move {
                let (client, connection) = config.connect(NoTls).await?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Ok::<_, tokio_postgres::Error>(client)
            })
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot connect to {shown}: {e}"))?;
        Ok(Self {
            client: Arc::new(client),
            runner,
        })
    }

    fn batch(&self, sql: String) -> Result<(), String> {
        let client = self.client.clone();
        let run = sql.clone();
        self.runner
            .block(async move { client.batch_execute(&run).await })
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("{sql}: {e}"))
    }

    /// The first column of the first row `sql` answers, as text.
    fn query_text(&self, sql: String) -> Result<Option<String>, String> {
        let client = self.client.clone();
        let run = sql.clone();
        self.runner
            .block(async move {
                let rows = client.simple_query(&run).await?;
                Ok::<_, tokio_postgres::Error>(rows.into_iter().find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
                    _ => None,
                }))
            })
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("{sql}: {e}"))
    }

    /// Ends every session whose `application_name` is `name` (a backend a test
    /// left open), so that what they used can be dropped.
    fn terminate(&self, name: &str) -> Result<(), String> {
        let client = self.client.clone();
        let name = name.to_string();
        self.runner
            .block(async move {
                client
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE application_name = $1 AND pid <> pg_backend_pid()",
                        &[&name],
                    )
                    .await
            })
            .map_err(|e| e.to_string())?
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// A schema of its own on the test database, dropped with its tables on drop. Its
/// backends connect with `search_path` (and `application_name`) set to it.
pub struct TestSchema {
    admin: Admin,
    url: String,
    name: String,
}

impl TestSchema {
    /// Creates a fresh schema on the database at `url`.
    pub fn create(url: &str) -> Result<Self, String> {
        let admin = Admin::connect(url)?;
        let name = unique_name();
        admin.batch(format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))?;
        Ok(Self {
            admin,
            url: url.to_string(),
            name,
        })
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Options that put a backend's tables in this schema.
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions {
            schema: Some(self.name.clone()),
            application_name: self.name.clone(),
            pool_size: 4,
            ..PostgresOptions::default()
        }
    }

    /// A backend on this schema (its tables are made at the first open).
    pub fn open(&self) -> Result<PostgresBackend, OpenError> {
        PostgresBackend::open(&self.url, &self.options())
    }

    /// The schema opened for export (no lease, no migration).
    pub fn reader(&self) -> Result<crate::PostgresReader, OpenError> {
        crate::PostgresReader::open(&self.url, &self.options())
    }

    /// Runs `sql` in this schema on a connection of its own.
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        self.admin.batch(format!(
            "SET search_path TO {}; {sql}; RESET search_path",
            self.name
        ))
    }

    /// The first column of the first row of `sql` (a query on this schema's
    /// tables), as text; `None` when it answers no row or a `NULL`.
    pub fn query_text(&self, sql: &str) -> Result<Option<String>, String> {
        self.admin.query_text(format!(
            "SET search_path TO {}; {sql}; RESET search_path",
            self.name
        ))
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let dropped = self.admin.terminate(&self.name).and_then(|()| {
            self.admin
                .batch(format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
        });
        if let Err(e) = dropped {
            eprintln!("could not drop test schema {}: {e}", self.name);
        }
    }
}

/// A database of its own on the test server, dropped (with every connection to it)
/// on drop: for tests that hand a plain URL to another process.
pub struct TestDatabase {
    admin: Admin,
    url: String,
    name: String,
}

impl TestDatabase {
    /// Creates a fresh database on the server `url` connects to.
    pub fn create(url: &str) -> Result<Self, String> {
        let admin = Admin::connect(url)?;
        let name = unique_name();
        admin.batch(format!("CREATE DATABASE {name}"))?;
        Ok(Self {
            url: with_database(url, &name)?,
            admin,
            name,
        })
    }

    /// The URL of the new database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `sql` on the new database, on a connection of its own.
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        Admin::connect(&self.url)?.batch(sql.to_string())
    }

    /// The first column of the first row `sql` answers on the new database, as text.
    pub fn query_text(&self, sql: &str) -> Result<Option<String>, String> {
        Admin::connect(&self.url)?.query_text(sql.to_string())
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Err(e) = self
            .admin
            .batch(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
        {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

/// `url` (a `postgres://` URL) naming database `db` instead of its own.
pub fn with_database(url: &str, db: &str) -> Result<String, String> {
    let Some(scheme_end) = url.find("://") else {
        return Err(format!("{}: not a postgres:// URL", redact(url)));
    };
    let rest = scheme_end + 3;
    let authority_end = url[rest..].find(['/', '?', '#']).map_or(url.len(), |i| rest + i);
    let tail_start = url[authority_end..]
        .find(['?', '#'])
        .map_or(url.len(), |i| authority_end + i);
    Ok(format!("{}/{db}{}", &url[..authority_end], &url[tail_start..]))
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_url_is_pointed_at_another_database() {
        let cases = [
            ("postgres://u@h:5/db", "postgres://u@h:5/other"),
            ("postgres://u@h:5", "postgres://u@h:5/other"),
            (
                "postgres://u@h/db?sslmode=disable",
                "postgres://u@h/other?sslmode=disable",
            ),
            ("postgresql://u@h?x=1", "postgresql://u@h/other?x=1"),
        ];
        for (url, want) in cases {
            assert_eq!(with_database(url, "other").unwrap(), want);
        }
        assert!(with_database("host=h", "other").is_err());
    }
}
