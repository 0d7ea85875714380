//! `railyard worker` end to end: real `railyard server` and `railyard worker`
//! processes, with a mock model server (`support::mock_model`) speaking the Anthropic
//! Messages and OpenAI chat-completions wire formats.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use railyard_proto::v1::HistoryEvent;
use railyard_sdk::Client;
use serde_json::json;

/// Long enough for any run here on a slow machine; only an upper bound for `eventually`.
const RUN_LIMIT: Duration = Duration::from_secs(90);

// ------------------------------------------------------------------ worker processes

/// An Anthropic-provider worker on `queue` with model `claude-mock`, pointed at the mock.
fn anthropic_worker(
    server: &ServerProcess,
    sandbox: &Sandbox,
    mock: &MockModel,
    identity: &str,
    queue: &str,
) -> WorkerProcess {
    let args = ["--model", "claude-mock", "--queue", queue];
    anthropic_worker_with(server, sandbox, mock, identity, &args)
}

/// An Anthropic-provider worker pointed at the mock, with further `args`.
fn anthropic_worker_with(
    server: &ServerProcess,
    sandbox: &Sandbox,
    mock: &MockModel,
    identity: &str,
    args: &[&str],
) -> WorkerProcess {
    WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        identity,
        &[&["--provider", "anthropic"], args].concat(),
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
        ],
    )
}

// ------------------------------------------------------------------ the cluster, through the SDK

/// A client on its own small runtime, for starting runs and reading histories.
struct Api {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Api {
    fn new(url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(Client::connect(url)).expect("client");
        Self { rt, client }
    }

    fn start(&self, workflow: &str, goal: &str) -> String {
        self.rt
            .block_on(self.client.start_run("default", workflow, goal, HashMap::new()))
            .expect("start run")
    }

    fn status(&self, run_id: &str) -> String {
        let run = self
            .rt
            .block_on(self.client.describe_run("default", run_id))
            .expect("describe")
            .run
            .expect("run");
        railyard_proto::v1::RunStatus::try_from(run.status)
            .expect("status")
            .short_name()
            .to_string()
    }

    /// Waits until the run is closed and returns its status.
    fn wait_closed(&self, run_id: &str) -> String {
        eventually(RUN_LIMIT, || {
            let s = self.status(run_id);
            (s != "RUNNING").then_some(s)
        })
    }

    fn steer(&self, run_id: &str, text: &str) {
        self.rt
            .block_on(self.client.signal_run(railyard_proto::v1::SignalRunRequest {
                namespace: "default".into(),
                run_id: run_id.into(),
                signal_name: "steer".into(),
                payload_json: serde_json::to_string(text).unwrap(),
                ..Default::default()
            }))
            .expect("signal")
    }

    fn history(&self, run_id: &str) -> Vec<HistoryEvent> {
        self.rt
            .block_on(self.client.full_history("default", run_id))
            .expect("history")
    }
}

fn events<'a>(history: &'a [HistoryEvent], kind: &str) -> Vec<&'a HistoryEvent> {
    history.iter().filter(|e| e.event_type == kind).collect()
}

