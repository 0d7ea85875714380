//! The MCP gateway driving runs: the bundled demo step by step through `railyard mcp`,
//! continue-token misuse, a gateway SIGKILLed mid-step and resumed by a new one, and
//! the process ending cleanly when its stdout or stderr breaks.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp::Mcp;
use crate::support::*;

/// A lease that expires six seconds after the gateway stops heartbeating, retried at
/// once; the second step needs the human's confirmation.
const SHORT_LEASE: &str = r#"{"id":"short","version":"1","name":"Short lease","steps":[
  {"id":"first","title":"First","prompt":"Do the first thing for {{goal}}","heartbeatTimeoutSeconds":6,
   "retry":{"maximumAttempts":3,"initialIntervalSeconds":0.1}},
  {"id":"second","title":"Second","prompt":"Confirm and finish","requireConfirmation":true}]}"#;

fn ok_result(result: &Value) -> &Value {
    assert_ne!(result["isError"], json!(true), "{result}");
    &result["structuredContent"]
}

fn error_text(result: &Value) -> String {
    assert_eq!(result["isError"], json!(true), "expected a tool error: {result}");
    result["content"][0]["text"].as_str().expect("text").to_string()
}

fn history(server: &ServerProcess, run_id: &str) -> Vec<Value> {
    json(server.ry(&["run", "history", run_id, "-o", "json"]))
        .as_array()
        .expect("events")
        .clone()
}

fn event_types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn mcp_drives_the_bundled_demo_through_every_step() {
    let sandbox = Sandbox::new();
    sandbox.workflow("demo.json", include_str!("../../workflows/demo.json"));
    let server = sandbox.server();
    let mut mcp = Mcp::start(&server.url);
    mcp.initialize();

    let tools = mcp.request(2, "tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for tool in [
        "list_workflows",
        "start_workflow",
        "complete_step",
        "get_run",
        "list_runs",
        "signal_run",
        "resume_run",
        "reset_run",
        "set_search_attributes",
    ] {
        assert!(names.contains(&tool), "{tool} in {names:?}");
    }
    let start_schema = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "start_workflow")
        .unwrap()["inputSchema"]
        .clone();
    assert_eq!(start_schema["type"], "object");
    let required = start_schema["required"].as_array().unwrap();
    assert!(
        required.contains(&json!("workflow_id")) && required.contains(&json!("goal")),
        "{start_schema}"
    );

    let first = mcp.tool(
        "start_workflow",
        json!({"workflow_id": "demo", "goal": "tide pools", "context": {"research_file": "notes.md"}}),
    );
    let step = ok_result(&first).clone();
    assert_eq!(step["status"], "step", "{step}");
    assert_eq!(step["step"]["id"], "research");
    assert_eq!(
        (step["step"]["number"].as_u64(), step["step"]["count"].as_u64()),
        (Some(1), Some(3))
    );
    assert!(
        step["prompt"].as_str().unwrap().contains("Research tide pools"),
        "{step}"
    );
    let run_id = step["run_id"].as_str().unwrap().to_string();
    assert!(
        !step.to_string().contains("task_token"),
        "the raw lease never shows: {step}"
    );

    // Started on the gateway's queue, so no ordinary worker of the demo's queue sees it.
    let shown = json(server.ry(&["run", "describe", &run_id, "-o", "json"]));
    assert!(shown.to_string().contains("\"mcp\""), "{shown}");

    let mut token = step["continue_token"].as_str().unwrap().to_string();
    let mut steps_done = Vec::new();
    let finished = loop {
        let step_id = step_id_of(&mut mcp, &run_id);
        let answer = mcp.tool(
            "complete_step",
            json!({
                "continue_token": token,
                "notes": format!("notes of {step_id}"),
                "artifacts": [format!("{step_id}.md")],
                "context_updates": {"draft_file": "draft.md", "draft_status": "drafted"},
                "result": {"step": step_id},
            }),
        );
        steps_done.push(step_id);
        let content = ok_result(&answer).clone();
        match content["status"].as_str() {
            Some("step") => token = content["continue_token"].as_str().unwrap().to_string(),
            Some("finished") => break content,
            other => panic!("unexpected {other:?}: {content}"),
        }
    };
    assert_eq!(steps_done, ["research", "draft", "review"]);
    assert_eq!(finished["run_status"], "COMPLETED", "{finished}");
    assert_eq!(finished["result"], "notes of review");
    assert_eq!(finished["context"]["review.result"], r#"{"step":"review"}"#);

    let events = history(&server, &run_id);
    assert_eq!(
        event_types(&events),
        [
            "RunStarted",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "RunCompleted"
        ]
    );
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "StepCompleted")
        .collect();
    assert!(
        completed[0]["attributes"]
            .to_string()
            .contains("notes of research"),
        "{}",
        completed[0]
    );
    assert!(
        events
            .iter()
            .filter(|e| e["event_type"] == "StepStarted")
            .all(|e| e["identity"]
                .as_str()
                .is_some_and(|i| i.starts_with("railyard-mcp-"))),
        "{events:?}"
    );
    let run = ok_result(&mcp.tool("get_run", json!({"run_id": run_id}))).clone();
    assert_eq!(run["status"], "COMPLETED");
    let listed = ok_result(&mcp.tool("list_runs", json!({"status": "completed"}))).clone();
    assert_eq!(listed["runs"][0]["run_id"], run_id.as_str(), "{listed}");
    // The same through a list query; a query that matches none lists none.
    let by_query = json!({"query": format!("RunId = '{run_id}' AND Status = 'COMPLETED'")});
    let listed = ok_result(&mcp.tool("list_runs", by_query)).clone();
    assert_eq!(listed["runs"][0]["run_id"], run_id.as_str(), "{listed}");
    let none = ok_result(&mcp.tool("list_runs", json!({"query": "Status = 'FAILED'"}))).clone();
    assert_eq!(none["runs"], json!([]), "{none}");
    let (status, logs) = mcp.close();
    assert!(status.success(), "{status}: {logs}");
}

