//! Guardrails of the agent loop: token usage and budgets, stuck detection, and tool
//! errors that end a step at once.

use std::sync::Arc;

use crate::common::{FakeLease, Recording, Reply, mock_model, task};
use railyard_proto::v1::{StuckThresholds, TokenBudget, TokenUsage};
use railyard_worker::agent::{AGENT_STUCK, Agent, AgentOptions, Outcome, TOKEN_BUDGET_EXCEEDED};
use railyard_worker::provider::scripted::{Script, ScriptedProvider};
use railyard_worker::provider::{AnthropicProvider, Block};
use railyard_worker::usage::ModelPrice;
use railyard_worker::{HeartbeatOutcome, LeaseError};
use serde_json::{Value, json};

fn scripted(script: Value) -> Arc<Recording<ScriptedProvider>> {
    Arc::new(Recording::new(ScriptedProvider::new(
        serde_json::from_value::<Script>(script).unwrap(),
    )))
}

fn turn(name: &str, input: Value, input_tokens: u64) -> Value {
    json!({"tool_calls": [{"name": name, "input": input}], "usage": {"input": input_tokens, "output": 10}})
}

/// A script of `n` turns that each write a new file (`f0.txt`, `f1.txt`, ...), so
/// none looks stuck, at `input_tokens` a turn.
fn new_file_each_turn(n: usize, input_tokens: u64) -> Arc<Recording<ScriptedProvider>> {
    let turns: Vec<Value> = (0..n)
        .map(|i| {
            turn(
                "write_file",
                json!({"path": format!("f{i}.txt"), "content": "x"}),
                input_tokens,
            )
        })
        .collect();
    scripted(json!({ "default": turns }))
}

