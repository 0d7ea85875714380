//! Live output with real processes: a `railyard server`, a test process playing the
//! worker over real gRPC with the SDK (`AppendStepOutput`), and `railyard run watch
//! --stream` processes watching. A watcher sees text before the step completes; a
//! worker that goes silent mid-stream loses its lease and the retry's new segment is
//! announced; chunks past the configured cap are dropped with a marker; a closed run
//! replays from any offset (CLI and SSE with `Last-Event-ID`), with no gap and no
//! repeat; a slow watcher is told it lagged while the worker's heartbeats all land; a
//! server killed mid-stream loses at most its last flush, and a watcher lives
//! through the restart; a `railyard worker` killed mid-step is followed by the
//! retry's segment on another worker.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use railyard_proto::v1::{AppendStepOutputRequest, OutputChunk, OutputKind, watch_output_response::Message};
use railyard_sdk::{Client, Completion, StepWorker};
use serde_json::Value;

use crate::support::worker::WorkerProcess;
use crate::support::{BIN, Sandbox, eventually, ok};

/// One step whose worker must heartbeat every second, retried at once.
const FLOW: &str = r#"{"id": "talk", "version": "1", "name": "Talk", "taskQueue": "agents",
  "steps": [{"id": "say", "title": "Say", "prompt": "Say {{goal}}",
             "heartbeatTimeoutSeconds": 1,
             "retry": {"initialIntervalSeconds": 0.1, "maximumAttempts": 3}}]}"#;

fn text(s: &str) -> OutputChunk {
    OutputChunk {
        kind: OutputKind::Text as i32,
        text: s.into(),
        ..Default::default()
    }
}

async fn append(client: &Client, token: &str, chunks: Vec<OutputChunk>) {
    client
        .append_step_output(AppendStepOutputRequest {
            task_token: token.into(),
            identity: "test-worker".into(),
            chunks,
        })
        .await
        .unwrap();
}

/// `railyard run watch RUN --stream --output json ...` with its stdout piped.
fn watcher(url: &str, run: &str, more: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args([
            "run", "watch", run, "--stream", "--output", "json", "--server", url,
        ])
        .args(more)
        .env_remove("RAILYARD_API_KEY")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads JSON lines until `until` holds for one; every line read is kept in `seen`.
fn read_until(out: &mut impl BufRead, seen: &mut Vec<Value>, until: impl Fn(&Value) -> bool) {
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the watcher ended early: {seen:?}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        let done = until(&v);
        seen.push(v);
        if done {
            return;
        }
    }
}

