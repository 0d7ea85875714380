//! A real MCP server from npm: `@modelcontextprotocol/server-filesystem` (pinned in
//! tests/mcp_server/npm), declared by a workflow and started by the worker over stdio
//! with the run's workspace as its directory. The mock model reads, writes and lists
//! files through it; each result reaches the next turn and the transcript.
//!
//! The server is `RAILYARD_TEST_MCP_FILESYSTEM` (its `dist/index.js`, run with node), as
//! `.ci/run` installs and sets it; without it, the install `.ci/run` makes under the
//! target directory; without that, the test is skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::{Value, json};

/// A one-pixel PNG.
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// The server's entry point, or None (the test is skipped).
fn filesystem_server() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("RAILYARD_TEST_MCP_FILESYSTEM") {
        // Set (by CI): it must be there.
        return Some(PathBuf::from(p));
    }
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let index =
        Path::new(&target).join("mcp-npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if index.is_file() {
        return Some(index);
    }
    eprintln!("skipped: no @modelcontextprotocol/server-filesystem (set RAILYARD_TEST_MCP_FILESYSTEM)");
    None
}

#[test]
fn the_npm_filesystem_server_works_in_the_runs_workspace() {
    let Some(index) = filesystem_server() else { return };
    let sandbox = Sandbox::new();
    let def = json!({
        "id": "mcp-fs", "version": "1", "name": "MCP filesystem",
        "mcpServers": {"fs": {"command": "node", "args": [index, "."]}},
        "steps": [{"id": "f_use", "title": "Use the files server", "prompt": "Use {{goal}}",
                   "allowedTools": ["mcp__fs__*", "bash"], "taskQueue": "fs"}]
    });
    sandbox.workflow("mcp-fs.json", &def.to_string());
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        let turn = match r.turn {
            0 => call(
                "bash",
                json!({"command": format!(
                    "printf 'hello from the workspace' > notes.txt && echo {PNG_BASE64} | base64 -d > dot.png"
                )}),
            ),
            1 => call("mcp__fs__read_text_file", json!({"path": "notes.txt"})),
            2 => call(
                "mcp__fs__write_file",
                json!({"path": "out.txt", "content": "written by the MCP server"}),
            ),
            3 => call("bash", json!({"command": "cat out.txt"})),
            4 => call("mcp__fs__list_directory", json!({"path": "."})),
            5 => call("mcp__fs__read_media_file", json!({"path": "dot.png"})),
            6 => call("mcp__fs__read_text_file", json!({"path": "/etc/passwd"})),
            _ => complete("used the files server"),
        };
        Reply::Turn(turn)
    });
    let log = sandbox.path("worker.log");
    let mut worker = WorkerProcess::start_logged(
        &server.url,
        &sandbox.path("workspace"),
        "fs-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "fs",
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
            ("RUST_LOG", "info"),
        ],
        Some(&log),
    );
    let (rt, client) = connect(&server.url);
    let (_, status) = run_until_closed(
        &rt,
        &client,
        "mcp-fs",
        "the files server",
        Duration::from_secs(120),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status, "COMPLETED", "{}", log_text());

    let requests = mock.requests_for("f_use");
    let tools: HashMap<String, Value> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["input_schema"].clone()))
        .collect();
    for name in [
        "mcp__fs__read_text_file",
        "mcp__fs__write_file",
        "mcp__fs__list_directory",
    ] {
        assert!(
            tools.contains_key(name),
            "{name} offered: {:?}; {}",
            tools.keys(),
            log_text()
        );
    }
    assert_eq!(
        tools["mcp__fs__write_file"]["properties"]["content"]["type"],
        "string"
    );

    let last = requests.iter().max_by_key(|r| r.turn).unwrap();
    let results = last.tool_results();
    assert_eq!(results.len(), 7, "{results:?}");
    assert_eq!(results[1], ("hello from the workspace".to_string(), false));
    let (wrote, is_error) = &results[2];
    assert!(
        !is_error && wrote.contains("Successfully wrote to out.txt"),
        "{wrote}"
    );
    // The server's directory is the run's workspace: bash reads what it wrote.
    assert!(
        results[3].0.contains("written by the MCP server"),
        "{:?}",
        results[3]
    );
    let (listing, _) = &results[4];
    for name in ["[FILE] notes.txt", "[FILE] out.txt", "[FILE] dot.png"] {
        assert!(listing.contains(name), "{name} in {listing}");
    }
    // The image reaches the model as an image block of the tool result.
    let media = last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result" && b["content"].is_array())
        .expect("a tool result with blocks");
    assert_eq!(media["content"][0]["type"], "text", "{media}");
    assert!(
        media["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("[image 1 (image/png, ")
    );
    assert_eq!(
        media["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}})
    );
    let (outside, is_error) = &results[6];
    assert!(*is_error && outside.contains("Access denied"), "{outside}");

    worker.terminate(Duration::from_secs(20));
    drop(server);
    // The transcript the worker checkpointed, in the server's data, holds the call.
    let stored: Vec<u8> = crate::mcp_tools::walk(&sandbox.path("data"))
        .into_iter()
        .flat_map(|f| std::fs::read(f).unwrap_or_default())
        .collect();
    let has = |needle: &str| stored.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(has("mcp__fs__read_text_file") && has("hello from the workspace"));
}
