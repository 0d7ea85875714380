//! The agent loop on the offline scripted provider: limits, refusals, resume, notes, and
//! the bundled demo script end to end.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::common::{FakeLease, Recording, task};
use railyard_worker::agent::{Agent, Outcome};
use railyard_worker::events::{EventKind, EventSink, WorkerEvent};
use railyard_worker::provider::{Block, Role, Script, ScriptSource, ScriptedProvider};
use railyard_worker::{LeaseError, provider};
use serde_json::json;

fn scripted(script: serde_json::Value) -> ScriptedProvider {
    ScriptedProvider::new(serde_json::from_value::<Script>(script).unwrap())
}

#[tokio::test]
async fn max_turns_exceeded_when_the_model_never_completes() {
    let provider = Recording::new(scripted(json!({"default": [{"text": "hmm"}, {"text": "hmm"}]})));
    let provider = Arc::new(provider);
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new();
    let mut t = task("s", "do it");
    t.max_turns = 3;
    let report = Agent::new(provider.clone())
        .run_step(&t, "q", ws.path(), &lease)
        .await;
    let Outcome::Failed(f) = report.outcome else {
        panic!("expected failure, got {:?}", report.outcome)
    };
    assert_eq!(f.error_type, "max_turns_exceeded");
    assert!(f.non_retryable);
    assert!(f.message.contains("3 turns"), "{}", f.message);
    assert_eq!(report.turns, 3);
    assert_eq!(provider.requests().len(), 3);
    assert_eq!(lease.beats().len(), 3, "a heartbeat after every turn");
    let cp = railyard_worker::agent::Checkpoint::decode(&f.checkpoint).unwrap();
    assert_eq!(cp.turns, 3);
    // Each reply without a tool call was answered with the nudge.
    let last = cp.messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(matches!(&last.content[0], Block::Text { text } if text.contains("call complete_step")));
}

#[tokio::test]
async fn disallowed_tool_is_refused_and_counted() {
    let provider = Arc::new(Recording::new(scripted(json!({"steps": {"s": [
        {"tool_calls": [{"name": "bash", "input": {"command": "touch pwned"}},
                        {"name": "read_file", "input": {"path": "missing.txt"}},
                        {"name": "launch_rockets", "input": {}}]},
        {"tool_calls": [{"name": "complete_step", "input": {"notes": "ok"}}]}
    ]}}))));
    let ws = tempfile::tempdir().unwrap();
    let mut t = task("s", "p");
    t.allowed_tools = vec!["read_file".into()];
    let report = Agent::new(provider.clone())
        .run_step(&t, "q", ws.path(), &FakeLease::new())
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(_)),
        "{:?}",
        report.outcome
    );
    assert_eq!(
        report.refused_tool_calls, 2,
        "bash (not allowed) and an unknown tool"
    );
    assert!(
        !ws.path().join("pwned").exists(),
        "the refused command did not run"
    );

    let requests = provider.requests();
    let offered: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        offered,
        vec!["read_file", "complete_step", "signal_coordinator", "report_issue"]
    );
    let results = &requests[1].messages[2].content;
    let Block::ToolResult {
        content,
        is_error: true,
        ..
    } = &results[0]
    else {
        panic!("{results:?}")
    };
    assert!(
        content.contains("\"bash\" is not allowed in this step"),
        "{content}"
    );
    // An allowed tool that fails is an error result too, but not a refusal.
    assert!(
        matches!(&results[1], Block::ToolResult { is_error: true, content, .. } if content.contains("cannot read"))
    );
    assert!(
        matches!(&results[2], Block::ToolResult { is_error: true, content, .. } if content.contains("does not exist"))
    );
}

