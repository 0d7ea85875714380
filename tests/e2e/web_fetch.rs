//! The `web_fetch` tool end to end: a real `railyard server` and `railyard worker`,
//! the mock model fetching a page from an HTTP server on loopback (which the worker's
//! `web_fetch_allow_networks` lets it reach); the page's text reaches the next turn.
//! A step whose `allowedTools` does not name the tool is not offered it.

use std::io::{Read, Write};
use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::json;

const PAGE: &str = "<html><head><script>var x = 1;</script></head>\
    <body><h1>Changelog</h1><p>Version <b>7.2</b> fixes the parser.</p></body></html>";

/// Answers every request on a loopback port with [`PAGE`]; returns its URL.
fn serve_page() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/changelog", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PAGE}",
                PAGE.len()
            );
        }
    });
    url
}

#[test]
fn a_step_that_names_web_fetch_reads_a_page_and_one_that_does_not_is_not_offered_it() {
    let page = serve_page();
    let sandbox = Sandbox::new();
    let def = json!({
        "id": "fetch", "version": "1", "name": "Fetch",
        "steps": [
            {"id": "w_read", "title": "Read the changelog", "prompt": "Read {{goal}}",
             "allowedTools": ["web_fetch"], "taskQueue": "web"},
            {"id": "w_plain", "title": "Work without the web", "prompt": "Go on",
             "allowedTools": ["read_file"], "taskQueue": "web"}
        ]
    });
    sandbox.workflow("fetch.json", &def.to_string());
    let server = sandbox.server();
    let url = page.clone();
    let mock = MockModel::start(move |r| {
        // Both steps try it; only the first may.
        let turn = match r.turn {
            0 => call("web_fetch", json!({ "url": url })),
            _ => complete("done"),
        };
        Reply::Turn(turn)
    });
    let config = sandbox.path("worker.toml");
    std::fs::write(&config, "web_fetch_allow_networks = [\"127.0.0.1/32\"]\n").unwrap();
    let mut worker = WorkerProcess::start_logged(
        &server.url,
        &sandbox.path("workspace"),
        "web-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "web",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
        None,
    );
    let (rt, client) = connect(&server.url);
    let (_, status) = run_until_closed(&rt, &client, "fetch", &page, Duration::from_secs(120));
    assert_eq!(status, "COMPLETED");

    let tools = |step: &str| -> Vec<String> {
        mock.requests_for(step)[0].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        tools("w_read").contains(&"web_fetch".to_string()),
        "{:?}",
        tools("w_read")
    );
    assert!(
        !tools("w_plain").contains(&"web_fetch".to_string()),
        "{:?}",
        tools("w_plain")
    );

    let read = mock.requests_for("w_read");
    let results = read.iter().max_by_key(|r| r.turn).unwrap().tool_results();
    let (text, is_error) = &results[0];
    assert!(!is_error, "{text}");
    assert!(
        text.starts_with(&format!("URL: {page}\nStatus: 200 OK\n")),
        "{text}"
    );
    assert!(
        text.contains("# Changelog")
            && text.contains("Version **7.2** fixes the parser.")
            && !text.contains("var x"),
        "{text}"
    );
    let plain = mock.requests_for("w_plain");
    let results = plain.iter().max_by_key(|r| r.turn).unwrap().tool_results();
    let (refused, is_error) = &results[0];
    assert!(
        *is_error && refused.contains("\"web_fetch\" is not allowed in this step"),
        "{refused}"
    );

    worker.terminate(Duration::from_secs(20));
    drop(server);
    // The transcript the worker checkpointed, in the server's data, holds the call.
    let stored: Vec<u8> = crate::mcp_tools::walk(&sandbox.path("data"))
        .into_iter()
        .flat_map(|f| std::fs::read(f).unwrap_or_default())
        .collect();
    let has = |needle: &str| stored.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(has("fixes the parser"), "the page's text is in the checkpoint");
}
