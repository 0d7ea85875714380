//! `railyard bench`: throughput and latency of a real server, in-process, over real
//! gRPC on loopback, with durable (fsync'd) commits, on a temporary data directory.
//!
//! - Throughput: `--workers` concurrent `StepWorker` loops (poll, complete) and
//!   `--starters` concurrent starters drive `--runs` runs of the one-step `bench-1`
//!   workflow; the figure is runs completed per second, checked with `ListRuns`.
//! - Latency: one worker and one starter at concurrency 1 drive `--latency-runs` runs
//!   of the three-step `bench-3` workflow; the figure is start-to-completed p50/p99.
//!
//! The client side spreads over `--connections` gRPC channels so it is not the bottleneck.
//!
//! `--store postgres://...` runs the in-process server on that database instead of
//! redb in the temp directory.
//!
//! `--schedules N` runs the schedule bench instead ([`schedules`]),
//! `--webhooks N` the webhook bench ([`webhooks`]), `--fanout N` the
//! child-run fan-out bench ([`fanout`]), `--agents N` the long-agent-step heartbeat
//! bench ([`agents`]), `--processes` the same run phases with the server, the
//! workers and the clients in separate processes ([`processes`]), `--preload N` the
//! calls that must not slow down as closed runs pile up ([`preload`]), `--soak
//! DURATION` steady load on Postgres, with `--hold-transaction` under a long
//! transaction ([`soak`]).
//!
//! This crate is the binary's `railyard bench`: the binary flattens [`BenchArgs`]
//! into its `bench` command, calls [`run`], and dispatches the hidden commands the
//! benches re-execute it with ([`AGENT_COMMAND`], [`PROCESS_COMMAND`]). Its errors
//! are `anyhow`, as at the binary's edge: no crate but the binary may depend on it
//! (`.ci/layers.py`).

