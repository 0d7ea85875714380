//! The real providers against local doubles of the Anthropic and OpenAI wire formats.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{FakeLease, Reply, mock_model, task, tool_results};
use railyard_worker::agent::{Agent, Outcome};
use railyard_worker::output::Discard;
use railyard_worker::provider::{
    AnthropicProvider, Block, Message, ModelRequest, OpenAiProvider, Provider, ProviderError, RetryPolicy,
};
use railyard_worker::{HeartbeatOutcome, LeaseError};
use serde_json::{Value, json};

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
    }
}

fn anthropic(base: &str) -> AnthropicProvider {
    AnthropicProvider::new(base, "sk-ant-test", "claude-test", 1024)
        .unwrap()
        .with_retry(fast_retry())
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

fn anthropic_turn(content: Vec<Value>) -> Reply {
    Reply::ok(
        json!({"id": "msg", "type": "message", "role": "assistant", "content": content,
                     "stop_reason": "tool_use", "model": "claude-test"}),
    )
}

#[tokio::test]
async fn agent_completes_a_step_through_anthropic() {
    let (base, state) = mock_model(
        "/v1/messages",
        vec![
            anthropic_turn(vec![
                json!({"type": "text", "text": "Writing the file."}),
                tool_use("tu1", "write_file", json!({"path": "out/haiku.txt", "content": "rust never sleeps"})),
            ]),
            anthropic_turn(vec![tool_use(
                "tu2",
                "complete_step",
                json!({"notes": "wrote the haiku", "artifacts": ["out/haiku.txt"], "context_updates": {"k": "v"}}),
            )]),
        ],
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let agent = Agent::new(Arc::new(anthropic(&base)));
    let report = agent
        .run_step(
            &task("draft", "Write a haiku into out/haiku.txt"),
            "q",
            ws.path(),
            &lease,
        )
        .await;

    let Outcome::Completed(c) = report.outcome else {
        panic!("expected completion, got {:?}", report.outcome)
    };
    assert_eq!(c.notes, "wrote the haiku");
    assert_eq!(c.artifacts, vec!["out/haiku.txt"]);
    assert_eq!(c.context_updates["k"], "v");
    assert_eq!(report.turns, 2);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out/haiku.txt")).unwrap(),
        "rust never sleeps"
    );

    let requests = state.requests();
    assert_eq!(requests.len(), 2);
    let (headers, first) = &requests[0];
    assert_eq!(headers["x-api-key"], "sk-ant-test");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(first["model"], "claude-test");
    assert_eq!(first["max_tokens"], 1024);
    assert!(
        first["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("a haiku about rust")
    );
    assert_eq!(
        first["messages"][0]["content"][0]["text"],
        "Write a haiku into out/haiku.txt"
    );
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"write_file") && tools.contains(&"complete_step"));
    // The second call carries the assistant's tool_use and the tool's result.
    let second = &requests[1].1;
    assert_eq!(second["messages"][1]["content"][1]["id"], "tu1");
    let results = tool_results(second);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, "tu1");
    assert!(
        results[0].1.contains("wrote 17 bytes to out/haiku.txt"),
        "{}",
        results[0].1
    );

    // One heartbeat after the tool turn, with the transcript as checkpoint.
    let beats = lease.beats();
    assert_eq!(beats.len(), 1);
    let cp = beats[0].transcript();
    assert_eq!(cp.turns, 1);
    assert_eq!(cp.messages.len(), 3);
}

#[tokio::test]
async fn anthropic_retries_429_honouring_retry_after() {
    let (base, state) = mock_model(
        "/v1/messages",
        vec![
            Reply::status(
                429,
                json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
            )
            .header("retry-after", "0"),
            Reply::status(
                529,
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
            ),
            anthropic_turn(vec![json!({"type": "text", "text": "hello"})]),
        ],
    )
    .await;
    let provider = anthropic(&base);
    let req = ModelRequest {
        messages: vec![Message::user_text("hi")],
        ..Default::default()
    };
    let turn = provider.complete(&req, &Discard).await.unwrap();
    assert_eq!(turn.blocks, vec![Block::text("hello")]);
    assert_eq!(state.requests().len(), 3);
}