#[test]
fn a_watcher_follows_a_step_live_through_a_retry_and_a_closed_run_replays() {
    let sandbox = Sandbox::new();
    sandbox.workflow("talk.json", FLOW);
    let config = sandbox.path("railyard.toml");
    std::fs::write(
        &config,
        "[output]\nattempt_cap_bytes = 4096\nflush_interval_ms = 50\n",
    )
    .unwrap();
    let server = sandbox.server_with(&["--config", config.to_str().unwrap()]);
    ok(server.ry(&["run", "start", "talk", "--run-id", "r1", "--goal", "hi"]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&server.url)).unwrap();
    let w = StepWorker::new(client.clone(), "default", "agents", "test-worker");

    // The first attempt streams, and the watcher sees it while the step runs.
    let first = rt
        .block_on(w.poll(Duration::from_secs(10)))
        .unwrap()
        .expect("a task");
    rt.block_on(append(&client, &first.task_token, vec![text("Hel"), text("lo")]));
    let mut watch = watcher(&server.url, "r1", &[]);
    let mut out = BufReader::new(watch.stdout.take().unwrap());
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, |v| v["text"] == "lo");
    assert_eq!(seen[0]["kind"], "segment_start");
    assert_eq!(seen[0]["attempt"], 1);
    let status = ok(server.ry(&["run", "describe", "r1", "--output", "json"]));
    assert!(status.contains("RUNNING"), "{status}");

    // The worker goes silent mid-stream: its lease lapses, the retry is leased and
    // streams, and the watcher is told of the new segment.
    let second = rt
        .block_on(w.poll(Duration::from_secs(30)))
        .unwrap()
        .expect("the retry, once the first lease lapsed");
    assert_eq!(second.attempt, 2);
    rt.block_on(append(&client, &second.task_token, vec![text("again")]));
    read_until(&mut out, &mut seen, |v| v["text"] == "again");
    let segment = &seen[seen.len() - 2];
    assert_eq!(
        (segment["kind"].as_str(), segment["attempt"].as_u64()),
        (Some("segment_start"), Some(2))
    );

    // Past the attempt's 4 KiB cap: dropped, and the marker says how much.
    rt.block_on(append(
        &client,
        &second.task_token,
        vec![text(&"x".repeat(5000)), text("y")],
    ));
    rt.block_on(w.complete(&second.task_token, Completion::notes("said")))
        .unwrap();
    read_until(&mut out, &mut seen, |v| v.get("run").is_some());
    let status = watch.wait().unwrap();
    assert!(status.success(), "the watcher exits 0 once the run completed");
    let marker = seen
        .iter()
        .rev()
        .find(|v| v["kind"] == "dropped")
        .expect("a drop marker");
    assert_eq!(
        (
            marker["dropped_chunks"].as_u64(),
            marker["dropped_bytes"].as_u64()
        ),
        (Some(1), Some(5016))
    );
    let offsets: Vec<u64> = seen.iter().filter_map(|v| v["offset"].as_u64()).collect();
    let last = *offsets.last().unwrap();
    assert_eq!(offsets, (1..=last).collect::<Vec<_>>(), "no gap, no repeat");

    // The closed run replays, from an offset: the rest once.
    let again = ok(Command::new(BIN)
        .args([
            "run",
            "watch",
            "r1",
            "--stream",
            "--from-offset",
            "3",
            "--output",
            "json",
        ])
        .args(["--server", &server.url])
        .output()
        .unwrap());
    let replayed: Vec<u64> = again
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["offset"].as_u64())
        .collect();
    assert_eq!(replayed, (3..=last).collect::<Vec<_>>());
    // The human view marks the segments and the drop.
    let human = ok(Command::new(BIN)
        .args(["run", "watch", "r1", "--stream", "--server", &server.url])
        .output()
        .unwrap());
    assert!(human.contains("── step say · attempt 2 ──"), "{human}");
    assert!(human.contains("Hello"), "{human}");
    assert!(human.contains("dropped past the output cap"), "{human}");
    assert!(human.contains("run r1 closed: COMPLETED"), "{human}");

    // SSE on the server's HTTP listener: after Last-Event-ID, the rest, then `end`.
    let mut conn = std::net::TcpStream::connect(&server.http_addr).unwrap();
    write!(
        conn,
        "GET /runs/r1/output HTTP/1.0\r\nLast-Event-ID: {}\r\n\r\n",
        last - 1
    )
    .unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    let ids: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(str::trim)
        .collect();
    assert_eq!(ids, vec![last.to_string().as_str()]);
    assert!(body.contains("event: end"), "{body}");
}

