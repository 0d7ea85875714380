//! MCP servers as the agent's tools, end to end: a real `railyard server` and
//! `railyard worker`, the mock model calling `mcp__py__TOOL`, and a real MCP server
//! (the `mcp` package's MCPServer, `tests/mcp_server/server.py`) that the worker starts
//! over stdio, killed between two calls and answering one call never.
//!
//! The server needs a Python with the `mcp` package (tests/mcp_server/requirements.txt):
//! `RAILYARD_TEST_MCP_PYTHON`, as `.ci/run` sets it; without it, the venv `.ci/run`
//! makes under the target directory; without that, the tests are skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::{Value, json};

const RUN_LIMIT: Duration = Duration::from_secs(120);
/// The token the definition hands the MCP server as `$MCP_TEST_TOKEN`.
const TOKEN: &str = "tok-7f3a9c21-never-shown";

/// A Python that has the `mcp` package, or None (the test is skipped).
fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("RAILYARD_TEST_MCP_PYTHON") {
        // Set (by CI): it must work.
        return Some(PathBuf::from(p));
    }
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let venv = Path::new(&target).join("mcp-client-venv/bin/python");
    let ok = std::process::Command::new(&venv)
        .args(["-c", "import mcp.server.mcpserver"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(venv);
    }
    eprintln!("skipped: no Python with the mcp package (set RAILYARD_TEST_MCP_PYTHON)");
    None
}

fn server_script() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp_server/server.py");
    path.canonicalize().unwrap_or(path).display().to_string()
}

/// The pid in the last `echo` result of the transcript.
fn last_echo_pid(r: &Recorded) -> Option<i32> {
    r.tool_results()
        .iter()
        .rev()
        .find_map(|(c, _)| c.split("(pid ").nth(1)?.split(')').next()?.parse().ok())
}

#[test]
fn an_mcp_servers_tools_are_called_survive_a_kill_and_a_hang_and_keep_its_secret() {
    let Some(python) = python() else { return };
    let sandbox = Sandbox::new();
    let def = json!({
        "id": "mcp-tools", "version": "1", "name": "MCP tools",
        "mcpServers": {"py": {"command": python, "args": [server_script()],
                              "env": {"TEST_TOKEN": "$MCP_TEST_TOKEN"}}},
        "steps": [{"id": "m_use", "title": "Use the MCP server", "prompt": "Use {{goal}}",
                   "allowedTools": ["mcp__py__*"], "taskQueue": "mcp"}]
    });
    sandbox.workflow("mcp-tools.json", &def.to_string());
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        let turn = match r.turn {
            0 => call("mcp__py__echo", json!({"text": "hello"})),
            1 => call("mcp__py__token_info", json!({})),
            2 => call("mcp__py__big", json!({"n": 5000})),
            3 => {
                // Killed between two calls: this call finds it gone.
                if r.repeat == 0
                    && let Some(pid) = last_echo_pid(r)
                {
                    let killed = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    assert!(killed.is_ok(), "kill {pid}: {killed:?}");
                    std::thread::sleep(Duration::from_millis(300));
                }
                call("mcp__py__echo", json!({"text": "after the kill"}))
            }
            4 => call("mcp__py__echo", json!({"text": "restarted"})),
            5 => call("mcp__py__hang", json!({})),
            _ => complete("used the MCP server"),
        };
        Reply::Turn(turn)
    });
    let config = sandbox.path("worker.toml");
    std::fs::write(
        &config,
        "mcp_env = [\"MCP_TEST_TOKEN\"]\nmcp_call_timeout_secs = 3\nmcp_result_max_bytes = 1024\nheartbeat_interval_secs = 0.5\n",
    )
    .unwrap();
    let log = sandbox.path("worker.log");
    let mut worker = WorkerProcess::start_logged(
        &server.url,
        &sandbox.path("workspace"),
        "mcp-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "mcp",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
            ("MCP_TEST_TOKEN", TOKEN),
            ("RUST_LOG", "info"),
        ],
        Some(&log),
    );

    let (rt, client) = connect(&server.url);
    let (run, status) = run_until_closed(&rt, &client, "mcp-tools", "the py server", RUN_LIMIT);
    assert_eq!(status, "COMPLETED");

    // The model was offered the server's tools with their input schemas.
    let requests = mock.requests_for("m_use");
    let first = &requests[0];
    let tools: HashMap<String, Value> = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["input_schema"].clone()))
        .collect();
    for name in [
        "mcp__py__echo",
        "mcp__py__token_info",
        "mcp__py__big",
        "mcp__py__hang",
    ] {
        assert!(
            tools.contains_key(name),
            "{name} offered: {:?}; system: {}; log: {}",
            tools.keys(),
            first.system(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    assert_eq!(tools["mcp__py__echo"]["properties"]["text"]["type"], "string");
    assert!(
        !tools.contains_key("bash"),
        "allowedTools keeps the workspace tools out"
    );

    // Each result reached the next turn.
    let last = requests.iter().max_by_key(|r| r.turn).unwrap();
    let results = last.tool_results();
    assert_eq!(results.len(), 6, "{results:?}");
    let (echo, ok) = &results[0];
    assert!(echo.starts_with("echo: hello (pid ") && !ok, "{echo}");
    let (info, _) = &results[1];
    assert_eq!(info, &format!("token of {} bytes: [redacted]", TOKEN.len()));
    let (big, _) = &results[2];
    assert!(
        big.ends_with("[MCP result cut: 1024 of 5000 bytes shown]"),
        "{big}"
    );
    let (killed, is_error) = &results[3];
    assert!(*is_error && killed.contains("MCP server py stopped"), "{killed}");
    let (restarted, is_error) = &results[4];
    assert!(
        !is_error && restarted.starts_with("echo: restarted (pid "),
        "{restarted}"
    );
    let pid = |s: &str| s.split("(pid ").nth(1).map(str::to_string);
    assert_ne!(pid(echo), pid(restarted), "a new server process");
    let (hung, is_error) = &results[5];
    assert!(*is_error && hung.contains("did not answer within 3s"), "{hung}");

    // In history: the transcript the worker checkpointed holds the calls and results.
    let history = rt.block_on(client.full_history("default", &run)).unwrap();
    let text = format!("{history:?}");
    assert!(!text.contains(TOKEN), "the token is not in history");
    worker.terminate(Duration::from_secs(20));
    drop(server);
    // Nowhere in the server's data (history, checkpoints) or the worker's log.
    let mut stored = Vec::new();
    for entry in walk(&sandbox.path("data")) {
        stored.extend(std::fs::read(entry).unwrap_or_default());
    }
    let has = |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        has(&stored, "mcp__py__token_info"),
        "the checkpoint is in the data directory"
    );
    assert!(!has(&stored, TOKEN), "the token is not stored");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("MCP server stderr"),
        "the server's stderr is logged: {log}"
    );
    assert!(
        log.contains("test server starting with token [redacted]"),
        "{log}"
    );
    assert!(!log.contains(TOKEN), "the token is not in the worker log");
}