#[tokio::test]
async fn anthropic_gives_up_after_max_attempts_as_retryable() {
    let busy = Reply::status(503, json!({"error": "down"}));
    let (base, state) = mock_model("/v1/messages", vec![busy.clone(), busy.clone(), busy]).await;
    let req = ModelRequest {
        messages: vec![Message::user_text("hi")],
        ..Default::default()
    };
    let err = anthropic(&base).complete(&req, &Discard).await.unwrap_err();
    assert!(err.is_retryable());
    assert!(matches!(err, ProviderError::Http { status: 503, .. }), "{err}");
    assert_eq!(state.requests().len(), 3);

    // Through the agent: retryable → provider_unavailable, retryable failure.
    let busy = Reply::status(500, json!({"error": "down"}));
    let (base, _) = mock_model("/v1/messages", vec![busy.clone(), busy.clone(), busy]).await;
    let ws = tempfile::tempdir().unwrap();
    let report = Agent::new(Arc::new(anthropic(&base)))
        .run_step(&task("s", "p"), "q", ws.path(), &FakeLease::new())
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("expected failure")
    };
    assert_eq!(f.error_type, "provider_unavailable");
    assert!(!f.non_retryable);
    assert!(
        !f.checkpoint.is_empty(),
        "the transcript so far goes to the next attempt"
    );
}

#[tokio::test]
async fn anthropic_401_fails_clearly_without_retrying() {
    let (base, state) = mock_model(
        "/v1/messages",
        vec![Reply::status(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
        )],
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let report = Agent::new(Arc::new(anthropic(&base)))
        .run_step(&task("s", "p"), "q", ws.path(), &FakeLease::new())
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("expected failure")
    };
    assert_eq!(f.error_type, "provider_error");
    assert!(f.non_retryable);
    assert!(
        f.message
            .starts_with("authentication failed (check ANTHROPIC_API_KEY)"),
        "{}",
        f.message
    );
    assert!(f.message.contains("invalid x-api-key"), "{}", f.message);
    assert_eq!(state.requests().len(), 1, "401 is not retried");
}

#[tokio::test]
async fn unknown_model_is_named() {
    let (base, _) = mock_model(
        "/v1/messages",
        vec![Reply::status(
            404,
            json!({"type": "error", "error": {"type": "not_found_error", "message": "model: claude-test"}}),
        )],
    )
    .await;
    let req = ModelRequest {
        messages: vec![Message::user_text("hi")],
        ..Default::default()
    };
    let err = anthropic(&base).complete(&req, &Discard).await.unwrap_err();
    assert!(!err.is_retryable());
    assert!(err.to_string().starts_with("unknown model claude-test"), "{err}");
}

#[tokio::test]
async fn resumed_step_continues_the_earlier_transcript() {
    // Attempt 1 writes a file, then loses its lease at the heartbeat after that turn.
    let (base, _) = mock_model(
        "/v1/messages",
        vec![anthropic_turn(vec![tool_use(
            "tu1",
            "write_file",
            json!({"path": "a.txt", "content": "A"}),
        )])],
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new().reply(Err(LeaseError::Lost("lease expired".into())));
    let report = Agent::new(Arc::new(anthropic(&base)))
        .run_step(&task("s", "the prompt"), "q", ws.path(), &lease)
        .await;
    assert!(matches!(report.outcome, Outcome::LeaseLost(_)));
    let checkpoint = lease.beats()[0].checkpoint.clone();

    // Attempt 2 gets that checkpoint: the model sees the earlier turn and only finishes.
    let (base, state) = mock_model(
        "/v1/messages",
        vec![anthropic_turn(vec![tool_use(
            "tu2",
            "complete_step",
            json!({"notes": "finished"}),
        )])],
    )
    .await;
    let mut second = task("s", "the prompt");
    second.attempt = 2;
    second.checkpoint = checkpoint;
    let report = Agent::new(Arc::new(anthropic(&base)))
        .run_step(&second, "q", ws.path(), &FakeLease::new())
        .await;
    assert!(matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "finished"));
    assert_eq!(report.turns, 2, "turns carry over from the checkpoint");
    let requests = state.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0].1["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[0]["content"][0]["text"], "the prompt");
    assert_eq!(messages[1]["content"][0]["id"], "tu1");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "tu1");
    assert!(
        messages[2]["content"][1]["text"]
            .as_str()
            .unwrap()
            .contains("resuming (attempt 2)")
    );
}