/// Writes a worker config file that makes background heartbeats frequent, so the
/// worker notices a crashed server or a cancel request quickly.
fn quick_heartbeats(sandbox: &Sandbox) -> String {
    let path = sandbox.path("worker.json");
    std::fs::write(&path, r#"{"heartbeat_interval_secs": 0.2}"#).unwrap();
    path.to_str().unwrap().to_string()
}

/// Waits until the mock has had a request for `step` that `matches`.
fn wait_for_request(mock: &MockModel, step: &str, matches: impl Fn(&Recorded) -> bool) {
    eventually(RUN_LIMIT, || {
        mock.requests_for(step).iter().any(&matches).then_some(())
    });
}

/// Waits until the mock has had at least `n` requests for `step`.
fn wait_for_requests(mock: &MockModel, step: &str, n: usize) {
    eventually(RUN_LIMIT, || (mock.requests_for(step).len() >= n).then_some(()));
}

/// One `StepCompleted` per step of `steps` and no other, and the run `COMPLETED`.
fn assert_each_step_completed_once(api: &Api, run: &str, steps: &[&str]) -> Vec<HistoryEvent> {
    let history = api.history(run);
    let completed: Vec<String> = events(&history, "StepCompleted")
        .iter()
        .map(|e| attrs(e)["stepId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(completed, steps, "run {run}");
    assert_eq!(events(&history, "RunCompleted").len(), 1, "run {run}");
    history
}

/// The run's one `StepFailed`, checked for its error type and whether it will be retried.
fn failed_once<'a>(history: &'a [HistoryEvent], error_type: &str, will_retry: bool) -> &'a HistoryEvent {
    let failed = events(history, "StepFailed");
    assert_eq!(failed.len(), 1, "{history:?}");
    let a = attrs(failed[0]);
    assert_eq!(a["errorType"], error_type);
    assert_eq!(a["willRetry"], will_retry);
    failed[0]
}

// ------------------------------------------------------------------ tests

const THREE_STEPS: &str = r#"{"id": "three", "version": "1", "name": "Three steps", "taskQueue": "anthropic",
  "steps": [
    {"id": "a_research", "title": "Research", "prompt": "Research {{goal}}"},
    {"id": "a_write", "title": "Write", "prompt": "Write about {{goal}} from {{context.notes_file}}",
     "allowedTools": ["read_file", "bash", "complete_step"]},
    {"id": "a_review", "title": "Review", "prompt": "Review the output"}
  ]}"#;

#[test]
fn anthropic_worker_runs_a_three_step_workflow() {
    let sandbox = Sandbox::new();
    sandbox.workflow("three.json", THREE_STEPS);
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        Reply::Turn(match (r.step.as_str(), r.turn) {
            ("a_research", 0) => say_and_call(
                "Writing notes.",
                "write_file",
                json!({"path": "notes.txt", "content": "alpha beta\n"}),
            ),
            ("a_research", _) => call(
                "complete_step",
                json!({"notes": "notes are in notes.txt", "artifacts": ["notes.txt"],
                       "context_updates": {"notes_file": "notes.txt"}}),
            ),
            ("a_write", 0) => call("read_file", json!({"path": "notes.txt"})),
            ("a_write", 1) => call("bash", json!({"command": "tr a-z A-Z < notes.txt > out.txt"})),
            ("a_write", _) => call(
                "complete_step",
                json!({"notes": "wrote out.txt", "artifacts": ["out.txt"]}),
            ),
            ("a_review", 0) => call("read_file", json!({"path": "out.txt"})),
            _ => complete("reviewed: looks right"),
        })
    });
    let _worker = anthropic_worker(&server, &sandbox, &mock, "anthropic-worker", "anthropic");
    let api = Api::new(&server.url);
    let run = api.start("three", "the greek alphabet");
    assert_eq!(api.wait_closed(&run), "COMPLETED");

    // The work happened in the run's workspace.
    let out = std::fs::read_to_string(sandbox.path("workspace").join(&run).join("out.txt")).unwrap();
    assert_eq!(out, "ALPHA BETA\n");

    // Wire format: key and version headers, the model, tools offered.
    let requests = mock.requests();
    let first = &requests[0];
    assert_eq!(first.headers["x-api-key"], "sk-ant-dummy");
    assert_eq!(first.headers["anthropic-version"], "2023-06-01");
    assert_eq!(first.body["model"], "claude-mock");
    assert!(first.system().contains("Goal of this run: the greek alphabet"));
    // The write step only offers its allowed tools (the loop's own two always come along).
    let write = mock.requests_for("a_write");
    let offered: HashSet<&str> = write[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains("bash") && offered.contains("read_file") && !offered.contains("write_file"));
    // The prompt was rendered with the context the first step set, and the step saw its notes.
    assert!(
        write[0].body["messages"][0]
            .to_string()
            .contains("from notes.txt")
    );
    assert!(write[0].system().contains("notes are in notes.txt"));
    // Tool results go back to the model: the read_file result is in the next request.
    assert!(
        write[1]
            .tool_results()
            .iter()
            .any(|(c, e)| c.contains("alpha beta") && !e)
    );

    let history = assert_each_step_completed_once(&api, &run, &["a_research", "a_write", "a_review"]);
    assert!(
        events(&history, "StepStarted")
            .iter()
            .all(|e| attrs(e)["worker"] == "anthropic-worker")
    );
}

