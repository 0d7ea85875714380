//! Checkpoints that grow by appending, across a SIGKILL: a `railyard bench-agent`
//! process heartbeats a growing transcript (appending after its first heartbeat) and
//! prints each acknowledged state; killed, its step times out, and the next attempt
//! is handed the transcript exactly as the last acknowledged heartbeat left it, byte
//! for byte, with the digest to append to.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use railyard_proto::checkpoint;
use railyard_sdk::{CheckpointSync, Client, StepWorker};

use crate::support::*;

#[test]
fn a_resumed_attempt_gets_the_last_acknowledged_transcript_byte_for_byte() {
    let sandbox = Sandbox::new();
    sandbox.workflow(
        "agent.json",
        r#"{"id": "agent", "version": "1", "name": "Agent", "taskQueue": "agents",
          "steps": [{"id": "long", "title": "Long", "prompt": "Work on {{goal}}",
                     "heartbeatTimeoutSeconds": 1,
                     "retry": {"initialIntervalSeconds": 0.2, "maximumAttempts": 3}}]}"#,
    );
    let server = sandbox.server();
    ok(server.ry(&["run", "start", "agent", "--run-id", "r1", "--goal", "g"]));

    let turns = 12;
    let mut agent = Command::new(BIN)
        .args(["bench-agent", "--server", &server.url, "--queue", "agents"])
        .args([
            "--turns",
            &turns.to_string(),
            "--print-acks",
            "--hold",
            "--timeout",
            "120",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut acks = Vec::new();
    let mut out = BufReader::new(agent.stdout.take().unwrap());
    while acks.len() < turns {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "the agent ended early");
        let fields: Vec<String> = line.split_whitespace().map(String::from).collect();
        assert_eq!(fields[0], "ack", "{line}");
        acks.push(fields);
    }
    // Every turn was acknowledged; the agent now holds the lease, silent: kill it.
    let _ = kill(Pid::from_raw(agent.id() as i32), Signal::SIGKILL);
    let _ = agent.wait();
    let last = acks.last().unwrap();
    let (len, sha, digest) = (last[2].parse::<usize>().unwrap(), &last[3], &last[4]);
    // The transcript grew by 4-20 KB a turn, so after the first it went as appends.
    assert!(len > turns * 4096, "{len}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(&server.url).await.unwrap();
        let w = StepWorker::new(client, "default", "agents", "rescuer");
        let task = w
            .poll(Duration::from_secs(60))
            .await
            .unwrap()
            .expect("the step comes back once its lease times out");
        assert_eq!((task.run_id.as_str(), task.attempt), ("r1", 2));
        assert_eq!(task.checkpoint.len(), len);
        assert_eq!(&hex(&checkpoint::full(&task.checkpoint)), sha);
        assert_eq!(&hex(&task.checkpoint_digest), digest);
        // The new attempt appends to it at once.
        let mut sync = CheckpointSync::from_task(&task);
        let grown = [task.checkpoint.as_slice(), b"{\"turn\":\"resumed\"}\n"].concat();
        let r = w
            .heartbeat(&task.task_token)
            .checkpoint(&grown)
            .sync(&mut sync)
            .send()
            .await
            .unwrap();
        assert_eq!(r.checkpoint_length, grown.len() as u64);
        assert_eq!((sync.stats.appends, sync.stats.whole), (1, 0));
    });
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
