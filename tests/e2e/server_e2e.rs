//! The server as a real process over real sockets, driven by the CLI: a run from start
//! to finish, a lease that expires across worker processes, forged and stale tokens,
//! bad input of every kind, and SIGKILL in the middle of a run.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::*;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::Value;

const THREE: &str = r#"{"id":"three","version":"1","name":"Three","description":"three steps","steps":[
    {"id":"plan","title":"Plan","prompt":"Plan {{goal}}"},
    {"id":"build","title":"Build","prompt":"Build {{goal}} in {{context.lang}}"},
    {"id":"ship","title":"Ship","prompt":"Ship it"}]}"#;

/// One step, retried quickly, so a failed attempt is followed by the next at once.
const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
    {"id":"only","title":"Only","prompt":"Do {{goal}}",
     "retry":{"initialIntervalSeconds":0.1,"maximumAttempts":5}}]}"#;

/// A step whose lease is lost when its worker stops heartbeating.
const HEARTBEAT: &str = r#"{"id":"hb","version":"1","name":"Heartbeat","steps":[
    {"id":"long","title":"Long","prompt":"Work on {{goal}}","heartbeatTimeoutSeconds":1,
     "retry":{"initialIntervalSeconds":0.1,"maximumAttempts":3}}]}"#;

const WAIT: Duration = Duration::from_secs(30);

/// `task poll` that must return a task.
fn poll(server: &ServerProcess, identity: &str) -> Value {
    let task = json(server.ry(&[
        "task",
        "poll",
        "--wait",
        "10",
        "--identity",
        identity,
        "-o",
        "json",
    ]));
    assert!(task.is_object(), "no task within 10s");
    task
}

/// `task poll` with a short wait; `None` when nothing came.
fn try_poll(server: &ServerProcess, identity: &str) -> Option<Value> {
    let task = json(server.ry(&[
        "task",
        "poll",
        "--wait",
        "1",
        "--identity",
        identity,
        "-o",
        "json",
    ]));
    task.is_object().then_some(task)
}

fn token(task: &Value) -> String {
    task["task_token"].as_str().expect("task_token").to_string()
}

fn history(server: &ServerProcess, run_id: &str) -> Vec<Value> {
    let h = json(server.ry(&["run", "history", run_id, "-o", "json"]));
    h.as_array().expect("history array").clone()
}

fn event_types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["event_type"].as_str().unwrap()).collect()
}

fn assert_numbered(events: &[Value]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["event_id"], i as u64 + 1, "event {i} of {events:#?}");
    }
}

fn describe(server: &ServerProcess, run_id: &str) -> Value {
    json(server.ry(&["run", "describe", run_id, "-o", "json"]))["run"].clone()
}

/// A refused client command: exit code 1 and one error line starting with `prefix`.
fn refused(out: std::process::Output, prefix: &str) -> String {
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected a refusal: {}{err}",
        stdout(&out)
    );
    assert!(err.starts_with(prefix), "expected {prefix:?}, got {err:?}");
    err
}

/// `GET path` over a plain TCP connection; returns the whole response.
fn http_get(addr: &str, path: &str) -> String {
    let mut conn = TcpStream::connect(addr).expect("connect to the HTTP listener");
    conn.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).expect("read HTTP response");
    response
}