#[test]
fn openai_worker_runs_a_workflow() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "two.json",
        r#"{"id": "two", "version": "1", "name": "Two steps", "taskQueue": "openai",
          "steps": [
            {"id": "o_make", "title": "Make", "prompt": "Make a file about {{goal}}"},
            {"id": "o_check", "title": "Check", "prompt": "Check it"}
          ]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        Reply::Turn(match (r.step.as_str(), r.turn) {
            ("o_make", 0) => say_and_call(
                "Making it.",
                "write_file",
                json!({"path": "made.txt", "content": "made by openai mock"}),
            ),
            ("o_make", _) => complete("made made.txt"),
            ("o_check", 0) => call("bash", json!({"command": "wc -c < made.txt"})),
            _ => complete("checked"),
        })
    });
    let openai_url = format!("{}/v1", mock.url);
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "openai-worker",
        &["--provider", "openai", "--model", "gpt-mock", "--queue", "openai"],
        &[
            ("OPENAI_BASE_URL", openai_url.as_str()),
            ("OPENAI_API_KEY", "sk-openai-dummy"),
        ],
    );
    let api = Api::new(&server.url);
    let run = api.start("two", "files");
    assert_eq!(api.wait_closed(&run), "COMPLETED");

    let requests = mock.requests();
    assert!(requests.iter().all(|r| r.api == "openai"));
    assert_eq!(requests[0].headers["authorization"], "Bearer sk-openai-dummy");
    assert_eq!(requests[0].body["model"], "gpt-mock");
    assert_eq!(requests[0].body["messages"][0]["role"], "system");
    // The bash result (19 bytes) came back as a `tool` message.
    let check = mock.requests_for("o_check");
    assert!(
        check[1].tool_results().iter().any(|(c, _)| c.contains("19")),
        "{:?}",
        check[1].body
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.path("workspace").join(&run).join("made.txt")).unwrap(),
        "made by openai mock"
    );
    let history = api.history(&run);
    assert_eq!(events(&history, "StepCompleted").len(), 2);
}