/// The current step of a run, through `get_run`.
fn step_id_of(mcp: &mut Mcp, run_id: &str) -> String {
    let run = ok_result(&mcp.tool("get_run", json!({"run_id": run_id}))).clone();
    assert_eq!(run["held_here"], true, "{run}");
    run["current_step"]["id"].as_str().unwrap().to_string()
}

#[test]
fn mcp_refuses_old_foreign_and_corrupted_continue_tokens_and_changes_nothing() {
    let sandbox = Sandbox::new();
    sandbox.workflow("demo.json", include_str!("../../workflows/demo.json"));
    let server = sandbox.server();
    let mut mcp = Mcp::start(&server.url);
    mcp.initialize();
    let a = ok_result(&mcp.tool("start_workflow", json!({"workflow_id": "demo", "goal": "a"}))).clone();
    let b = ok_result(&mcp.tool("start_workflow", json!({"workflow_id": "demo", "goal": "b"}))).clone();
    let (run_a, run_b) = (a["run_id"].as_str().unwrap(), b["run_id"].as_str().unwrap());
    let old = a["continue_token"].as_str().unwrap().to_string();
    let next = ok_result(&mcp.tool(
        "complete_step",
        json!({"continue_token": old, "notes": "researched"}),
    ))
    .clone();
    assert_eq!(next["step"]["id"], "draft");
    let current = next["continue_token"].as_str().unwrap().to_string();
    let before_a = history(&server, run_a);
    let before_b = history(&server, run_b);

    // An earlier step's token.
    let text = error_text(&mcp.tool("complete_step", json!({"continue_token": old, "notes": "again"})));
    assert!(
        text.contains("refused") && text.contains("step 2 of 3") && text.contains("\"draft\""),
        "{text}"
    );
    assert!(text.contains("resume_run"), "{text}");
    // Another run's token, for this run.
    let foreign = b["continue_token"].as_str().unwrap();
    let text = error_text(&mcp.tool(
        "complete_step",
        json!({"continue_token": foreign, "notes": "wrong run", "run_id": run_a}),
    ));
    assert!(
        text.contains(run_b) && text.contains("not to the run_id you gave"),
        "{text}"
    );
    // Corrupted: one character changed, and cut short.
    let mut bytes = current.clone().into_bytes();
    let at = bytes.len() - 5;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    let corrupted = String::from_utf8(bytes).unwrap();
    let text = error_text(&mcp.tool(
        "complete_step",
        json!({"continue_token": corrupted, "notes": "x"}),
    ));
    assert!(text.contains("refused"), "{text}");
    let text = error_text(&mcp.tool(
        "complete_step",
        json!({"continue_token": &current[..20], "notes": "x"}),
    ));
    assert!(text.contains("not a continue token"), "{text}");

    assert_eq!(history(&server, run_a), before_a, "run a unchanged");
    assert_eq!(history(&server, run_b), before_b, "run b unchanged");
    // The current token still works, and the foreign one on its own run too.
    let done = ok_result(&mcp.tool(
        "complete_step",
        json!({"continue_token": current, "notes": "drafted", "run_id": run_a}),
    ))
    .clone();
    assert_eq!(done["step"]["id"], "review");
    let other = ok_result(&mcp.tool(
        "complete_step",
        json!({"continue_token": foreign, "notes": "b researched"}),
    ))
    .clone();
    assert_eq!(
        (other["run_id"].as_str(), other["step"]["id"].as_str()),
        (Some(run_b), Some("draft"))
    );
    let (status, logs) = mcp.close();
    assert!(status.success(), "{status}: {logs}");
}