#[test]
fn a_three_step_run_driven_by_cli_workers_has_a_complete_history() {
    let sandbox = Sandbox::new();
    sandbox.workflow("three.json", THREE);
    let server = sandbox.server();

    let started = json(server.ry(&[
        "run",
        "start",
        "three",
        "--goal",
        "a haiku",
        "--context",
        "lang=rust",
        "--run-id",
        "e2e-1",
        "--request-id",
        "req-e2e-1",
        "-o",
        "json",
    ]));
    assert_eq!(started["run_id"], "e2e-1");
    assert_eq!(started["started"], true);

    let steps = [("plan", "w-1"), ("build", "w-2"), ("ship", "w-3")];
    for (i, (step, worker)) in steps.iter().enumerate() {
        let task = poll(&server, worker);
        assert_eq!(task["run_id"], "e2e-1");
        assert_eq!(task["step_id"], *step);
        assert_eq!(task["step_index"], i);
        assert_eq!(task["step_count"], 3);
        assert_eq!(task["attempt"], 1);
        assert_eq!(task["prior_steps"].as_array().unwrap().len(), i);
        if i == 1 {
            assert_eq!(task["prompt"], "Build a haiku in rust");
            assert_eq!(task["prior_steps"][0]["notes"], "notes of plan");
            assert_eq!(task["context"]["planned"], "yes");
        }
        let tok = token(&task);
        if i == 0 {
            ok(server.ry(&[
                "task",
                "complete",
                &tok,
                "--notes",
                "notes of plan",
                "--context",
                "planned=yes",
                "--identity",
                worker,
            ]));
        } else {
            let notes = format!("notes of {step}");
            ok(server.ry(&["task", "complete", &tok, "--notes", &notes, "--identity", worker]));
        }
    }

    let events = history(&server, "e2e-1");
    assert_numbered(&events);
    let mut expected = vec!["RunStarted"];
    for _ in 0..3 {
        expected.extend(["StepScheduled", "StepStarted", "StepCompleted"]);
    }
    expected.push("RunCompleted");
    assert_eq!(event_types(&events), expected);
    assert_eq!(events[0]["attributes"]["goal"], "a haiku");
    assert_eq!(events[0]["attributes"]["requestId"], "req-e2e-1");
    assert_eq!(events[0]["attributes"]["definition"]["id"], "three");
    for (i, (step, worker)) in steps.iter().enumerate() {
        let (scheduled, started, completed) = (&events[1 + 3 * i], &events[2 + 3 * i], &events[3 + 3 * i]);
        assert_eq!(scheduled["attributes"]["stepId"], *step);
        assert_eq!(scheduled["attributes"]["attempt"], 1);
        assert_eq!(started["identity"], *worker, "{started}");
        assert_eq!(started["attributes"]["worker"], *worker);
        assert_eq!(started["attributes"]["stepId"], *step);
        assert_eq!(completed["identity"], *worker);
        assert_eq!(completed["attributes"]["notes"], format!("notes of {step}"));
        assert_eq!(completed["attributes"]["attempt"], 1);
    }
    let last = events.last().unwrap();
    assert_eq!(last["attributes"]["context"]["planned"], "yes");
    assert_eq!(last["attributes"]["context"]["lang"], "rust");

    let run = describe(&server, "e2e-1");
    assert_eq!(run["status"], "COMPLETED");
    assert_eq!(run["history_length"], events.len());
    for (i, (step, worker)) in steps.iter().enumerate() {
        assert_eq!(run["steps"][i]["state"], "COMPLETED");
        assert_eq!(run["steps"][i]["worker_identity"], *worker);
        assert_eq!(run["steps"][i]["notes"], format!("notes of {step}"));
    }
    // The same request id returns the same run and starts nothing.
    let again = json(server.ry(&[
        "run",
        "start",
        "three",
        "--goal",
        "other",
        "--request-id",
        "req-e2e-1",
        "-o",
        "json",
    ]));
    assert_eq!(
        (again["run_id"].as_str(), again["started"].as_bool()),
        (Some("e2e-1"), Some(false))
    );
    assert!(
        try_poll(&server, "w-idle").is_none(),
        "a closed run left a task behind"
    );
    assert!(server.stop().success());
}

#[test]
fn an_expired_lease_goes_to_another_worker_process_with_the_last_checkpoint() {
    let sandbox = Sandbox::new();
    sandbox.workflow("hb.json", HEARTBEAT);
    let server = sandbox.server();
    ok(server.ry(&["run", "start", "hb", "--goal", "g", "--run-id", "lease-1"]));

    let a = poll(&server, "A");
    assert_eq!(
        (a["attempt"].as_u64(), a["heartbeat_timeout_ms"].as_u64()),
        (Some(1), Some(1000))
    );
    let token_a = token(&a);
    let beat = ok(server.ry(&[
        "task",
        "heartbeat",
        &token_a,
        "--checkpoint",
        "turn 3 transcript",
        "--identity",
        "A",
    ]));
    assert!(beat.contains("lease extended"), "{beat}");

    // A goes silent: the step times out and is handed to B.
    let b = eventually(WAIT, || try_poll(&server, "B"));
    assert_eq!(b["run_id"], "lease-1");
    assert_eq!(b["attempt"], 2);
    assert_eq!(b["checkpoint"], "turn 3 transcript");
    assert!(b["last_failure"].as_str().unwrap().contains("timed out"), "{b}");

    let late = refused(
        server.ry(&["task", "complete", &token_a, "--notes", "late", "--identity", "A"]),
        "error: failed precondition: ",
    );
    assert!(late.contains("no longer current"), "{late}");
    refused(
        server.ry(&["task", "heartbeat", &token_a, "--identity", "A"]),
        "error: failed precondition: ",
    );
    ok(server.ry(&[
        "task",
        "complete",
        &token(&b),
        "--notes",
        "done by B",
        "--identity",
        "B",
    ]));

    let events = history(&server, "lease-1");
    assert_numbered(&events);
    assert_eq!(
        event_types(&events),
        [
            "RunStarted",
            "StepScheduled",
            "StepStarted",
            "StepTimedOut",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "RunCompleted"
        ]
    );
    assert_eq!(events[2]["attributes"]["worker"], "A");
    assert_eq!(events[3]["attributes"]["attempt"], 1);
    assert_eq!(events[3]["attributes"]["timeout"], "HEARTBEAT");
    assert_eq!(events[3]["attributes"]["willRetry"], true);
    assert_eq!(events[4]["attributes"]["attempt"], 2);
    assert_eq!(events[5]["attributes"]["worker"], "B");
    assert_eq!(events[6]["attributes"]["attempt"], 2);
    assert_eq!(events[6]["attributes"]["notes"], "done by B");
    assert_eq!(describe(&server, "lease-1")["status"], "COMPLETED");
    assert!(server.stop().success());
}