#[test]
fn a_step_whose_worker_dies_resumes_on_another_worker_from_its_checkpoint() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "fragile.json",
        r#"{"id": "fragile", "version": "1", "name": "Fragile", "taskQueue": "fragile",
          "steps": [{"id": "f_long", "title": "Long step", "prompt": "Work on {{goal}}",
                     "heartbeatTimeoutSeconds": 2,
                     "retry": {"initialIntervalSeconds": 0.2, "maximumAttempts": 3}}]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|r| match (r.attempt, r.turn) {
        (_, 0) => Reply::Turn(call("bash", json!({"command": "echo turn-one-marker-$((40+2))"}))),
        // The first worker's second turn never comes back: it is killed while waiting.
        (1, _) => Reply::Hang,
        _ => Reply::Turn(complete("finished after resuming")),
    });
    let mut first = anthropic_worker(&server, &sandbox, &mock, "doomed-worker", "fragile");
    let api = Api::new(&server.url);
    let run = api.start("fragile", "survive a crash");

    // Turn 1 ran its tool and heartbeated its checkpoint before turn 2 was asked for.
    wait_for_request(&mock, "f_long", |r| r.attempt == 1 && r.turn == 1);
    first.kill9();
    let second = anthropic_worker(&server, &sandbox, &mock, "rescue-worker", "fragile");
    assert_eq!(api.wait_closed(&run), "COMPLETED");

    // Attempt 2 did not start afresh: its first request already holds turn 1's tool result.
    let attempt2 = mock.requests_for_attempt("f_long", 2);
    assert!(!attempt2.is_empty(), "attempt 2 never called the model");
    assert!(
        attempt2.iter().all(|r| r.turn >= 1),
        "attempt 2 restarted from scratch"
    );
    let resumed = &attempt2[0];
    assert!(
        resumed
            .tool_results()
            .iter()
            .any(|(c, is_error)| c.contains("turn-one-marker-42") && !is_error),
        "turn 1's tool result is missing: {}",
        resumed.body["messages"]
    );
    assert_eq!(resumed.body["messages"][1]["content"][0]["name"], "bash");

    let history = api.history(&run);
    let timed_out = events(&history, "StepTimedOut");
    assert_eq!(timed_out.len(), 1);
    assert_eq!(attrs(timed_out[0])["attempt"], 1);
    let started: Vec<(u64, String)> = events(&history, "StepStarted")
        .iter()
        .map(|e| {
            (
                attrs(e)["attempt"].as_u64().unwrap(),
                attrs(e)["worker"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        started,
        [(1, "doomed-worker".to_string()), (2, second.identity.clone())]
    );
    let completed = events(&history, "StepCompleted");
    assert_eq!(completed.len(), 1);
    assert_eq!(attrs(completed[0])["attempt"], 2);
    assert_eq!(completed[0].identity, "rescue-worker");
}

#[test]
fn two_workers_share_fifty_runs_and_do_every_step_exactly_once() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "bulk.json",
        r#"{"id": "bulk", "version": "1", "name": "Bulk", "taskQueue": "bulk",
          "steps": [{"id": "b1", "title": "One", "prompt": "one"},
                    {"id": "b2", "title": "Two", "prompt": "two"}]}"#,
    );
    let script = sandbox.path("bulk.script.json");
    std::fs::write(
        &script,
        r#"{"steps": {
             "b1": [{"tool_calls": [{"name": "bash", "input": {"command": "sleep 0.05; echo {{run_id}} > b1.txt"}}]},
                    {"tool_calls": [{"name": "complete_step", "input": {"notes": "b1 done"}}]}],
             "b2": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "b2 done"}}]}]}}"#,
    )
    .unwrap();
    let server = sandbox.server();
    let script_arg = script.to_str().unwrap();
    let workers: Vec<WorkerProcess> = ["bulk-one", "bulk-two"]
        .iter()
        .map(|id| {
            WorkerProcess::start(
                &server.url,
                &sandbox.path("workspace"),
                id,
                &[
                    "--provider",
                    "scripted",
                    "--script",
                    script_arg,
                    "--queue",
                    "bulk",
                    "--slots",
                    "3",
                ],
                &[],
            )
        })
        .collect();
    let api = Api::new(&server.url);
    let runs: Vec<String> = (0..50).map(|i| api.start("bulk", &format!("run {i}"))).collect();
    for run in &runs {
        assert_eq!(api.wait_closed(run), "COMPLETED", "run {run}");
    }

    let mut identities = HashSet::new();
    for run in &runs {
        let history = api.history(run);
        assert!(events(&history, "StepTimedOut").is_empty(), "{run}");
        assert!(events(&history, "StepFailed").is_empty(), "{run}");
        for step in ["b1", "b2"] {
            let of = |kind: &str| {
                events(&history, kind)
                    .into_iter()
                    .filter(|e| attrs(e)["stepId"] == step)
                    .count()
            };
            assert_eq!(of("StepCompleted"), 1, "run {run} step {step}");
            assert_eq!(of("StepStarted"), 1, "run {run} step {step}");
        }
        for e in events(&history, "StepStarted") {
            identities.insert(attrs(e)["worker"].as_str().unwrap().to_string());
        }
        let marker = std::fs::read_to_string(sandbox.path("workspace").join(run).join("b1.txt")).unwrap();
        assert_eq!(marker.trim(), run);
    }
    let expected: HashSet<String> = workers.iter().map(|w| w.identity.clone()).collect();
    assert_eq!(identities, expected);
}