#[test]
fn a_gateway_killed_mid_step_is_resumed_by_a_new_one_and_its_token_is_void() {
    let sandbox = Sandbox::new();
    sandbox.workflow("short.json", SHORT_LEASE);
    let server = sandbox.server();
    let mut first = Mcp::start(&server.url);
    first.initialize();
    let step = ok_result(&first.tool("start_workflow", json!({"workflow_id": "short", "goal": "g"}))).clone();
    let (run_id, old) = (
        step["run_id"].as_str().unwrap().to_string(),
        step["continue_token"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        (step["step"]["id"].as_str(), step["step"]["attempt"].as_u64()),
        (Some("first"), Some(1))
    );
    assert_eq!(step["require_confirmation"], false);
    // The gateway keeps the lease alive while the agent works: past the 6 s heartbeat
    // timeout (heartbeats go every 2 s, so only a stall of over 4 s could miss one),
    // the step has not timed out.
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        !event_types(&history(&server, &run_id))
            .iter()
            .any(|t| t == "StepTimedOut"),
        "a heartbeated lease does not time out"
    );
    first.kill9();

    let mut second = Mcp::start(&server.url);
    second.initialize();
    let resumed =
        ok_result(&second.tool("resume_run", json!({"run_id": run_id, "wait_seconds": 60}))).clone();
    assert_eq!(resumed["step"]["id"], "first", "{resumed}");
    assert_eq!(resumed["step"]["attempt"], 2, "{resumed}");
    assert_eq!(resumed["waited_for_lease"], true, "{resumed}");
    assert!(
        resumed["resumed"].as_str().unwrap().contains("expire"),
        "{resumed}"
    );
    let before = history(&server, &run_id);
    let text = error_text(&second.tool("complete_step", json!({"continue_token": old, "notes": "stale"})));
    assert!(text.contains("refused") && text.contains("\"first\""), "{text}");
    assert_eq!(history(&server, &run_id), before);

    let token = resumed["continue_token"].as_str().unwrap();
    let confirm = ok_result(&second.tool(
        "complete_step",
        json!({"continue_token": token, "notes": "done first"}),
    ))
    .clone();
    assert_eq!(confirm["step"]["id"], "second");
    assert_eq!(confirm["require_confirmation"], true, "{confirm}");
    assert!(
        confirm["confirmation"].as_str().unwrap().contains("ask"),
        "{confirm}"
    );
    // resume_run on a step this gateway holds: a new token, and the one before is void.
    let again = ok_result(&second.tool("resume_run", json!({"run_id": run_id}))).clone();
    let replaced = confirm["continue_token"].as_str().unwrap();
    assert_ne!(again["continue_token"], confirm["continue_token"]);
    error_text(&second.tool("complete_step", json!({"continue_token": replaced, "notes": "x"})));
    // The step requires confirmation: the server holds its result for approval.
    let held = ok_result(&second.tool(
        "complete_step",
        json!({"continue_token": again["continue_token"], "notes": "confirmed by the human"}),
    ))
    .clone();
    assert_eq!(held["status"], "held_for_approval", "{held}");
    ok(server.ry(&["run", "approve", &run_id]));
    let done = ok_result(&second.tool("resume_run", json!({"run_id": run_id}))).clone();
    assert_eq!(
        (done["status"].as_str(), done["run_status"].as_str()),
        (Some("finished"), Some("COMPLETED"))
    );
    let types = event_types(&history(&server, &run_id));
    assert_eq!(
        types.iter().filter(|t| *t == "StepTimedOut").count(),
        1,
        "{types:?}"
    );
    assert_eq!(types.last().map(String::as_str), Some("RunCompleted"));
    let (status, logs) = second.close();
    assert!(status.success(), "{status}: {logs}");
}

/// Spawns `railyard mcp` with stdout and stderr piped, then closes the read end of
/// one of them, sends the handshake and a request, and waits for the process to end.
fn exits_when_closed(server_url: &str, close_stdout: bool) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(BIN)
        .args(["mcp", "--server", server_url])
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn railyard mcp");
    let mut kept = String::new();
    let keep = if close_stdout {
        drop(child.stdout.take());
        child.stderr.take().map(|s| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut { s }, &mut text);
                text
            })
        })
    } else {
        drop(child.stderr.take());
        child.stdout.take().map(|s| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut { s }, &mut text);
                text
            })
        })
    };
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let _ = writeln!(stdin, "{init}");
    let _ = writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    );
    let _ = writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    );
    let _ = stdin.flush();
    let status = if close_stdout {
        // Nobody reads its answers: it must end by itself, stdin still open.
        eventually(Duration::from_secs(60), || child.try_wait().unwrap())
    } else {
        // Its logs go nowhere: it must go on serving, and end when stdin closes.
        drop(stdin);
        eventually(Duration::from_secs(60), || child.try_wait().unwrap())
    };
    if let Some(t) = keep {
        kept = t.join().unwrap();
    }
    (status, kept)
}

