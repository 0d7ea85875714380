//! `/mcp` sessions are bounded (one keep-alive client once took the server from
//! 27 MB to 3 GB in 8 s with `initialize` after `initialize`): at most
//! `--mcp-max-sessions-per-key` per key and `--mcp-max-sessions` in all, refused past
//! the cap with HTTP 429 and a JSON-RPC error naming it, and a closed session gives
//! its slot back.

use crate::mcp_http::{HttpMcp, key};
use crate::support::*;

/// The server's resident memory, in KiB.
fn rss_kib(server: &ServerProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn refused(answer: &serde_json::Value, says: &str) {
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    assert!(message.contains(says), "{answer}");
}

#[test]
fn mcp_sessions_are_capped_per_key_and_in_all() {
    let sandbox = Sandbox::new();
    let server = sandbox.server_with(&[
        "--auth",
        "--mcp-max-sessions",
        "3",
        "--mcp-max-sessions-per-key",
        "2",
    ]);
    let admin = std::fs::read_to_string(sandbox.path("data").join("admin.key"))
        .unwrap()
        .trim()
        .to_string();
    let a = key(&server, &admin, &["--role", "client"]);
    let b = key(&server, &admin, &["--role", "worker"]);
    let a_id = &a[3..19];
    let url = format!("http://{}/mcp", server.http_addr);
    let open = |k: &str| {
        let mut s = HttpMcp::new(&url, Some(k));
        let (status, answer) = s.initialize();
        (s, status, answer)
    };

    // Two for key a; its third is refused, naming the cap.
    let (mut a1, status, _) = open(&a);
    assert_eq!(status, 200);
    let (_a2, status, _) = open(&a);
    assert_eq!(status, 200);
    let (_, status, answer) = open(&a);
    assert_eq!(status, 429, "{answer}");
    refused(
        &answer,
        &format!("too many MCP sessions open for key {a_id} (2, the most allowed per key)"),
    );
    // One for key b fills the server; b's second is refused by the total.
    let (_b1, status, _) = open(&b);
    assert_eq!(status, 200);
    let (_, status, answer) = open(&b);
    assert_eq!(status, 429, "{answer}");
    refused(
        &answer,
        "too many MCP sessions open on this server (3, the most allowed)",
    );
    // The open sessions still work.
    let tools = a1.request("tools/list", serde_json::json!({}));
    assert!(tools["result"]["tools"].is_array(), "{tools}");

    // Closing one gives its slot back.
    assert!((200..300).contains(&a1.close()));
    let (_b2, status, answer) = open(&b);
    assert_eq!(status, 200, "{answer}");

    // A client that keeps asking gets refusals, and the server's memory stays put
    // (each session held ~53 KB: 2000 of them were ~100 MB before).
    let before = rss_kib(&server);
    let mut flood = HttpMcp::new(&url, Some(&a));
    let mut accepted = 0;
    for _ in 0..2000 {
        let (status, _) = flood.initialize();
        if status == 200 {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 0, "the server is full");
    let grown = rss_kib(&server).saturating_sub(before);
    assert!(
        grown < 40 * 1024,
        "the server grew by {grown} KiB under a flood of initialize"
    );
}