/// Options pricing input and output tokens (dollars per million), no cache prices.
fn priced(input: f64, output: f64) -> AgentOptions {
    AgentOptions {
        price: Some(ModelPrice {
            input,
            output,
            cache_read: None,
            cache_write: None,
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn usage_is_reported_cumulatively_with_its_cost() {
    let provider = scripted(json!({"default": [
        turn("write_file", json!({"path": "a.txt", "content": "a"}), 1000),
        turn("complete_step", json!({"notes": "done"}), 3000),
    ]}));
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(provider)
        .with_options(priced(3.0, 15.0))
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(_)),
        "{:?}",
        report.outcome
    );
    let usage = lease.usage.lock().unwrap().clone();
    assert_eq!(usage.len(), 2, "one report per turn");
    assert_eq!((usage[0].0.input_tokens, usage[0].0.output_tokens), (1000, 10));
    assert_eq!((usage[1].0.input_tokens, usage[1].0.output_tokens), (4000, 20));
    assert_eq!(usage[1].1, "scripted");
    // 4000 input at $3/M + 20 output at $15/M
    let expected = 4000.0 * 3.0 / 1e6 + 20.0 * 15.0 / 1e6;
    assert!(
        (usage[1].0.cost_usd - expected).abs() < 1e-12,
        "{}",
        usage[1].0.cost_usd
    );
    assert_eq!(report.usage.total(), 4020);
    assert!((report.cost_usd - expected).abs() < 1e-12);
}

#[tokio::test]
async fn a_step_budget_stops_the_model_and_fails_non_retryable() {
    // 600 tokens a turn.
    let provider = new_file_each_turn(10, 590);
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let mut t = task("s", "p");
    // 500 used by an earlier attempt: the second turn of this one passes 1,500.
    t.budget = Some(TokenBudget {
        step_max_tokens: 1500,
        step_used: Some(TokenUsage {
            input_tokens: 500,
            ..Default::default()
        }),
        ..Default::default()
    });
    let report = Agent::new(provider.clone())
        .run_step(&t, "q", ws.path(), &lease)
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("expected a failure, got {:?}", report.outcome)
    };
    assert_eq!(f.error_type, TOKEN_BUDGET_EXCEEDED);
    assert!(f.non_retryable);
    assert!(
        f.message.contains("1700 tokens") && f.message.contains("1500"),
        "{}",
        f.message
    );
    assert_eq!(provider.requests().len(), 2, "no model call past the budget");
    assert!(ws.path().join("f0.txt").exists());
    assert!(
        !ws.path().join("f1.txt").exists(),
        "the turn past the budget runs no tool"
    );
    // The usage past the budget went to the server with a heartbeat first.
    let last_usage = lease.usage.lock().unwrap().last().unwrap().0;
    assert_eq!(last_usage.input_tokens, 1180);
    assert_eq!(lease.beats().len(), 2);

    // A step whose budget was spent by earlier attempts makes no call at all.
    let provider = scripted(json!({ "default": [turn("complete_step", json!({"notes": "n"}), 1)] }));
    t.budget
        .as_mut()
        .unwrap()
        .step_used
        .as_mut()
        .unwrap()
        .input_tokens = 1501;
    let report = Agent::new(provider.clone())
        .run_step(&t, "q", ws.path(), &FakeLease::new())
        .await;
    assert!(matches!(&report.outcome, Outcome::Failed(f) if f.error_type == TOKEN_BUDGET_EXCEEDED));
    assert_eq!(provider.requests().len(), 0);
}

#[tokio::test]
async fn a_run_cost_cap_counts_the_configured_price() {
    let provider = new_file_each_turn(5, 100_000);
    let ws = tempfile::tempdir().unwrap();
    let mut t = task("s", "p");
    t.budget = Some(TokenBudget {
        run_max_cost_usd: 0.5,
        run_used: Some(TokenUsage {
            cost_usd: 0.2,
            ..Default::default()
        }),
        ..Default::default()
    });
    // $1 per million input tokens: 0.1 a turn, so the fourth turn passes 0.5.
    let report = Agent::new(provider.clone())
        .with_options(priced(1.0, 0.0))
        .run_step(&t, "q", ws.path(), &FakeLease::new())
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(f.error_type, TOKEN_BUDGET_EXCEEDED);
    assert!(f.message.contains("maxCostUsd"), "{}", f.message);
    assert_eq!(provider.requests().len(), 4);
}

#[tokio::test]
async fn the_server_failing_the_step_on_its_budget_ends_it_unreported() {
    let provider = new_file_each_turn(5, 10);
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new().reply(Ok(HeartbeatOutcome {
        budget_exceeded: Some("the run used 20 tokens, more than its maxTokens of 15".into()),
        ..Default::default()
    }));
    let report = Agent::new(provider.clone())
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    let Outcome::EndedByServer { error_type, message } = report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(error_type, TOKEN_BUDGET_EXCEEDED);
    assert!(message.contains("maxTokens of 15"));
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test]
async fn a_model_repeating_a_call_is_warned_then_failed_agent_stuck() {
    let same: Vec<Value> = (0..8)
        .map(|_| turn("list_files", json!({"path": "."}), 10))
        .collect();
    let provider = scripted(json!({ "default": same }));
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(provider.clone())
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(f.error_type, AGENT_STUCK);
    assert!(f.non_retryable);
    assert!(f.message.contains("repeated_call"), "{}", f.message);
    // Warned at the third call, failed at the fourth: no fifth model call.
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    let warned = requests[3].messages.last().unwrap();
    assert!(
        warned.content.iter().any(|b| matches!(b, Block::Text { text }
            if text.starts_with("[stuck: repeated_call]") && text.contains("list_files"))),
        "the model is told plainly: {warned:?}"
    );
    let stuck = lease.stuck.lock().unwrap().clone();
    assert_eq!(stuck.len(), 2, "{stuck:?}");
    assert_eq!(
        (stuck[0].signal.as_str(), stuck[0].fatal),
        ("repeated_call", false)
    );
    assert_eq!(
        (stuck[1].signal.as_str(), stuck[1].fatal),
        ("repeated_call", true)
    );
    // The fatal report went out with a heartbeat before the failure.
    assert_eq!(lease.beats().len(), 4);
}

#[tokio::test]
async fn a_model_varying_its_calls_is_not_flagged() {
    let mut turns: Vec<Value> = (0..6)
        .map(|i| turn("list_files", json!({"path": format!("dir{i}")}), 10))
        .collect();
    turns.push(turn("write_file", json!({"path": "out.md", "content": "x"}), 10));
    turns.push(turn("complete_step", json!({"notes": "done"}), 10));
    let provider = scripted(json!({ "default": turns }));
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(provider)
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(_)),
        "{:?}",
        report.outcome
    );
    assert!(lease.stuck.lock().unwrap().is_empty());
}