#[test]
fn mcp_ends_cleanly_when_its_stdout_or_stderr_is_closed() {
    let sandbox = Sandbox::new();
    let server = sandbox.server();
    let (status, logs) = exits_when_closed(&server.url, true);
    assert!(status.code().is_some(), "ended by a signal: {status}");
    assert_ne!(status.code(), Some(101), "panicked: {logs}");
    assert!(!logs.contains("panicked"), "{logs}");

    let (status, out) = exits_when_closed(&server.url, false);
    assert!(status.success(), "{status}: {out}");
    assert!(out.contains("\"tools\""), "answers still came on stdout: {out}");
}

/// One MCP message POSTed to `/mcp` over HTTP/1.0 (so the answer is neither chunked
/// nor kept alive); returns the session id header and the JSON-RPC messages of the
/// answer (a JSON body or an SSE stream).
fn post_mcp(http_addr: &str, session: Option<&str>, message: &Value) -> (Option<String>, Vec<Value>) {
    use std::io::Read;
    let body = message.to_string();
    let mut stream = std::net::TcpStream::connect(http_addr).expect("connect to the HTTP listener");
    stream.set_read_timeout(Some(crate::mcp::ANSWER_LIMIT)).unwrap();
    let session_header = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST /mcp HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         {session_header}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    let (head, payload) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.0 2") || head.starts_with("HTTP/1.1 2"),
        "{head}"
    );
    let session = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_string())
    });
    let messages = payload
        .lines()
        .filter_map(|l| l.strip_prefix("data:").map(str::trim).or(Some(l.trim())))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("jsonrpc").is_some())
        .collect();
    (session, messages)
}

#[test]
fn mcp_over_streamable_http_on_the_servers_listener() {
    let sandbox = Sandbox::new();
    sandbox.workflow("demo.json", include_str!("../../workflows/demo.json"));
    let server = sandbox.server();
    let addr = server.http_addr.clone();
    let (session, init) = post_mcp(
        &addr,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-http", "version": "0"}}}),
    );
    assert_eq!(init[0]["result"]["serverInfo"]["name"], "railyard", "{init:?}");
    let session = session.expect("a session id");
    post_mcp(
        &addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let (_, tools) = post_mcp(
        &addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    let tools = tools[0]["result"]["tools"].as_array().expect("tools").clone();
    assert_eq!(tools.len(), 10, "{tools:?}");
    let call = |id: u64, name: &str, arguments: Value| {
        let (_, answer) = post_mcp(
            &addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}),
        );
        answer
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .expect("the answer")["result"]
            .clone()
    };
    let step = call(
        3,
        "start_workflow",
        json!({"workflow_id": "demo", "goal": "over http"}),
    );
    let content = ok_result(&step).clone();
    assert_eq!(content["step"]["id"], "research", "{content}");
    let run_id = content["run_id"].as_str().unwrap().to_string();
    // An outside agent is a worker: it reports an issue and keeps its step.
    let issue = call(
        40,
        "report_issue",
        json!({"continue_token": content["continue_token"], "severity": "warning",
               "summary": "the sources disagree", "details": "two dates for one event"}),
    );
    assert_eq!(ok_result(&issue)["recorded"], true, "{issue}");
    let wrong = call(
        41,
        "report_issue",
        json!({"continue_token": content["continue_token"], "severity": "fatal", "summary": "x"}),
    );
    assert!(error_text(&wrong).contains("severity"), "{wrong}");
    let bad = call(
        4,
        "complete_step",
        json!({"continue_token": "rct1_nonsense", "notes": "x"}),
    );
    assert!(error_text(&bad).contains("refused"));
    let done = call(
        5,
        "complete_step",
        json!({"continue_token": content["continue_token"], "notes": "researched"}),
    );
    assert_eq!(ok_result(&done)["step"]["id"], "draft");
    let types = event_types(&history(&server, &run_id));
    assert_eq!(
        types[..6],
        [
            "RunStarted",
            "StepScheduled",
            "StepStarted",
            "IssueReported",
            "StepCompleted",
            "StepScheduled"
        ]
    );
    // A Host header from elsewhere is refused on a loopback listener (DNS rebinding).
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(stream, "POST /mcp HTTP/1.0\r\nHost: evil.example\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{{}}").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    assert!(
        !answer.starts_with("HTTP/1.0 2") && !answer.starts_with("HTTP/1.1 2"),
        "{answer}"
    );
}
