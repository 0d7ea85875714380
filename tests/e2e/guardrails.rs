//! Guardrails end to end: token usage from the Anthropic and OpenAI wire formats
//! recorded by a real server and shown by `railyard run describe` / `run list`, its
//! estimated cost from the worker's price table, and a step's token budget enforced.

use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::{Value, json};

const RUN_LIMIT: Duration = Duration::from_secs(90);

fn wait_closed(server: &ServerProcess, run_id: &str) -> Value {
    eventually(RUN_LIMIT, || {
        let d = json(server.ry(&["run", "describe", run_id, "-o", "json"]));
        (d["run"]["status"] != "RUNNING").then_some(d)
    })
}

fn start(server: &ServerProcess, workflow: &str) -> String {
    let out = json(server.ry(&["run", "start", workflow, "--goal", "count", "-o", "json"]));
    out["run_id"].as_str().unwrap().to_string()
}

/// The usage the mock reports for `turns` turns, added up: (input, output, cache read,
/// cache write).
fn mock_usage(turns: usize, cache_writes: bool) -> (u64, u64, u64, u64) {
    (0..turns).map(turn_usage).fold((0, 0, 0, 0), |a, t| {
        (
            a.0 + t.0,
            a.1 + t.1,
            a.2 + t.2,
            a.3 + if cache_writes { t.3 } else { 0 },
        )
    })
}

#[test]
fn token_usage_from_both_wire_formats_reaches_describe_and_list_with_its_cost() {
    let sandbox = Sandbox::new();
    for (id, queue) in [("tok_a", "tok_anthropic"), ("tok_o", "tok_openai")] {
        sandbox.workflow(
            &format!("{id}.json"),
            &format!(
                r#"{{"id": "{id}", "version": "1", "name": "Tokens", "taskQueue": "{queue}",
                  "steps": [{{"id": "{id}_step", "title": "Write", "prompt": "Write {{{{goal}}}}"}}]}}"#
            ),
        );
    }
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        Reply::Turn(match r.turn {
            0 => call("write_file", json!({"path": "n.txt", "content": "1"})),
            _ => complete("counted"),
        })
    });
    // The Anthropic worker has a price for its model; the OpenAI worker has none.
    let config = sandbox.path("worker.toml");
    std::fs::write(
        &config,
        "[prices.claude-mock]\ninput = 3.0\noutput = 15.0\ncache_read = 0.3\ncache_write = 3.75\n",
    )
    .unwrap();
    let _anthropic = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "tok-anthropic",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "tok_anthropic",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
    );
    let openai_url = format!("{}/v1", mock.url);
    let _openai = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "tok-openai",
        &[
            "--provider",
            "openai",
            "--model",
            "gpt-mock",
            "--queue",
            "tok_openai",
        ],
        &[
            ("OPENAI_BASE_URL", openai_url.as_str()),
            ("OPENAI_API_KEY", "sk-openai-dummy"),
        ],
    );
    let run_a = start(&server, "tok_a");
    let run_o = start(&server, "tok_o");

    // Anthropic: two turns, with cache reads and writes, priced.
    let a = wait_closed(&server, &run_a);
    assert_eq!(a["run"]["status"], "COMPLETED", "{a}");
    let (input, output, cache_read, cache_write) = mock_usage(2, true);
    let usage = &a["run"]["usage"];
    assert_eq!(usage["input_tokens"], input);
    assert_eq!(usage["output_tokens"], output);
    assert_eq!(usage["cache_read_tokens"], cache_read);
    assert_eq!(usage["cache_write_tokens"], cache_write);
    let total = input + output + cache_read + cache_write;
    assert_eq!(usage["total_tokens"], total);
    let cost =
        (input as f64 * 3.0 + output as f64 * 15.0 + cache_read as f64 * 0.3 + cache_write as f64 * 3.75)
            / 1e6;
    assert!(
        (usage["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9,
        "{usage}"
    );
    assert_eq!(
        a["run"]["steps"][0]["usage"], *usage,
        "one step: its usage is the run's"
    );
    assert_eq!(a["run"]["steps"][0]["model"], "claude-mock");
    let human = ok(server.ry(&["run", "describe", &run_a]));
    let line = format!(
        "tokens    {total} (input {input}, output {output}, cache read {cache_read}, cache write {cache_write}), est. ${cost:.4}"
    );
    assert!(human.lines().any(|l| l == line), "{line:?} not in:\n{human}");
    assert!(
        human.contains("tokens by step") && human.contains("claude-mock"),
        "{human}"
    );

    // OpenAI: the cached prompt tokens are counted apart; no price, no cost.
    let o = wait_closed(&server, &run_o);
    assert_eq!(o["run"]["status"], "COMPLETED", "{o}");
    let (input, output, cache_read, _) = mock_usage(2, false);
    let usage = &o["run"]["usage"];
    assert_eq!(
        (
            usage["input_tokens"].as_u64(),
            usage["output_tokens"].as_u64(),
            usage["cache_read_tokens"].as_u64()
        ),
        (Some(input), Some(output), Some(cache_read)),
        "{usage}"
    );
    assert_eq!(usage["cache_write_tokens"], 0);
    assert_eq!(usage["cost_usd"], 0.0);
    assert_eq!(o["run"]["steps"][0]["model"], "gpt-mock");

    // History records each attempt's usage; `run list` shows each run's total.
    let history = json(server.ry(&["run", "history", &run_a, "-o", "json"]));
    let history = history
        .as_array()
        .cloned()
        .unwrap_or_else(|| history["events"].as_array().cloned().unwrap_or_default());
    let used: Vec<&Value> = history
        .iter()
        .filter(|e| e["event_type"] == "StepUsage")
        .collect();
    assert_eq!(used.len(), 1, "{history:?}");
    assert_eq!(used[0]["attributes"]["inputTokens"], mock_usage(2, true).0);
    let listed = json(server.ry(&["run", "list", "-o", "json"]));
    let of = |id: &str| {
        listed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == id)
            .unwrap()["usage"]["total_tokens"]
            .clone()
    };
    assert_eq!(of(&run_a), total);
    assert_eq!(of(&run_o), input + output + cache_read);
    let table = ok(server.ry(&["run", "list"]));
    assert!(
        table.contains("TOKENS") && table.contains(&total.to_string()),
        "{table}"
    );
}