#[test]
fn a_slow_watcher_is_told_it_lagged_while_the_workers_heartbeats_all_land() {
    let sandbox = Sandbox::new();
    sandbox.workflow("talk.json", FLOW);
    let config = sandbox.path("railyard.toml");
    std::fs::write(
        &config,
        "[output]\nattempt_cap_bytes = 1073741824\nrun_cap_bytes = 1073741824\nflush_interval_ms = 20\nwatch_buffer = 16\n",
    )
    .unwrap();
    let server = sandbox.server_with(&["--config", config.to_str().unwrap()]);
    ok(server.ry(&["run", "start", "talk", "--run-id", "r1", "--goal", "hi"]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(&server.url).await.unwrap();
        let w = StepWorker::new(client.clone(), "default", "agents", "test-worker");
        let task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
        append(&client, &task.task_token, vec![text("start")]).await;
        // A watcher that reads the first chunk and then nothing while much is written.
        let mut slow = client.watch_output("default", "r1", 0).await.unwrap();
        assert!(slow.message().await.unwrap().is_some());
        let piece = "z".repeat(10_000);
        let (batches, per) = (60u64, 50u64);
        let mut beats = 0;
        for _ in 0..batches {
            append(
                &client,
                &task.task_token,
                (0..per).map(|_| text(&piece)).collect(),
            )
            .await;
            // Every heartbeat is answered: streaming never holds up the lease.
            w.heartbeat(&task.task_token).send().await.unwrap();
            beats += 1;
        }
        assert_eq!(beats, batches);
        // The slow watcher reads again while the step still runs (heartbeating, as a
        // worker does): told it lagged, it catches up from storage.
        let beating = {
            let (w, token) = (w.clone(), task.task_token.clone());
            tokio::spawn(async move {
                loop {
                    w.heartbeat(&token).send().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        };
        let total = 2 + batches * per;
        let mut offsets = vec![1];
        let mut lagged = 0;
        while (offsets.len() as u64) < total {
            match slow.message().await.unwrap().expect("more").message {
                Some(Message::Chunk(c)) => offsets.push(c.offset),
                Some(Message::Lagged(l)) => {
                    lagged += 1;
                    assert_eq!(l.next_offset, offsets.last().unwrap() + 1);
                }
                None => {}
            }
        }
        beating.abort();
        w.complete(&task.task_token, Completion::notes("done"))
            .await
            .unwrap();
        assert!(slow.message().await.unwrap().is_none(), "then the end");
        let history = client.full_history("default", "r1").await.unwrap();
        assert!(
            !history.iter().any(|e| e.event_type == "StepTimedOut"),
            "the step never timed out"
        );
        assert!(
            lagged >= 1,
            "the slow watcher was told it lagged ({} chunks)",
            offsets.len()
        );
        // The segment start, "start", then every piece: each once, in order.
        assert_eq!(offsets, (1..=2 + batches * per).collect::<Vec<_>>());
    });
}

#[test]
fn the_mcp_gateways_get_run_shows_the_output_tail_bounded() {
    let sandbox = Sandbox::new();
    sandbox.workflow("talk.json", FLOW);
    let server = sandbox.server();
    ok(server.ry(&["run", "start", "talk", "--run-id", "r1", "--goal", "hi"]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(&server.url).await.unwrap();
        let w = StepWorker::new(client.clone(), "default", "agents", "test-worker");
        let task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
        let mut chunks = vec![text(&"a".repeat(6000)), text("The answer is ")];
        chunks.push(OutputChunk {
            kind: OutputKind::ToolCallStart as i32,
            name: "bash".into(),
            ..Default::default()
        });
        chunks.push(OutputChunk {
            kind: OutputKind::ToolInput as i32,
            text: "{\"command\":\"ls\"}".into(),
            ..Default::default()
        });
        append(&client, &task.task_token, chunks).await;
        // Stored once a flush ran: the tail reads what is stored.
        let mut watch = client.watch_output("default", "r1", 4).await.unwrap();
        assert!(watch.message().await.unwrap().is_some());
    });
    let mut mcp = crate::mcp::Mcp::start(&server.url);
    mcp.initialize();
    let got = mcp.tool("get_run", serde_json::json!({"run_id": "r1"}));
    let tail = got["structuredContent"]["output_tail"]
        .as_str()
        .expect("output_tail")
        .to_string();
    assert!(
        tail.ends_with("The answer is \n→ bash({\"command\":\"ls\"}"),
        "{tail}"
    );
    assert_eq!(tail.chars().count(), 4096, "bounded");
    drop(mcp);
}

/// A step whose lease outlives a server restart.
const HOLD: &str = r#"{"id": "hold", "version": "1", "name": "Hold", "taskQueue": "agents",
  "steps": [{"id": "say", "title": "Say", "prompt": "Say {{goal}}",
             "heartbeatTimeoutSeconds": 120}]}"#;

/// Offsets and texts of `run watch --stream --output json` lines.
fn chunks(out: &str) -> (Vec<u64>, Vec<String>) {
    let lines: Vec<Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let offsets = lines.iter().filter_map(|v| v["offset"].as_u64()).collect();
    let texts = lines
        .iter()
        .filter(|v| v["kind"] == "text")
        .filter_map(|v| v["text"].as_str().map(str::to_string))
        .collect();
    (offsets, texts)
}

#[test]
fn a_server_killed_mid_stream_loses_at_most_its_last_flush_and_resumes_without_gap_or_repeat() {
    let sandbox = Sandbox::new();
    sandbox.workflow("hold.json", HOLD);
    let config = sandbox.path("railyard.toml");
    std::fs::write(&config, "[output]\nflush_interval_ms = 50\n").unwrap();
    let server = sandbox.server_with(&["--config", config.to_str().unwrap()]);
    ok(server.ry(&["run", "start", "hold", "--run-id", "k1", "--goal", "hi"]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&server.url)).unwrap();
    let w = StepWorker::new(client.clone(), "default", "agents", "test-worker");
    let task = rt
        .block_on(w.poll(Duration::from_secs(10)))
        .unwrap()
        .expect("a task");

    // A watcher sees the first chunks: they are stored (watchers see only what is).
    rt.block_on(append(&client, &task.task_token, vec![text("one"), text("two")]));
    let mut watch = watcher(&server.url, "k1", &[]);
    let mut out = BufReader::new(watch.stdout.take().unwrap());
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, |v| v["text"] == "two");
    let before: Vec<u64> = seen.iter().filter_map(|v| v["offset"].as_u64()).collect();
    assert_eq!(before, vec![1, 2, 3], "segment start, one, two");

    // Appended and answered, then the server is killed: this chunk may be lost (it
    // was at most one flush interval old), but never half-kept or repeated.
    rt.block_on(append(&client, &task.task_token, vec![text("maybe")]));
    let server = server.crash_and_restart();

    // The same lease goes on streaming to the restarted server.
    let client = rt.block_on(Client::connect(&server.url)).unwrap();
    rt.block_on(append(&client, &task.task_token, vec![text("three")]));
    let w = StepWorker::new(client.clone(), "default", "agents", "test-worker");
    rt.block_on(w.complete(&task.task_token, Completion::notes("said")))
        .unwrap();

    // The watcher reopened on its own after the last offset it saw, and follows to
    // the close: every offset once.
    read_until(&mut out, &mut seen, |v| v.get("run").is_some());
    assert!(watch.wait().unwrap().success());
    let followed: Vec<u64> = seen.iter().filter_map(|v| v["offset"].as_u64()).collect();
    let end = *followed.last().unwrap();
    assert_eq!(followed, (1..=end).collect::<Vec<_>>(), "{seen:?}");

    // A new watcher from that offset: the rest, once each.
    let resumed = ok(Command::new(BIN)
        .args([
            "run",
            "watch",
            "k1",
            "--stream",
            "--from-offset",
            "4",
            "--output",
            "json",
        ])
        .args(["--server", &server.url])
        .output()
        .unwrap());
    let (offsets, texts) = chunks(&resumed);
    let last = *offsets.last().expect("chunks after the restart");
    assert_eq!(
        offsets,
        (4..=last).collect::<Vec<_>>(),
        "no gap, no repeat: {resumed}"
    );
    assert_eq!(texts.last().map(String::as_str), Some("three"), "{resumed}");
    assert!(
        texts == ["three"] || texts == ["maybe", "three"],
        "the chunk in flight at the kill is there once or not at all: {texts:?}"
    );
    // A full replay agrees with what the first watcher saw before the kill.
    let (all, all_texts) = chunks(&ok(Command::new(BIN)
        .args(["run", "watch", "k1", "--stream", "--output", "json"])
        .args(["--server", &server.url])
        .output()
        .unwrap()));
    assert_eq!(all, (1..=last).collect::<Vec<_>>());
    assert_eq!(last, end, "the watcher that lived through the kill saw it all");
    assert_eq!(&all_texts[..2], ["one", "two"]);
}

/// A step that streams a turn, then sleeps in bash the first time it runs.
const NAP: &str = r#"{"id": "nap", "version": "1", "name": "Nap", "taskQueue": "naps",
  "steps": [{"id": "s1", "title": "Nap", "prompt": "Nap on {{goal}}",
             "heartbeatTimeoutSeconds": 2,
             "retry": {"initialIntervalSeconds": 0.1, "maximumAttempts": 3}}]}"#;

