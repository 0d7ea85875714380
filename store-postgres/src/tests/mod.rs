//! The backend against a real server (skipped, saying so, without
//! `RAILYARD_TEST_POSTGRES`): opening, migrating and refusing schemas, snapshots,
//! rollback, retries and timeouts; the writer lease in [`lease`]. The storage trait's behaviour as a whole is
//! checked against the reference backend by the server's writer tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use railyard_model::namespace::Namespace;
use railyard_store::{Backend, StorageError};

use crate::conn::params;
use crate::testing::{TestSchema, skipped, test_url};
use crate::{OpenError, PostgresBackend, PostgresOptions, schema};

mod attributes;
mod dump;
mod keys;
mod lease;
mod queries;
mod standby;

/// A fresh schema, or `None` (and a printed line) when no database is configured.
pub(super) fn schema(test: &str) -> Option<TestSchema> {
    let Some(url) = test_url() else {
        eprintln!("{}", skipped(test));
        return None;
    };
    Some(TestSchema::create(&url).expect("the test database takes a new schema"))
}

pub(super) fn namespace(name: &str) -> Namespace {
    Namespace {
        principles: None,
        name: name.into(),
        ..Namespace::default()
    }
}

#[test]
fn a_new_schema_gets_the_tables_and_the_default_namespace_and_reopens() {
    let Some(s) = schema("a_new_schema_gets_the_tables_and_the_default_namespace_and_reopens") else {
        return;
    };
    let backend = s.open().unwrap();
    assert_eq!(backend.snapshot().unwrap().namespaces().unwrap(), ["default"]);
    backend
        .write(&mut |tx| tx.put_namespace(&namespace("team")))
        .unwrap();
    drop(backend);
    let again = s.open().unwrap();
    assert_eq!(
        again.snapshot().unwrap().namespaces().unwrap(),
        ["default", "team"]
    );
}

#[test]
fn a_schema_newer_than_this_build_is_refused_by_both_versions_and_left_alone() {
    let Some(s) = schema("a_schema_newer_than_this_build_is_refused_by_both_versions_and_left_alone") else {
        return;
    };
    drop(s.open().unwrap());
    let newer = schema::latest() + 1;
    s.execute(&format!("UPDATE railyard_schema SET version = {newer}"))
        .unwrap();
    let err = s.open().err().expect("a newer schema is refused");
    assert!(
        matches!(err, OpenError::Schema { found, known, .. } if found == newer && known == schema::latest())
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("schema version {newer}"))
            && msg.contains(&format!("up to {}", schema::latest())),
        "{msg}"
    );
    // Refusing changed nothing.
    s.execute(&format!(
        "DO $$ BEGIN IF (SELECT version FROM railyard_schema) <> {newer} THEN RAISE 'changed'; END IF; END $$"
    ))
    .unwrap();
}

#[test]
fn a_snapshot_sees_one_moment_and_a_failed_write_keeps_nothing() {
    let Some(s) = schema("a_snapshot_sees_one_moment_and_a_failed_write_keeps_nothing") else {
        return;
    };
    let backend = s.open().unwrap();
    let before = backend.snapshot().unwrap();
    assert_eq!(before.namespaces().unwrap().len(), 1);
    backend
        .write(&mut |tx| tx.put_namespace(&namespace("a")))
        .unwrap();
    // The snapshot taken before the commit still sees its own moment.
    assert_eq!(before.namespaces().unwrap().len(), 1);
    assert_eq!(backend.snapshot().unwrap().namespaces().unwrap().len(), 2);

    // The closure sees its own writes; its error abandons them all.
    let err = backend
        .write(&mut |tx| {
            tx.put_namespace(&namespace("b"))?;
            assert!(tx.namespace("b")?.is_some(), "reads see the transaction's writes");
            Err(StorageError::Injected("no".into()))
        })
        .unwrap_err();
    assert!(matches!(err, StorageError::Injected(_)));
    assert_eq!(
        backend.snapshot().unwrap().namespaces().unwrap(),
        ["a", "default"]
    );

    // A statement that fails inside the closure, with its error swallowed, still
    // fails the commit: the transaction was aborted on the server. A write is sent
    // with the next statement waited for (here the read), whose error it is.
    let err = backend
        .write(&mut |tx| {
            tx.put_namespace(&namespace("c"))?;
            // Text may not hold NUL: the server refuses the statement.
            let _ = tx.put_namespace(&namespace("bad\0name"));
            assert!(tx.namespace("a").is_err(), "the write's error, with the read");
            Ok(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("rolled back"), "{err}");
    // Without a read after it, the commit it is sent with fails.
    let err = backend
        .write(&mut |tx| {
            tx.put_namespace(&namespace("c"))?;
            let _ = tx.put_namespace(&namespace("bad\0name"));
            Ok(())
        })
        .unwrap_err();
    assert!(!matches!(err, StorageError::Injected(_)), "{err}");
    assert_eq!(
        backend.snapshot().unwrap().namespaces().unwrap(),
        ["a", "default"]
    );
}

#[test]
fn a_deadlocked_write_is_run_again() {
    let Some(s) = schema("a_deadlocked_write_is_run_again") else {
        return;
    };
    let a = Arc::new(s.open().unwrap());
    // The write takes row x, another transaction (a plain connection: a second
    // backend would be refused the database) takes y, the write waits for y, and
    // then the other for x. The write waited first, so the database ends it (40P01)
    // and the backend runs it again.
    let runs = Arc::new(AtomicUsize::new(0));
    let mut other = None;
    let put = "INSERT INTO namespaces (name, record) VALUES ($1, $2)
               ON CONFLICT (name) DO UPDATE SET record = excluded.record";
    a.write(&mut |tx| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        tx.put_namespace(&namespace("x"))?;
        if n == 0 {
            let conn = a.begin("BEGIN")?;
            conn.execute(put, params!["y".to_string(), b"{}".to_vec()])?;
            other = Some(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                let taken = conn.execute(put, params!["x".to_string(), b"{}".to_vec()]);
                taken.and_then(|_| conn.commit())
            }));
        }
        tx.put_namespace(&namespace("y"))
    })
    .unwrap();
    // The other may have been the one ended: either way it finished.
    let _ = other.expect("the other transaction started").join().unwrap();
    assert!(runs.load(Ordering::SeqCst) >= 2, "the write ran again");
    assert_eq!(a.snapshot().unwrap().namespaces().unwrap(), ["default", "x", "y"]);
    // Counted for /metrics, by cause (a serialization failure under SERIALIZABLE).
    let retried: u64 = a.stats().retries.iter().map(|(_, n)| n).sum();
    assert_eq!(retried as usize, runs.load(Ordering::SeqCst) - 1);
}

