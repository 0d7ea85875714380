//! The worker configuration's loading, precedence and errors.

use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn load(
    file: Option<&Path>,
    vars: &[(&str, &str)],
    flags: ConfigLayer,
    default_script: Option<ScriptSource>,
) -> Result<WorkerConfig, ConfigError> {
    WorkerConfig::load_with(file, env(vars), flags, default_script)
}

#[test]
fn file_env_flags_precedence() {
    let dir = tempfile::tempdir().unwrap();
    // The JSON files of earlier releases, and TOML with the same keys.
    let json = dir.path().join("worker.json");
    std::fs::write(
        &json,
        r#"{"slots": 2, "queues": ["a"], "namespace": "ns", "workspace": "ws",
        "shutdown_grace_secs": 1.5}"#,
    )
    .unwrap();
    let toml = dir.path().join("worker.toml");
    std::fs::write(
        &toml,
        "slots = 2\nqueues = [\"a\"]\nnamespace = \"ns\"\nworkspace = \"ws\"\nshutdown_grace_secs = 1.5\n",
    )
    .unwrap();
    for path in [&json, &toml] {
        let vars = [
            ("RAILYARD_SLOTS", "3"),
            ("RAILYARD_QUEUES", "b, c,"),
            ("ANTHROPIC_API_KEY", "k"),
        ];
        let flags = ConfigLayer {
            slots: Some(5),
            ..Default::default()
        };
        let cfg = load(Some(path), &vars, flags, None).unwrap();
        assert_eq!(cfg.slots, 5);
        assert_eq!(cfg.queues, vec!["b", "c"]);
        assert_eq!(cfg.namespace, "ns");
        assert_eq!(cfg.workspace, dir.path().join("ws"));
        assert_eq!(cfg.shutdown_grace, Duration::from_millis(1500));
        assert!(matches!(&cfg.provider, ProviderConfig::Anthropic { api_key, .. } if api_key == "k"));
        assert!(
            !format!("{:?}", cfg.provider).contains("\"k\""),
            "key must be redacted"
        );
        assert!(cfg.identity.contains(':'));
        // Without the flag the environment wins over the file; without both, the file.
        let cfg = load(Some(path), &vars, ConfigLayer::default(), None).unwrap();
        assert_eq!(cfg.slots, 3);
        let cfg = load(
            Some(path),
            &[("ANTHROPIC_API_KEY", "k")],
            ConfigLayer::default(),
            None,
        )
        .unwrap();
        assert_eq!((cfg.slots, cfg.queues), (2, vec!["a".to_string()]));
    }
}