#[tokio::test]
async fn agent_completes_a_step_through_openai_chat_completions() {
    let call = |id: &str, name: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    let (base, state) = mock_model(
        "/v1/chat/completions",
        vec![
            Reply::ok(json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Let me check.",
                "tool_calls": [call("c1", "bash", r#"{"command": "echo hi"}"#), call("c2", "write_file", "{not json")]
            }}]})),
            Reply::ok(json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [call("c3", "complete_step", r#"{"notes": "said hi"}"#)]
            }}]})),
        ],
    )
    .await;
    let provider = OpenAiProvider::new(&format!("{base}/v1"), Some("sk-test"), "gpt-test")
        .unwrap()
        .with_retry(fast_retry());
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let report = Agent::new(Arc::new(provider))
        .run_step(&task("s", "Say hi"), "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "said hi"),
        "{:?}",
        report.outcome
    );

    let requests = state.requests();
    assert_eq!(requests.len(), 2);
    let (headers, first) = &requests[0];
    assert_eq!(headers["authorization"], "Bearer sk-test");
    assert_eq!(first["model"], "gpt-test");
    assert_eq!(first["messages"][0]["role"], "system");
    assert_eq!(first["messages"][1], json!({"role": "user", "content": "Say hi"}));
    assert_eq!(first["tools"][0]["type"], "function");
    assert!(first["tools"][0]["function"]["parameters"].is_object());

    let msgs = requests[1].1["messages"].as_array().unwrap().clone();
    let assistant = &msgs[2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        r#"{"command":"echo hi"}"#
    );
    assert_eq!(
        assistant["tool_calls"][1]["function"]["arguments"], "{not json",
        "raw arguments round-trip"
    );
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "c1");
    let out = msgs[3]["content"].as_str().unwrap();
    assert!(out.contains("exit code: 0") && out.contains("hi"), "{out}");
    assert_eq!(msgs[4]["tool_call_id"], "c2");
    let err = msgs[4]["content"].as_str().unwrap();
    assert!(
        err.starts_with("Error: the arguments of write_file must be a JSON object"),
        "{err}"
    );
}

#[tokio::test]
async fn openai_without_key_sends_no_authorization_and_maps_errors() {
    let (base, state) = mock_model(
        "/v1/chat/completions",
        vec![
            Reply::status(
                404,
                json!({"error": {"message": "model \"llama9\" not found, try pulling it first"}}),
            ),
            Reply::status(401, json!({"error": {"message": "bad key"}})),
        ],
    )
    .await;
    let provider = OpenAiProvider::new(&format!("{base}/v1"), None, "llama9")
        .unwrap()
        .with_retry(fast_retry());
    let req = ModelRequest {
        messages: vec![Message::user_text("hi")],
        ..Default::default()
    };
    let err = provider.complete(&req, &Discard).await.unwrap_err();
    assert!(err.to_string().starts_with("unknown model llama9"), "{err}");
    assert!(state.requests()[0].0.get("authorization").is_none());
    let err = provider.complete(&req, &Discard).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("authentication failed (check OPENAI_API_KEY)"),
        "{err}"
    );
}

#[tokio::test]
async fn cancel_and_steer_via_heartbeat() {
    let (base, _) = mock_model(
        "/v1/messages",
        vec![
            anthropic_turn(vec![json!({"type": "text", "text": "thinking"})]),
            anthropic_turn(vec![json!({"type": "text", "text": "still thinking"})]),
        ],
    )
    .await;
    let lease = FakeLease::new()
        .reply(Ok(HeartbeatOutcome {
            cancel_requested: false,
            signals: vec![crate::common::steer(7, "be brief")],
            ..Default::default()
        }))
        .reply(Ok(HeartbeatOutcome {
            cancel_requested: true,
            signals: vec![],
            ..Default::default()
        }));
    let ws = tempfile::tempdir().unwrap();
    let report = Agent::new(Arc::new(anthropic(&base)))
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    let Outcome::Canceled { checkpoint } = report.outcome else {
        panic!("expected cancel, got {:?}", report.outcome)
    };
    let cp = railyard_worker::agent::Checkpoint::decode(&checkpoint).unwrap();
    // The steer reached the model as a user message after the first turn.
    let texts: Vec<String> = cp.messages[2]
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("call complete_step")),
        "the no-tool nudge: {texts:?}"
    );
    assert!(texts.iter().any(|t| t == "[steer] be brief"), "{texts:?}");
}

#[tokio::test]
async fn a_step_whose_model_the_worker_cannot_serve_fails_naming_it() {
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    // Only Anthropic settings: the step asks for an OpenAI model.
    let agent = Agent::new(Arc::new(anthropic("http://127.0.0.1:9")));
    let mut t = task("s1", "do it");
    t.provider = "openai".into();
    t.model = "gpt-4o".into();
    let report = agent.run_step(&t, "q", ws.path(), &lease).await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(f.error_type, railyard_worker::agent::MODEL_UNAVAILABLE);
    assert!(f.non_retryable);
    assert!(
        f.message.contains("openai") && f.message.contains("gpt-4o"),
        "{}",
        f.message
    );
    assert_eq!(report.turns, 0);
}
