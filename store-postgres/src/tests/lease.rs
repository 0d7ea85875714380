//! The writer lease against a real server: a second backend on the same database is
//! refused while the first holds it, claims it once it expired, and the first then
//! writes nothing more; a clean drop gives it up at once.

use std::time::{Duration, Instant};

use railyard_store::{Backend, StorageError};

use super::{namespace, schema};
use crate::testing::{TestSchema, test_url};
use crate::{OpenError, PostgresBackend, PostgresOptions};

/// Bounds a wait that should end long before; never a measure of anything.
const HANG: Duration = Duration::from_secs(60);

/// A backend on `s` with a short lease whose timer renews often.
fn short_lease(s: &TestSchema) -> Result<PostgresBackend, OpenError> {
    let options = PostgresOptions {
        lease: Duration::from_secs(1),
        lease_renew_every: Duration::from_millis(200),
        ..s.options()
    };
    PostgresBackend::open(&test_url().unwrap_or_default(), &options)
}

/// Opens a backend on `s` (with the default lease) once the lease someone holds has
/// expired (refusals until then); gives up after [`HANG`].
fn claim_when_expired(s: &TestSchema) -> PostgresBackend {
    let deadline = Instant::now() + HANG;
    loop {
        match s.open() {
            Ok(backend) => return backend,
            Err(OpenError::Held { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("could not claim the expired lease: {e}"),
        }
    }
}

#[test]
fn a_second_backend_is_refused_while_the_first_holds_the_lease_and_changes_nothing() {
    let Some(s) = schema("a_second_backend_is_refused_while_the_first_holds_the_lease") else {
        return;
    };
    let first = s.open().unwrap();
    let err = s.open().err().expect("the database is held");
    let OpenError::Held { node, .. } = &err else {
        panic!("not refused for the lease: {err}");
    };
    assert_eq!(node, first.node());
    let msg = err.to_string();
    assert!(
        msg.contains("another railyard server writes to this database")
            && msg.contains(&format!("node {}", first.node()))
            && msg.contains("lease until")
            && msg.contains("stop it or wait"),
        "{msg}"
    );
    // The first still holds the lease at its epoch, and goes on writing.
    s.execute(&format!(
        "DO $$ BEGIN IF (SELECT epoch FROM writer_lease) <> {} THEN RAISE 'changed'; END IF; END $$",
        first.lease_epoch()
    ))
    .unwrap();
    first
        .write(&mut |tx| tx.put_namespace(&namespace("still")))
        .unwrap();
    assert_eq!(
        first.snapshot().unwrap().namespaces().unwrap(),
        ["default", "still"]
    );
}

#[test]
fn a_paused_backend_past_its_lease_loses_the_database_and_writes_nothing() {
    let Some(s) = schema("a_paused_backend_past_its_lease_loses_the_database_and_writes_nothing") else {
        return;
    };
    let first = short_lease(&s).unwrap();
    first
        .write(&mut |tx| tx.put_namespace(&namespace("before")))
        .unwrap();
    // SIGSTOP, as far as the lease is concerned: no renewals, no writes.
    first.pause_lease_renewal(true);
    let second = claim_when_expired(&s);
    assert_ne!(second.node(), first.node());
    assert_eq!(second.lease_epoch(), first.lease_epoch() + 1);

    // The first wakes up and writes: fenced, nothing kept.
    first.pause_lease_renewal(false);
    let err = first
        .write(&mut |tx| tx.put_namespace(&namespace("after")))
        .unwrap_err();
    assert!(
        matches!(&err, StorageError::Fenced { holder } if holder == second.node()),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "lost its claim on the database to node {}",
            second.node()
        )),
        "{err}"
    );
    // And every later write fails the same way without trying.
    let mut ran = false;
    let again = first
        .write(&mut |tx| {
            ran = true;
            tx.put_namespace(&namespace("later"))
        })
        .unwrap_err();
    assert!(matches!(again, StorageError::Fenced { .. }), "{again}");
    assert!(!ran, "a fenced backend does not run the write");
    // Health and metrics say so: the ping fails, the claim is not held, one conflict.
    assert!(matches!(first.ping(HANG), Err(StorageError::Fenced { .. })));
    let claim = first.stats().claim.expect("a claim");
    assert_eq!((claim.held, claim.conflicts), (false, 1));
    s.execute(
        "DO $$ BEGIN IF (SELECT count(*) FROM namespaces) <> 2 THEN RAISE 'a fenced write was kept'; END IF; END $$",
    )
    .unwrap();
    assert_eq!(
        second.snapshot().unwrap().namespaces().unwrap(),
        ["before", "default"]
    );

    // The second writes on; dropping the fenced first does not release its lease.
    drop(first);
    second
        .write(&mut |tx| tx.put_namespace(&namespace("second")))
        .unwrap();
    assert!(matches!(s.open(), Err(OpenError::Held { .. })));
}

#[test]
fn an_idle_backend_keeps_its_lease_by_renewing_it() {
    let Some(s) = schema("an_idle_backend_keeps_its_lease_by_renewing_it") else {
        return;
    };
    let options = PostgresOptions {
        lease: Duration::from_secs(5),
        lease_renew_every: Duration::from_millis(100),
        ..s.options()
    };
    let first = PostgresBackend::open(&test_url().unwrap_or_default(), &options).unwrap();
    // The timer moves the expiry forward without any write.
    let expiry = || {
        s.query_text("SELECT expires_at::text FROM writer_lease WHERE id = 1")
            .unwrap()
            .expect("the lease row")
    };
    let deadline = Instant::now() + HANG;
    let (mut renewals, mut last) = (0, expiry());
    while renewals < 3 {
        assert!(Instant::now() < deadline, "the timer did not renew the lease");
        std::thread::sleep(Duration::from_millis(50));
        let now = expiry();
        if now != last {
            renewals += 1;
            last = now;
        }
    }
    assert!(matches!(s.open(), Err(OpenError::Held { .. })));
    first
        .write(&mut |tx| tx.put_namespace(&namespace("idle")))
        .unwrap();
}

#[test]
fn a_dropped_backend_releases_the_lease_so_the_next_claims_at_once() {
    let Some(s) = schema("a_dropped_backend_releases_the_lease_so_the_next_claims_at_once") else {
        return;
    };
    // A long lease: only the release lets the next one in.
    let first = s.open().unwrap();
    let epoch = first.lease_epoch();
    drop(first);
    let next = s.open().expect("the released lease is claimed at once");
    assert_eq!(next.lease_epoch(), epoch + 1);
}