#[test]
fn limits_max_turns_disallowed_tools_and_escaping_paths() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "spin.json",
        r#"{"id": "spin", "version": "1", "name": "Spin", "taskQueue": "limits",
          "steps": [{"id": "l_spin", "title": "Spin", "prompt": "never finish", "maxTurns": 3}]}"#,
    );
    sandbox.workflow(
        "fence.json",
        r#"{"id": "fence", "version": "1", "name": "Fence", "taskQueue": "limits",
          "steps": [{"id": "l_fence", "title": "Fence", "prompt": "stay inside",
                     "allowedTools": ["read_file", "complete_step"]}]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|r| {
        Reply::Turn(match (r.step.as_str(), r.turn) {
            ("l_spin", n) if n % 2 == 0 => say("Still thinking."),
            ("l_spin", _) => call("list_files", json!({})),
            ("l_fence", 0) => call("bash", json!({"command": "cat /etc/passwd"})),
            ("l_fence", 1) => call("read_file", json!({"path": "../../etc/passwd"})),
            _ => complete("gave up on the forbidden file"),
        })
    });
    let _worker = anthropic_worker(&server, &sandbox, &mock, "limits-worker", "limits");
    let api = Api::new(&server.url);

    // A model that never calls complete_step runs out of turns; the run fails.
    let spin = api.start("spin", "loop");
    assert_eq!(api.wait_closed(&spin), "FAILED");
    assert_eq!(
        mock.requests_for("l_spin").len(),
        3,
        "one model call per allowed turn"
    );
    let history = api.history(&spin);
    let a = attrs(failed_once(&history, "max_turns_exceeded", false));
    assert!(a["message"].as_str().unwrap().contains("3 turns"), "{a}");
    assert_eq!(events(&history, "RunFailed").len(), 1);

    // A disallowed tool and a path out of the workspace are refused back to the model,
    // which reads the refusal in its next request and carries on.
    let fence = api.start("fence", "escape");
    assert_eq!(api.wait_closed(&fence), "COMPLETED");
    let requests = mock.requests_for("l_fence");
    assert_eq!(requests.len(), 3);
    let after_bash = requests[1].tool_results();
    assert_eq!(after_bash.len(), 1);
    assert!(after_bash[0].1, "refusal must be an error result");
    assert!(
        after_bash[0].0.contains("\"bash\" is not allowed in this step"),
        "{after_bash:?}"
    );
    let after_read = requests[2].tool_results();
    assert_eq!(after_read.len(), 2);
    assert!(after_read[1].1, "escape must be an error result");
    assert!(
        after_read[1].0.contains("escapes the workspace"),
        "{after_read:?}"
    );
    // Nothing of the real file reached the model.
    assert!(
        requests
            .iter()
            .all(|r| !r.body.to_string().contains("root:x:0:0"))
    );
}

#[test]
fn provider_errors_rate_limit_is_retried_and_bad_key_fails_the_step() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "limited.json",
        r#"{"id": "limited", "version": "1", "name": "Limited", "taskQueue": "errors",
          "steps": [{"id": "p_429", "title": "Rate limited", "prompt": "go"}]}"#,
    );
    sandbox.workflow(
        "badkey.json",
        r#"{"id": "badkey", "version": "1", "name": "Bad key", "taskQueue": "errors",
          "steps": [{"id": "p_401", "title": "Unauthorized", "prompt": "go"}]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|r| match (r.step.as_str(), r.repeat) {
        ("p_429", 0) => Reply::Error(
            429,
            vec![("retry-after", "1")],
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        ),
        ("p_429", _) => Reply::Turn(complete("done after the rate limit")),
        _ => Reply::Error(
            401,
            vec![],
            json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
        ),
    });
    let _worker = anthropic_worker(&server, &sandbox, &mock, "errors-worker", "errors");
    let api = Api::new(&server.url);

    let limited = api.start("limited", "patience");
    assert_eq!(api.wait_closed(&limited), "COMPLETED");
    let calls = mock.requests_for("p_429");
    assert_eq!(calls.len(), 2, "one 429, then one retry");
    assert_eq!(
        (calls[0].turn, calls[1].turn),
        (0, 0),
        "the same call was retried"
    );
    let history = api.history(&limited);
    assert!(
        events(&history, "StepFailed").is_empty(),
        "retried inside the attempt"
    );
    assert_eq!(events(&history, "StepStarted").len(), 1);

    let badkey = api.start("badkey", "denied");
    assert_eq!(api.wait_closed(&badkey), "FAILED");
    assert_eq!(
        mock.requests_for("p_401").len(),
        1,
        "a refused key is not retried"
    );
    let history = api.history(&badkey);
    let a = attrs(failed_once(&history, "provider_error", false));
    let message = a["message"].as_str().unwrap();
    assert!(
        message.contains("authentication failed")
            && message.contains("ANTHROPIC_API_KEY")
            && message.contains("invalid x-api-key"),
        "{message}"
    );
}