#[test]
fn file_errors_name_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["bad.json", "bad.toml"] {
        let path = dir.path().join(name);
        let text = if name.ends_with("json") {
            r#"{"slots": "four"}"#
        } else {
            "slots = \"four\""
        };
        std::fs::write(&path, text).unwrap();
        let err = load(Some(&path), &[], ConfigLayer::default(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains("`slots`"), "{err}");
        let text = if name.ends_with("json") {
            r#"{"slotz": 4}"#
        } else {
            "slotz = 4"
        };
        std::fs::write(&path, text).unwrap();
        let err = load(Some(&path), &[], ConfigLayer::default(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains("slotz"), "{err}");
    }
    // A value that is fine alone but not as a setting names where it was set.
    let path = dir.path().join("zero.toml");
    std::fs::write(&path, "slots = 0").unwrap();
    let err = load(
        Some(&path),
        &[],
        ConfigLayer::default(),
        Some(ScriptSource::Path("s.json".into())),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("zero.toml") && err.contains("`slots`: must be at least 1"),
        "{err}"
    );
    let missing = dir.path().join("missing.toml");
    let err = load(Some(&missing), &[], ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing.toml") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn script_paths_in_a_file_are_relative_to_it_and_inline_scripts_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.toml");
    std::fs::write(&path, "script = \"demo.script.json\"").unwrap();
    let cfg = load(Some(&path), &[], ConfigLayer::default(), None).unwrap();
    assert_eq!(
        cfg.provider,
        ProviderConfig::Scripted {
            script: ScriptSource::Path(dir.path().join("demo.script.json"))
        }
    );
    let cfg = load(
        None,
        &[("RAILYARD_SCRIPT", r#"{"default": []}"#)],
        ConfigLayer::default(),
        None,
    )
    .unwrap();
    assert!(matches!(
        cfg.provider,
        ProviderConfig::Scripted {
            script: ScriptSource::Inline(_)
        }
    ));
    let err = load(
        None,
        &[("RAILYARD_SCRIPT", "{oops")],
        ConfigLayer::default(),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("RAILYARD_SCRIPT") && err.contains("inline script"),
        "{err}"
    );
}

#[test]
fn provider_selection() {
    let scripted = load(
        None,
        &[],
        ConfigLayer::default(),
        Some(ScriptSource::Path("demo.script.json".into())),
    )
    .unwrap();
    assert_eq!(
        scripted.provider,
        ProviderConfig::Scripted {
            script: ScriptSource::Path("demo.script.json".into())
        }
    );
    assert!(load(None, &[], ConfigLayer::default(), None).is_err());
    let vars = [
        ("OPENAI_BASE_URL", "http://localhost:11434/v1"),
        ("RAILYARD_MODEL", "llama3"),
    ];
    let local = load(None, &vars, ConfigLayer::default(), None).unwrap();
    assert!(
        matches!(local.provider, ProviderConfig::OpenAi { api_key: None, ref model, .. } if model == "llama3")
    );
    let err = load(
        None,
        &[("RAILYARD_PROVIDER", "anthropic")],
        ConfigLayer::default(),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
    let upper = load(
        None,
        &[("RAILYARD_PROVIDER", "OpenAI")],
        ConfigLayer::default(),
        None,
    )
    .unwrap();
    assert!(matches!(upper.provider, ProviderConfig::OpenAi { .. }));
    let err = load(
        None,
        &[("RAILYARD_PROVIDER", "gpt")],
        ConfigLayer::default(),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("RAILYARD_PROVIDER") && err.contains("unknown provider"),
        "{err}"
    );
    let bad = load(
        None,
        &[("RAILYARD_SLOTS", "0")],
        ConfigLayer::default(),
        Some(ScriptSource::Path("s.json".into())),
    );
    assert!(bad.unwrap_err().to_string().contains("RAILYARD_SLOTS"));
    let err = load(
        None,
        &[("RAILYARD_SLOTS", "9")],
        ConfigLayer {
            slots: Some(0),
            ..Default::default()
        },
        Some(ScriptSource::Path("s.json".into())),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("flag --slots"), "{err}");
}

#[test]
fn bash_env_and_response_cap() {
    let script = || Some(ScriptSource::Path("s.json".into()));
    let cfg = load(None, &[("ANTHROPIC_API_KEY", "k")], ConfigLayer::default(), None).unwrap();
    assert!(cfg.bash_env.is_empty());
    assert!(matches!(
        cfg.provider,
        ProviderConfig::Anthropic { max_response_bytes, .. } if max_response_bytes == 32 << 20
    ));
    let vars = [
        ("OPENAI_BASE_URL", "http://localhost:11434/v1"),
        ("RAILYARD_BASH_ENV", "GOPATH, CARGO_HOME,GOPATH"),
        ("RAILYARD_MAX_MODEL_RESPONSE_BYTES", "65536"),
    ];
    let cfg = load(None, &vars, ConfigLayer::default(), None).unwrap();
    assert_eq!(cfg.bash_env, vec!["GOPATH", "CARGO_HOME"]);
    assert!(matches!(
        cfg.provider,
        ProviderConfig::OpenAi {
            max_response_bytes: 65536,
            ..
        }
    ));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.toml");
    std::fs::write(&path, "bash_env = [\"OPENAI_API_KEY\"]").unwrap();
    let err = load(Some(&path), &[], ConfigLayer::default(), script())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("w.toml") && err.contains("`bash_env`") && err.contains("never passed to bash"),
        "{err}"
    );
    let flags = ConfigLayer {
        bash_env: Some(vec!["A=B".into()]),
        ..Default::default()
    };
    let err = load(None, &[], flags, script()).unwrap_err().to_string();
    assert!(
        err.contains("flag --bash-env") && err.contains("not an environment variable name"),
        "{err}"
    );
    let err = load(
        None,
        &[
            ("ANTHROPIC_API_KEY", "k"),
            ("RAILYARD_MAX_MODEL_RESPONSE_BYTES", "10"),
        ],
        ConfigLayer::default(),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("RAILYARD_MAX_MODEL_RESPONSE_BYTES") && err.contains("at least 1024"),
        "{err}"
    );
}

#[test]
fn the_railyard_api_key_comes_from_flag_env_or_file_and_is_never_printed() {
    let model = ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1");
    let vars = [("RAILYARD_API_KEY", "ry_env"), model];
    let cfg = load(None, &vars, ConfigLayer::default(), None).unwrap();
    assert_eq!(cfg.api_key.as_ref().map(|k| k.expose()), Some("ry_env"));
    assert!(!format!("{cfg:?}").contains("ry_env"), "{cfg:?}");
    let flags = ConfigLayer {
        api_key: Some("ry_flag".into()),
        ..Default::default()
    };
    let cfg = load(None, &vars, flags, None).unwrap();
    assert_eq!(
        cfg.api_key.map(|k| k.expose().to_string()).as_deref(),
        Some("ry_flag")
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("worker.toml");
    std::fs::write(&file, "api_key = \"ry_file\"\n").unwrap();
    let cfg = load(Some(&file), &[model], ConfigLayer::default(), None).unwrap();
    assert_eq!(
        cfg.api_key.map(|k| k.expose().to_string()).as_deref(),
        Some("ry_file")
    );
    assert!(
        load(None, &[model], ConfigLayer::default(), None)
            .unwrap()
            .api_key
            .is_none()
    );
}

#[test]
fn prices_are_read_per_model_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("worker.toml");
    std::fs::write(
        &toml,
        "[prices.\"claude-sonnet-4-5\"]\ninput = 3.0\noutput = 15.0\ncache_read = 0.3\n\n[prices.scripted]\ninput = 1\noutput = 2\n",
    )
    .unwrap();
    let key = [("ANTHROPIC_API_KEY", "k")];
    let cfg = load(Some(&toml), &key, ConfigLayer::default(), None).unwrap();
    let sonnet = cfg.prices["claude-sonnet-4-5"];
    assert_eq!(
        (sonnet.input, sonnet.output, sonnet.cache_read, sonnet.cache_write),
        (3.0, 15.0, Some(0.3), None)
    );
    assert_eq!(cfg.prices["scripted"].output, 2.0);

    std::fs::write(&toml, "[prices.m]\ninput = 1\noutput = -2\n").unwrap();
    let err = load(Some(&toml), &key, ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("prices") && err.contains("\"m\".output") && err.contains("worker.toml"),
        "{err}"
    );

    std::fs::write(&toml, "[prices.m]\ninput = 1\noutput = 2\ncache = 1\n").unwrap();
    let err = load(Some(&toml), &key, ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cache"), "{err}");
}

#[test]
fn model_streaming_is_on_by_default_and_can_be_turned_off() {
    let cfg = load(None, &[("ANTHROPIC_API_KEY", "k")], ConfigLayer::default(), None).unwrap();
    assert!(matches!(
        cfg.provider,
        ProviderConfig::Anthropic { stream, .. } if stream == StreamSettings::default() && stream.enabled
    ));
    let vars = [
        ("OPENAI_BASE_URL", "http://localhost:11434/v1"),
        ("RAILYARD_MODEL_STREAM", "false"),
        ("RAILYARD_MODEL_STREAM_IDLE_TIMEOUT_SECS", "42"),
    ];
    let cfg = load(None, &vars, ConfigLayer::default(), None).unwrap();
    let ProviderConfig::OpenAi { stream, .. } = cfg.provider else {
        panic!("{:?}", cfg.provider)
    };
    assert!(!stream.enabled);
    assert_eq!(stream.idle_timeout, Duration::from_secs(42));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.toml");
    std::fs::write(&path, "model_stream = false\n").unwrap();
    let cfg = load(
        Some(&path),
        &[("ANTHROPIC_API_KEY", "k")],
        ConfigLayer::default(),
        None,
    )
    .unwrap();
    assert!(matches!(cfg.provider, ProviderConfig::Anthropic { stream, .. } if !stream.enabled));
    std::fs::write(&path, "model_stream_idle_timeout_secs = 0\n").unwrap();
    let err = load(
        Some(&path),
        &[("ANTHROPIC_API_KEY", "k")],
        ConfigLayer::default(),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("model_stream_idle_timeout_secs") && err.contains("w.toml"),
        "{err}"
    );
}

#[test]
fn mcp_servers_and_their_variables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.toml");
    std::fs::write(
        &path,
        "mcp_env = [\"GITHUB_TOKEN\", \"UNSET_ONE\"]\nmcp_call_timeout_secs = 5\n\
         [mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"server-filesystem\", \"$DOCS\"]\n\
         env = { KEY = \"${FILES_KEY}\" }\n",
    )
    .unwrap();
    let vars = [
        ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
        ("DOCS", "/srv/docs"),
        ("FILES_KEY", "files-secret-1"),
        ("GITHUB_TOKEN", "ghp-secret-2"),
    ];
    let cfg = load(Some(&path), &vars, ConfigLayer::default(), None).unwrap();
    let mcp = &cfg.mcp;
    assert_eq!(
        mcp.servers["files"].args[2], "$DOCS",
        "filled in only when started"
    );
    assert_eq!(mcp.config_env["FILES_KEY"], "files-secret-1");
    assert_eq!(
        mcp.definition_env.keys().collect::<Vec<_>>(),
        vec!["GITHUB_TOKEN"]
    );
    assert_eq!(mcp.call_timeout, Duration::from_secs(5));
    assert_eq!(mcp.result_cap, crate::mcp::DEFAULT_RESULT_CAP);
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("secret"), "no value in Debug: {shown}");

    // A variable a worker server names must be set; a worker credential is never lent.
    let err = load(Some(&path), &vars[..3], ConfigLayer::default(), None);
    assert!(err.is_ok(), "mcp_env names may be unset");
    let no_docs = [vars[0], vars[2]];
    let err = load(Some(&path), &no_docs, ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`mcp_servers`") && err.contains("$DOCS"), "{err}");
    std::fs::write(&path, "mcp_env = [\"ANTHROPIC_API_KEY\"]").unwrap();
    let err = load(Some(&path), &vars[..1], ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("never passed to MCP servers"), "{err}");
    std::fs::write(&path, "[mcp_servers.x]\ncommand = \"a\"\nurl = \"http://b\"\n").unwrap();
    let err = load(Some(&path), &vars[..1], ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mcp_servers.x.") && err.contains("not both"),
        "{err}"
    );
    std::fs::write(&path, "mcp_result_max_bytes = 10").unwrap();
    let err = load(Some(&path), &vars[..1], ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`mcp_result_max_bytes`"), "{err}");
}

#[test]
fn web_fetch_allow_networks_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.toml");
    let vars = [("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")];
    std::fs::write(
        &path,
        "web_fetch_allow_networks = [\"127.0.0.0/8\", \"10.1.2.3\"]\n",
    )
    .unwrap();
    let cfg = load(Some(&path), &vars, ConfigLayer::default(), None).unwrap();
    let shown: Vec<String> = cfg
        .web_fetch_allow_networks
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(shown, vec!["127.0.0.0/8", "10.1.2.3/32"]);
    std::fs::write(&path, "web_fetch_allow_networks = [\"10.0.0.0/40\"]\n").unwrap();
    let err = load(Some(&path), &vars, ConfigLayer::default(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`web_fetch_allow_networks`") && err.contains("10.0.0.0/40"),
        "{err}"
    );
}