mod agents;
mod args;
mod child;
mod fanout;
mod output;
mod preload;
mod processes;
mod schedules;
mod soak;
mod store;
mod streams;
mod timefmt;
mod webhooks;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_proto::v1::{ListRunsRequest, RunStatus, StepTask};
use railyard_sdk::{Client, Completion, ConnectOptions, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

pub use agents::client::{AgentClientArgs, run as run_agent_client};
pub use args::BenchArgs;
pub use output::Output;
pub use processes::role::{Role as ProcessRole, run as run_process_role};

use crate::timefmt::human_duration;

/// The hidden command of the binary that runs one client process of `--agents`
/// ([`run_agent_client`] with its [`AgentClientArgs`]): the bench re-executes the
/// binary it runs in with it.
pub const AGENT_COMMAND: &str = "bench-agent";
/// The hidden command of the binary that runs one worker or client process of
/// `--processes` ([`run_process_role`] with its [`ProcessRole`]).
pub const PROCESS_COMMAND: &str = "bench-process";

/// The task queue the bench workflows' steps land on (the server's default queue).
pub(crate) const QUEUE: &str = "default";
/// How long one worker poll waits; also how long stopping the workers can take.
/// Long enough for the server to hand a new step straight to a parked poll (sync match).
const POLL_WAIT: Duration = Duration::from_secs(3);

/// The throughput phase's figures.
#[derive(Debug)]
struct Throughput {
    completed: u64,
    elapsed: Duration,
    starts_elapsed: Duration,
    verified_completed: u64,
    start_errors: u64,
    worker_errors: u64,
}

/// The latency phase's figures.
#[derive(Debug)]
struct Latency {
    samples: Vec<Duration>,
    verified_completed: u64,
    /// p50 of one read RPC (DescribeRun) and of one durable write RPC (StartRun).
    read_p50: Duration,
    write_p50: Duration,
    /// p50 of a heartbeat carrying token usage (a durable write that adds to the
    /// step's and run's totals); zero when no step could be leased for it.
    heartbeat_p50: Duration,
}

/// Runs the bench `args` ask for and prints its settings and figures as `output`
/// says. The benches with child processes start them from the running binary
/// ([`AGENT_COMMAND`], [`PROCESS_COMMAND`], `railyard server`).
pub async fn run(output: Output, args: BenchArgs) -> anyhow::Result<()> {
    if args.store.is_some() && (args.schedules.is_some() || args.webhooks.is_some() || args.fanout.is_some())
    {
        bail!("--store goes with the run phases only (not --schedules, --webhooks, --fanout)");
    }
    if let Some(count) = args.schedules {
        return schedules::run(output, &args, count).await;
    }
    if let Some(count) = args.webhooks {
        return webhooks::run(output, &args, count).await;
    }
    if let Some(count) = args.fanout {
        return fanout::run(output, &args, count).await;
    }
    if let Some(count) = args.agents {
        return agents::run(output, &args, count).await;
    }
    if let Some(count) = args.streams {
        return streams::run(output, &args, count).await;
    }
    if args.processes {
        return processes::run(output, &args).await;
    }
    if let Some(closed) = args.preload {
        return preload::run(output, &args, closed).await;
    }
    if let Some(duration) = args.soak.soak {
        return soak::run(output, &args, duration).await;
    }
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows_dir = dir.path().join("workflows");
    write_workflows(&workflows_dir)?;
    let mut config = ServerConfig::new(dir.path().join("data"), workflows_dir);
    config.grpc_listen = ([127, 0, 0, 1], 0).into();
    config.http_listen = ([127, 0, 0, 1], 0).into();
    let (config, store) = with_bench_store(config, &args).await?;
    let server = RunningServer::start(config)
        .await
        .context("cannot start the in-process server")?;
    let url = format!("http://{}", server.grpc_addr);
    tracing::info!(%url, data = %dir.path().display(), %store, "bench server started");
    let result = measure(&url, &args).await;
    // The server is in this process, with the bench's clients and workers.
    let memory = Memory::of("self");
    server.shutdown().await;
    let (throughput, latency) = result?;
    let ran = Ran {
        url: &url,
        store: &store,
    };
    report(output, &args, ran, throughput.as_ref(), latency.as_ref(), memory)?;
    Ok(())
}

/// Where the bench's server ran.
#[derive(Debug, Clone, Copy)]
struct Ran<'a> {
    url: &'a str,
    /// The store as it may be shown.
    store: &'a str,
}

/// `config` on the database `--store` names (opened here, as `railyard server` opens
/// it), and the store as it may be shown; redb in the temp directory without it.
async fn with_bench_store(config: ServerConfig, args: &BenchArgs) -> anyhow::Result<(ServerConfig, String)> {
    match &args.store {
        None => Ok((config, "redb (a temp directory)".into())),
        Some(url) => store::open(config, url, args.store_ca.as_deref()).await,
    }
}

/// Run `n`'s goal: `run N` and `words` words of a 2,000-word vocabulary, spread
/// over it as a multiplicative hash of (n, i) spreads them.
fn bench_goal(n: u32, words: u32) -> String {
    let mut goal = format!("run {n}");
    for i in 0..words {
        let k = (u64::from(n) * 2_654_435_761 + u64::from(i) * 40_503) % 2_000;
        goal.push_str(&format!(" w{k}"));
    }
    goal
}