/// Turn 0 streams its text and naps (only the first time: the marker stays in the
/// run's workspace); turn 1 completes.
const NAP_SCRIPT: &str = r#"{"steps": {"s1": [
  {"text": "Thinking about {{goal}} before a nap.",
   "tool_calls": [{"name": "bash", "input": {"command": "if [ -f napped ]; then echo rested; else touch napped; sleep 120; fi"}}]},
  {"text": "Awake again, finishing.",
   "tool_calls": [{"name": "complete_step", "input": {"notes": "napped"}}]}]}}"#;

#[test]
fn a_worker_killed_mid_step_is_followed_by_the_retrys_segment_on_another_worker() {
    let sandbox = Sandbox::new();
    sandbox.workflow("nap.json", NAP);
    let script = sandbox.path("nap.script.json");
    std::fs::write(&script, NAP_SCRIPT).unwrap();
    let config = sandbox.path("railyard.toml");
    std::fs::write(&config, "[output]\nflush_interval_ms = 50\n").unwrap();
    let server = sandbox.server_with(&["--config", config.to_str().unwrap()]);
    let workspace = sandbox.path("workspace");
    let worker = |identity: &str| {
        let args = [
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--queue",
            "naps",
        ];
        WorkerProcess::start(&server.url, &workspace, identity, &args, &[])
    };
    let mut first = worker("napper-1");
    ok(server.ry(&["run", "start", "nap", "--run-id", "n1", "--goal", "stars"]));
    let mut watch = watcher(&server.url, "n1", &[]);
    let mut out = BufReader::new(watch.stdout.take().unwrap());
    let mut seen = Vec::new();
    read_until(&mut out, &mut seen, |v| {
        v["kind"] == "tool_call_start" && v["attempt"] == 1
    });
    let said: String = seen
        .iter()
        .filter(|v| v["kind"] == "text")
        .filter_map(|v| v["text"].as_str())
        .collect();
    assert!(said.contains("Thinking about stars"), "{seen:?}");

    // Killed while its bash tool naps: nothing of it says goodbye.
    eventually(Duration::from_secs(60), || {
        workspace.join("n1").join("napped").exists().then_some(())
    });
    first.kill9();
    let _second = worker("napper-2");

    // Its lease lapses; the retry runs on the other worker, and the watcher is told
    // of the new segment before its text.
    read_until(&mut out, &mut seen, |v| v.get("run").is_some());
    assert!(
        watch.wait().unwrap().success(),
        "the watcher exits 0 once the run completed"
    );
    let segment = seen
        .iter()
        .position(|v| v["kind"] == "segment_start" && v["attempt"] == 2)
        .unwrap_or_else(|| panic!("a segment for attempt 2: {seen:?}"));
    let later: String = seen[segment..]
        .iter()
        .filter(|v| v["kind"] == "text")
        .filter_map(|v| v["text"].as_str())
        .collect();
    assert!(later.contains("Awake again"), "{seen:?}");
    let offsets: Vec<u64> = seen.iter().filter_map(|v| v["offset"].as_u64()).collect();
    let last = *offsets.last().unwrap();
    assert_eq!(offsets, (1..=last).collect::<Vec<_>>(), "no gap, no repeat");
    let run = &seen.last().unwrap()["run"];
    assert_eq!(run["status"], "COMPLETED", "{run}");
}
