//! `railyard bench-agent` (hidden): one client process of `railyard bench --agents`.
//! It leases `--agents` steps from `--queue` and, for each at once, heartbeats a
//! transcript that grows by a turn of 4-20 KB for `--turns` turns, sending only what
//! it gained (a `CheckpointSync::growing`: the transcript only grows, so nothing is
//! compared or copied), then completes the step. It prints one
//! JSON line: the heartbeat latencies of the first and the last tenth of the turns,
//! and how the checkpoints went on the wire.
//!
//! With `--print-acks` it also prints `ack RUN LEN SHA DIGEST` after every
//! acknowledged heartbeat (the transcript's length, `checkpoint::full` of its bytes,
//! and the digest the server acknowledged), so a test can kill it and compare what a
//! resumed attempt is handed, byte for byte. A leased step that already has a
//! checkpoint resumes from it.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use railyard_proto::checkpoint;
use railyard_proto::v1::StepTask;
use railyard_sdk::{CheckpointStats, CheckpointSync, Client, Completion, ConnectOptions, StepWorker};
use serde_json::json;
use tokio::task::JoinSet;

/// Flags of `railyard bench-agent`.
#[derive(Debug, Args)]
pub struct AgentClientArgs {
    /// The server's gRPC URL.
    #[arg(long)]
    pub server: String,
    /// The task queue to lease from.
    #[arg(long, default_value = "default")]
    pub queue: String,
    /// Steps to lease and drive at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub agents: u32,
    /// Turns per step.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..))]
    pub turns: u32,
    /// Seeds the turn sizes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Pause between turns, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub pause_ms: u64,
    /// Print a line for each acknowledged heartbeat.
    #[arg(long)]
    pub print_acks: bool,
    /// After the last turn, hold the lease without heartbeating or completing, until
    /// killed or --timeout (a worker that died, for tests).
    #[arg(long)]
    pub hold: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

/// Bytes of turn `turn` of agent `agent`: a JSON line of 4 to 20 KB.
pub(crate) fn turn_bytes(seed: u64, agent: u64, turn: u64) -> Vec<u8> {
    // splitmix64: sizes that differ by turn, the same on every run.
    let mut z = seed
        .wrapping_add(agent.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(turn.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let size = 4096 + (z % (16 * 1024)) as usize;
    let head = format!("{{\"turn\":{turn},\"tool_result\":\"");
    let filler = b"the quick brown fox reads a file and runs the tests; ";
    let body_len = size.saturating_sub(head.len() + 3);
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(head.as_bytes());
    out.extend(filler.iter().cycle().take(body_len));
    out.extend_from_slice(b"\"}\n");
    out
}

/// What one step's heartbeats came to.
struct StepFigures {
    first: Vec<Duration>,
    last: Vec<Duration>,
    stats: CheckpointStats,
    transcript: u64,
}

/// Runs the client and prints its JSON line.
pub async fn run(args: AgentClientArgs) -> anyhow::Result<()> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(120),
        ..ConnectOptions::default()
    };
    let client = Client::connect_with(&args.server, opts).await?;
    let worker = StepWorker::new(
        client,
        railyard_proto::DEFAULT_NAMESPACE,
        &args.queue,
        "bench-agent",
    );
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut tasks = Vec::new();
    while tasks.len() < args.agents as usize {
        if Instant::now() > deadline {
            bail!(
                "leased {} of {} steps before the timeout",
                tasks.len(),
                args.agents
            );
        }
        if let Some(task) = worker.poll(Duration::from_secs(5)).await? {
            tasks.push(task);
        }
    }
    let mut set = JoinSet::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let worker = worker.clone();
        let plan = Plan {
            seed: args.seed,
            agent: i as u64,
            turns: args.turns,
            pause: Duration::from_millis(args.pause_ms),
            print_acks: args.print_acks,
            hold: args.hold.then(|| Duration::from_secs(args.timeout)),
        };
        set.spawn(async move { drive(worker, task, plan).await });
    }
    let (mut first, mut last) = (Vec::new(), Vec::new());
    let mut stats = CheckpointStats::default();
    let mut transcript = 0;
    while let Some(joined) = set.join_next().await {
        let f = joined.context("an agent task panicked")??;
        first.extend(f.first);
        last.extend(f.last);
        stats.whole += f.stats.whole;
        stats.appends += f.stats.appends;
        stats.refused += f.stats.refused;
        stats.bytes += f.stats.bytes;
        transcript += f.transcript;
    }
    let us = |v: &[Duration]| v.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>();
    let line = json!({
        "first_us": us(&first), "last_us": us(&last),
        "whole": stats.whole, "appends": stats.appends, "refused": stats.refused,
        "bytes_sent": stats.bytes, "transcript_bytes": transcript,
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// What one agent does.
struct Plan {
    seed: u64,
    agent: u64,
    turns: u32,
    pause: Duration,
    print_acks: bool,
    /// Hold the lease this long after the last turn instead of completing.
    hold: Option<Duration>,
}

async fn drive(worker: StepWorker, task: StepTask, plan: Plan) -> anyhow::Result<StepFigures> {
    let Plan {
        seed,
        agent,
        turns,
        pause,
        print_acks,
        hold,
    } = plan;
    let mut sync = CheckpointSync::from_task(&task).growing();
    let mut transcript = task.checkpoint.clone();
    let tenth = turns.div_ceil(10);
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for turn in 0..turns {
        transcript.extend_from_slice(&turn_bytes(seed, agent, u64::from(turn)));
        let t0 = Instant::now();
        let resp = worker
            .heartbeat(&task.task_token)
            .checkpoint(&transcript)
            .sync(&mut sync)
            .send()
            .await
            .with_context(|| format!("heartbeat of turn {turn} of run {}", task.run_id))?;
        let took = t0.elapsed();
        if turn < tenth {
            first.push(took);
        }
        if turn >= turns - tenth {
            last.push(took);
        }
        if print_acks {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "ack {} {} {} {}",
                task.run_id,
                transcript.len(),
                hex::encode(checkpoint::full(&transcript)),
                hex::encode(&resp.checkpoint_digest)
            )?;
            out.flush()?;
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    if let Some(hold) = hold {
        tokio::time::sleep(hold).await;
        bail!(
            "held the lease of run {} for {hold:?} without being killed",
            task.run_id
        );
    }
    worker
        .complete(&task.task_token, Completion::notes("bench agent done"))
        .await?;
    Ok(StepFigures {
        first,
        last,
        stats: sync.stats,
        transcript: transcript.len() as u64,
    })
}
