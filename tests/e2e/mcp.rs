//! `railyard mcp`: MCP JSON-RPC over the real process's stdin and stdout, against a real
//! `railyard server`, written here by hand as any MCP client would (one JSON object a
//! line). [`Mcp`] is shared with `mcp_steps`, which drives runs through the gateway.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// How long to wait for one answer before calling the gateway hung (not a timing check).
pub const ANSWER_LIMIT: Duration = Duration::from_secs(60);

/// A `railyard mcp` process and the lines of its stdout, each checked to be JSON.
pub struct Mcp {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    next_id: u64,
}

impl Mcp {
    pub fn start(server_url: &str) -> Self {
        Self::start_with(server_url, &[])
    }

    /// With more flags (`--queue ...`).
    pub fn start_with(server_url: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(["mcp", "--server", server_url])
            .args(extra)
            .env_remove("RAILYARD_NAMESPACE")
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn railyard mcp");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout holds a line that is not JSON ({e}): {line:?}"));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            next_id: 100,
        }
    }

    pub fn send(&mut self, message: Value) {
        self.send_line(&message.to_string());
    }

    /// Writes one line to stdin as it is, JSON or not.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to railyard mcp");
        stdin.flush().unwrap();
    }

    /// The next message on stdout, whatever its id.
    pub fn next_message(&mut self) -> Value {
        self.lines
            .recv_timeout(ANSWER_LIMIT)
            .unwrap_or_else(|e| panic!("no message on stdout ({e})"))
    }

    /// Sends a request and returns the answer with its id.
    pub fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self
                .lines
                .recv_timeout(ANSWER_LIMIT)
                .unwrap_or_else(|e| panic!("no answer to {method} ({e})"));
            if message["id"] == json!(id) {
                assert_eq!(message["jsonrpc"], "2.0", "{message}");
                return message;
            }
        }
    }

    /// The MCP handshake: `initialize`, then `notifications/initialized`.
    pub fn initialize(&mut self) -> Value {
        let answer = self.request(
            1,
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "railyard-e2e", "version": "0"}
            }),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    /// Closes stdin, as a client does when it is done, and returns the exit status and stderr.
    pub fn close(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let out = self.child.wait_with_output().expect("wait for railyard mcp");
        (out.status, stderr(&out))
    }

    /// Calls a tool with a fresh request id; its `result`.
    pub fn tool(&mut self, tool: &str, arguments: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        call(self, id, tool, arguments)
    }

    /// SIGKILL: the gateway dies mid-step, no shutdown code runs.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn call(mcp: &mut Mcp, id: u64, tool: &str, arguments: Value) -> Value {
    let answer = mcp.request(id, "tools/call", json!({"name": tool, "arguments": arguments}));
    answer
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("tools/call {tool} has no result: {answer}"))
}

#[test]
fn mcp_lists_tools_and_workflows_of_a_real_server() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "demo.json",
        r#"{"id":"demo","version":"1","name":"Demo","description":"two steps","steps":[
            {"id":"plan","title":"Plan","prompt":"Plan {{goal}}"},
            {"id":"write","title":"Write","prompt":"Write it"}]}"#,
    );
    sandbox.workflow("broken.json", r#"{"id":"broken","steps":3}"#);
    let server = sandbox.server();
    let mut mcp = Mcp::start(&server.url);

    let init = mcp.initialize();
    let result = &init["result"];
    assert_eq!(result["serverInfo"]["name"], "railyard", "{init}");
    assert!(result["capabilities"]["tools"].is_object(), "{init}");
    assert!(result["protocolVersion"].is_string(), "{init}");

    let tools = mcp.request(2, "tools/list", json!({}));
    let list = tools["result"]["tools"].as_array().expect("tools");
    let tool = list
        .iter()
        .find(|t| t["name"] == "list_workflows")
        .unwrap_or_else(|| panic!("list_workflows in {tools}"));
    assert!(
        tool["description"]
            .as_str()
            .is_some_and(|d| d.contains("workflows")),
        "{tool}"
    );
    assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");

    let listed = call(&mut mcp, 3, "list_workflows", json!({}));
    assert_ne!(listed["isError"], json!(true), "{listed}");
    let content = &listed["structuredContent"];
    assert_eq!(
        content["workflows"],
        json!([{"id": "demo", "name": "Demo", "description": "two steps", "version": "1",
                "steps": 2, "source": sandbox.path("workflows").join("demo.json").display().to_string()}]),
        "{listed}"
    );
    assert_eq!(
        content["invalid"][0]["source"]
            .as_str()
            .map(|s| s.ends_with("broken.json")),
        Some(true)
    );
    // The same, as text, for clients that read only content.
    let text = listed["content"][0]["text"].as_str().expect("text content");
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), *content);

    // A tool that does not exist is a protocol error, and the gateway goes on.
    let unknown = mcp.request(4, "tools/call", json!({"name": "nope", "arguments": {}}));
    assert!(unknown["error"]["message"].is_string(), "{unknown}");
    let again = call(&mut mcp, 5, "list_workflows", json!({}));
    assert_ne!(again["isError"], json!(true), "{again}");

    let (status, logs) = mcp.close();
    assert!(status.success(), "{status}: {logs}");
    assert!(logs.contains("serving MCP on stdio"), "logs go to stderr: {logs}");
}

#[test]
fn mcp_reports_an_unreachable_server_as_a_tool_error() {
    // Nothing listens on port 1 of loopback: every connection is refused.
    let mut mcp = Mcp::start("http://127.0.0.1:1");
    mcp.initialize();
    let listed = call(&mut mcp, 2, "list_workflows", json!({}));
    assert_eq!(listed["isError"], json!(true), "{listed}");
    let text = listed["content"][0]["text"].as_str().expect("text content");
    assert!(
        text.contains("cannot list workflows") && text.contains("http://127.0.0.1:1"),
        "{text}"
    );
    // Still serving.
    let tools = mcp.request(3, "tools/list", json!({}));
    assert!(tools["result"]["tools"].is_array(), "{tools}");
    let (status, logs) = mcp.close();
    assert!(status.success(), "{status}: {logs}");
}

#[test]
fn mcp_answers_a_line_that_is_not_json_with_a_parse_error_and_goes_on() {
    let sandbox = Sandbox::new();
    let server = sandbox.server();
    let mut mcp = Mcp::start(&server.url);
    mcp.initialize();

    // Garbage, JSON that is no message, then a request: each gets its answer, in
    // whichever order they are written.
    mcp.send_line("this is not json {");
    mcp.send_line(r#"{"hello": "world"}"#);
    mcp.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}));
    let mut parse_error = None;
    let mut invalid = None;
    let mut tools = None;
    while parse_error.is_none() || invalid.is_none() || tools.is_none() {
        let message = mcp.next_message();
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        match message["error"]["code"].as_i64() {
            Some(-32700) => parse_error = Some(message),
            Some(-32600) => invalid = Some(message),
            _ if message["id"] == json!(7) => tools = Some(message),
            _ => panic!("unexpected message {message}"),
        }
    }
    let parse_error = parse_error.unwrap();
    assert_eq!(parse_error["id"], Value::Null, "{parse_error}");
    assert!(
        parse_error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Parse error: ")),
        "{parse_error}"
    );
    assert_eq!(invalid.unwrap()["id"], Value::Null);
    assert!(tools.unwrap()["result"]["tools"].is_array());

    // Still serving, on the same stream.
    let listed = call(&mut mcp, 8, "list_workflows", json!({}));
    assert_ne!(listed["isError"], json!(true), "{listed}");
    let (status, logs) = mcp.close();
    assert!(status.success(), "{status}: {logs}");
}
