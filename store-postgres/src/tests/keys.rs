//! The task-token keys in the database: made once by the first opening (racing
//! openings end with one), the same for every later one, and rotated beside a
//! running backend without its lease.

use railyard_store::{Backend, SharedKeys};

use super::schema;
use crate::testing::test_url;
use crate::{OpenError, RotatedKey, rotate_token_key};

fn keys(b: &dyn Backend) -> SharedKeys {
    b.shared_keys().unwrap().expect("postgres keeps the keys")
}

#[test]
fn the_first_opening_makes_one_key_and_every_later_one_reads_it() {
    let Some(s) = schema("the_first_opening_makes_one_key_and_every_later_one_reads_it") else {
        return;
    };
    let first = s.open().unwrap();
    let made = keys(&first);
    assert_eq!(made.active, "k1");
    assert_eq!(made.keys.len(), 1);
    assert_eq!(made.keys[0].1.len(), 32);
    drop(first);
    let again = s.open().unwrap();
    assert_eq!(keys(&again), made, "a reopening keeps the key");
    assert!(!format!("{made:?}").contains(&format!("{:?}", made.keys[0].1)));
}

#[test]
fn racing_first_openings_end_with_one_key() {
    let Some(s) = schema("racing_first_openings_end_with_one_key") else {
        return;
    };
    // The tables first (racing creations of the tables themselves are another
    // matter), then no key, as on a database the tables were made on.
    drop(s.open().unwrap());
    s.execute("DELETE FROM token_keys").unwrap();
    let opened: Vec<_> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..4).map(|_| scope.spawn(|| s.open())).collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    // The writer lease lets one of them in; the others are refused (or, on a
    // database that lets several in, open too). Either way, one key.
    let mut seen = None;
    for outcome in opened {
        match outcome {
            Ok(b) => {
                let k = keys(&b);
                assert_eq!(*seen.get_or_insert(k.clone()), k);
            }
            Err(OpenError::Held { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(seen.is_some(), "one opening got in");
    assert_eq!(
        s.query_text("SELECT count(*) FROM token_keys")
            .unwrap()
            .as_deref(),
        Some("1")
    );
}

#[test]
fn a_rotation_beside_a_running_backend_adds_a_key_that_signs_and_keeps_the_old() {
    let Some(s) = schema("a_rotation_beside_a_running_backend_adds_a_key_that_signs_and_keeps_the_old")
    else {
        return;
    };
    let url = test_url().unwrap_or_default();
    let running = s.open().unwrap();
    let before = keys(&running);
    let rotated = rotate_token_key(&url, &s.options()).unwrap();
    assert_eq!(
        rotated,
        RotatedKey {
            kid: "k2".into(),
            keys: 2
        }
    );
    let after = keys(&running);
    assert_eq!(after.active, "k2");
    assert_eq!(after.keys[0], before.keys[0], "the old key is kept as it was");
    assert_ne!(after.keys[1].1, before.keys[0].1);
    assert_eq!(rotate_token_key(&url, &s.options()).unwrap().kid, "k3");
    assert_eq!(keys(&running).keys.len(), 3);
}

#[test]
fn a_rotation_on_a_database_without_tables_says_to_start_a_server_first() {
    let Some(s) = schema("a_rotation_on_a_database_without_tables_says_to_start_a_server_first") else {
        return;
    };
    let err = rotate_token_key(&test_url().unwrap_or_default(), &s.options()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("no railyard tables") && msg.contains("start a server"),
        "{msg}"
    );
}
