//! `railyard bench --streams [N]`: what live output costs the durable path. On the
//! in-process server, the throughput phase and the write floor run twice: alone, and
//! while N steps (100 when N is omitted) each stream 50 chunks a second
//! (`AppendStepOutput`, ten chunks five times a second, heartbeating as a worker
//! does). Prints runs/s and the durable write RPC p50 of both and their ratio, and the
//! process's CPU while only the streams run (the bench's clients are in the same
//! process as the server, so it counts the streaming clients too: an upper bound).

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
use crate::client::global::GlobalOpts;
use crate::client::output;

/// The queue the streaming steps are leased from.
const STREAM_QUEUE: &str = "bench-stream";
/// Chunks per append, and appends per second: 50 chunks a second a step.
const CHUNKS_PER_APPEND: usize = 10;
const APPEND_EVERY: Duration = Duration::from_millis(200);
/// How long the CPU of the streams alone is measured.
const CPU_WINDOW: Duration = Duration::from_secs(10);

/// One side of the comparison.
struct Side {
    runs_per_s: f64,
    write_p50: Duration,
}

/// Runs the comparison and prints it.
pub(super) async fn run(global: &GlobalOpts, args: &BenchArgs, streams: u32) -> anyhow::Result<()> {
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
    let (alone, streaming, cpu_percent, chunks) = result?;
    let ratio = |a: f64, b: f64| if a > 0.0 { b / a } else { 0.0 };
    if global.output.is_json() {
        output::json(&json!({
            "streams": streams,
            "chunks_per_second_per_stream": 50,
            "chunks_sent": chunks,
            "without_streams": {"runs_per_second": alone.runs_per_s, "write_p50_ms": ms(alone.write_p50)},
            "with_streams": {"runs_per_second": streaming.runs_per_s, "write_p50_ms": ms(streaming.write_p50)},
            "runs_per_second_ratio": ratio(alone.runs_per_s, streaming.runs_per_s),
            "write_p50_ratio": ratio(ms(alone.write_p50), ms(streaming.write_p50)),
            "streams_cpu_percent": cpu_percent,
        }))?;
    } else {
        output::line(format!(
            "streams: {streams} steps × 50 chunks/s ({chunks} chunks sent)"
        ))?;
        output::line(format!(
            "without streams: {:.0} runs/s, durable write p50 {:.2} ms",
            alone.runs_per_s,
            ms(alone.write_p50)
        ))?;
        output::line(format!(
            "with streams:    {:.0} runs/s ({:.0}%), durable write p50 {:.2} ms ({:.0}%)",
            streaming.runs_per_s,
            100.0 * ratio(alone.runs_per_s, streaming.runs_per_s),
            ms(streaming.write_p50),
            100.0 * ratio(ms(alone.write_p50), ms(streaming.write_p50))
        ))?;
        output::line(format!(
            "CPU of the streams alone (server and streaming clients, one process): {cpu_percent:.0}% of a core"
        ))?;
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn side(clients: &[Client], args: &BenchArgs) -> anyhow::Result<Side> {
    // The floor first: the runs it starts are completed by this side's throughput
    // phase, alike on both sides.
    let mut floor_ids = Vec::new();
    for _ in 0..50 {
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

async fn compare(url: &str, args: &BenchArgs, streams: u32) -> anyhow::Result<(Side, Side, f64, u64)> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(Client::connect_with(url, opts.clone()).await?);
    }
    let alone = side(&clients, args).await?;

    // The streaming steps: started, leased, then streaming until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let leased = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for i in 0..streams {
        let client = clients[i as usize % clients.len()].clone();
        client
            .start_run(DEFAULT_NAMESPACE, "bench-stream", "stream", HashMap::new())
            .await?;
        let (stop, sent, leased) = (stop.clone(), sent.clone(), leased.clone());
        tasks.spawn(async move { stream_one(client, stop, sent, leased).await });
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
    let pid = std::process::id();
    let (ticks0, at0) = (cpu_ticks(pid)?, Instant::now());
    tokio::time::sleep(CPU_WINDOW).await;
    let cpu_s = cpu_ticks(pid)?.saturating_sub(ticks0) as f64 / clock_ticks_per_second();
    let cpu_percent = 100.0 * cpu_s / at0.elapsed().as_secs_f64().max(1e-9);

    let streaming = side(&clients, args).await?;
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok((alone, streaming, cpu_percent, sent.load(Ordering::Relaxed)))
}

/// One streaming step: lease it, then append ten chunks every 200 ms and heartbeat
/// every second until `stop`, then complete it.
async fn stream_one(
    client: Client,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    leased: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let worker = StepWorker::new(client.clone(), DEFAULT_NAMESPACE, STREAM_QUEUE, "bench-streamer");
    let task = loop {
        if let Some(task) = worker.poll(Duration::from_secs(3)).await? {
            break task;
        }
    };
    leased.fetch_add(1, Ordering::Relaxed);
    let piece = OutputChunk {
        kind: OutputKind::Text as i32,
        text: "token ".into(),
        ..Default::default()
    };
    let mut tick = tokio::time::interval(APPEND_EVERY);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let req = AppendStepOutputRequest {
            task_token: task.task_token.clone(),
            identity: "bench-streamer".into(),
            chunks: vec![piece.clone(); CHUNKS_PER_APPEND],
        };
        if client.append_step_output(req).await.is_ok() {
            sent.fetch_add(CHUNKS_PER_APPEND as u64, Ordering::Relaxed);
        }
        n += 1;
        if n.is_multiple_of(5) {
            worker
                .heartbeat(&task.task_token, Vec::new(), Vec::new(), 0)
                .await?;
        }
    }
    worker
        .complete(&task.task_token, railyard_sdk::Completion::notes("streamed"))
        .await?;
    Ok(())
}