/// Flips one character of `token` at `i` to another base64url character.
fn flip(token: &str, i: usize) -> String {
    let mut bytes = token.as_bytes().to_vec();
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

/// Rewrites one claim in a token's payload and keeps its signature.
fn forge_claim(token: &str, key: &str, value: Value) -> String {
    let (payload, sig) = token.split_once('.').unwrap();
    let mut claims: Value = serde_json::from_slice(&B64.decode(payload).unwrap()).unwrap();
    claims[key] = value;
    format!("{}.{sig}", B64.encode(serde_json::to_vec(&claims).unwrap()))
}

/// One claim of a token's payload.
fn claim(token: &str, key: &str) -> Value {
    let payload = token.split_once('.').unwrap().0;
    let claims: Value = serde_json::from_slice(&B64.decode(payload).unwrap()).unwrap();
    claims[key].clone()
}

#[test]
fn tampered_stale_and_foreign_tokens_are_refused_and_change_nothing() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let server = sandbox.server();
    ok(server.ry(&["run", "start", "one", "--goal", "a", "--run-id", "t1"]));
    ok(server.ry(&["run", "start", "one", "--goal", "b", "--run-id", "t2"]));
    let t1_first = poll(&server, "w");
    let t2 = poll(&server, "w");
    assert_eq!(
        (t1_first["run_id"].as_str(), t2["run_id"].as_str()),
        (Some("t1"), Some("t2"))
    );
    let (old_token, t2_token) = (token(&t1_first), token(&t2));

    // Attempt 1 of t1 fails; attempt 2 is leased, so t1's token of attempt 1 is stale.
    let failed = ok(server.ry(&[
        "task",
        "fail",
        &old_token,
        "--error-type",
        "flaky",
        "--message",
        "x",
    ]));
    assert!(failed.contains("another attempt is scheduled"), "{failed}");
    let t1 = eventually(WAIT, || try_poll(&server, "w"));
    assert_eq!(
        (t1["run_id"].as_str(), t1["attempt"].as_u64()),
        (Some("t1"), Some(2))
    );
    let t1_token = token(&t1);

    // A token signed by another server (its own key) for a run of the same name.
    let other_sandbox = Sandbox::new();
    other_sandbox.workflow("one.json", ONE);
    let other = other_sandbox.server();
    ok(other.ry(&["run", "start", "one", "--goal", "a", "--run-id", "t1"]));
    let foreign = token(&poll(&other, "w"));
    drop(other);

    let before = (history(&server, "t1"), history(&server, "t2"));
    let denied = "error: permission denied: task_token: signature does not verify";
    let mut forged = vec![
        // A flipped byte in the payload, at the dot's neighbours and in the signature.
        flip(&t1_token, 0),
        flip(&t1_token, t1_token.find('.').unwrap() - 1),
        flip(&t1_token, t1_token.find('.').unwrap() + 1),
        flip(&t1_token, t1_token.len() - 2),
        // t1's payload with t2's signature, and t2's payload with t1's.
        format!(
            "{}.{}",
            t1_token.split_once('.').unwrap().0,
            t2_token.split_once('.').unwrap().1
        ),
        format!(
            "{}.{}",
            t2_token.split_once('.').unwrap().0,
            t1_token.split_once('.').unwrap().1
        ),
        // Claims rewritten under a kept signature: another run, another attempt, a later lease.
        forge_claim(&t1_token, "run", "t2".into()),
        forge_claim(&t1_token, "att", 3.into()),
        forge_claim(
            &forge_claim(&old_token, "att", 2.into()),
            "lease",
            claim(&t1_token, "lease"),
        ),
        foreign,
        "not-a-token".to_string(),
        format!("{t1_token}x"),
    ];
    forged.dedup();
    for bad in &forged {
        let err = refused(
            server.ry(&["task", "complete", bad, "--notes", "forged"]),
            "error: permission denied: ",
        );
        assert!(err.starts_with(denied), "{bad}: {err}");
        refused(
            server.ry(&["task", "heartbeat", bad, "--checkpoint", "forged"]),
            "error: permission denied: ",
        );
        refused(
            server.ry(&[
                "task",
                "fail",
                bad,
                "--error-type",
                "x",
                "--message",
                "forged",
                "--non-retryable",
            ]),
            "error: permission denied: ",
        );
    }
    // The old attempt's genuine token: the lease it names is gone.
    for args in [
        vec!["task", "complete", &old_token, "--notes", "late"],
        vec!["task", "heartbeat", &old_token, "--checkpoint", "late"],
        vec![
            "task",
            "fail",
            &old_token,
            "--error-type",
            "x",
            "--message",
            "late",
            "--non-retryable",
        ],
    ] {
        let err = refused(server.ry(&args), "error: failed precondition: ");
        assert!(err.contains("attempt 1 is no longer current"), "{err}");
    }
    let wrong_kind = refused(server.ry(&["task", "complete", ""]), "error: invalid argument: ");
    assert!(wrong_kind.contains("task_token"), "{wrong_kind}");

    let after = (history(&server, "t1"), history(&server, "t2"));
    assert_eq!(before, after, "a refused token changed a history");
    assert_eq!(describe(&server, "t1")["steps"][0]["state"], "STARTED");

    // The genuine current tokens still work, once each.
    ok(server.ry(&["task", "complete", &t1_token, "--notes", "real"]));
    ok(server.ry(&["task", "complete", &t2_token, "--notes", "real"]));
    refused(
        server.ry(&["task", "complete", &t2_token, "--notes", "replay"]),
        "error: failed precondition: ",
    );
    for run in ["t1", "t2"] {
        let events = history(&server, run);
        assert_numbered(&events);
        let done: Vec<_> = events
            .iter()
            .filter(|e| e["event_type"] == "StepCompleted")
            .collect();
        assert_eq!(done.len(), 1, "{run}: {events:#?}");
        assert_eq!(done[0]["attributes"]["notes"], "real");
        assert_eq!(events.last().unwrap()["event_type"], "RunCompleted");
    }
    assert!(server.stop().success());
}

