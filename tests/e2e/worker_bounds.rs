//! What a real `railyard worker` lets a step's `bash` see and keep: only the
//! allowlisted environment, none of the worker's credentials (not even through
//! `/proc/$PPID/environ`), and no background job after the command.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use railyard_sdk::Client;
use serde_json::json;

const LEAK: &str = r#"{"id": "leak", "version": "1", "name": "Leak", "taskQueue": "bounds",
  "steps": [{"id": "b_leak", "title": "Look around", "prompt": "Look at {{goal}}"}]}"#;

const KEY: &str = "sk-ant-e2e-never-in-bash";
const GITHUB: &str = "ghp-e2e-not-passed";

#[test]
fn bash_in_a_real_worker_sees_no_secrets_and_leaves_no_background_job() {
    let sandbox = Sandbox::new();
    sandbox.workflow("leak.json", LEAK);
    let server = sandbox.server();
    // Background jobs, also ones that left the process group (setsid, setsid -f) and
    // one that also emptied its environment (env -i).
    let command = "env | sort; echo '---PARENT---'; tr '\\0' '\\n' < /proc/$PPID/environ; \
                   echo; echo '---END---'; sleep 300 >/dev/null 2>&1 & echo bgpid=$!; \
                   setsid sleep 80301 >/dev/null 2>&1 & setsid -f sleep 80302 >/dev/null 2>&1; \
                   env -i setsid -f sleep 80303 >/dev/null 2>&1; \
                   setsid -f bash -c 'sleep 80304 & wait' >/dev/null 2>&1; sleep 0.2";
    let mock = MockModel::start(move |r| {
        Reply::Turn(match r.turn {
            0 => call("bash", json!({ "command": command })),
            _ => complete("looked"),
        })
    });
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "bounds-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "bounds",
            "--bash-env",
            "RAILYARD_E2E_PASS",
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", KEY),
            ("GITHUB_TOKEN", GITHUB),
            ("RAILYARD_E2E_PASS", "passed-through"),
        ],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(Client::connect(&server.url)).unwrap();
    let run = rt
        .block_on(client.start_run("default", "leak", "the environment", HashMap::new()))
        .unwrap();
    eventually(Duration::from_secs(90), || {
        let info = rt.block_on(client.describe_run("default", &run)).ok()?.run?;
        (info.status == railyard_proto::v1::RunStatus::Completed as i32).then_some(())
    });

    // The key did reach the model API, as a header: the worker had it.
    let requests = mock.requests_for("b_leak");
    assert_eq!(requests[0].headers["x-api-key"], KEY);
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1);
    let (seen, is_error) = &results[0];
    assert!(!is_error, "{seen}");
    let (own, parent) = seen.split_once("---PARENT---").expect("both parts");
    let workspace = sandbox.path("workspace").join(&run).canonicalize().unwrap();
    assert!(own.contains(&format!("HOME={}", workspace.display())), "{own}");
    assert!(own.contains("RAILYARD_E2E_PASS=passed-through"), "{own}");
    assert!(!own.contains(GITHUB) && !own.contains("RUST_LOG="), "{own}");
    assert!(parent.contains("---END---"), "{parent}");
    assert!(!seen.contains(KEY), "the provider key reached bash: {seen}");
    // As root, the worker's /proc/PID/environ is readable: nothing but what bash gets
    // (and the worker's runtime variables) is left in it.
    if parent.contains("PATH=") {
        assert!(
            !parent.contains(GITHUB),
            "GITHUB_TOKEN readable in the worker's environ: {parent}"
        );
        assert!(!parent.contains("ANTHROPIC_BASE_URL"), "{parent}");
        assert!(parent.contains("RAILYARD_E2E_PASS=passed-through"), "{parent}");
    }

    // The background job died with its command.
    let pid: i32 = seen
        .lines()
        .find_map(|l| l.strip_prefix("bgpid="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no bgpid in {seen}"));
    eventually(Duration::from_secs(30), || {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().to_string()))
            .is_some_and(|rest| !rest.starts_with(['Z', 'X']));
        (!alive).then_some(())
    });

    // Nothing the command started outlives it, in a session of its own or not.
    eventually(Duration::from_secs(30), || {
        let left = sleeps_running(&["80301", "80302", "80303", "80304"]);
        left.is_empty().then_some(())
    });
}

/// The running `sleep N` processes among `args`, by their command lines.
fn sleeps_running(args: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let words: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        if words.first().is_some_and(|w| w.ends_with("sleep"))
            && words.get(1).is_some_and(|a| args.contains(&a.as_str()))
        {
            found.push(words.join(" "));
        }
    }
    found
}