#[test]
fn steer_signals_reach_the_model_once_and_do_not_leak_into_the_next_step() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "steer.json",
        r#"{"id": "steer", "version": "1", "name": "Steer", "taskQueue": "steer",
          "steps": [{"id": "s_one", "title": "One", "prompt": "write about {{goal}}"},
                    {"id": "s_two", "title": "Two", "prompt": "polish it"}]}"#,
    );
    let server = sandbox.server();
    let release = Arc::new(AtomicBool::new(false));
    let gate = release.clone();
    let mock = MockModel::start(move |r| match (r.step.as_str(), r.turn) {
        ("s_one", 0) => Reply::Turn(call("list_files", json!({}))),
        ("s_one", 1) => Reply::After(gate.clone(), call("list_files", json!({}))),
        _ => Reply::Turn(complete("done")),
    });
    let api = Api::new(&server.url);
    let run = api.start("steer", "transport");
    // Sent before any worker polls: it comes with the step task itself.
    api.steer(&run, "focus on trains");
    let _worker = anthropic_worker(&server, &sandbox, &mock, "steer-worker", "steer");
    // Sent mid-step, while the model works on its second turn.
    wait_for_requests(&mock, "s_one", 2);
    api.steer(&run, "also mention ships");
    release.store(true, Ordering::SeqCst);
    assert_eq!(api.wait_closed(&run), "COMPLETED");

    let one = mock.requests_for("s_one");
    assert_eq!(one.len(), 3);
    let text = |r: &Recorded| r.body["messages"].to_string();
    assert!(
        text(&one[0]).contains("[steer] focus on trains"),
        "the first turn sees the queued steer"
    );
    assert!(
        text(&one[2]).contains("[steer] also mention ships"),
        "{}",
        text(&one[2])
    );
    assert_eq!(
        text(&one[2]).matches("focus on trains").count(),
        1,
        "delivered once"
    );
    for r in mock.requests_for("s_two") {
        assert!(
            !text(&r).contains("[steer]"),
            "an acknowledged steer came back in the next step: {}",
            text(&r)
        );
    }
}

#[test]
fn sigterm_hands_the_running_step_back_and_another_worker_resumes_it() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "handback.json",
        r#"{"id": "handback", "version": "1", "name": "Hand back", "taskQueue": "handback",
          "steps": [{"id": "h_step", "title": "Long step", "prompt": "Work on {{goal}}",
                     "retry": {"initialIntervalSeconds": 0.2, "maximumAttempts": 3}}]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|r| match (r.attempt, r.turn) {
        (_, 0) => Reply::Turn(call("bash", json!({"command": "echo handback-marker"}))),
        (1, _) => Reply::Hang,
        _ => Reply::Turn(complete("finished by the second worker")),
    });
    let mut first = anthropic_worker_with(
        &server,
        &sandbox,
        &mock,
        "leaving-worker",
        &["--queue", "handback", "--shutdown-grace", "0.5"],
    );
    let api = Api::new(&server.url);
    let run = api.start("handback", "a clean handover");
    wait_for_request(&mock, "h_step", |r| r.attempt == 1 && r.turn == 1);
    // The step outlives the grace period: it is failed back, not left to time out.
    let status = first.terminate(RUN_LIMIT);
    assert!(status.success(), "worker exit status {status}");
    // The step was failed back, to be retried, before the worker exited.
    failed_once(&api.history(&run), "worker_shutdown", true);

    let _second = anthropic_worker(&server, &sandbox, &mock, "arriving-worker", "handback");
    assert_eq!(api.wait_closed(&run), "COMPLETED");
    let attempt2 = mock.requests_for_attempt("h_step", 2);
    assert!(!attempt2.is_empty());
    assert!(
        attempt2[0]
            .tool_results()
            .iter()
            .any(|(c, e)| c.contains("handback-marker") && !e),
        "attempt 2 did not resume from the handed-back checkpoint: {}",
        attempt2[0].body["messages"]
    );
    let history = api.history(&run);
    assert!(events(&history, "StepTimedOut").is_empty());
    let completed = events(&history, "StepCompleted");
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].identity, "arriving-worker");
}