#[test]
fn bad_input_gets_clear_errors_and_the_server_keeps_answering() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    sandbox.workflow(
        "broken.json",
        r#"{"id":"broken","version":"1","name":"B","steps":[{"id":"a","title":"A"}]}"#,
    );
    sandbox.workflow("garbage.json", "{\"id\": \"garbage\", \"steps\": [");
    sandbox.workflow(
        "badretry.json",
        r#"{"id":"badretry","version":"1","name":"R","steps":[{"id":"a","title":"A","prompt":"p",
            "retry":{"initialIntervalSeconds":-1}}]}"#,
    );
    let server = sandbox.server();

    let list = json(server.ry(&["workflow", "list", "-o", "json"]));
    let ids: Vec<_> = list["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].clone())
        .collect();
    assert_eq!(ids, ["one"]);
    let invalid = list["invalid"].as_array().unwrap();
    assert_eq!(invalid.len(), 3, "{list:#}");
    let error_of = |file: &str| {
        let bad = invalid
            .iter()
            .find(|b| b["source_file"].as_str().unwrap().ends_with(file))
            .unwrap_or_else(|| panic!("{file} not listed as invalid: {list:#}"));
        let error = bad["error"].as_str().unwrap().to_string();
        assert!(error.contains(file), "the error names the file: {error}");
        error
    };
    let broken = error_of("broken.json");
    assert!(broken.contains("steps[0]: missing field `prompt`"), "{broken}");
    let garbage = error_of("garbage.json");
    assert!(garbage.contains("EOF"), "{garbage}");
    let retry = error_of("badretry.json");
    assert!(
        retry.contains("steps[0].retry.initialIntervalSeconds: must be a positive number"),
        "{retry}"
    );
    let human = ok(server.ry(&["workflow", "list"]));
    assert!(
        human.contains("invalid workflow files (3):") && human.contains("broken.json"),
        "{human}"
    );

    let unknown = refused(
        server.ry(&["run", "start", "nope", "--goal", "g"]),
        "error: not found: ",
    );
    assert!(
        unknown.contains("workflow \"nope\" not found (known: one)"),
        "{unknown}"
    );
    refused(
        server.ry(&["run", "start", "broken", "--goal", "g"]),
        "error: not found: ",
    );

    // An empty goal is fine; one past the limit is refused, naming the field.
    let empty = json(server.ry(&[
        "run",
        "start",
        "one",
        "--goal",
        "",
        "--run-id",
        "empty-goal",
        "-o",
        "json",
    ]));
    assert_eq!(empty["started"], true);
    assert_eq!(describe(&server, "empty-goal")["goal"], "");
    let big = "g".repeat(70 * 1024);
    let too_big = refused(
        server.ry(&["run", "start", "one", "--goal", &big, "--run-id", "big-goal"]),
        "error: invalid argument: goal: ",
    );
    assert!(
        too_big.contains("71680 bytes, more than the limit of 65536"),
        "{too_big}"
    );

    let no_ns = refused(
        server.ry(&["-n", "nope", "task", "poll", "--wait", "1"]),
        "error: not found: ",
    );
    assert!(no_ns.contains("namespace \"nope\" does not exist"), "{no_ns}");
    refused(
        server.ry(&["-n", "nope", "run", "start", "one", "--goal", "g"]),
        "error: not found: namespace",
    );
    let bad_queue = refused(
        server.ry(&["task", "poll", "--queue", "no such queue", "--wait", "1"]),
        "error: invalid argument: task_queue: ",
    );
    assert!(bad_queue.contains("may hold only"), "{bad_queue}");
    refused(
        server.ry(&["run", "start", "one", "--goal", "g", "--run-id", "bad id!"]),
        "error: invalid argument: run_id: ",
    );
    refused(
        server.ry(&["run", "describe", "bad id!"]),
        "error: invalid argument: run_id: ",
    );
    refused(
        server.ry(&["run", "signal", "missing", "steer"]),
        "error: not found: ",
    );
    refused(server.ry(&["run", "cancel", "missing"]), "error: not found: ");

    // Bytes that are not gRPC at all, on both listeners.
    for addr in [&server.grpc_addr, &server.http_addr] {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = conn.write_all(b"\x00\x01garbage\r\n\r\nPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff");
        let _ = conn.read(&mut [0u8; 1024]);
    }

    // Only the empty-goal run was created, and the server still answers on both listeners.
    let runs = json(server.ry(&["run", "list", "-o", "json"]));
    let ids: Vec<_> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].clone())
        .collect();
    assert_eq!(ids, ["empty-goal"]);
    let health = http_get(&server.http_addr, "/healthz");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.ends_with(r#"{"status":"ok"}"#), "{health}");
    let task = poll(&server, "w");
    assert_eq!(task["run_id"], "empty-goal");
    ok(server.ry(&["task", "complete", &token(&task)]));
    assert_eq!(describe(&server, "empty-goal")["status"], "COMPLETED");
    assert!(server.stop().success());
}