/// Every file under `dir`.
pub(crate) fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A streamable-HTTP server (the same script, `--http PORT`) is reached through the
/// same client, on loopback only because the worker allows it; one on the cloud
/// metadata address is refused, and the model is told.
#[test]
fn a_streamable_http_server_is_reached_and_an_internal_one_refused() {
    let Some(python) = python() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut http_server = std::process::Command::new(&python)
        .args([server_script(), "--http".into(), port.to_string()])
        .env("TEST_TOKEN", "")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
    });
    let sandbox = Sandbox::new();
    let def = json!({
        "id": "mcp-http", "version": "1", "name": "MCP over HTTP",
        "mcpServers": {
            "web": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp"),
                    "headers": {"Authorization": "Bearer $MCP_TEST_TOKEN"}},
            "meta": {"url": "http://169.254.169.254/mcp"}
        },
        "steps": [{"id": "h_use", "title": "Use it", "prompt": "Use {{goal}}", "taskQueue": "mcph"}]
    });
    sandbox.workflow("mcp-http.json", &def.to_string());
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        Reply::Turn(match r.turn {
            0 => call("mcp__web__echo", json!({"text": "over http"})),
            _ => complete("used it"),
        })
    });
    let config = sandbox.path("worker.toml");
    std::fs::write(
        &config,
        "mcp_env = [\"MCP_TEST_TOKEN\"]\nmcp_allow_networks = [\"127.0.0.1/32\"]\n",
    )
    .unwrap();
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "mcph-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "mcph",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
            ("MCP_TEST_TOKEN", TOKEN),
        ],
    );
    let (rt, client) = connect(&server.url);
    let (_, status) = run_until_closed(&rt, &client, "mcp-http", "the web server", RUN_LIMIT);
    let _ = http_server.kill();
    let _ = http_server.wait();
    assert_eq!(status, "COMPLETED");
    let requests = mock.requests_for("h_use");
    let system = requests[0].system();
    assert!(
        system.contains("MCP server meta is not available")
            && system.contains("169.254.169.254 is an internal address"),
        "{system}"
    );
    let results = requests.last().unwrap().tool_results();
    assert!(results[0].0.starts_with("echo: over http (pid "), "{results:?}");
}
