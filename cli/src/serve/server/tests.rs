//! Tests of the server's settings: flags over environment over config file, the
//! triggers file, and values refused by key (including `--max-child-depth` and
//! `--max-children-per-run`, into the server's `ChildLimits`, and the `/mcp` session caps).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use railyard_engine::ChildLimits;
use railyard_server::net::NetLimits;

use super::settings::{DEFAULT_DATA_DIR, DEFAULT_WORKFLOWS};
use super::*;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("railyard.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn triggers_come_from_the_config_file_and_the_triggers_file_it_names() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("more.toml"),
        "[[triggers]]\nid = \"b\"\nworkflow = \"demo\"\nmode = \"serial\"\nconcurrency_key = \"{{$.n}}\"\n",
    )
    .unwrap();
    let config = write(
        &dir,
        "[hooks]\nmax_body_bytes = 2048\ntriggers_file = \"more.toml\"\n\n[[triggers]]\nid = \"a\"\nworkflow = \"demo\"\n\
         goal = \"PR {{$.number}}\"\nsignature_secret = \"$GH\"\ncontext = { repo = \"{{$.repository.full_name}}\" }\n",
    );
    let args = ServerArgs {
        config: Some(config.clone()),
        ..ServerArgs::default()
    };
    let s = args.settings_with(env(&[])).unwrap();
    assert_eq!(s.hook_max_body_bytes, 2048);
    assert_eq!(s.dedup_retention, Duration::from_secs(7 * 86_400));
    let ids: Vec<_> = s.triggers.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(s.triggers[0].goal, "PR {{$.number}}");
    assert_eq!(s.triggers[0].context["repo"], "{{$.repository.full_name}}");
    assert_eq!(s.triggers[1].mode, "serial");
    let c = s.config();
    assert_eq!(c.triggers.config.len(), 2);
    assert_eq!(c.triggers.max_body_bytes, 2048);

    write(&dir, "[[triggers]]\nid = \"a\"\nworkflw = \"demo\"\n");
    let e = args.settings_with(env(&[])).unwrap_err().to_string();
    assert!(e.contains("workflw"), "{e}");
    write(&dir, "[hooks]\nmax_body_bytes = 10\n");
    let e = args.settings_with(env(&[])).unwrap_err().to_string();
    assert!(e.contains("hooks.max_body_bytes"), "{e}");
}

#[test]
fn a_polled_trigger_and_the_poll_bounds_come_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "[hooks]\nmax_pollers = 2\nitems_per_poll = 50\n\n[[triggers]]\nid = \"triage\"\nworkflow = \"demo\"\n\
         goal = \"#{{$.number}}\"\n\n[triggers.poll]\nsource = \"github-issues\"\nrepo = \"acme/app\"\n\
         labels = [\"agent\"]\ntoken = \"$GITHUB_TOKEN\"\nevery = \"5m\"\n",
    );
    let args = ServerArgs {
        config: Some(config),
        ..ServerArgs::default()
    };
    let s = args.settings_with(env(&[])).unwrap();
    let poll = s.triggers[0].poll.clone().expect("a polled trigger");
    assert_eq!((poll.repo.as_str(), poll.every.as_str()), ("acme/app", "5m"));
    assert_eq!(poll.labels, ["agent"]);
    let limits = s.config().triggers.poll;
    assert_eq!(
        (limits.max_pollers, limits.items_per_poll, limits.pages_per_poll),
        (2, 50, 10)
    );
    write(&dir, "[hooks]\npages_per_poll = 0\n");
    let e = args.settings_with(env(&[])).unwrap_err().to_string();
    assert!(e.contains("hooks.pages_per_poll"), "{e}");
}

