//! Tests of `railyard key`: a whole key cut to its id, and how keys are listed.

use super::*;

#[test]
fn a_whole_key_is_cut_to_its_id() {
    assert_eq!(key_id_of("ry_0123456789abcdef_ffff"), "0123456789abcdef");
    assert_eq!(key_id_of(" 0123456789abcdef\n"), "0123456789abcdef");
}

#[test]
fn keys_are_listed_with_their_state() {
    let k = ApiKeyInfo {
        key_id: "0123456789abcdef".into(),
        namespace: "default".into(),
        role: ApiKeyRole::Worker as i32,
        task_queues: vec!["a".into(), "b".into()],
        create_time_unix_ms: 1_714_564_800_000,
        revoke_time_unix_ms: 1_714_564_860_000,
        description: "ci".into(),
        ..Default::default()
    };
    assert_eq!(
        list_lines(std::slice::from_ref(&k)),
        vec![
            "KEY ID            NAMESPACE  ROLE    QUEUES  CREATED               STATE                         DESCRIPTION",
            "0123456789abcdef  default    worker  a,b     2024-05-01T12:00:00Z  revoked 2024-05-01T12:01:00Z  ci",
        ]
    );
    assert_eq!(summary(&k), "role worker, namespace default, queues a,b");
    assert_eq!(key_json(&k)["role"], "worker");
    assert_eq!(list_lines(&[]), vec!["no API keys"]);
}
