//! Standing by on a database another node leads: the standby says who leads and
//! where, claims the lease only once it is free or expired, and the node it took the
//! lease from hears that it lost it.

use std::time::{Duration, Instant};

use railyard_store::{Backend, StorageError};

use super::{namespace, schema};
use crate::testing::{TestSchema, test_url};
use crate::{Opening, PostgresBackend, PostgresOptions, Standby};

/// Bounds a wait that should end long before; never a measure of anything.
const HANG: Duration = Duration::from_secs(60);

fn short(s: &TestSchema) -> PostgresOptions {
    PostgresOptions {
        lease: Duration::from_secs(1),
        lease_renew_every: Duration::from_millis(200),
        ..s.options()
    }
}

fn standby(options: &PostgresOptions) -> Standby {
    match PostgresBackend::open_or_standby(&test_url().unwrap_or_default(), options).unwrap() {
        Opening::Standby(standby) => standby,
        Opening::Leader(b) => panic!("claimed a held lease (node {})", b.node()),
    }
}

#[test]
fn a_standby_names_the_leader_and_its_addresses_and_claims_only_a_released_lease() {
    let Some(s) = schema("a_standby_names_the_leader_and_its_addresses") else {
        return;
    };
    let url = test_url().unwrap_or_default();
    let first = match PostgresBackend::open_or_standby(&url, &s.options()).unwrap() {
        Opening::Leader(b) => b,
        Opening::Standby(_) => panic!("a free database stood by"),
    };
    let second = standby(&s.options());
    assert_ne!(second.node(), first.node());
    let leader = second.leader().unwrap().expect("a leader");
    assert_eq!(
        (
            leader.node.as_str(),
            leader.epoch,
            leader.grpc.as_str(),
            leader.tls
        ),
        (first.node(), first.lease_epoch(), "", false),
        "no address until the leader says"
    );
    first
        .advertise("db1.internal:7400", "db1.internal:7401", true)
        .unwrap();
    let leader = second.leader().unwrap().expect("a leader");
    assert_eq!(
        (leader.grpc.as_str(), leader.http.as_str(), leader.tls),
        ("db1.internal:7400", "db1.internal:7401", true)
    );
    assert!(leader.in_secs > 0.0, "{leader:?}");
    assert!(second.try_claim().unwrap().is_none(), "the lease is held");
    first
        .write(&mut |tx| tx.put_namespace(&namespace("still")))
        .unwrap();

    let epoch = first.lease_epoch();
    drop(first);
    assert_eq!(second.leader().unwrap(), None, "a released lease: nobody leads");
    let claimed = second
        .try_claim()
        .unwrap()
        .expect("the released lease is claimed");
    assert_eq!(claimed.node(), second.node());
    assert_eq!(claimed.lease_epoch(), epoch + 1);
    let leader = second.leader().unwrap().expect("the standby's own claim");
    assert_eq!(
        (leader.node.as_str(), leader.grpc.as_str(), leader.http.as_str()),
        (second.node(), "", ""),
        "a claim clears the last holder's addresses"
    );
    claimed
        .write(&mut |tx| tx.put_namespace(&namespace("by the new leader")))
        .unwrap();
}

#[test]
fn the_node_a_standby_took_the_expired_lease_from_hears_it_lost_it_and_writes_nothing() {
    let Some(s) = schema("the_node_a_standby_took_the_expired_lease_from_hears_it_lost_it") else {
        return;
    };
    let url = test_url().unwrap_or_default();
    let first = PostgresBackend::open(&url, &short(&s)).unwrap();
    let mut lost = first.lost();
    assert_eq!(*lost.borrow(), None);
    let second = standby(&short(&s));
    // SIGSTOP, as far as the lease is concerned.
    first.pause_lease_renewal(true);
    let deadline = Instant::now() + HANG;
    let claimed = loop {
        if let Some(b) = second.try_claim().unwrap() {
            break b;
        }
        assert!(Instant::now() < deadline, "the expired lease was never claimed");
        std::thread::sleep(Duration::from_millis(100));
    };
    first.advertise("old:1", "old:2", false).unwrap_err();
    first.pause_lease_renewal(false);
    let err = first
        .write(&mut |tx| tx.put_namespace(&namespace("stale")))
        .unwrap_err();
    assert!(matches!(err, StorageError::Fenced { .. }), "{err}");
    assert!(lost.has_changed().unwrap());
    assert_eq!(lost.borrow_and_update().as_deref(), Some(claimed.node()));
    assert_eq!(
        second.leader().unwrap().map(|l| l.node),
        Some(claimed.node().to_string())
    );
    assert!(claimed.snapshot().unwrap().namespaces().unwrap() == ["default"]);
}

#[test]
fn a_renewal_that_finds_the_lease_taken_says_so_on_the_lost_channel() {
    let Some(s) = schema("a_renewal_that_finds_the_lease_taken_says_so") else {
        return;
    };
    let url = test_url().unwrap_or_default();
    let first = PostgresBackend::open(&url, &short(&s)).unwrap();
    let mut lost = first.lost();
    // Another node takes the lease under it (as if the first had been stopped past it).
    s.execute("UPDATE writer_lease SET node = 'usurper', epoch = epoch + 1")
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let heard = rt
        .block_on(async {
            tokio::time::timeout(HANG, lost.wait_for(|l| l.is_some()))
                .await
                .map(|l| l.map(|v| v.clone()))
        })
        .expect("the renewal timer noticed")
        .unwrap();
    assert_eq!(heard.as_deref(), Some("usurper"));
}
