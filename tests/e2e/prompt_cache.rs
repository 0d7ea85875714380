//! Prompt caching, end to end: the Anthropic requests a real worker sends a step's
//! turns carry `cache_control` breakpoints at stable positions (the last tool, the
//! system prompt, and the conversation's end and the previous turn's end), and the
//! cache reads and writes the mock reports (as the real API does) are priced at the
//! configured `cache_read` and `cache_write` prices.

use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::{Value, json};

const RUN_LIMIT: Duration = Duration::from_secs(120);
/// Turns of the step: the 30 of docs/performance.md.
const TURNS: usize = 30;

/// What the API would bill a request as (uncached input, cache read, cache write), in
/// tokens of 4 bytes, as the Anthropic cache works: the prefix up to each breakpoint
/// (tools, then system, then the messages' blocks) is written when new, and a request
/// reads the longest prefix up to one of its breakpoints that an earlier one wrote.
fn bill(body: &Value, cache: &mut std::collections::HashSet<u64>) -> (u64, u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut blocks: Vec<Value> = body["tools"].as_array().cloned().unwrap_or_default();
    blocks.extend(body["system"].as_array().cloned().unwrap_or_default());
    for m in body["messages"].as_array().into_iter().flatten() {
        blocks.extend(m["content"].as_array().cloned().unwrap_or_default());
    }
    let (mut tokens, mut hasher) = (0u64, std::collections::hash_map::DefaultHasher::new());
    let (mut read, mut written_to) = (0u64, 0u64);
    for mut b in blocks {
        let marked = b
            .as_object_mut()
            .and_then(|o| o.remove("cache_control"))
            .is_some();
        let text = b.to_string();
        text.hash(&mut hasher);
        tokens += text.len() as u64 / 4;
        if marked {
            let prefix = hasher.finish();
            if !cache.insert(prefix) {
                read = tokens;
            }
            written_to = tokens;
        }
    }
    let write = written_to.saturating_sub(read);
    (tokens - read - write, read, write)
}

/// Indexes of the messages whose last content block is a cache breakpoint.
fn marked_messages(body: &Value) -> Vec<usize> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, m)| {
            let blocks = m["content"].as_array().cloned().unwrap_or_default();
            blocks.last().is_some_and(|b| b.get("cache_control").is_some())
                && blocks[..blocks.len() - 1]
                    .iter()
                    .all(|b| b.get("cache_control").is_none())
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn each_turn_marks_the_prefix_the_next_turn_reads_and_cache_tokens_are_priced() {
    let sandbox = Sandbox::new();
    let def = json!({
        "id": "cached", "version": "1", "name": "Cached",
        "steps": [{"id": "c_long", "title": "Several turns", "prompt": "Do {{goal}}", "taskQueue": "cache",
                   "maxTurns": 40, "stuck": {"noProgressTurns": 100}}]
    });
    sandbox.workflow("cached.json", &def.to_string());
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        Reply::Turn(if r.turn < TURNS - 1 {
            call("bash", json!({"command": format!("echo turn {}", r.turn)}))
        } else {
            complete("done")
        })
    });
    let config = sandbox.path("worker.toml");
    std::fs::write(
        &config,
        "[prices.\"claude-mock\"]\ninput = 3.0\noutput = 15.0\ncache_read = 0.3\ncache_write = 3.75\n",
    )
    .unwrap();
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "cache-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "cache",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
    );
    let (rt, client) = connect(&server.url);
    let (run, status) = run_until_closed(&rt, &client, "cached", "the work", RUN_LIMIT);
    assert_eq!(status, "COMPLETED");

    let requests = mock.requests_for("c_long");
    assert_eq!(requests.len(), TURNS);
    let mut previous_end = None;
    for r in &requests {
        let tools = r.body["tools"].as_array().unwrap();
        let marked: Vec<usize> = (0..tools.len())
            .filter(|&i| tools[i].get("cache_control").is_some())
            .collect();
        assert_eq!(marked, vec![tools.len() - 1], "the last tool, turn {}", r.turn);
        assert_eq!(r.body["system"][0]["cache_control"]["type"], "ephemeral");
        let end = r.body["messages"].as_array().unwrap().len() - 1;
        let expected: Vec<usize> = previous_end.into_iter().chain([end]).collect();
        assert_eq!(marked_messages(&r.body), expected, "turn {}", r.turn);
        previous_end = Some(end);
    }
    // The system text and tools are the same bytes every turn (the cached prefix).
    for r in &requests[1..] {
        assert_eq!(r.body["system"], requests[0].body["system"]);
        assert_eq!(r.body["tools"], requests[0].body["tools"]);
    }

    // Priced as the table says: each turn's uncached input, output, cache read and write.
    let history = rt.block_on(client.full_history("default", &run)).unwrap();
    let usage = history
        .iter()
        .find(|e| e.event_type == "StepUsage")
        .map(attrs)
        .expect("StepUsage");
    let mut expected = 0.0;
    for turn in 0..TURNS {
        let (input, output, read, write) = turn_usage(turn);
        expected +=
            (input as f64 * 3.0 + output as f64 * 15.0 + read as f64 * 0.3 + write as f64 * 3.75) / 1e6;
    }
    let cost = usage["costUsd"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-9, "{cost} != {expected}: {usage}");
    assert_eq!(usage["cacheReadTokens"], TURNS as u64 * turn_usage(0).2);

    // What the breakpoints save on this step, billed as the API would: every input
    // token at $3 per million without caching; with it, reads at $0.30 and writes at
    // $3.75 (claude-sonnet-4-5's prices). Printed for docs/performance.md.
    let mut cache = std::collections::HashSet::new();
    let (mut plain, mut cached) = (0.0, 0.0);
    for r in &requests {
        let (input, read, write) = bill(&r.body, &mut cache);
        plain += (input + read + write) as f64 * 3.0 / 1e6;
        cached += (input as f64 * 3.0 + read as f64 * 0.3 + write as f64 * 3.75) / 1e6;
    }
    eprintln!(
        "{TURNS}-turn step, estimated input cost: ${plain:.4} without prompt caching, ${cached:.4} with it"
    );
    assert!(
        cached < plain / 3.0,
        "caching saves most of it: {cached} vs {plain}"
    );
}