#[test]
fn worker_rides_out_server_crashes_while_polling_and_mid_step() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "sturdy.json",
        r#"{"id": "sturdy", "version": "1", "name": "Sturdy", "taskQueue": "sturdy",
          "steps": [{"id": "r_one", "title": "One", "prompt": "first half of {{goal}}",
                     "heartbeatTimeoutSeconds": 20},
                    {"id": "r_two", "title": "Two", "prompt": "second half of {{goal}}",
                     "heartbeatTimeoutSeconds": 20}]}"#,
    );
    let mut server = sandbox.server();
    let release = Arc::new(AtomicBool::new(false));
    let gate = release.clone();
    let mock = MockModel::start(move |r| {
        let held = r.system().contains("Goal of this run: held over a crash");
        match (r.step.as_str(), r.turn) {
            ("r_one", 0) if held => Reply::After(gate.clone(), complete("one done late")),
            (_, 0) => Reply::Turn(call("list_files", json!({}))),
            _ => Reply::Turn(complete("done")),
        }
    });
    let config = quick_heartbeats(&sandbox);
    let args = [
        "--model",
        "claude-mock",
        "--queue",
        "sturdy",
        "--slots",
        "2",
        "--config",
        &config,
    ];
    let mut worker = anthropic_worker_with(&server, &sandbox, &mock, "sturdy-worker", &args);
    let early = Api::new(&server.url).start("sturdy", "before any crash");
    assert_eq!(Api::new(&server.url).wait_closed(&early), "COMPLETED");

    // Crash 1: the worker has nothing to do and sits in long polls.
    server = server.crash_and_restart();
    let held = Api::new(&server.url).start("sturdy", "held over a crash");
    wait_for_request(&mock, "r_one", |r| r.system().contains("held over a crash"));

    // Crash 2: one slot is mid-step (its model call held back), the other polls.
    server = server.crash_and_restart();
    let api = Api::new(&server.url);
    let late = api.start("sturdy", "after the crashes");
    // The polling slot came back on its own while the held step is still running.
    assert_eq!(api.wait_closed(&late), "COMPLETED");
    assert_eq!(api.status(&held), "RUNNING");
    release.store(true, Ordering::SeqCst);
    assert_eq!(api.wait_closed(&held), "COMPLETED");

    for run in [&early, &late] {
        assert_each_step_completed_once(&api, run, &["r_one", "r_two"]);
    }
    // The step in flight during the crash kept its lease: no timeout, no second attempt.
    let history = assert_each_step_completed_once(&api, &held, &["r_one", "r_two"]);
    assert!(events(&history, "StepTimedOut").is_empty());
    assert!(events(&history, "StepFailed").is_empty());
    assert!(
        events(&history, "StepStarted")
            .iter()
            .all(|e| attrs(e)["attempt"] == 1 && attrs(e)["worker"] == "sturdy-worker"),
        "{history:?}"
    );
    assert!(
        worker.child.try_wait().unwrap().is_none(),
        "the worker is still running"
    );
}

#[test]
fn cancel_mid_step_stops_the_step_and_the_run_ends_canceled() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "cancelable.json",
        r#"{"id": "cancelable", "version": "1", "name": "Cancelable", "taskQueue": "cancel",
          "steps": [{"id": "c_long", "title": "Long", "prompt": "take your time"},
                    {"id": "c_never", "title": "Never", "prompt": "never reached"}]}"#,
    );
    let server = sandbox.server();
    let mock = MockModel::start(|r| match (r.step.as_str(), r.turn) {
        ("c_long", 0) => Reply::Turn(call("bash", json!({"command": "echo started"}))),
        // The second model call never comes back: the step is in flight.
        ("c_long", _) => Reply::Hang,
        _ => Reply::Turn(complete("should not run")),
    });
    let config = quick_heartbeats(&sandbox);
    let args = ["--model", "claude-mock", "--queue", "cancel", "--config", &config];
    let _worker = anthropic_worker_with(&server, &sandbox, &mock, "cancel-worker", &args);
    let api = Api::new(&server.url);
    let run = api.start("cancelable", "something slow");
    wait_for_requests(&mock, "c_long", 2);
    ok(server.ry(&["run", "cancel", &run, "--reason", "changed my mind"]));
    assert_eq!(api.wait_closed(&run), "CANCELED");

    let history = api.history(&run);
    assert_eq!(events(&history, "CancelRequested").len(), 1);
    let failed = failed_once(&history, "canceled", false);
    assert_eq!(attrs(failed)["stepId"], "c_long");
    assert_eq!(failed.identity, "cancel-worker");
    assert_eq!(events(&history, "RunCanceled").len(), 1);
    assert!(events(&history, "StepCompleted").is_empty());
    assert!(events(&history, "StepTimedOut").is_empty());
    // The step stopped where it was: no further model call, and the next step never ran.
    assert_eq!(mock.requests_for("c_long").len(), 2);
    assert!(mock.requests_for("c_never").is_empty());
}