#[tokio::test]
async fn resume_continues_at_the_next_scripted_turn() {
    let script = json!({"steps": {"s": [
        {"tool_calls": [{"name": "write_file", "input": {"path": "one.txt", "content": "1"}}]},
        {"tool_calls": [{"name": "write_file", "input": {"path": "two.txt", "content": "2"}}]},
        {"tool_calls": [{"name": "complete_step", "input": {"notes": "both written"}}]}
    ]}});
    let ws = tempfile::tempdir().unwrap();
    let lease = FakeLease::new().reply(Err(LeaseError::Lost("gone".into())));
    let report = Agent::new(Arc::new(scripted(script.clone())))
        .run_step(&task("s", "p"), "q", ws.path(), &lease)
        .await;
    assert!(matches!(report.outcome, Outcome::LeaseLost(_)));
    assert!(ws.path().join("one.txt").exists());
    std::fs::remove_file(ws.path().join("one.txt")).unwrap();

    let provider = Arc::new(Recording::new(scripted(script)));
    let mut second = task("s", "p");
    second.attempt = 2;
    second.checkpoint = lease.beats()[0].checkpoint.clone();
    let report = Agent::new(provider.clone())
        .run_step(&second, "q", ws.path(), &FakeLease::new())
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "both written"),
        "{:?}",
        report.outcome
    );
    assert!(!ws.path().join("one.txt").exists(), "turn 1 was not played again");
    assert!(ws.path().join("two.txt").exists());
    assert_eq!(report.turns, 3);
    // The resumed model saw the earlier exchange first.
    let first = &provider.requests()[0];
    assert_eq!(first.messages.len(), 3);
    assert!(matches!(&first.messages[1].content[0], Block::ToolUse { name, .. } if name == "write_file"));
}

#[tokio::test]
async fn garbage_checkpoint_starts_afresh() {
    let ws = tempfile::tempdir().unwrap();
    let mut t = task("s", "p");
    t.checkpoint = b"not json".to_vec();
    let p = scripted(
        json!({"default": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "fresh"}}]}]}),
    );
    let report = Agent::new(Arc::new(p))
        .run_step(&t, "q", ws.path(), &FakeLease::new())
        .await;
    assert!(matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "fresh"));
    assert_eq!(report.turns, 1);
}

/// Plays `fresh` on a step's first turn and `resumed` on its fourth (the fixture's
/// transcript holds three assistant turns).
fn fresh_or_resumed() -> ScriptedProvider {
    let complete =
        |notes: &str| json!({"tool_calls": [{"name": "complete_step", "input": {"notes": notes}}]});
    let hmm = json!({"text": "hmm"});
    scripted(json!({"default": [complete("fresh"), hmm, hmm, complete("resumed")]}))
}

const PRE_RECORD_FIXTURE: &[u8] = include_bytes!("../fixtures/checkpoint-v1-pre-record.json");

#[tokio::test]
async fn a_checkpoint_written_before_the_record_resumes_the_step() {
    let ws = tempfile::tempdir().unwrap();
    let mut t = task("s", "p");
    t.attempt = 2;
    t.checkpoint = PRE_RECORD_FIXTURE.to_vec();
    let provider = Arc::new(Recording::new(fresh_or_resumed()));
    let report = Agent::new(provider.clone())
        .run_step(&t, "q", ws.path(), &FakeLease::new())
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "resumed"),
        "{:?}",
        report.outcome
    );
    assert_eq!(report.turns, 4, "three turns restored, one played");
    let first = &provider.requests()[0].messages[0];
    assert!(matches!(&first.content[0], Block::Text { text } if text.starts_with("Fix the build — naïve")));
}

#[tokio::test]
async fn a_checkpoint_from_a_newer_format_starts_afresh() {
    let mut newer: serde_json::Value = serde_json::from_slice(PRE_RECORD_FIXTURE).unwrap();
    newer["version"] = json!(2);
    let ws = tempfile::tempdir().unwrap();
    let mut t = task("s", "p");
    t.attempt = 2;
    t.checkpoint = serde_json::to_vec(&newer).unwrap();
    let report = Agent::new(Arc::new(fresh_or_resumed()))
        .run_step(&t, "q", ws.path(), &FakeLease::new())
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(ref c) if c.notes == "fresh"),
        "{:?}",
        report.outcome
    );
    assert_eq!(report.turns, 1);
}

fn demo_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../workflows/demo.script.json")
}