#[tokio::test]
async fn stuck_thresholds_come_from_the_step() {
    // No progress in 2 turns is a warning; two more and the step fails.
    let turns: Vec<Value> = (0..8)
        .map(|i| turn("read_file", json!({"path": format!("f{i}")}), 10))
        .collect();
    let provider = scripted(json!({ "default": turns }));
    let ws = tempfile::tempdir().unwrap();
    let mut t = task("s", "p");
    t.stuck = Some(StuckThresholds {
        no_progress_turns: 2,
        ..Default::default()
    });
    let lease = FakeLease::new();
    let report = Agent::new(provider.clone())
        .run_step(&t, "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(&report.outcome, Outcome::Failed(f) if f.error_type == AGENT_STUCK && f.message.contains("no_progress")),
        "{:?}",
        report.outcome
    );
    assert_eq!(provider.requests().len(), 4);
    let signals: Vec<_> = lease
        .stuck
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.signal.clone(), s.fatal))
        .collect();
    assert_eq!(
        signals,
        vec![
            ("no_progress".to_string(), false),
            ("no_progress".to_string(), true)
        ]
    );
}

fn anthropic_tool_turn(id: &str, name: &str, input: Value) -> Reply {
    Reply::ok(json!({"id": "msg", "type": "message", "role": "assistant",
        "content": [{"type": "tool_use", "id": id, "name": name, "input": input}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 50, "output_tokens": 5}}))
}

#[tokio::test]
async fn a_lease_lost_mid_step_ends_it_without_another_model_call() {
    let replies = (0..5)
        .map(|i| {
            anthropic_tool_turn(
                &format!("tu{i}"),
                "write_file",
                json!({"path": format!("f{i}"), "content": "x"}),
            )
        })
        .collect();
    let (base, state) = mock_model("/v1/messages", replies).await;
    let ws = tempfile::tempdir().unwrap();
    // The first heartbeat is fine; the second finds the lease gone.
    let lease = FakeLease::new()
        .reply(Ok(HeartbeatOutcome::default()))
        .reply(Err(LeaseError::Lost(
            "FAILED_PRECONDITION: the lease of step s is spent".into(),
        )));
    let provider = AnthropicProvider::new(&base, "sk-ant-test", "claude-test", 1024).unwrap();
    let report = Agent::new(Arc::new(provider))
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(&report.outcome, Outcome::LeaseLost(m) if m.contains("spent")),
        "{:?}",
        report.outcome
    );
    assert_eq!(
        state.requests().len(),
        2,
        "no model call after the lease was lost"
    );
    assert_eq!(report.usage.input, 100);
}

#[tokio::test]
async fn an_unusable_workspace_ends_the_step_with_a_typed_reason() {
    let turns = vec![
        turn("write_file", json!({"path": "a.txt", "content": "a"}), 10),
        turn("bash", json!({"command": "rm -rf \"$PWD\""}), 10),
        turn("write_file", json!({"path": "b.txt", "content": "b"}), 10),
        turn("write_file", json!({"path": "c.txt", "content": "c"}), 10),
    ];
    let provider = scripted(json!({ "default": turns }));
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("run");
    std::fs::create_dir(&ws).unwrap();
    let report = Agent::new(provider.clone())
        .run_step(&task("s", "p"), "q", &ws, &FakeLease::new())
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(f.error_type, "workspace_unusable");
    assert!(!f.non_retryable, "another attempt may have a workspace");
    assert_eq!(
        provider.requests().len(),
        3,
        "no model call after the workspace went"
    );
}