#[test]
fn acknowledged_work_survives_sigkill_and_the_run_goes_on() {
    let sandbox = Sandbox::new();
    sandbox.workflow("three.json", THREE);
    let server = sandbox.server();
    let started = json(server.ry(&[
        "run",
        "start",
        "three",
        "--goal",
        "durable",
        "--context",
        "lang=go",
        "--run-id",
        "d1",
        "--request-id",
        "req-d1",
        "-o",
        "json",
    ]));
    assert_eq!(started["started"], true);
    let plan = poll(&server, "before-crash");
    ok(server.ry(&[
        "task",
        "complete",
        &token(&plan),
        "--notes",
        "planned before the crash",
        "--context",
        "k=v",
    ]));
    ok(server.ry(&[
        "run",
        "signal",
        "d1",
        "steer",
        "--payload",
        r#"{"text":"after the crash"}"#,
    ]));
    // A second run that nobody polled before the crash: its ready task must come back.
    ok(server.ry(&["run", "start", "three", "--goal", "idle", "--run-id", "d2"]));
    let before = history(&server, "d1");

    let server = server.crash_and_restart();

    assert_eq!(
        history(&server, "d1"),
        before,
        "the history changed across the crash"
    );
    assert_eq!(
        event_types(&before),
        [
            "RunStarted",
            "StepScheduled",
            "StepStarted",
            "StepCompleted",
            "StepScheduled",
            "SignalReceived"
        ]
    );
    let run = describe(&server, "d1");
    assert_eq!(run["status"], "RUNNING");
    assert_eq!(run["steps"][0]["state"], "COMPLETED");
    assert_eq!(run["steps"][0]["notes"], "planned before the crash");
    assert_eq!(run["context"]["k"], "v");
    let again = json(server.ry(&[
        "run",
        "start",
        "three",
        "--goal",
        "durable",
        "--request-id",
        "req-d1",
        "-o",
        "json",
    ]));
    assert_eq!(
        (again["run_id"].as_str(), again["started"].as_bool()),
        (Some("d1"), Some(false))
    );

    // The runs go on: d1's next step carries the signal and the first step's notes,
    // and d2's first step, queued before the crash, is handed out again.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let task = poll(&server, "after-crash");
        let (run_id, step) = (
            task["run_id"].as_str().unwrap(),
            task["step_id"].as_str().unwrap(),
        );
        if (run_id, step) == ("d1", "build") {
            assert_eq!(task["signals"][0]["name"], "steer");
            assert_eq!(task["signals"][0]["payload"]["text"], "after the crash");
            assert_eq!(task["prior_steps"][0]["notes"], "planned before the crash");
            assert_eq!(task["prompt"], "Build durable in go");
        }
        let notes = format!("{run_id}/{step} after the crash");
        ok(server.ry(&["task", "complete", &token(&task), "--notes", &notes]));
        seen.push(format!("{run_id}/{step}"));
    }
    seen.sort();
    assert_eq!(seen, ["d1/build", "d1/ship", "d2/build", "d2/plan", "d2/ship"]);

    for run_id in ["d1", "d2"] {
        assert_eq!(describe(&server, run_id)["status"], "COMPLETED");
        let events = history(&server, run_id);
        assert_numbered(&events);
        assert_eq!(
            events
                .iter()
                .filter(|e| e["event_type"] == "StepCompleted")
                .count(),
            3
        );
        assert_eq!(events.last().unwrap()["event_type"], "RunCompleted");
    }
    let d1 = history(&server, "d1");
    assert_eq!(&d1[..before.len()], &before[..]);
    assert!(server.stop().success());
}