#[tokio::test]
async fn bundled_demo_script_runs_all_three_steps() {
    let config = railyard_worker::ProviderConfig::Scripted {
        script: ScriptSource::Path(demo_script()),
    };
    let provider = provider::from_config(&config).expect("demo script loads");
    let events: Arc<Mutex<Vec<WorkerEvent>>> = Arc::default();
    let sink_events = events.clone();
    let sink: EventSink = Arc::new(move |e| sink_events.lock().unwrap().push(e));
    let agent = Agent::new(provider).with_events(Some(sink));
    let ws = tempfile::tempdir().unwrap();

    let mut completions = Vec::new();
    let mut research_lease = None;
    for (i, step) in ["research", "draft", "review"].into_iter().enumerate() {
        let mut t = task(step, "demo step");
        t.step_index = i as u32;
        let lease = FakeLease::new();
        let report = agent.run_step(&t, "default", ws.path(), &lease).await;
        let Outcome::Completed(c) = report.outcome else {
            panic!("{step}: {:?}", report.outcome)
        };
        completions.push(c);
        if step == "research" {
            research_lease = Some(lease);
        }
    }
    let notes = std::fs::read_to_string(ws.path().join("notes.md")).unwrap();
    assert!(notes.contains("Goal: a haiku about rust"), "{notes}");
    let draft = std::fs::read_to_string(ws.path().join("draft.md")).unwrap();
    assert!(draft.starts_with("# a haiku about rust"), "{draft}");
    assert!(
        draft.contains("Status: reviewed") && draft.contains("_Reviewed:"),
        "{draft}"
    );
    assert_eq!(completions[0].artifacts, vec!["notes.md"]);
    assert_eq!(completions[1].context_updates["draft_file"], "draft.md");
    assert_eq!(completions[2].artifacts, vec!["draft.md"]);

    // The progress note went out with a heartbeat.
    let beats = research_lease.unwrap().beats();
    let notes: Vec<_> = beats.iter().flat_map(|b| b.notes.clone()).collect();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].kind, "progress");

    let events = events.lock().unwrap();
    let errors: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ToolError { .. }))
        .collect();
    assert!(errors.is_empty(), "demo tools all succeed: {errors:?}");
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::ToolCall { name, summary } if name == "bash" && summary == "wc -w draft.md")));
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::ModelText { text } if text.contains("(scripted)")))
    );
}

#[tokio::test]
async fn signals_queued_with_the_task_reach_the_first_turn_once() {
    let script = json!({"default": [
        {"tool_calls": [{"name": "list_files", "input": {}}]},
        {"tool_calls": [{"name": "complete_step", "input": {"notes": "ok"}}]}
    ]});
    let steer_count = |req: &provider::ModelRequest| {
        req.messages
            .iter()
            .flat_map(|m| &m.content)
            .filter(|b| matches!(b, Block::Text { text } if text == "[steer] be brief"))
            .count()
    };

    // A fresh attempt: the queued steer is in the very first request.
    let provider = Arc::new(Recording::new(scripted(script.clone())));
    let ws = tempfile::tempdir().unwrap();
    let mut t = task("s", "p");
    t.signals = vec![crate::common::steer(5, "be brief")];
    // The heartbeat after turn 1 brings a second steer.
    let lease = FakeLease::new().reply(Ok(railyard_worker::HeartbeatOutcome {
        cancel_requested: false,
        signals: vec![crate::common::steer(9, "hurry")],
        ..Default::default()
    }));
    let report = Agent::new(provider.clone())
        .run_step(&t, "q", ws.path(), &lease)
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed(_)),
        "{:?}",
        report.outcome
    );
    let requests = provider.requests();
    assert_eq!(steer_count(&requests[0]), 1);
    assert_eq!(steer_count(&requests[1]), 1, "injected once, not again per turn");
    assert!(format!("{:?}", requests[1].messages).contains("[steer] hurry"));
    // The checkpoint records what the transcript holds; the steer read in the last turn
    // is acknowledged by a settling heartbeat before the step completes.
    let beats = lease.beats();
    assert_eq!(beats.len(), 2, "one heartbeat after turn 1, one to settle");
    assert_eq!(beats[0].transcript().signals_through, 5);
    assert!(beats[1].checkpoint.is_empty(), "settling sends no checkpoint");

    // A resumed attempt whose checkpoint already holds the steer does not add it again.
    let provider = Arc::new(Recording::new(scripted(script)));
    let mut resumed = t.clone();
    resumed.attempt = 2;
    resumed.checkpoint = beats[0].checkpoint.clone();
    Agent::new(provider.clone())
        .run_step(&resumed, "q", ws.path(), &FakeLease::new())
        .await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "resumed at its second turn");
    assert_eq!(steer_count(&requests[0]), 1);
}
