use std::collections::HashMap;
use std::net::SocketAddr;

use serde::Deserialize;

use super::*;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    #[serde(default)]
    server: Section,
    slots: Option<u32>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Section {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    grace_secs: Option<f64>,
}

const ENV: &[EnvVar] = &[
    EnvVar {
        var: "T_LISTEN",
        key: "server.listen",
    },
    EnvVar {
        var: "T_DATA_DIR",
        key: "server.data_dir",
    },
    EnvVar {
        var: "T_SLOTS",
        key: "slots",
    },
];

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load(
    path: Option<&Path>,
    vars: &[(&str, &str)],
    flags: &Settings,
) -> Result<Loaded<Settings>, ConfigError> {
    Loader::new()
        .file(path)?
        .env(ENV, env(vars))
        .flags(flags, &[("server.listen", "--grpc")])?
        .load()
}

#[test]
fn file_then_env_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(
        &dir,
        "railyard.toml",
        "slots = 2\n[server]\nlisten = \"127.0.0.1:1\"\ndata_dir = \"d\"\ngrace_secs = 1.5\n",
    );
    let none = Settings::default();
    let only_file = load(Some(&path), &[], &none).unwrap();
    assert_eq!(only_file.value.slots, Some(2));
    assert_eq!(only_file.value.server.grace_secs, Some(1.5));
    assert_eq!(
        only_file.origin("slots"),
        format!("config file {}", path.display())
    );
    assert_eq!(only_file.file_of("server.data_dir"), Some(path.as_path()));

    let vars = [
        ("T_LISTEN", "127.0.0.1:2"),
        ("T_SLOTS", " 3 "),
        ("T_DATA_DIR", "  "),
    ];
    let with_env = load(Some(&path), &vars, &none).unwrap();
    assert_eq!(with_env.value.server.listen, Some("127.0.0.1:2".parse().unwrap()));
    assert_eq!(
        with_env.value.slots,
        Some(3),
        "numbers are read from the variable's text"
    );
    assert_eq!(
        with_env.value.server.data_dir,
        Some(PathBuf::from("d")),
        "a blank variable is unset"
    );
    assert_eq!(with_env.origin("server.listen"), "environment variable T_LISTEN");
    assert_eq!(with_env.file_of("server.listen"), None);

    let flags = Settings {
        server: Section {
            listen: Some("127.0.0.1:3".parse().unwrap()),
            ..Default::default()
        },
        slots: None,
    };
    let all = load(Some(&path), &vars, &flags).unwrap();
    assert_eq!(all.value.server.listen, Some("127.0.0.1:3".parse().unwrap()));
    assert_eq!(all.value.slots, Some(3), "a flag not given hides nothing");
    assert_eq!(all.value.server.grace_secs, Some(1.5));
    assert_eq!(all.origin("server.listen"), "flag --grpc");
    assert_eq!(all.origin("nothing.here"), "default");
    let err = all.invalid("slots", "must be at least 1").to_string();
    assert_eq!(err, "environment variable T_SLOTS: `slots`: must be at least 1");
}

#[test]
fn bad_values_name_the_key_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "bad.toml", "[server]\nlisten = \"nowhere\"\n");
    let err = load(Some(&path), &[], &Settings::default()).unwrap_err();
    let ConfigError::Key { key, origin, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(key, "server.listen");
    assert_eq!(origin, &format!("config file {}", path.display()));
    assert!(err.to_string().contains("bad.toml"), "{err}");

    let err = load(None, &[("T_SLOTS", "four")], &Settings::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("environment variable T_SLOTS: `slots`: "),
        "{err}"
    );

    let path = file(&dir, "typo.toml", "[server]\nlistn = \"127.0.0.1:1\"\n");
    let err = load(Some(&path), &[], &Settings::default()).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Key { key, message, .. } if key == "server.listn" && message.contains("unknown field")),
        "{err:?}"
    );
    assert!(err.to_string().contains("typo.toml"), "{err}");

    let path = file(&dir, "broken.toml", "[server\n");
    let err = load(Some(&path), &[], &Settings::default()).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Parse { path: p, .. } if *p == path),
        "{err:?}"
    );
}

#[test]
fn json_files_are_read_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "w.json", r#"{"slots": 7, "server": {"grace_secs": 0.2}}"#);
    let loaded = load(Some(&path), &[], &Settings::default()).unwrap();
    assert_eq!(loaded.value.slots, Some(7));
    assert_eq!(loaded.value.server.grace_secs, Some(0.2));
    assert_eq!(loaded.origin("slots"), format!("config file {}", path.display()));
    let path = file(&dir, "list.json", "[1, 2]");
    assert!(matches!(
        load(Some(&path), &[], &Settings::default()),
        Err(ConfigError::Parse { .. })
    ));
}

#[test]
fn missing_files_and_directories_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let err = load(Some(&missing), &[], &Settings::default()).unwrap_err();
    assert!(
        matches!(&err, ConfigError::File { path, .. } if *path == missing),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing.toml"), "{err}");

    let err = load(Some(dir.path()), &[], &Settings::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a regular file (a directory)"), "{err}");

    let big = file(&dir, "big.toml", &"#".repeat(MAX_FILE_BYTES as usize + 1));
    let err = load(Some(&big), &[], &Settings::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than the"), "{err}");
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Run it on a thread so a regression shows up as a failure, not a hung test.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(load(Some(&path), &[], &Settings::default()).map(|_| ()));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("reading a FIFO config blocked");
    let err = got.unwrap_err().to_string();
    assert!(
        err.contains("not a regular file (a FIFO)") && err.contains("fifo.toml"),
        "{err}"
    );
}