#[test]
fn a_step_budget_fails_the_step_for_good_without_more_model_calls() {
    let sandbox = Sandbox::new();
    // Each mock turn reports about 1,200 tokens: the third passes 2,500.
    sandbox.workflow(
        "budget.json",
        r#"{"id": "budget", "version": "1", "name": "Budget", "taskQueue": "budget",
          "steps": [{"id": "b_loop", "title": "Loop", "prompt": "Write files", "maxTokens": 2500}]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        Reply::Turn(call(
            "write_file",
            json!({"path": format!("f{}.txt", r.turn), "content": "x"}),
        ))
    });
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "budget-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "budget",
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
    );
    let run = start(&server, "budget");
    let d = wait_closed(&server, &run);
    assert_eq!(d["run"]["status"], "FAILED", "{d}");
    assert!(
        d["run"]["failure"]
            .as_str()
            .unwrap()
            .contains("token_budget_exceeded"),
        "{d}"
    );
    let history = json(server.ry(&["run", "history", &run, "-o", "json"]));
    let history = history
        .as_array()
        .cloned()
        .unwrap_or_else(|| history["events"].as_array().cloned().unwrap_or_default());
    let failed: Vec<&Value> = history
        .iter()
        .filter(|e| e["event_type"] == "StepFailed")
        .collect();
    assert_eq!(failed.len(), 1, "one attempt, not retried: {history:?}");
    assert_eq!(failed[0]["attributes"]["errorType"], "token_budget_exceeded");
    assert_eq!(failed[0]["attributes"]["willRetry"], false);
    let (i, o, cr, cw) = mock_usage(3, true);
    assert_eq!(d["run"]["usage"]["total_tokens"], i + o + cr + cw);
    assert_eq!(
        mock.requests_for("b_loop").len(),
        3,
        "no model call past the budget"
    );
}

#[test]
fn a_model_repeating_a_call_is_warned_then_failed_agent_stuck_in_history() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "loop.json",
        r#"{"id": "loop", "version": "1", "name": "Loop", "taskQueue": "loop",
          "steps": [{"id": "s_loop", "title": "Loop", "prompt": "Look around"}]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|_| Reply::Turn(call("list_files", json!({"path": "."}))));
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "loop-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--queue",
            "loop",
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
    );
    let run = start(&server, "loop");
    let d = wait_closed(&server, &run);
    assert_eq!(d["run"]["status"], "FAILED", "{d}");
    let history = json(server.ry(&["run", "history", &run, "-o", "json"]));
    let history = history.as_array().cloned().unwrap_or_default();
    let of = |t: &str| -> Vec<Value> {
        history
            .iter()
            .filter(|e| e["event_type"] == t)
            .map(|e| e["attributes"].clone())
            .collect()
    };
    let (warned, stuck, failed) = (of("AgentStuckWarning"), of("AgentStuck"), of("StepFailed"));
    assert_eq!(warned.len(), 1, "{history:?}");
    assert_eq!(warned[0]["signal"], "repeated_call");
    assert_eq!(stuck.len(), 1, "{history:?}");
    assert_eq!(stuck[0]["signal"], "repeated_call");
    assert_eq!(failed.len(), 1, "{history:?}");
    assert_eq!(failed[0]["errorType"], "agent_stuck");
    assert_eq!(failed[0]["willRetry"], false);
    // Warned at the third identical call, failed at the fourth.
    let requests = mock.requests_for("s_loop");
    assert_eq!(requests.len(), 4);
    assert!(
        requests[3].body.to_string().contains("[stuck: repeated_call]"),
        "the model was told plainly"
    );
}