#[test]
fn defaults_without_file_env_or_flags() {
    let s = ServerArgs::default().settings_with(|_| None).unwrap();
    assert_eq!(s.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    assert_eq!(s.workflows, PathBuf::from(DEFAULT_WORKFLOWS));
    assert_eq!(s.listen.to_string(), "127.0.0.1:7400");
    assert_eq!(s.http_listen.to_string(), "127.0.0.1:7401");
    assert_eq!(s.shutdown_grace, Duration::from_secs(10));
}

#[test]
fn connection_limits_from_flags_env_or_file_and_refused_out_of_range() {
    assert_eq!(
        ServerArgs::default().settings_with(|_| None).unwrap().net,
        NetLimits::default()
    );
    let flags = ServerArgs {
        max_connections: Some(10),
        idle_timeout: Some(30),
        ..Default::default()
    };
    let net = flags.settings_with(|_| None).unwrap().config().net;
    assert_eq!(net.max_connections, 10);
    assert_eq!(net.idle_timeout, Duration::from_secs(30));
    let from_env = ServerArgs::default()
        .settings_with(env(&[("RAILYARD_IDLE_TIMEOUT", "5")]))
        .unwrap();
    assert_eq!(from_env.net.idle_timeout, Duration::from_secs(5));

    let err = ServerArgs::default()
        .settings_with(env(&[("RAILYARD_MAX_CONNECTIONS", "0")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("server.max_connections") && err.contains("RAILYARD_MAX_CONNECTIONS"),
        "{err}"
    );
    let err = ServerArgs {
        idle_timeout: Some(0),
        ..Default::default()
    }
    .settings_with(|_| None)
    .unwrap_err()
    .to_string();
    assert!(err.contains("--idle-timeout"), "{err}");

    let per_peer = ServerArgs {
        max_connections_per_peer: Some(3),
        http_request_timeout: Some(7),
        ..Default::default()
    };
    let net = per_peer.settings_with(|_| None).unwrap().config().net;
    assert_eq!(
        (net.max_per_peer, net.request_timeout),
        (3, Duration::from_secs(7))
    );
    let from_env = ServerArgs::default()
        .settings_with(env(&[
            ("RAILYARD_MAX_CONNECTIONS_PER_PEER", "9"),
            ("RAILYARD_HTTP_REQUEST_TIMEOUT", "11"),
        ]))
        .unwrap();
    assert_eq!(
        (from_env.net.max_per_peer, from_env.net.request_timeout),
        (9, Duration::from_secs(11))
    );
    let err = ServerArgs {
        http_request_timeout: Some(0),
        ..Default::default()
    }
    .settings_with(|_| None)
    .unwrap_err()
    .to_string();
    assert!(err.contains("--http-request-timeout"), "{err}");
    let header = ServerArgs {
        http_header_timeout: Some(2),
        ..Default::default()
    };
    assert_eq!(
        header
            .settings_with(|_| None)
            .unwrap()
            .config()
            .net
            .header_timeout,
        Duration::from_secs(2)
    );
    let from_env = ServerArgs::default()
        .settings_with(env(&[("RAILYARD_HTTP_HEADER_TIMEOUT", "3")]))
        .unwrap();
    assert_eq!(from_env.net.header_timeout, Duration::from_secs(3));
    for (header, request) in [(0, 30), (31, 30)] {
        let err = ServerArgs {
            http_header_timeout: Some(header),
            http_request_timeout: Some(request),
            ..Default::default()
        }
        .settings_with(|_| None)
        .unwrap_err()
        .to_string();
        assert!(err.contains("--http-header-timeout"), "{err}");
    }
    let err = ServerArgs::default()
        .settings_with(env(&[("RAILYARD_MAX_CONNECTIONS_PER_PEER", "0")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("server.max_connections_per_peer"), "{err}");
}

#[test]
fn file_then_env_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "[server]\ndata_dir = \"data\"\nlisten = \"127.0.0.1:1\"\nhttp_listen = \"127.0.0.1:2\"\n\
         workflows = \"/abs/workflows\"\nshutdown_grace_secs = 3\n",
    );
    let args = ServerArgs {
        config: Some(path.clone()),
        ..Default::default()
    };
    let file = args.settings_with(|_| None).unwrap();
    assert_eq!(file.data_dir, dir.path().join("data"), "relative to the file");
    assert_eq!(file.workflows, PathBuf::from("/abs/workflows"));
    assert_eq!(file.listen.port(), 1);
    assert_eq!(file.shutdown_grace, Duration::from_secs(3));

    let vars = [
        ("RAILYARD_LISTEN", "127.0.0.1:3"),
        ("RAILYARD_DATA_DIR", "envdata"),
    ];
    let with_env = args.settings_with(env(&vars)).unwrap();
    assert_eq!(with_env.listen.port(), 3);
    assert_eq!(
        with_env.data_dir,
        PathBuf::from("envdata"),
        "env paths are taken as given"
    );
    assert_eq!(with_env.http_listen.port(), 2);

    let flags = ServerArgs {
        listen: Some("127.0.0.1:4".parse().unwrap()),
        shutdown_grace: Some(0),
        ..args
    };
    let all = flags.settings_with(env(&vars)).unwrap();
    assert_eq!(all.listen.port(), 4);
    assert_eq!(all.data_dir, PathBuf::from("envdata"));
    assert_eq!(all.shutdown_grace, Duration::ZERO);
    assert_eq!(all.config().grpc_listen.port(), 4);
}

#[test]
fn bad_settings_name_the_key_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let with = |text: &str| ServerArgs {
        config: Some(write(&dir, text)),
        ..Default::default()
    };
    let err = with("[server]\nlisten = \"nowhere\"\n")
        .settings_with(|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("railyard.toml") && err.contains("`server.listen`"),
        "{err}"
    );

    let err = with("[server]\nlisen = \"127.0.0.1:1\"\n")
        .settings_with(|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("railyard.toml") && err.contains("server.lisen") && err.contains("unknown field"),
        "{err}"
    );

    let err = with("[auth]\nmode = \"none\"\n")
        .settings_with(|_| None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("auth") && err.contains("unknown field"), "{err}");

    let err = with("[server]\nshutdown_grace_secs = 99999\n")
        .settings_with(|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("railyard.toml") && err.contains("`server.shutdown_grace_secs`"),
        "{err}"
    );

    let err = ServerArgs::default()
        .settings_with(env(&[("RAILYARD_HTTP_LISTEN", "nowhere")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("environment variable RAILYARD_HTTP_LISTEN: `server.http_listen`"),
        "{err}"
    );

    let same = ServerArgs {
        listen: Some("127.0.0.1:9".parse().unwrap()),
        http_listen: Some("127.0.0.1:9".parse().unwrap()),
        ..Default::default()
    };
    let err = same.settings_with(|_| None).unwrap_err().to_string();
    assert!(
        err.starts_with("flag --http-listen: `server.http_listen`"),
        "{err}"
    );
}

#[test]
fn missing_files_and_directories_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = ServerArgs {
        config: Some(dir.path().join("nope.toml")),
        ..Default::default()
    };
    let err = missing.settings_with(|_| None).unwrap_err().to_string();
    assert!(err.contains("nope.toml") && err.contains("cannot read"), "{err}");
    let a_dir = ServerArgs {
        config: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let err = a_dir.settings_with(|_| None).unwrap_err().to_string();
    assert!(err.contains("not a regular file (a directory)"), "{err}");
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

#[test]
fn the_store_is_redb_in_the_data_dir_or_named_by_store_but_not_both() {
    let s = ServerArgs::default().settings_with(|_| None).unwrap();
    assert_eq!(s.store, StoreSetting::Redb(PathBuf::from(DEFAULT_DATA_DIR)));

    let redb = ServerArgs {
        store: Some("redb:/srv/ry".into()),
        ..ServerArgs::default()
    };
    let s = redb.settings_with(|_| None).unwrap();
    assert_eq!(s.store, StoreSetting::Redb(PathBuf::from("/srv/ry")));
    assert_eq!(s.data_dir, PathBuf::from("/srv/ry"), "redb:DIR is --data-dir DIR");

    // From the environment, with the keys in a directory of their own.
    let url = "postgres://ry:s3cret@db:5432/railyard";
    let vars = [("RAILYARD_STORE", url), ("RAILYARD_KEYS_DIR", "/var/lib/ry")];
    let s = ServerArgs::default().settings_with(env(&vars)).unwrap();
    assert_eq!(s.store, StoreSetting::Postgres(url.into()));
    assert_eq!(s.data_dir, PathBuf::from("/var/lib/ry"));
    // Shown, and debug-printed, without the password.
    assert_eq!(s.store.shown(), "postgres://ry:***@db:5432/railyard");
    assert!(!format!("{s:?}").contains("s3cret"));
    let pg = ServerArgs::default()
        .settings_with(env(&[("RAILYARD_STORE", "postgresql://ry@db/railyard")]))
        .unwrap();
    assert_eq!(
        pg.data_dir,
        PathBuf::from(DEFAULT_DATA_DIR),
        "keys default to ./.railyard"
    );

    // Both a store and a data directory: refused, naming both.
    let both = ServerArgs {
        store: Some(url.into()),
        data_dir: Some("d".into()),
        ..ServerArgs::default()
    };
    let e = both.settings_with(|_| None).unwrap_err().to_string();
    assert!(e.contains("server.store") && e.contains("server.data_dir"), "{e}");
    assert!(!e.contains("s3cret"), "{e}");

    // A keys directory only goes with a postgres store; an unknown store is refused
    // without showing its password.
    let keys = ServerArgs {
        keys_dir: Some("k".into()),
        ..ServerArgs::default()
    };
    let e = keys.settings_with(|_| None).unwrap_err().to_string();
    assert!(e.contains("server.keys_dir"), "{e}");
    // So does the database's CA file.
    let ca = ServerArgs {
        store_ca: Some("ca.pem".into()),
        ..ServerArgs::default()
    };
    let e = ca.settings_with(|_| None).unwrap_err().to_string();
    assert!(e.contains("server.store_ca"), "{e}");
    let vars = [
        ("RAILYARD_STORE", url),
        ("RAILYARD_STORE_CA", "/etc/ry/db-ca.pem"),
    ];
    let s = ServerArgs::default().settings_with(env(&vars)).unwrap();
    assert_eq!(s.store_ca, Some(PathBuf::from("/etc/ry/db-ca.pem")));
    for bad in ["mysql://u:s3cret@h/db", "redb:", "/srv/ry"] {
        let args = ServerArgs {
            store: Some(bad.into()),
            ..ServerArgs::default()
        };
        let e = args.settings_with(|_| None).unwrap_err().to_string();
        assert!(e.contains("server.store") && !e.contains("s3cret"), "{e}");
    }
}

#[test]
fn several_nodes_settings_go_with_a_postgres_store_and_are_checked() {
    let url = "postgres://ry@db:5432/railyard";
    let pg = |f: &dyn Fn(&mut ServerArgs)| {
        let mut args = ServerArgs {
            store: Some(url.into()),
            ..ServerArgs::default()
        };
        f(&mut args);
        args.settings_with(|_| None)
    };
    let s = pg(&|_| {}).unwrap();
    assert_eq!(s.node_lease, Duration::from_secs(30));
    assert_eq!(s.advertised_host(), "127.0.0.1", "the listen IP by default");
    let s = pg(&|a| {
        a.node_lease = Some("3s".into());
        a.advertise_host = Some("node1.internal".into());
        a.listen = Some("0.0.0.0:7400".parse().unwrap());
        a.http_listen = Some("0.0.0.0:7401".parse().unwrap());
    })
    .unwrap();
    assert_eq!(s.node_lease, Duration::from_secs(3));
    assert_eq!(s.advertised_host(), "node1.internal");
    let s = ServerArgs {
        store: Some(url.into()),
        ..ServerArgs::default()
    }
    .settings_with(env(&[
        ("RAILYARD_NODE_LEASE", "1m"),
        ("RAILYARD_ADVERTISE_HOST", "10.0.0.5"),
    ]))
    .unwrap();
    assert_eq!(
        (s.node_lease, s.advertised_host().as_str()),
        (Duration::from_secs(60), "10.0.0.5")
    );

    // Every interface, and nothing says where the other nodes reach this one.
    let e = pg(&|a| a.listen = Some("0.0.0.0:7400".parse().unwrap()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--advertise-host") && e.contains("server.listen"),
        "{e}"
    );
    // Mutual TLS cannot cross a follower.
    let dir = tempfile::tempdir().unwrap();
    let e = pg(&|a| {
        a.tls_cert = Some(dir.path().join("c.pem"));
        a.tls_key = Some(dir.path().join("k.pem"));
        a.tls_client_ca = Some(dir.path().join("ca.pem"));
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("server.tls_client_ca") && e.contains("mutual TLS"),
        "{e}"
    );
    for bad in ["0s", "11m", "soon"] {
        let e = pg(&|a| a.node_lease = Some(bad.into())).unwrap_err().to_string();
        assert!(e.contains("server.node_lease"), "{bad}: {e}");
    }
    let e = pg(&|a| a.advertise_host = Some("a b".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("server.advertise_host"), "{e}");
    // Not with redb.
    for (args, key) in [
        (
            ServerArgs {
                advertise_host: Some("h".into()),
                ..ServerArgs::default()
            },
            "server.advertise_host",
        ),
        (
            ServerArgs {
                node_lease: Some("3s".into()),
                ..ServerArgs::default()
            },
            "server.node_lease",
        ),
        (
            ServerArgs {
                peer_ca: Some("ca.pem".into()),
                ..ServerArgs::default()
            },
            "server.peer_ca",
        ),
    ] {
        let e = args.settings_with(|_| None).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("postgres"), "{e}");
    }
}

#[test]
fn delivery_allow_networks_come_from_the_file_the_environment_or_repeated_flags() {
    let dir = tempfile::tempdir().unwrap();
    let nets = |s: &ServerSettings| -> Vec<String> {
        s.config()
            .delivery
            .allow_networks
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    // None by default: internal addresses are refused.
    assert!(nets(&ServerArgs::default().settings_with(|_| None).unwrap()).is_empty());
    let file = ServerArgs {
        config: Some(write(
            &dir,
            "[delivery]\nallow_networks = [\"127.0.0.0/8\", \"::1\"]\nmax_per_target = 2\nmax_per_namespace = 3\n",
        )),
        ..Default::default()
    };
    let from_file = file.settings_with(|_| None).unwrap();
    assert_eq!(nets(&from_file), ["127.0.0.0/8", "::1/128"]);
    assert_eq!(from_file.config().delivery.max_per_target, Some(2));
    assert_eq!(from_file.config().delivery.max_per_namespace, Some(3));
    let from_env = ServerArgs::default()
        .settings_with(env(&[(
            "RAILYARD_DELIVERY_ALLOW_NETWORKS",
            "10.0.0.0/8, 192.168.0.0/16",
        )]))
        .unwrap();
    assert_eq!(nets(&from_env), ["10.0.0.0/8", "192.168.0.0/16"]);
    let flags = ServerArgs {
        delivery_allow_networks: vec!["127.0.0.0/8".into(), "fd00::/8".into()],
        ..file
    };
    assert_eq!(
        nets(&flags.settings_with(|_| None).unwrap()),
        ["127.0.0.0/8", "fd00::/8"],
        "flags win over the file"
    );
    let err = ServerArgs {
        delivery_allow_networks: vec!["10.0.0.0/40".into()],
        ..Default::default()
    }
    .settings_with(|_| None)
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("delivery.allow_networks")
            && err.contains("10.0.0.0/40")
            && err.contains("--delivery-allow-network"),
        "{err}"
    );
}

#[test]
fn cache_size_from_flags_env_or_file_and_refused_out_of_range() {
    let s = ServerArgs::default().settings_with(env(&[])).unwrap();
    assert_eq!(s.cache_size_mib, 64);
    assert_eq!(s.config().cache_bytes, 64 << 20);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("railyard.toml");
    std::fs::write(&file, "[server]\ncache_size_mib = 256\n").unwrap();
    let args = ServerArgs {
        config: Some(file),
        ..ServerArgs::default()
    };
    assert_eq!(args.settings_with(env(&[])).unwrap().cache_size_mib, 256);
    let s = args
        .settings_with(env(&[("RAILYARD_CACHE_SIZE_MIB", "16")]))
        .unwrap();
    assert_eq!(s.config().cache_bytes, 16 << 20);
    let flags = ServerArgs {
        cache_size_mib: Some(8),
        ..args.clone()
    };
    let s = flags
        .settings_with(env(&[("RAILYARD_CACHE_SIZE_MIB", "16")]))
        .unwrap();
    assert_eq!(s.cache_size_mib, 8, "the flag wins");

    let zero = ServerArgs {
        cache_size_mib: Some(0),
        ..ServerArgs::default()
    };
    let e = zero.settings_with(env(&[])).unwrap_err().to_string();
    assert!(
        e.contains("server.cache_size_mib") && e.contains("--cache-size-mib"),
        "{e}"
    );
    let e = args
        .settings_with(env(&[("RAILYARD_CACHE_SIZE_MIB", "lots")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("server.cache_size_mib") && e.contains("RAILYARD_CACHE_SIZE_MIB"),
        "{e}"
    );
}

#[test]
fn mcp_session_caps_from_flags_env_or_file_and_refused_out_of_range() {
    use railyard_gateway::sessions::SessionLimits;
    let s = ServerArgs::default().settings_with(env(&[])).unwrap();
    assert_eq!(s.mcp_sessions, SessionLimits::default());

    let dir = tempfile::tempdir().unwrap();
    let file = write(
        &dir,
        "[server]\nmcp_max_sessions = 50\nmcp_max_sessions_per_key = 4\nmcp_session_idle_secs = 30\n",
    );
    let args = ServerArgs {
        config: Some(file),
        ..ServerArgs::default()
    };
    let s = args
        .settings_with(env(&[("RAILYARD_MCP_MAX_SESSIONS_PER_KEY", "3")]))
        .unwrap();
    assert_eq!(
        s.mcp_sessions,
        SessionLimits {
            max_total: 50,
            max_per_key: 3,
            idle: Duration::from_secs(30)
        }
    );
    let flags = ServerArgs {
        mcp_max_sessions: Some(9),
        ..args.clone()
    };
    assert_eq!(flags.settings_with(env(&[])).unwrap().mcp_sessions.max_total, 9);

    let e = args
        .settings_with(env(&[("RAILYARD_MCP_MAX_SESSIONS", "0")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("server.mcp_max_sessions"), "{e}");
    let idle = ServerArgs {
        mcp_session_idle: Some(0),
        ..ServerArgs::default()
    };
    let e = idle.settings_with(env(&[])).unwrap_err().to_string();
    assert!(
        e.contains("server.mcp_session_idle_secs") && e.contains("--mcp-session-idle"),
        "{e}"
    );
}

#[test]
fn live_output_settings_from_the_file_and_refused_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, "");
    let args = ServerArgs {
        config: Some(config.clone()),
        ..ServerArgs::default()
    };
    let defaults = args.settings_with(env(&[])).unwrap();
    assert_eq!(
        defaults.config().output,
        railyard_engine::output::OutputSettings::default()
    );
    assert_eq!(defaults.output.retention_ms, 7 * 86_400_000);
    write(
        &dir,
        "[output]\nattempt_cap_bytes = 8192\nrun_cap_bytes = 65536\nretention_secs = 3600\nflush_interval_ms = 50\nwatch_buffer = 64\n",
    );
    let c = args.settings_with(env(&[])).unwrap().config();
    assert_eq!(
        (
            c.output.attempt_cap_bytes,
            c.output.run_cap_bytes,
            c.output.retention_ms
        ),
        (8192, 65536, 3_600_000)
    );
    assert_eq!((c.output.flush_interval_ms, c.output.watch_buffer), (50, 64));
    for (text, key) in [
        ("[output]\nattempt_cap_bytes = 10\n", "output.attempt_cap_bytes"),
        ("[output]\nrun_cap_bytes = 2000000000\n", "output.run_cap_bytes"),
        ("[output]\nflush_interval_ms = 1\n", "output.flush_interval_ms"),
        ("[output]\nwatch_buffer = 0\n", "output.watch_buffer"),
        (
            "[output]\nretention_secs = 999999999999\n",
            "output.retention_secs",
        ),
        ("[output]\ncap = 1\n", "cap"),
    ] {
        write(&dir, text);
        let e = args.settings_with(env(&[])).unwrap_err().to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn kept_transcripts_from_flags_env_or_file_zero_keeps_none_and_too_many_refused() {
    let s = ServerArgs::default().settings_with(env(&[])).unwrap();
    assert_eq!(s.config().kept_checkpoint_bytes, 64 << 20);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("railyard.toml");
    std::fs::write(&file, "[server]\nkept_transcripts_mib = 0\n").unwrap();
    let args = ServerArgs {
        config: Some(file),
        ..ServerArgs::default()
    };
    assert_eq!(
        args.settings_with(env(&[]))
            .unwrap()
            .config()
            .kept_checkpoint_bytes,
        0
    );
    let s = args
        .settings_with(env(&[("RAILYARD_KEPT_TRANSCRIPTS_MIB", "8")]))
        .unwrap();
    assert_eq!(s.config().kept_checkpoint_bytes, 8 << 20);
    let flags = ServerArgs {
        kept_transcripts_mib: Some(2000),
        ..args
    };
    let err = flags.settings_with(env(&[])).unwrap_err().to_string();
    assert!(
        err.contains("server.kept_transcripts_mib") && err.contains("1024"),
        "{err}"
    );
}

#[test]
fn batch_retention_from_the_file_defaults_to_30_days_and_is_refused_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, "");
    let args = ServerArgs {
        config: Some(config.clone()),
        ..ServerArgs::default()
    };
    let defaults = args.settings_with(env(&[])).unwrap().config();
    assert_eq!(defaults.purge.batch_retention_ms, 30 * 86_400_000);
    write(&dir, "[batches]\nretention_secs = 3600\n");
    let c = args.settings_with(env(&[])).unwrap().config();
    assert_eq!(c.purge.batch_retention_ms, 3_600_000);
    write(&dir, "[batches]\nretention_secs = 0\n");
    let c = args.settings_with(env(&[])).unwrap().config();
    assert_eq!(c.purge.batch_retention_ms, 0, "0 keeps batches for good");
    for (text, key) in [
        (
            "[batches]\nretention_secs = 999999999999\n",
            "batches.retention_secs",
        ),
        ("[batches]\nretention = 1\n", "retention"),
    ] {
        write(&dir, text);
        let e = args.settings_with(env(&[])).unwrap_err().to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn secrets_are_declared_per_namespace_and_never_the_servers_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, "[secrets]\nGITHUB_TOKEN = [\"team-a\"]\nSHARED = [\"*\"]\n");
    let args = ServerArgs {
        config: Some(config),
        ..ServerArgs::default()
    };
    let policy = args.settings_with(env(&[])).unwrap().config().triggers.secrets;
    let api = railyard_model::trigger::Source::Api;
    assert!(policy.check(api, "team-a", "$GITHUB_TOKEN").is_ok());
    assert!(policy.check(api, "team-b", "$GITHUB_TOKEN").is_err());
    assert!(policy.check(api, "team-b", "$SHARED").is_ok());

    write(&dir, "[secrets]\nRAILYARD_DELIVERY_SIGNING_SECRET = [\"*\"]\n");
    let e = args.settings_with(env(&[])).unwrap_err().to_string();
    assert!(
        e.contains("secrets") && e.contains("server's own settings"),
        "{e}"
    );
}