/// Sends a request head that never ends, a byte each 200 ms for up to 30 s, to
/// `http_addr`; answers whether the server closed the connection before that.
fn trickled_head_closed(http_addr: &str) -> bool {
    let Ok(mut conn) = TcpStream::connect(http_addr) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    if conn.write_all(b"GET /healthz HTTP/1.1\r\nx-slow: ").is_err() {
        return true;
    }
    let mut buf = [0u8; 256];
    for _ in 0..150 {
        match conn.read(&mut buf) {
            // Closed, reset, or answered (a 408): the head did not get to trickle on.
            Ok(_) => return true,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
            }
            Err(_) => return true,
        }
        if conn.write_all(b"a").is_err() {
            return true;
        }
    }
    false
}

#[test]
fn connections_trickling_headers_are_closed_at_the_header_timeout() {
    let sandbox = Sandbox::new();
    // The whole request may take a minute; its headers a second.
    let server = sandbox.server_with(&[
        "--max-connections",
        "4",
        "--http-request-timeout",
        "60",
        "--http-header-timeout",
        "1",
    ]);
    // As many trickling connections as the listener takes.
    let slow: Vec<_> = (0..4)
        .map(|_| {
            let addr = server.http_addr.clone();
            std::thread::spawn(move || trickled_head_closed(&addr))
        })
        .collect();
    for t in slow {
        assert!(
            t.join().unwrap(),
            "a connection trickling its headers was kept 30 s"
        );
    }
    // Their slots are free again.
    let mut conn = TcpStream::connect(&server.http_addr).unwrap();
    conn.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.0 200"), "{text}");
    // Out of range: refused naming the flag.
    let out = std::process::Command::new(BIN)
        .args([
            "server",
            "--http-request-timeout",
            "10",
            "--http-header-timeout",
            "11",
        ])
        .arg("--data-dir")
        .arg(sandbox.path("other"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--http-header-timeout"),
        "{err}"
    );
}
