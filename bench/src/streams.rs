//! `railyard bench --streams [N]`: what live output costs the durable path. On the
//! in-process server, the write floor and the throughput phase run on an idle server,
//! then while N steps (100 when N is omitted) are leased and heartbeat every second
//! (the baseline: the same steps without output), then while the same steps also
//! stream 50 chunks a second each (`AppendStepOutput`, ten chunks five times a
//! second). Baseline and streaming are measured three times each, alternating, and
//! each figure is the median. Prints runs/s and the durable write RPC p50 of each and the ratio of
//! streaming to the baseline, and the process's CPU while only the steps run, without
//! and with output (the bench's clients are in the server's process, so the
//! difference counts the streaming clients too: an upper bound of the server's).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_proto::v1::{AppendStepOutputRequest, OutputChunk, OutputKind};
use railyard_sdk::{Client, ConnectOptions, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use serde_json::json;
use tokio::task::JoinSet;

use super::schedules::{clock_ticks_per_second, cpu_ticks};
use super::{BenchArgs, rpc_floor, throughput, write_workflows};
use crate::output::{self, Output};

/// The queue the streaming steps are leased from.
const STREAM_QUEUE: &str = "bench-stream";
/// Chunks per append, and appends per second: 50 chunks a second a step.
const CHUNKS_PER_APPEND: usize = 10;
const APPEND_EVERY: Duration = Duration::from_millis(200);
/// Measurements of each of the baseline and streaming sides, alternating.
const ROUNDS: usize = 3;
/// Durable writes timed for each side's p50.
const FLOOR_SAMPLES: usize = 200;
/// How long the CPU of the streams alone is measured.
const CPU_WINDOW: Duration = Duration::from_secs(10);

/// One side of the comparison.
#[derive(Clone, Copy)]
struct Side {
    runs_per_s: f64,
    write_p50: Duration,
}

impl Side {
    /// The median of each figure over several measurements of one side.
    fn median(sides: &[Side]) -> Side {
        let mut rates: Vec<f64> = sides.iter().map(|s| s.runs_per_s).collect();
        let mut p50s: Vec<Duration> = sides.iter().map(|s| s.write_p50).collect();
        rates.sort_by(f64::total_cmp);
        p50s.sort();
        Side {
            runs_per_s: rates.get(rates.len() / 2).copied().unwrap_or(0.0),
            write_p50: p50s.get(p50s.len() / 2).copied().unwrap_or_default(),
        }
    }
}

/// What [`compare`] measured.
struct Figures {
    /// Nothing else on the server.
    idle: Side,
    /// The N steps leased and heartbeating, not streaming: the baseline.
    heartbeating: Side,
    /// The N steps heartbeating and streaming.
    streaming: Side,
    /// Process CPU (% of a core) while only the N steps run, without and with output.
    heartbeat_cpu: f64,
    streaming_cpu: f64,
    chunks: u64,
}

/// Runs the comparison and prints it.
pub(super) async fn run(output: Output, args: &BenchArgs, streams: u32) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows = dir.path().join("workflows");
    write_workflows(&workflows)?;
    let def = json!({"id": "bench-stream", "version": "1", "name": "Bench streaming step",
        "taskQueue": STREAM_QUEUE,
        "steps": [{"id": "talk", "title": "Talk", "prompt": "Stream: {{goal}}", "heartbeatTimeoutSeconds": 60}]});
    std::fs::write(workflows.join("bench-stream.json"), serde_json::to_vec(&def)?)?;
    let mut config = ServerConfig::new(dir.path().join("data"), workflows);
    config.grpc_listen = ([127, 0, 0, 1], 0).into();
    config.http_listen = ([127, 0, 0, 1], 0).into();
    let server = RunningServer::start(config)
        .await
        .context("cannot start the in-process server")?;
    let url = format!("http://{}", server.grpc_addr);
    let result = compare(&url, args, streams).await;
    server.shutdown().await;
    let f = result?;
    let ratio = |a: f64, b: f64| if a > 0.0 { b / a } else { 0.0 };
    let (base, with) = (f.heartbeating, f.streaming);
    let streams_cpu = (f.streaming_cpu - f.heartbeat_cpu).max(0.0);
    if output.is_json() {
        output::json(&json!({
            "streams": streams,
            "chunks_per_second_per_stream": 50,
            "chunks_sent": f.chunks,
            "idle": {"runs_per_second": f.idle.runs_per_s, "write_p50_ms": ms(f.idle.write_p50)},
            "heartbeating_only": {"runs_per_second": base.runs_per_s, "write_p50_ms": ms(base.write_p50)},
            "with_streams": {"runs_per_second": with.runs_per_s, "write_p50_ms": ms(with.write_p50)},
            "runs_per_second_ratio": ratio(base.runs_per_s, with.runs_per_s),
            "write_p50_ratio": ratio(ms(base.write_p50), ms(with.write_p50)),
            "heartbeating_cpu_percent": f.heartbeat_cpu,
            "streaming_cpu_percent": f.streaming_cpu,
            "streams_cpu_percent": streams_cpu,
        }))?;
    } else {
        output::line(format!(
            "streams: {streams} leased steps heartbeating every second; streaming adds 50 chunks/s each ({} chunks sent); \
             with steps: medians of {ROUNDS} alternating measurements, write p50 over {FLOOR_SAMPLES} writes",
            f.chunks
        ))?;
        output::line(format!(
            "idle server:                {:.0} runs/s, durable write p50 {:.2} ms",
            f.idle.runs_per_s,
            ms(f.idle.write_p50)
        ))?;
        output::line(format!(
            "steps heartbeating only:    {:.0} runs/s, durable write p50 {:.2} ms (the baseline)",
            base.runs_per_s,
            ms(base.write_p50)
        ))?;
        output::line(format!(
            "steps heartbeating+streaming: {:.0} runs/s ({:.0}% of the baseline), durable write p50 {:.2} ms ({:.0}%)",
            with.runs_per_s,
            100.0 * ratio(base.runs_per_s, with.runs_per_s),
            ms(with.write_p50),
            100.0 * ratio(ms(base.write_p50), ms(with.write_p50))
        ))?;
        output::line(format!(
            "process CPU with only the steps running (server and their clients, one process): {:.0}% of a core heartbeating, {:.0}% streaming too: streaming costs {streams_cpu:.0}%",
            f.heartbeat_cpu, f.streaming_cpu
        ))?;
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn side(clients: &[Client], args: &BenchArgs) -> anyhow::Result<Side> {
    // The floor first: the runs it starts are completed by this side's throughput
    // phase, alike on every side.
    let mut floor_ids = Vec::new();
    for _ in 0..FLOOR_SAMPLES {
        floor_ids.push(
            clients[0]
                .start_run(DEFAULT_NAMESPACE, "bench-1", "floor", HashMap::new())
                .await?,
        );
    }
    let (_, write_p50) = rpc_floor(&clients[0], &floor_ids).await?;
    let t = throughput(clients, args, Duration::from_secs(args.timeout)).await?;
    Ok(Side {
        runs_per_s: t.completed as f64 / t.elapsed.as_secs_f64().max(1e-9),
        write_p50,
    })
}

/// Process CPU, in % of a core, over [`CPU_WINDOW`].
async fn cpu_percent() -> anyhow::Result<f64> {
    let pid = std::process::id();
    let (ticks0, at0) = (cpu_ticks(pid)?, Instant::now());
    tokio::time::sleep(CPU_WINDOW).await;
    let cpu_s = cpu_ticks(pid)?.saturating_sub(ticks0) as f64 / clock_ticks_per_second();
    Ok(100.0 * cpu_s / at0.elapsed().as_secs_f64().max(1e-9))
}

async fn compare(url: &str, args: &BenchArgs, streams: u32) -> anyhow::Result<Figures> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(Client::connect_with(url, opts.clone()).await?);
    }
    let idle = side(&clients, args).await?;

    // The steps: started, leased, then heartbeating (and appending output while
    // `appending`) until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let appending = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let leased = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for i in 0..streams {
        let client = clients[i as usize % clients.len()].clone();
        client
            .start_run(DEFAULT_NAMESPACE, "bench-stream", "stream", HashMap::new())
            .await?;
        let flags = Flags {
            stop: stop.clone(),
            appending: appending.clone(),
            sent: sent.clone(),
            leased: leased.clone(),
        };
        tasks.spawn(async move { stream_one(client, flags).await });
    }
    let started = Instant::now();
    while leased.load(Ordering::Relaxed) < u64::from(streams) {
        if started.elapsed() > Duration::from_secs(args.timeout) {
            bail!(
                "only {} of {streams} streaming steps were leased",
                leased.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let heartbeat_cpu = cpu_percent().await?;
    appending.store(true, Ordering::Relaxed);
    let streaming_cpu = cpu_percent().await?;
    // Baseline and streaming sides alternate (S B B S S B …), so the store's growth
    // and the machine's drift over the bench weigh on both alike.
    let (mut base, mut with) = (Vec::new(), Vec::new());
    for i in 0..2 * ROUNDS {
        let streaming = matches!(i % 4, 0 | 3);
        if appending.swap(streaming, Ordering::Relaxed) != streaming {
            // Let the switch settle (the steps' next appends, or the last flush).
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let measured = side(&clients, args).await?;
        if streaming {
            with.push(measured)
        } else {
            base.push(measured)
        }
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(Figures {
        idle,
        heartbeating: Side::median(&base),
        streaming: Side::median(&with),
        heartbeat_cpu,
        streaming_cpu,
        chunks: sent.load(Ordering::Relaxed),
    })
}

/// What a streaming step is told, and counts.
struct Flags {
    stop: Arc<AtomicBool>,
    appending: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    leased: Arc<AtomicU64>,
}

/// One streaming step: lease it, then heartbeat every second and, while
/// `appending`, append ten chunks every 200 ms, until `stop`; then complete it.
async fn stream_one(client: Client, flags: Flags) -> anyhow::Result<()> {
    let worker = StepWorker::new(client.clone(), DEFAULT_NAMESPACE, STREAM_QUEUE, "bench-streamer");
    let task = loop {
        if let Some(task) = worker.poll(Duration::from_secs(3)).await? {
            break task;
        }
    };
    flags.leased.fetch_add(1, Ordering::Relaxed);
    let piece = OutputChunk {
        kind: OutputKind::Text as i32,
        text: "token ".into(),
        ..Default::default()
    };
    let mut tick = tokio::time::interval(APPEND_EVERY);
    let mut n = 0u64;
    while !flags.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        if flags.appending.load(Ordering::Relaxed) {
            let req = AppendStepOutputRequest {
                task_token: task.task_token.clone(),
                identity: "bench-streamer".into(),
                chunks: vec![piece.clone(); CHUNKS_PER_APPEND],
            };
            if client.append_step_output(req).await.is_ok() {
                flags.sent.fetch_add(CHUNKS_PER_APPEND as u64, Ordering::Relaxed);
            }
        }
        n += 1;
        if n.is_multiple_of(5) {
            worker.heartbeat(&task.task_token).send().await?;
        }
    }
    worker
        .complete(&task.task_token, railyard_sdk::Completion::notes("streamed"))
        .await?;
    Ok(())
}
