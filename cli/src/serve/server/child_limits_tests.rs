//! `--max-child-depth` and `--max-children-per-run`: from flags, environment or the
//! config file, into the server's `ChildLimits`, refused by key out of range.

use std::collections::HashMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn child_limits_from_flags_env_or_file_and_refused_out_of_range() {
    let s = ServerArgs::default().settings_with(env(&[])).unwrap();
    assert_eq!(s.child_limits, ChildLimits::default());
    assert_eq!((s.child_limits.max_depth, s.child_limits.max_children), (3, 10));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("railyard.toml");
    std::fs::write(
        &file,
        "[server]\nmax_child_depth = 5\nmax_children_per_run = 50\n",
    )
    .unwrap();
    let args = ServerArgs {
        config: Some(file.clone()),
        ..ServerArgs::default()
    };
    let s = args.settings_with(env(&[])).unwrap();
    assert_eq!((s.child_limits.max_depth, s.child_limits.max_children), (5, 50));
    let s = args
        .settings_with(env(&[("RAILYARD_MAX_CHILDREN_PER_RUN", "7")]))
        .unwrap();
    assert_eq!((s.child_limits.max_depth, s.child_limits.max_children), (5, 7));
    let flags = ServerArgs {
        max_child_depth: Some(0),
        max_children_per_run: Some(100),
        ..args.clone()
    };
    let s = flags
        .settings_with(env(&[("RAILYARD_MAX_CHILD_DEPTH", "2")]))
        .unwrap();
    assert_eq!(
        s.config().child_limits,
        ChildLimits {
            max_depth: 0,
            max_children: 100
        },
        "flags win over the environment and the file"
    );

    let e = args
        .settings_with(env(&[("RAILYARD_MAX_CHILD_DEPTH", "33")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("server.max_child_depth") && e.contains("RAILYARD_MAX_CHILD_DEPTH"),
        "{e}"
    );
    let too_many = ServerArgs {
        max_children_per_run: Some(10_001),
        ..ServerArgs::default()
    };
    let e = too_many.settings_with(env(&[])).unwrap_err().to_string();
    assert!(
        e.contains("server.max_children_per_run") && e.contains("--max-children-per-run"),
        "{e}"
    );
    let e = args
        .settings_with(env(&[("RAILYARD_MAX_CHILD_DEPTH", "deep")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("server.max_child_depth"), "{e}");
}