/// Writes the `bench-1` (one step) and `bench-3` (three steps) definitions.
pub(crate) fn write_workflows(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (id, steps) in [("bench-1", 1), ("bench-3", 3)] {
        let steps: Vec<_> = (1..=steps)
            .map(|i| json!({ "id": format!("step-{i}"), "title": format!("Step {i}"), "prompt": "Bench: {{goal}}" }))
            .collect();
        let def = json!({
            "id": id,
            "version": "1",
            "name": format!("Bench workflow {id}"),
            "description": "Written by `railyard bench`; its steps are completed at once.",
            "steps": steps,
        });
        let path = dir.join(format!("{id}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&def)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

async fn measure(url: &str, args: &BenchArgs) -> anyhow::Result<(Option<Throughput>, Option<Latency>)> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(Client::connect_with(url, opts.clone()).await?);
    }
    let loaded = clients[0].list_workflows(DEFAULT_NAMESPACE).await?;
    for id in ["bench-1", "bench-3"] {
        if !loaded.workflows.iter().any(|w| w.id == id) {
            let why: Vec<_> = loaded.invalid.iter().map(|i| i.error.clone()).collect();
            bail!("the server did not load bench workflow {id}: {}", why.join("; "));
        }
    }
    let deadline = Duration::from_secs(args.timeout);
    let throughput = if args.runs > 0 {
        Some(throughput(&clients, args, deadline).await?)
    } else {
        None
    };
    let latency = if args.latency_runs > 0 {
        Some(latency(&clients, args.latency_runs, deadline).await?)
    } else {
        None
    };
    Ok((throughput, latency))
}

/// Runs one in-process worker: poll, complete at once (taking the run's next step
/// eagerly when the server hands it back), until `stop` is set.
/// `on_completed` sees each completed task and the moment its completion was acknowledged.
pub(crate) async fn work(
    worker: StepWorker,
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
    mut on_completed: impl FnMut(StepTask, Instant),
) {
    while !stop.load(Ordering::Relaxed) {
        let mut task = match worker.poll(POLL_WAIT).await {
            Ok(Some(task)) => task,
            Ok(None) => continue,
            Err(e) => {
                errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "bench poll failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Eager dispatch: each completion may hand back the run's next step.
        loop {
            match worker
                .complete_and_take_next(&task.task_token, Completion::notes("ok"))
                .await
            {
                Ok(next) => {
                    on_completed(task, Instant::now());
                    match next {
                        Some(next) => task = next,
                        None => break,
                    }
                }
                Err(e) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "bench complete failed");
                    break;
                }
            }
        }
    }
}

async fn throughput(clients: &[Client], args: &BenchArgs, deadline: Duration) -> anyhow::Result<Throughput> {
    let stop = Arc::new(AtomicBool::new(false));
    let worker_errors = Arc::new(AtomicU64::new(0));
    let completed = Arc::new(AtomicU64::new(0));
    // Nanoseconds after `base` of the latest acknowledged completion.
    let base = Instant::now();
    let last_completion = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    for i in 0..args.workers as usize {
        let client = clients[i % clients.len()].clone();
        let worker = StepWorker::new(client, DEFAULT_NAMESPACE, QUEUE, &format!("bench-{i}"));
        let (completed, last_completion) = (completed.clone(), last_completion.clone());
        workers.spawn(work(worker, stop.clone(), worker_errors.clone(), move |_, at| {
            completed.fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from((at - base).as_nanos()).unwrap_or(u64::MAX);
            last_completion.fetch_max(nanos, Ordering::Relaxed);
        }));
    }
    // Let the workers park their polls before the clock starts.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let next = Arc::new(AtomicU32::new(0));
    let start_errors = Arc::new(AtomicU64::new(0));
    let mut starters = JoinSet::new();
    let t0 = Instant::now();
    for i in 0..args.starters as usize {
        let client = clients[(i + 1) % clients.len()].clone();
        let (next, start_errors, runs) = (next.clone(), start_errors.clone(), args.runs);
        let goal_words = args.goal_words;
        starters.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= runs {
                    break;
                }
                let goal = bench_goal(n, goal_words);
                if let Err(e) = client
                    .start_run(DEFAULT_NAMESPACE, "bench-1", &goal, HashMap::new())
                    .await
                {
                    start_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "bench start failed");
                }
            }
        });
    }
    let mut starts_elapsed = None;
    let outcome = loop {
        while starters.try_join_next().is_some() {}
        if starts_elapsed.is_none() && starters.is_empty() {
            starts_elapsed = Some(t0.elapsed());
        }
        let started = u64::from(args.runs) - start_errors.load(Ordering::Relaxed);
        if starts_elapsed.is_some() && completed.load(Ordering::Relaxed) >= started {
            break Ok(());
        }
        if t0.elapsed() > deadline {
            break Err(anyhow!(
                "throughput phase timed out after {}s with {} of {} runs completed",
                deadline.as_secs(),
                completed.load(Ordering::Relaxed),
                args.runs
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    stop.store(true, Ordering::Relaxed);
    starters.abort_all();
    while workers.join_next().await.is_some() {}
    outcome?;

    let last = base + Duration::from_nanos(last_completion.load(Ordering::Relaxed));
    let elapsed = last.checked_duration_since(t0).unwrap_or_else(|| t0.elapsed());
    Ok(Throughput {
        completed: completed.load(Ordering::Relaxed),
        elapsed,
        starts_elapsed: starts_elapsed.unwrap_or(elapsed),
        verified_completed: count_completed(&clients[0], DEFAULT_NAMESPACE, "bench-1").await?,
        start_errors: start_errors.load(Ordering::Relaxed),
        worker_errors: worker_errors.load(Ordering::Relaxed),
    })
}

/// How many runs of `workflow` `ListRuns` reports as COMPLETED.
pub(crate) async fn count_completed(client: &Client, ns: &str, workflow: &str) -> anyhow::Result<u64> {
    let mut total = 0;
    let mut page_token = String::new();
    loop {
        let resp = client
            .list_runs(ListRunsRequest {
                namespace: ns.into(),
                status: RunStatus::Completed as i32,
                workflow_id: workflow.into(),
                page_size: 1000,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await?;
        total += resp.runs.len() as u64;
        if resp.next_page_token.is_empty() {
            return Ok(total);
        }
        page_token = resp.next_page_token;
    }
}

async fn latency(clients: &[Client], runs: u32, deadline: Duration) -> anyhow::Result<Latency> {
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Instant)>();
    let client = clients[1 % clients.len()].clone();
    let worker = StepWorker::new(client, DEFAULT_NAMESPACE, QUEUE, "bench-latency");
    let errors = Arc::new(AtomicU64::new(0));
    let worker_task = tokio::spawn(work(worker, stop.clone(), errors, move |task, at| {
        if task.step_index + 1 >= task.step_count {
            let _ = done_tx.send((task.run_id, at));
        }
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;

    let client = &clients[0];
    let phase_start = Instant::now();
    let mut samples = Vec::with_capacity(runs as usize);
    let mut run_ids = Vec::with_capacity(runs as usize);
    let outcome: anyhow::Result<()> = async {
        for n in 0..runs {
            let t0 = Instant::now();
            let run_id = client
                .start_run(
                    DEFAULT_NAMESPACE,
                    "bench-3",
                    &format!("latency {n}"),
                    HashMap::new(),
                )
                .await?;
            let left = deadline.saturating_sub(phase_start.elapsed());
            let end = loop {
                let (id, at) = tokio::time::timeout(left, done_rx.recv())
                    .await
                    .map_err(|_| anyhow!("latency phase timed out waiting for run {run_id}"))?
                    .ok_or_else(|| anyhow!("the latency worker stopped"))?;
                if id == run_id {
                    break at;
                }
            };
            samples.push(end - t0);
            run_ids.push(run_id);
        }
        Ok(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let _ = worker_task.await;
    outcome?;

    let mut verified_completed = 0;
    for id in &run_ids {
        let run = client.describe_run(DEFAULT_NAMESPACE, id).await?.run;
        if run.is_some_and(|r| r.status == RunStatus::Completed as i32) {
            verified_completed += 1;
        }
    }
    let (read_p50, write_p50) = rpc_floor(client, &run_ids).await?;
    let heartbeat_p50 = heartbeat_floor(client, run_ids.len().min(200)).await?;
    Ok(Latency {
        samples,
        verified_completed,
        read_p50,
        write_p50,
        heartbeat_p50,
    })
}

/// The floor under the latency figure: p50 of a read RPC and of a durable write
/// RPC at concurrency 1. A three-step run costs four writes: the start (whose first
/// step is leased to the parked poll in the same commit) and three completions (each
/// taking the next step by eager dispatch).
async fn rpc_floor(client: &Client, run_ids: &[String]) -> anyhow::Result<(Duration, Duration)> {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for id in run_ids.iter().take(200) {
        let t0 = Instant::now();
        client.describe_run(DEFAULT_NAMESPACE, id).await?;
        reads.push(t0.elapsed());
        let t0 = Instant::now();
        client
            .start_run(DEFAULT_NAMESPACE, "bench-1", "floor", HashMap::new())
            .await?;
        writes.push(t0.elapsed());
    }
    reads.sort();
    writes.sort();
    Ok((percentile(&reads, 50.0), percentile(&writes, 50.0)))
}

/// p50 of `n` heartbeats with a growing token usage on one leased step (one the
/// floor's starts left queued), at concurrency 1: the heartbeat is the call a worker
/// makes every model turn.
async fn heartbeat_floor(client: &Client, n: usize) -> anyhow::Result<Duration> {
    let worker = StepWorker::new(client.clone(), DEFAULT_NAMESPACE, QUEUE, "bench-heartbeat");
    let Some(task) = worker.poll(Duration::from_secs(1)).await? else {
        return Ok(Duration::ZERO);
    };
    let mut beats = Vec::with_capacity(n);
    for i in 1..=n as u64 {
        let usage = railyard_proto::v1::TokenUsage {
            input_tokens: 1000 * i,
            output_tokens: 100 * i,
            cache_read_tokens: 5000 * i,
            cache_write_tokens: 0,
            cost_usd: 0.001 * i as f64,
        };
        let t0 = Instant::now();
        worker
            .heartbeat(&task.task_token)
            .usage(usage, "bench-model")
            .send()
            .await?;
        beats.push(t0.elapsed());
    }
    beats.sort();
    Ok(percentile(&beats, 50.0))
}

/// A process's memory from `/proc/<pid>/status`: resident now (`VmRSS`) and its
/// peak (`VmHWM`), in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

impl Memory {
    /// The memory of process `pid` (`"self"` for this one); `None` where there is no
    /// `/proc` (not Linux) or it cannot be read.
    pub(crate) fn of(pid: &str) -> Option<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        Self::parse(&text)
    }

    fn parse(status: &str) -> Option<Self> {
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        Some(Self {
            rss_kib: kib("VmRSS:")?,
            peak_kib: kib("VmHWM:")?,
        })
    }

    /// As JSON: `{"rss_mib": .., "peak_rss_mib": ..}`.
    pub(crate) fn json(&self) -> serde_json::Value {
        json!({ "rss_mib": self.rss_kib as f64 / 1024.0, "peak_rss_mib": self.peak_kib as f64 / 1024.0 })
    }

    /// As a human line's end: `RSS 41.2 MiB (peak 57.0 MiB)`.
    pub(crate) fn line(&self) -> String {
        format!(
            "RSS {:.1} MiB (peak {:.1} MiB)",
            self.rss_kib as f64 / 1024.0,
            self.peak_kib as f64 / 1024.0
        )
    }
}

/// The `p`th percentile (nearest rank) of sorted samples.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn report(
    output: Output,
    args: &BenchArgs,
    Ran { url, store }: Ran<'_>,
    throughput: Option<&Throughput>,
    latency: Option<&Latency>,
    memory: Option<Memory>,
) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut sorted = latency.map(|l| l.samples.clone()).unwrap_or_default();
    sorted.sort();
    let mean = if sorted.is_empty() {
        Duration::ZERO
    } else {
        sorted.iter().sum::<Duration>() / u32::try_from(sorted.len()).unwrap_or(u32::MAX)
    };
    let rate = |t: &Throughput| t.completed as f64 / t.elapsed.as_secs_f64().max(1e-9);

    if output.is_json() {
        let value = json!({
            "settings": {
                "runs": args.runs, "workers": args.workers, "starters": args.starters, "goal_words": args.goal_words,
                "connections": args.connections, "latency_runs": args.latency_runs,
                "cores": cores, "fsync": true, "server": url, "store": store,
            },
            "throughput": throughput.map(|t| json!({
                "completed": t.completed, "verified_completed": t.verified_completed,
                "elapsed_s": t.elapsed.as_secs_f64(), "starts_elapsed_s": t.starts_elapsed.as_secs_f64(),
                "runs_per_second": rate(t), "start_errors": t.start_errors, "worker_errors": t.worker_errors,
            })),
            "latency": latency.map(|l| json!({
                "samples": l.samples.len(), "verified_completed": l.verified_completed,
                "p50_ms": ms(percentile(&sorted, 50.0)), "p90_ms": ms(percentile(&sorted, 90.0)),
                "p99_ms": ms(percentile(&sorted, 99.0)), "max_ms": ms(percentile(&sorted, 100.0)),
                "mean_ms": ms(mean),
                "read_rpc_p50_ms": ms(l.read_p50), "write_rpc_p50_ms": ms(l.write_p50),
                "heartbeat_rpc_p50_ms": ms(l.heartbeat_p50),
            })),
            "process_memory": memory.map(|m| m.json()),
        });
        output::json(&value)?;
        return Ok(());
    }
    let mut lines = vec![
        format!("railyard bench: in-process server at {url}, real gRPC over loopback"),
        "settings".to_string(),
        format!(
            "  runs          {} x bench-1 (1 step), goals of {} words",
            args.runs,
            args.goal_words + 2
        ),
        format!("  workers       {} in-process StepWorker loops", args.workers),
        format!(
            "  clients       {} gRPC connections, {} concurrent starters",
            args.connections, args.starters
        ),
        format!(
            "  latency runs  {} x bench-3 (3 steps), concurrency 1",
            args.latency_runs
        ),
        format!("  cores         {cores}"),
        "  fsync         on (every acknowledged write is durable)".to_string(),
        format!("  store         {store}"),
    ];
    if let Some(t) = throughput {
        lines.push("throughput (bench-1)".to_string());
        lines.push(format!(
            "  completed     {} runs ({} COMPLETED by ListRuns)",
            t.completed, t.verified_completed
        ));
        lines.push(format!(
            "  elapsed       {} (all starts acknowledged after {})",
            human_duration(t.elapsed),
            human_duration(t.starts_elapsed)
        ));
        lines.push(format!("  rate          {:.0} runs/s", rate(t)));
        if t.start_errors + t.worker_errors > 0 {
            lines.push(format!(
                "  errors        {} starts, {} polls/completions",
                t.start_errors, t.worker_errors
            ));
        }
    }
    if let Some(l) = latency {
        lines.push("latency (bench-3, start to completed, concurrency 1)".to_string());
        lines.push(format!(
            "  runs          {} ({} COMPLETED by DescribeRun)",
            l.samples.len(),
            l.verified_completed
        ));
        for (label, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)] {
            lines.push(format!(
                "  {label:<12}  {}",
                human_duration(percentile(&sorted, p))
            ));
        }
        lines.push(format!("  mean          {}", human_duration(mean)));
        lines.push(format!(
            "  floor         read RPC p50 {}, durable write RPC p50 {}; a 3-step run is 4 writes",
            human_duration(l.read_p50),
            human_duration(l.write_p50)
        ));
        lines.push(format!(
            "  heartbeat     RPC p50 {} (with token usage: the call a worker makes every model turn)",
            human_duration(l.heartbeat_p50)
        ));
    }
    if let Some(m) = memory {
        lines.push(format!(
            "memory        {} (server, workers and clients in one process)",
            m.line()
        ));
    }
    for text in lines {
        output::line(text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
