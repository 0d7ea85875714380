//! `railyard bench --processes`: the run phases of `railyard bench` with the server,
//! the workers and the clients in separate processes, as they are deployed. It
//! starts `railyard server` (this binary, on a temporary data directory or on
//! `--store postgres://...`, free loopback ports, fsync on) and, for each phase,
//! worker and client processes (this binary's hidden `bench-process`, [`role`]),
//! which talk to the server over the SDK and report to the bench as JSON lines on
//! stdout. Every child is killed when its phase ends or fails, and by the kernel if
//! the bench dies ([`crate::child`]).
//!
//! The phases, in order:
//! 1. **one-step throughput**: `--workers` StepWorker loops over `--worker-processes`
//!    processes (one gRPC connection each, as a deployed worker has), and one starter
//!    process (`--starters` over `--connections`) starting `--runs` runs of `bench-1`;
//!    the figure is runs completed per second, from `go` to the last completion a
//!    worker reported.
//! 2. **three-step latency**: one worker loop in one process; one client process
//!    starts `--latency-runs` runs of `bench-3` one at a time and watches each to its
//!    close (`WatchRun`); the figure is start to `RunCompleted` as the client saw it.
//! 3. **three-step throughput**: the same closed loop at concurrency `--workers` with
//!    as many worker loops, `--runs` runs; runs per second and p50/p99.
//! 4. **floor**: with no worker running, one client process alternates a read RPC
//!    (DescribeRun) and a durable write RPC (StartRun) at concurrency 1; beside it,
//!    the server's own apply-and-commit time per batch (`railyard_commit_duration`
//!    from its `/metrics`), so the write RPC is measured against the commit it
//!    waits for.
//!
//! Beside each phase it reads the server's CPU time (`/proc/PID/stat`), and at the
//! end its resident memory (`/proc/PID/status`).

mod fleet;
mod report;
pub(crate) mod role;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_sdk::{Client, ConnectOptions};

use crate::output::Output;
use crate::schedules::{ServerStore, clock_ticks_per_second, cpu_ticks, spawn_server_on};
use crate::{BenchArgs, Memory, count_completed, percentile, write_workflows};
use fleet::{Fleet, Heard};
use role::Report;

/// Most floor samples.
const FLOOR_SAMPLES: u32 = 200;

/// What the bench's phases share.
struct Ctx {
    exe: PathBuf,
    /// Each server node's gRPC URL; the first leads.
    urls: Vec<String>,
    /// The server processes, one per node.
    pids: Vec<u32>,
    /// The namespace of the bench's runs: on a shared database one of this bench's
    /// own, so runs and tasks an earlier bench left behind are never leased or counted.
    namespace: String,
    /// How long one phase may take.
    timeout: Duration,
    ticks_per_s: f64,
    /// The leading node's `/metrics` (it is the one that commits).
    metrics_url: String,
}

impl Ctx {
    /// The server nodes' CPU time so far, in seconds, summed.
    fn cpu_s(&self) -> anyhow::Result<f64> {
        let mut ticks = 0;
        for &pid in &self.pids {
            ticks += cpu_ticks(pid)?;
        }
        Ok(ticks as f64 / self.ticks_per_s)
    }
}

/// `total` split into at most `parts` nearly equal shares, none empty.
fn shares(total: u32, parts: u32) -> Vec<u32> {
    let parts = parts.clamp(1, total.max(1));
    (0..parts)
        .map(|p| total / parts + u32::from(p < total % parts))
        .filter(|&s| s > 0)
        .collect()
}

fn role_args(role: &str, workflow: &str, runs: u32, more: &[(&str, u32)]) -> Vec<String> {
    let mut a = vec![
        role.to_string(),
        "--workflow".into(),
        workflow.into(),
        "--runs".into(),
        runs.to_string(),
    ];
    for (flag, value) in more {
        a.push(format!("--{flag}"));
        a.push(value.to_string());
    }
    a
}

/// Runs completed, as the worker processes report them. Each report is one
/// process's running count; a process's count is the highest it reported, whatever
/// the order its reports arrive in.
#[derive(Debug)]
struct Completions(Vec<u64>);

impl Completions {
    fn new(procs: usize) -> Self {
        Self(vec![0; procs])
    }

    /// Process `id` reported `runs` completed so far.
    fn heard(&mut self, id: usize, runs: u64) {
        if let Some(count) = self.0.get_mut(id) {
            *count = (*count).max(runs);
        }
    }

    fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// The one-step throughput phase's figures.
#[derive(Debug)]
struct OneStep {
    started: u64,
    start_errors: u64,
    completed: u64,
    worker_errors: u64,
    elapsed: Duration,
    cpu_s: f64,
}

/// A closed-loop phase's figures (three-step, at some concurrency).
#[derive(Debug)]
struct Closed {
    concurrency: u32,
    samples: Vec<Duration>,
    completed: u64,
    errors: u64,
    elapsed: Duration,
    cpu_s: f64,
}

/// The floor's figures: p50 of a read and of a durable write RPC, and beside the
/// writes the server's own time to apply and commit a batch.
#[derive(Debug)]
struct Floor {
    samples: usize,
    read_p50: Duration,
    write_p50: Duration,
    write_mean: Duration,
    /// Mean of `railyard_commit_duration` over the floor's commits (each holds one
    /// StartRun: nothing else writes meanwhile), and how many there were.
    commit_mean: Duration,
    commits: u64,
}

/// `railyard_commit_duration_seconds` sum and count from the server's `/metrics`.
/// Waits until the node at `http_addr` holds the database's writer lease. A node of
/// an earlier bench on the same database (killed with it) keeps the lease until it
/// expires; a node started meanwhile follows that dead leader, and every call to it
/// would fail.
async fn wait_leading(http_addr: &str) -> anyhow::Result<()> {
    const WITHIN: Duration = Duration::from_secs(90);
    let url = format!("http://{http_addr}/healthz");
    let start = Instant::now();
    let mut told = false;
    loop {
        let body = match reqwest::get(&url).await {
            Ok(r) => r.json::<serde_json::Value>().await.ok(),
            Err(_) => None,
        };
        if body
            .as_ref()
            .and_then(|b| b.get("lease_held"))
            .and_then(|h| h.as_bool())
            == Some(true)
        {
            return Ok(());
        }
        if start.elapsed() > WITHIN {
            bail!(
                "the first server node did not take the database's writer lease within {} s (another server on this database? give the bench a database of its own)",
                WITHIN.as_secs()
            );
        }
        if !told {
            tracing::info!(
                "waiting for the writer lease (a node of an earlier run on this database holds it until it expires)"
            );
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn commit_totals(url: &str) -> anyhow::Result<(f64, u64)> {
    let text = reqwest::get(url)
        .await
        .with_context(|| format!("cannot read {url}"))?
        .error_for_status()?
        .text()
        .await?;
    parse_commit_totals(&text).ok_or_else(|| anyhow!("no railyard_commit_duration_seconds in {url}"))
}

fn parse_commit_totals(metrics: &str) -> Option<(f64, u64)> {
    let value = |name: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
    };
    let sum = value("railyard_commit_duration_seconds_sum")?;
    let count = value("railyard_commit_duration_seconds_count")?;
    Some((sum, count as u64))
}

async fn one_step(ctx: &Ctx, args: &BenchArgs) -> anyhow::Result<OneStep> {
    let mut fleet = Fleet::new(ctx, "one-step throughput");
    let workers = fleet.workers(args.workers, args.worker_processes, true)?;
    let starter = fleet.spawn(
        "starter".into(),
        &role_args(
            "start",
            "bench-1",
            args.runs,
            &[("starters", args.starters), ("connections", args.connections)],
        ),
    )?;
    fleet.ready().await?;
    let cpu0 = ctx.cpu_s()?;
    let t0 = Instant::now();
    fleet.go(starter)?;
    let mut completions = Completions::new(fleet.procs.len());
    let (mut started, mut last, mut starter_closed) = (None, t0, false);
    loop {
        fleet.waiting_for = match started {
            None => format!("the starter's report, {} runs completed", completions.total()),
            Some((s, _)) => format!("{s} runs to complete, {} reported", completions.total()),
        };
        match fleet.hear().await? {
            (id, Heard::Report(Report::Completed { runs }), at) => {
                completions.heard(id, runs);
                last = at;
            }
            (
                id,
                Heard::Report(Report::Started {
                    started: s, errors, ..
                }),
                _,
            ) if id == starter => {
                started = Some((s, errors));
            }
            (id, Heard::Closed, _) if id == starter && started.is_some() => {
                fleet.reap(id).await?;
                starter_closed = true;
            }
            (id, heard, _) => return Err(fleet.unexpected(id, heard).await),
        }
        if let Some((s, _)) = started
            && completions.total() >= s
        {
            break;
        }
    }
    let cpu_s = ctx.cpu_s()? - cpu0;
    // The last completion may be heard before the starter's exit, which then waits
    // in the queue: heard here, not taken for a worker's by `stop_workers`.
    if !starter_closed {
        fleet.reap_after_close(starter).await?;
    }
    let (_, worker_errors) = fleet.stop_workers(&workers).await?;
    let (started, start_errors) = started.unwrap_or_default();
    Ok(OneStep {
        started,
        start_errors,
        completed: completions.total(),
        worker_errors,
        elapsed: last.saturating_duration_since(t0),
        cpu_s,
    })
}

/// `runs` runs of `bench-3`, `concurrency` at a time, with as many worker loops.
async fn closed_loop(ctx: &Ctx, args: &BenchArgs, runs: u32, concurrency: u32) -> anyhow::Result<Closed> {
    let phase = if concurrency == 1 {
        "three-step latency"
    } else {
        "three-step throughput"
    };
    let mut fleet = Fleet::new(ctx, phase);
    let workers = fleet.workers(concurrency, args.worker_processes, false)?;
    let connections = args.connections.min(concurrency);
    let driver = fleet.spawn(
        "driver".into(),
        &role_args(
            "drive",
            "bench-3",
            runs,
            &[("concurrency", concurrency), ("connections", connections)],
        ),
    )?;
    fleet.ready().await?;
    let cpu0 = ctx.cpu_s()?;
    fleet.go(driver)?;
    let report = fleet.result(driver).await?;
    let cpu_s = ctx.cpu_s()? - cpu0;
    let (_, worker_errors) = fleet.stop_workers(&workers).await?;
    let Report::Drove {
        samples_us,
        completed,
        errors,
        elapsed_us,
    } = report
    else {
        bail!("{phase}: the driver reported {report:?}");
    };
    let mut samples: Vec<_> = samples_us.into_iter().map(Duration::from_micros).collect();
    samples.sort();
    Ok(Closed {
        concurrency,
        samples,
        completed,
        errors: errors + worker_errors,
        elapsed: Duration::from_micros(elapsed_us),
        cpu_s,
    })
}

async fn floor(ctx: &Ctx, samples: u32) -> anyhow::Result<Floor> {
    let mut fleet = Fleet::new(ctx, "floor");
    let client = fleet.spawn(
        "floor client".into(),
        &role_args("floor", "bench-1", samples, &[]),
    )?;
    fleet.ready().await?;
    let before = commit_totals(&ctx.metrics_url).await?;
    fleet.go(client)?;
    let report = fleet.result(client).await?;
    let after = commit_totals(&ctx.metrics_url).await?;
    let commits = after.1.saturating_sub(before.1);
    let commit_mean = Duration::from_secs_f64((after.0 - before.0).max(0.0) / commits.max(1) as f64);
    match report {
        Report::Floor { read_us, write_us } => {
            let sorted = |v: Vec<u64>| {
                let mut v: Vec<_> = v.into_iter().map(Duration::from_micros).collect();
                v.sort();
                v
            };
            let (reads, writes) = (sorted(read_us), sorted(write_us));
            let write_mean =
                writes.iter().sum::<Duration>() / u32::try_from(writes.len().max(1)).unwrap_or(u32::MAX);
            Ok(Floor {
                samples: writes.len(),
                read_p50: percentile(&reads, 50.0),
                write_p50: percentile(&writes, 50.0),
                write_mean,
                commit_mean,
                commits,
            })
        }
        other => bail!("floor: the client reported {other:?}"),
    }
}

/// Everything the bench measured.
struct Figures {
    one_step: Option<OneStep>,
    latency: Option<Closed>,
    three_step: Option<Closed>,
    floor: Floor,
    /// Runs of `bench-1` and of `bench-3` COMPLETED by `ListRuns`.
    verified: (u64, u64),
    cpu_s: f64,
    memory: Option<Memory>,
}

/// Runs the bench (`railyard bench --processes`).
pub(crate) async fn run(output: Output, args: &BenchArgs) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-processes-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows = dir.path().join("workflows");
    write_workflows(&workflows)?;
    let data = dir.path().join("data");
    let (store, shown) = match &args.store {
        None => (ServerStore::Redb(&data), "redb (a temp directory)".to_string()),
        Some(url) => {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                bail!(
                    "--store: the bench takes a postgres://USER@HOST:PORT/DB URL; without --store it runs on redb in a temp directory"
                );
            }
            let store = ServerStore::Postgres {
                url,
                ca: args.store_ca.as_deref(),
                keys_dir: &data,
            };
            (store, railyard_store_postgres::redact(url))
        }
    };
    // The first node claims the writer lease before the others start: it leads.
    let mut servers = Vec::new();
    for _ in 0..args.nodes {
        let server = spawn_server_on(&store, &workflows, &[], &[])?;
        if servers.is_empty() && args.store.is_some() {
            wait_leading(&server.http_addr).await?;
        }
        servers.push(server);
    }
    let namespace = match args.store {
        None => DEFAULT_NAMESPACE.to_string(),
        Some(_) => format!("bench-{}", crate::timefmt::now_unix_ms()),
    };
    let ctx = Ctx {
        namespace,
        exe: std::env::current_exe().context("cannot find this binary to start the bench's processes")?,
        urls: servers.iter().map(|s| s.url.clone()).collect(),
        pids: servers.iter().map(|s| s.child.id()).collect(),
        timeout: Duration::from_secs(args.timeout),
        ticks_per_s: clock_ticks_per_second(),
        metrics_url: format!("http://{}/metrics", servers[0].http_addr),
    };
    tracing::info!(urls = ?ctx.urls, pids = ?ctx.pids, store = %shown, "bench server processes started");
    let client = Client::connect_with(
        &ctx.urls[0],
        ConnectOptions {
            request_timeout: Duration::from_secs(60),
            ..ConnectOptions::default()
        },
    )
    .await?;
    if ctx.namespace != DEFAULT_NAMESPACE {
        client
            .create_namespace(&ctx.namespace, "runs of one `railyard bench --processes`")
            .await
            .with_context(|| format!("cannot create the bench's namespace {}", ctx.namespace))?;
    }
    let loaded = client.list_workflows(&ctx.namespace).await?;
    for id in ["bench-1", "bench-3"] {
        if !loaded.workflows.iter().any(|w| w.id == id) {
            bail!("the server did not load bench workflow {id}");
        }
    }
    let cpu0 = ctx.cpu_s()?;
    let one_step = if args.runs > 0 {
        Some(one_step(&ctx, args).await?)
    } else {
        None
    };
    let latency = if args.latency_runs > 0 {
        Some(closed_loop(&ctx, args, args.latency_runs, 1).await?)
    } else {
        None
    };
    let three_step = if args.runs > 0 {
        Some(closed_loop(&ctx, args, args.runs, args.workers).await?)
    } else {
        None
    };
    let floor = floor(&ctx, args.latency_runs.clamp(10, FLOOR_SAMPLES)).await?;
    let figures = Figures {
        one_step,
        latency,
        three_step,
        floor,
        verified: (
            count_completed(&client, &ctx.namespace, "bench-1").await?,
            count_completed(&client, &ctx.namespace, "bench-3").await?,
        ),
        cpu_s: ctx.cpu_s()? - cpu0,
        memory: Memory::of(&ctx.pids[0].to_string()),
    };
    drop(servers);
    report::report(output, args, &shown, &figures)
}

#[cfg(test)]
mod tests {
    use super::report::thousands;
    use super::*;

    #[test]
    fn loops_are_shared_out_without_empty_processes() {
        assert_eq!(shares(32, 4), vec![8, 8, 8, 8]);
        assert_eq!(shares(5, 2), vec![3, 2]);
        assert_eq!(shares(2, 8), vec![1, 1]);
        assert_eq!(shares(1, 1), vec![1]);
    }

    #[test]
    fn a_late_lower_count_does_not_undo_a_higher_one() {
        // A worker's loops report concurrently: its 101st completion may be read
        // before its 100th.
        let mut c = Completions::new(2);
        c.heard(0, 101);
        c.heard(0, 100);
        c.heard(1, 5);
        assert_eq!(c.total(), 106);
    }

    #[test]
    fn reads_the_commit_duration_from_openmetrics_text() {
        let text = "# TYPE railyard_commit_duration_seconds histogram\n\
            railyard_commit_duration_seconds_sum 0.25\n\
            railyard_commit_duration_seconds_count 100\n\
            railyard_commit_duration_seconds_bucket{le=\"0.0001\"} 0\n";
        assert_eq!(parse_commit_totals(text), Some((0.25, 100)));
        assert_eq!(parse_commit_totals("railyard_commits_total 3\n"), None);
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(4_850.2), "4,850");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }
}