#[test]
fn the_backend_reports_its_pool_claim_and_renewals_and_pings() {
    let Some(s) = schema("the_backend_reports_its_pool_claim_and_renewals_and_pings") else {
        return;
    };
    let b = s.open().unwrap();
    b.ping(Duration::from_secs(10)).unwrap();
    let before = b.stats();
    let claim = before.claim.clone().expect("a claim");
    assert_eq!(
        (claim.node.as_str(), claim.epoch, claim.held),
        (b.node(), b.lease_epoch(), true)
    );
    assert_eq!(before.pool.as_ref().map(|p| p.max), Some(4));
    assert_eq!(before.pool.as_ref().map(|p| p.in_use), Some(0));
    b.write(&mut |tx| tx.put_namespace(&namespace("x"))).unwrap();
    let after = b.stats().claim.expect("a claim");
    assert_eq!(after.renewals, claim.renewals + 1, "the write renewed the lease");
    assert_eq!(after.conflicts, 0);
    let snapshot = b.snapshot().unwrap();
    assert_eq!(
        b.stats().pool.map(|p| p.in_use),
        Some(1),
        "the snapshot holds one"
    );
    drop(snapshot);
}

#[test]
fn a_statement_past_its_timeout_fails_and_the_backend_goes_on() {
    let Some(s) = schema("a_statement_past_its_timeout_fails_and_the_backend_goes_on") else {
        return;
    };
    let url = test_url().unwrap_or_default();
    let options = PostgresOptions {
        statement_timeout: Duration::from_millis(200),
        ..s.options()
    };
    let backend = PostgresBackend::open(&url, &options).unwrap();
    let started = Instant::now();
    let conn = backend.begin("BEGIN").unwrap();
    let err = conn.simple("SELECT pg_sleep(5)").unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("statement timeout"), "{err}");
    drop(conn);
    assert_eq!(backend.snapshot().unwrap().namespaces().unwrap(), ["default"]);
}

#[test]
fn an_unreachable_database_is_an_error_that_hides_the_password() {
    // Nothing listens on port 1; this needs no database.
    let url = "postgres://railyard:s3cret@127.0.0.1:1/railyard";
    let options = PostgresOptions {
        connect_timeout: Duration::from_secs(2),
        ..PostgresOptions::default()
    };
    let started = Instant::now();
    let err = PostgresBackend::open(url, &options)
        .err()
        .expect("nothing to connect to");
    assert!(started.elapsed() < Duration::from_secs(10));
    let msg = err.to_string();
    assert!(
        msg.contains("railyard:***@127.0.0.1:1") && !msg.contains("s3cret"),
        "{msg}"
    );
    assert!(!format!("{err:?}").contains("s3cret"));
    assert!(!format!("{options:?}").contains("s3cret"));
}

#[test]
fn bad_tls_settings_and_odd_schema_names_are_refused_before_connecting() {
    // Root certificates that are not PEM, and root certificates without TLS asked.
    let bad_roots = PostgresOptions {
        root_certs_pem: Some(b"not a certificate".to_vec()),
        ..PostgresOptions::default()
    };
    let err = PostgresBackend::open("postgres://u:pw@h/db?sslmode=verify-full", &bad_roots)
        .err()
        .expect("no certificate in the roots");
    assert!(matches!(err, OpenError::Tls { .. }), "{err}");
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
    assert!(!err.to_string().contains(":pw@"));
    let err = PostgresBackend::open("postgres://u:pw@h/db", &bad_roots)
        .err()
        .expect("roots without TLS");
    assert!(err.to_string().contains("sslmode=verify-full"), "{err}");
    let options = PostgresOptions {
        schema: Some("a b".into()),
        ..PostgresOptions::default()
    };
    assert!(PostgresBackend::open("postgres://u@h/db", &options).is_err());
}

#[test]
fn live_output_is_kept_read_and_purged_in_its_own_tables() {
    let Some(s) = schema("live_output_is_kept_read_and_purged_in_its_own_tables") else {
        return;
    };
    let backend = s.open().unwrap();
    railyard_store::output::conformance::check(&backend.output_store());
}
