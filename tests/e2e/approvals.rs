//! Approvals end to end: a real `railyard server` and `railyard worker --slots 1` on
//! the scripted provider. A `requireConfirmation` step's result is held; `run reject
//! --feedback` re-opens it and the model's next turn reads the feedback on the same
//! transcript; a SIGKILLed server keeps the hold; `run approve` completes the run.

use std::time::Duration;

use crate::support::worker::WorkerProcess;
use crate::support::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(90);

const REVIEW: &str = r#"{"id":"review","version":"1","name":"Review","steps":[
  {"id":"write","title":"Write","prompt":"Write {{goal}}","requireConfirmation":true},
  {"id":"publish","title":"Publish","prompt":"Publish it"}]}"#;

// The turn played is the number of assistant turns in the transcript: the second turn
// of "write" is the one after the rejection, and it quotes what it read last.
const SCRIPT: &str = r#"{"steps": {
  "write": [
    {"tool_calls": [{"name": "complete_step", "input": {"notes": "draft one", "artifacts": ["draft.md"]}}]},
    {"tool_calls": [{"name": "complete_step", "input": {"notes": "revised after: {{last_user_text}}"}}]}
  ],
  "publish": [{"tool_calls": [{"name": "complete_step", "input": {"notes": "published"}}]}]
}}"#;

fn describe(server: &ServerProcess, run_id: &str) -> Value {
    json(server.ry(&["run", "describe", run_id, "-o", "json"]))["run"].clone()
}

fn awaiting(server: &ServerProcess, run_id: &str, notes: &str) -> Value {
    eventually(LIMIT, || {
        let run = describe(server, run_id);
        let held = run["waiting"]["on"] == "approval"
            && run["waiting"]["proposal"]["notes"]
                .as_str()
                .is_some_and(|n| n.contains(notes));
        held.then_some(run)
    })
}

#[test]
fn reject_with_feedback_then_sigkill_then_approve_completes_the_run() {
    let s = Sandbox::new();
    s.workflow("review.json", REVIEW);
    std::fs::write(s.path("review.script.json"), SCRIPT).unwrap();
    let server = s.server();
    let script = s.path("review.script.json");
    let _w = WorkerProcess::start(
        &server.url,
        &s.path("workspace"),
        "solo",
        &[
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--slots",
            "1",
        ],
        &[],
    );
    let v = json(server.ry(&["run", "start", "review", "--goal", "the post", "-o", "json"]));
    let run_id = v["run_id"].as_str().unwrap().to_string();

    let run = awaiting(&server, &run_id, "draft one");
    assert_eq!(run["status"], "RUNNING");
    assert_eq!(run["steps"][0]["state"], "AWAITING_APPROVAL");
    assert_eq!(run["waiting"]["proposal"]["artifacts"][0], "draft.md");
    let human = ok(server.ry(&["run", "describe", &run_id]));
    assert!(human.contains("AWAITING_APPROVAL since"), "{human}");
    assert!(human.contains("draft one"), "{human}");
    let listed = ok(server.ry(&["run", "list"]));
    assert!(listed.contains("AWAITING_APPROVAL"), "{listed}");

    let rejected = json(server.ry(&[
        "run",
        "reject",
        &run_id,
        "--feedback",
        "add a summary up top",
        "-o",
        "json",
    ]));
    assert_eq!(rejected["rejected"], true);
    // The same step runs again on its transcript; the model read the feedback.
    let run = awaiting(&server, &run_id, "add a summary up top");
    assert_eq!(run["steps"][0]["attempt"], 1, "a rejection uses up no attempt");

    // The server dies while the result is held; the hold survives.
    let server = server.crash_and_restart();
    let run = describe(&server, &run_id);
    assert_eq!(run["waiting"]["on"], "approval", "intact: {run}");

    let approved = ok(server.ry(&["run", "approve", &run_id, "--note", "good now"]));
    assert!(approved.contains("approved"), "{approved}");
    let run = eventually(LIMIT, || {
        let run = describe(&server, &run_id);
        (run["status"] == "COMPLETED").then_some(run)
    });
    let notes = run["steps"][0]["notes"].as_str().unwrap();
    assert!(
        notes.contains("revised after") && notes.contains("add a summary up top"),
        "{notes}"
    );
    assert_eq!(run["steps"][1]["notes"], "published");

    let history = json(server.ry(&["run", "history", &run_id, "-o", "json"]));
    let events = history.as_array().unwrap();
    let by = |t: &str| events.iter().find(|e| e["event_type"] == t).cloned();
    let approved = by("StepApproved").expect("StepApproved");
    assert_eq!(approved["attributes"]["note"], "good now", "{approved}");
    assert!(by("StepRejected").is_some());
    let held = events
        .iter()
        .filter(|e| e["event_type"] == "StepAwaitingApproval")
        .count();
    assert_eq!(held, 2);

    // Answering a run that no longer waits is refused, naming why.
    let out = server.ry(&["run", "approve", &run_id]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("COMPLETED"), "{err}");
}

/// A person playing worker with `task poll` sees a rejection's feedback: in JSON as
/// `resume_messages`, and in the human output after the prompt.
#[test]
fn task_poll_shows_the_rejection_feedback_it_resumes_with() {
    let s = Sandbox::new();
    s.workflow("review.json", REVIEW);
    let server = s.server();
    let v = json(server.ry(&["run", "start", "review", "--goal", "the post", "-o", "json"]));
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let poll = |human: bool| {
        let mut args = vec!["task", "poll", "--wait", "10"];
        if !human {
            args.extend(["-o", "json"]);
        }
        server.ry(&args)
    };
    let propose_and_reject = |token: &str, feedback: &str| {
        ok(server.ry(&["task", "complete", token, "--notes", "a draft"]));
        awaiting(&server, &run_id, "a draft");
        ok(server.ry(&["run", "reject", &run_id, "--feedback", feedback]));
    };

    let first = json(poll(false));
    assert_eq!(first["resume_messages"], serde_json::json!([]), "{first}");
    propose_and_reject(first["task_token"].as_str().unwrap(), "add a summary up top");

    let again = json(poll(false));
    assert_eq!(again["step_id"], "write");
    let messages = again["resume_messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{again}");
    assert!(
        messages[0].as_str().unwrap().contains("add a summary up top"),
        "{again}"
    );
    propose_and_reject(again["task_token"].as_str().unwrap(), "now shorter");

    let human = ok(poll(true));
    let after_prompt = human.split_once("\nprompt\n").map(|(_, rest)| rest).unwrap_or("");
    // No heartbeat stored a transcript holding the first feedback, so both are given.
    assert!(after_prompt.contains("resume message 1 of 2"), "{human}");
    assert!(after_prompt.contains("resume message 2 of 2"), "{human}");
    assert!(after_prompt.contains("now shorter"), "{human}");
}
