//! A step parked for a provider's rate limit, end to end: a real server and a real
//! worker with one slot, the mock model answering the first call of one step 429
//! with a reset a few seconds ahead. The step parks (its slot runs another step
//! meanwhile) and resumes after the reset under the same attempt. The server's
//! side with a 20 s reset on the controllable clock is
//! `server/tests/integration/flow.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;
use railyard_sdk::Client;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_429_with_a_reset_parks_the_step_and_frees_its_slot_until_then() {
    let sandbox = Sandbox::new();
    for (id, step) in [("limited", "limited_step"), ("free", "free_step")] {
        let def = json!({"id": id, "version": "1", "name": id, "taskQueue": "rl",
            "steps": [{"id": step, "title": step, "prompt": "Do {{goal}}"}]});
        sandbox.workflow(&format!("{id}.json"), &def.to_string());
    }
    let server = sandbox.server();
    let refused = Arc::new(AtomicUsize::new(0));
    let seen = refused.clone();
    let mock = MockModel::start(move |r| {
        if r.step == "limited_step" && seen.fetch_add(1, Ordering::SeqCst) == 0 {
            // Past the worker's in-call wait (5 s): the step parks.
            return Reply::Error(
                429,
                vec![("retry-after", "7")],
                json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
            );
        }
        Reply::Turn(complete("done"))
    });
    let _worker = WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "rl-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-test",
            "--queue",
            "rl",
            "--slots",
            "1",
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
            ("RAILYARD_RATE_LIMIT_KEY", "anthropic:prod"),
        ],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(Client::connect(&server.url)).unwrap();
    let describe = |run: &str| {
        rt.block_on(client.describe_run("default", run))
            .unwrap()
            .run
            .unwrap()
    };
    let limited = rt
        .block_on(client.start_run("default", "limited", "a", HashMap::new()))
        .unwrap();
    let wait = eventually(LIMIT, || describe(&limited).waiting);
    assert_eq!(
        (wait.on.as_str(), wait.rate_limit_key.as_str()),
        ("rate_limit", "anthropic:prod")
    );
    // The one slot is free: another run's step runs while the first one waits.
    let free = rt
        .block_on(client.start_run("default", "free", "b", HashMap::new()))
        .unwrap();
    let status = |run: &str| {
        railyard_proto::v1::RunStatus::try_from(describe(run).status)
            .unwrap()
            .short_name()
            .to_string()
    };
    eventually(LIMIT, || (status(&free) == "COMPLETED").then_some(()));
    assert_eq!(status(&limited), "RUNNING", "still waiting for the reset");

    eventually(LIMIT, || (status(&limited) == "COMPLETED").then_some(()));
    let history = rt.block_on(client.full_history("default", &limited)).unwrap();
    let types: Vec<&str> = history.iter().map(|e| e.event_type.as_str()).collect();
    assert!(!types.contains(&"StepFailed"), "no attempt used: {types:?}");
    let resumed = history
        .iter()
        .find(|e| e.event_type == "StepResumed")
        .map(attrs)
        .expect("resumed after the reset");
    assert_eq!(resumed["attempt"], 1);
    assert!(resumed["waitedMs"].as_i64().unwrap_or(0) >= 6_000, "{resumed}");
    let calls = mock.requests_for("limited_step");
    assert_eq!(calls.len(), 2, "one refused call, one after the reset");
    assert!(calls.iter().all(|c| c.attempt == 1));
}
