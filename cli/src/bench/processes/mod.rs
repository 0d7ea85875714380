//! `railyard bench --processes`: the run phases of `railyard bench` with the server,
//! the workers and the clients in separate processes, as they are deployed. It
//! starts `railyard server` (this binary, on a temporary data directory or on
//! `--store postgres://...`, free loopback ports, fsync on) and, for each phase,
//! worker and client processes (this binary's hidden `bench-process`, [`role`]),
//! which talk to the server over the SDK and report to the bench as JSON lines on
//! stdout. Every child is killed when its phase ends or fails, and by the kernel if
//! the bench dies ([`crate::bench::child`]).
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

pub(crate) mod role;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_sdk::{Client, ConnectOptions};
use serde_json::json;
use tokio::sync::mpsc;

use crate::bench::child::{Reaped, die_with_parent};
use crate::bench::schedules::{ServerStore, clock_ticks_per_second, cpu_ticks, spawn_server_on};
use crate::bench::{BenchArgs, Memory, count_completed, percentile, write_workflows};
use crate::client::global::GlobalOpts;
use crate::client::output;
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

/// A line a child wrote, or its end.
enum Heard {
    Report(Report),
    /// A line that is no report (a child's bug), as written.
    Garbled(String),
    /// Its stdout closed: it exited, or is about to.
    Closed,
}

/// One child of a phase.
struct Proc {
    name: String,
    child: Reaped,
    /// Its cue: a line means go, closing it means stop.
    stdin: Option<ChildStdin>,
}

/// The children of one phase; dropping it kills any left.
struct Fleet<'a> {
    ctx: &'a Ctx,
    procs: Vec<Proc>,
    tx: mpsc::UnboundedSender<(usize, Heard, Instant)>,
    rx: mpsc::UnboundedReceiver<(usize, Heard, Instant)>,
    deadline: Instant,
    phase: &'static str,
}

impl<'a> Fleet<'a> {
    fn new(ctx: &'a Ctx, phase: &'static str) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            ctx,
            procs: Vec::new(),
            tx,
            rx,
            deadline: Instant::now() + ctx.timeout,
            phase,
        }
    }

    /// Starts `bench-process ROLE ARGS... --server URL`, the nodes taken in turn;
    /// its lines go to [`Self::hear`].
    fn spawn(&mut self, name: String, role_args: &[String]) -> anyhow::Result<usize> {
        let url = &self.ctx.urls[self.procs.len() % self.ctx.urls.len()];
        let mut cmd = Command::new(&self.ctx.exe);
        die_with_parent(&mut cmd)
            .arg("bench-process")
            .args(role_args)
            .args(["--server", url, "--namespace", &self.ctx.namespace])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = Reaped(
            cmd.spawn()
                .with_context(|| format!("cannot start the {name} process"))?,
        );
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout of {name}"))?;
        let stdin = child.stdin.take();
        let id = self.procs.len();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let heard = match serde_json::from_str(&line) {
                    Ok(report) => Heard::Report(report),
                    Err(_) => Heard::Garbled(line),
                };
                if tx.send((id, heard, Instant::now())).is_err() {
                    return;
                }
            }
            let _ = tx.send((id, Heard::Closed, Instant::now()));
        });
        self.procs.push(Proc { name, child, stdin });
        Ok(id)
    }

    /// The next line any child wrote, with when it was read.
    async fn hear(&mut self) -> anyhow::Result<(usize, Heard, Instant)> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, self.rx.recv()).await {
            Ok(Some(heard)) => Ok(heard),
            Ok(None) => bail!("{}: every child's output closed", self.phase),
            Err(_) => bail!(
                "{} phase timed out after {}s (--timeout)",
                self.phase,
                self.ctx.timeout.as_secs()
            ),
        }
    }

    /// Waits for every child to report [`Report::Ready`].
    async fn ready(&mut self) -> anyhow::Result<()> {
        let mut waiting = self.procs.len();
        while waiting > 0 {
            match self.hear().await? {
                (_, Heard::Report(Report::Ready), _) => waiting -= 1,
                (id, heard, _) => return Err(self.unexpected(id, heard).await),
            }
        }
        Ok(())
    }

    fn go(&mut self, id: usize) -> anyhow::Result<()> {
        let p = &mut self.procs[id];
        let stdin = p
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("{} was stopped", p.name))?;
        writeln!(stdin, "go")
            .and_then(|()| stdin.flush())
            .with_context(|| format!("cannot cue {}", p.name))
    }

    /// Waits for child `id` to exit after its output closed; an error unless it succeeded.
    async fn reap(&mut self, id: usize) -> anyhow::Result<()> {
        loop {
            let p = &mut self.procs[id];
            if let Some(status) = p.child.try_wait()? {
                if !status.success() {
                    bail!("{}: the {} process failed ({status})", self.phase, p.name);
                }
                return Ok(());
            }
            if Instant::now() > self.deadline {
                bail!("{}: the {} process did not exit", self.phase, p.name);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The error for a line or an end a phase did not expect.
    async fn unexpected(&mut self, id: usize, heard: Heard) -> anyhow::Error {
        let name = self.procs[id].name.clone();
        match heard {
            Heard::Closed => match self.reap(id).await {
                Err(e) => e,
                Ok(()) => anyhow!("{}: the {name} process exited early", self.phase),
            },
            Heard::Garbled(line) => anyhow!("{}: the {name} process wrote {line:?}", self.phase),
            Heard::Report(r) => anyhow!("{}: unexpected report from the {name} process: {r:?}", self.phase),
        }
    }

    /// Waits for child `id`'s one report and its exit.
    async fn result(&mut self, id: usize) -> anyhow::Result<Report> {
        loop {
            match self.hear().await? {
                (from, Heard::Report(r), _) if from == id => {
                    self.reap_after_close(id).await?;
                    return Ok(r);
                }
                // A worker's run reports come with any phase's.
                (_, Heard::Report(Report::Completed { .. }), _) => {}
                (from, heard, _) => return Err(self.unexpected(from, heard).await),
            }
        }
    }

    async fn reap_after_close(&mut self, id: usize) -> anyhow::Result<()> {
        loop {
            match self.hear().await? {
                (from, Heard::Closed, _) if from == id => return self.reap(id).await,
                (_, Heard::Report(Report::Completed { .. }), _) => {}
                (from, heard, _) => return Err(self.unexpected(from, heard).await),
            }
        }
    }

    /// Stops the worker processes `ids` (closing their stdin) and sums what they
    /// report: steps completed, failed calls.
    async fn stop_workers(&mut self, ids: &[usize]) -> anyhow::Result<(u64, u64)> {
        for &id in ids {
            self.procs[id].stdin = None;
        }
        let (mut steps, mut errors, mut left) = (0, 0, ids.len());
        while left > 0 {
            match self.hear().await? {
                (_, Heard::Report(Report::Worker { steps: s, errors: e }), _) => {
                    steps += s;
                    errors += e;
                }
                (_, Heard::Report(Report::Completed { .. }), _) => {}
                (id, Heard::Closed, _) if ids.contains(&id) => {
                    self.reap(id).await?;
                    left -= 1;
                }
                (id, heard, _) => return Err(self.unexpected(id, heard).await),
            }
        }
        Ok((steps, errors))
    }

    /// Starts worker processes with `loops` StepWorker loops in all.
    fn workers(&mut self, loops: u32, processes: u32, report_runs: bool) -> anyhow::Result<Vec<usize>> {
        let mut ids = Vec::new();
        for (i, share) in shares(loops, processes).into_iter().enumerate() {
            let mut a = vec!["worker".to_string(), "--loops".into(), share.to_string()];
            if report_runs {
                a.push("--report-runs".into());
            }
            ids.push(self.spawn(format!("worker {}", i + 1), &a)?);
        }
        Ok(ids)
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
    let mut per_worker = vec![0u64; fleet.procs.len()];
    let (mut started, mut last, mut starter_closed) = (None, t0, false);
    loop {
        match fleet.hear().await? {
            (id, Heard::Report(Report::Completed { runs }), at) => {
                per_worker[id] = runs;
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
            && per_worker.iter().sum::<u64>() >= s
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
        completed: per_worker.iter().sum(),
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
pub(crate) async fn run(global: &GlobalOpts, args: &BenchArgs) -> anyhow::Result<()> {
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
        Some(_) => format!("bench-{}", crate::client::timefmt::now_unix_ms()),
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
    report(global, args, &shown, &figures)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// The write RPC's mean over the mean commit under it.
fn write_per_commit(f: &Floor) -> f64 {
    f.write_mean.as_secs_f64() / f.commit_mean.as_secs_f64().max(1e-9)
}

/// `n` rounded, with thousands separated by commas.
fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn rate(runs: u64, elapsed: Duration) -> f64 {
    runs as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// Server CPU per run, in microseconds.
fn cpu_per_run_us(cpu_s: f64, runs: u64) -> f64 {
    cpu_s * 1e6 / runs.max(1) as f64
}

fn report(global: &GlobalOpts, args: &BenchArgs, store: &str, f: &Figures) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = shares(args.workers, args.worker_processes).len();
    let closed_json = |c: &Closed| {
        json!({
            "runs": c.samples.len(), "concurrency": c.concurrency, "completed": c.completed,
            "errors": c.errors, "elapsed_s": c.elapsed.as_secs_f64(),
            "runs_per_second": rate(c.samples.len() as u64, c.elapsed),
            "p50_ms": ms(percentile(&c.samples, 50.0)), "p99_ms": ms(percentile(&c.samples, 99.0)),
            "max_ms": ms(percentile(&c.samples, 100.0)),
            "server_cpu_s": c.cpu_s,
            "server_cpu_per_run_us": cpu_per_run_us(c.cpu_s, c.samples.len() as u64),
        })
    };
    if global.output.is_json() {
        output::json(&json!({
            "settings": {
                "shape": "processes", "runs": args.runs, "workers": args.workers,
                "worker_processes": workers, "starters": args.starters,
                "connections": args.connections, "latency_runs": args.latency_runs,
                "cores": cores, "fsync": true, "store": store, "nodes": args.nodes,
            },
            "one_step": f.one_step.as_ref().map(|o| json!({
                "started": o.started, "start_errors": o.start_errors,
                "completed": o.completed, "verified_completed": f.verified.0,
                "worker_errors": o.worker_errors, "elapsed_s": o.elapsed.as_secs_f64(),
                "runs_per_second": rate(o.completed, o.elapsed), "server_cpu_s": o.cpu_s,
                "server_cpu_per_run_us": cpu_per_run_us(o.cpu_s, o.completed),
            })),
            "latency": f.latency.as_ref().map(closed_json),
            "three_step": f.three_step.as_ref().map(closed_json),
            "three_step_verified_completed": f.verified.1,
            "floor": {
                "samples": f.floor.samples, "read_rpc_p50_ms": ms(f.floor.read_p50),
                "write_rpc_p50_ms": ms(f.floor.write_p50), "write_rpc_mean_ms": ms(f.floor.write_mean),
                "commits": f.floor.commits, "commit_mean_ms": ms(f.floor.commit_mean),
                "write_rpc_per_commit": write_per_commit(&f.floor),
            },
            "server_cpu_s": f.cpu_s,
            "server_memory": f.memory.map(|m| m.json()),
        }))?;
        return Ok(());
    }
    let mut lines = vec![
        "railyard bench --processes: railyard server processes, driven over loopback by separate worker and client processes (SDK)".to_string(),
        "settings".to_string(),
        format!("  store         {store}; fsync on; {cores} cores"),
        format!(
            "  nodes         {}{}",
            args.nodes,
            if args.nodes > 1 {
                " server processes on the one database (the first leads, the others forward to it); worker and client processes spread over them in turn; server CPU summed over all, memory the leader's"
            } else {
                " server process"
            }
        ),
        format!(
            "  workers       {} StepWorker loops in {workers} worker processes, one gRPC connection each",
            args.workers
        ),
        format!(
            "  one-step      {} x bench-1 from one starter process ({} starters over {} connections)",
            args.runs, args.starters, args.connections
        ),
        format!(
            "  three-step    {} x bench-3 at concurrency 1, {} at concurrency {}: one client process starts each run and watches it to its close (WatchRun)",
            args.latency_runs, args.runs, args.workers
        ),
    ];
    let mut table = vec![
        "| figure (server, workers, clients: separate processes) | measured |".to_string(),
        "|---|---|".to_string(),
    ];
    if let Some(o) = &f.one_step {
        lines.push(format!(
            "one-step      {} runs completed ({} COMPLETED by ListRuns) in {:.2} s: {} runs/s; server CPU {:.2} s, {:.0} µs per run",
            o.completed,
            f.verified.0,
            o.elapsed.as_secs_f64(),
            thousands(rate(o.completed, o.elapsed)),
            o.cpu_s,
            cpu_per_run_us(o.cpu_s, o.completed)
        ));
        if o.start_errors + o.worker_errors > 0 {
            lines.push(format!(
                "  errors      {} starts, {} polls/completions",
                o.start_errors, o.worker_errors
            ));
        }
        table.push(format!(
            "| one-step runs per second, {} workers in {workers} processes | {} |",
            args.workers,
            thousands(rate(o.completed, o.elapsed))
        ));
    }
    let closed_line = |label: &str, c: &Closed| {
        format!(
            "{label}{} runs ({} COMPLETED) in {:.2} s: {} runs/s; start to completed p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; server CPU {:.0} µs per run{}",
            c.samples.len(),
            c.completed,
            c.elapsed.as_secs_f64(),
            thousands(rate(c.samples.len() as u64, c.elapsed)),
            ms(percentile(&c.samples, 50.0)),
            ms(percentile(&c.samples, 99.0)),
            ms(percentile(&c.samples, 100.0)),
            cpu_per_run_us(c.cpu_s, c.samples.len() as u64),
            if c.errors > 0 {
                format!("; {} errors", c.errors)
            } else {
                String::new()
            },
        )
    };
    if let Some(l) = &f.latency {
        lines.push(closed_line("latency       concurrency 1: ", l));
        table.push(format!(
            "| three-step run, start to completed (seen by the client), concurrency 1 | p50 {:.2} ms, p99 {:.2} ms |",
            ms(percentile(&l.samples, 50.0)),
            ms(percentile(&l.samples, 99.0))
        ));
    }
    if let Some(t) = &f.three_step {
        lines.push(closed_line(
            &format!("three-step    concurrency {}: ", t.concurrency),
            t,
        ));
        table.push(format!(
            "| three-step runs per second, concurrency {} | {} (p50 {:.1} ms, p99 {:.1} ms) |",
            t.concurrency,
            thousands(rate(t.samples.len() as u64, t.elapsed)),
            ms(percentile(&t.samples, 50.0)),
            ms(percentile(&t.samples, 99.0))
        ));
    }
    if f.latency.is_some() || f.three_step.is_some() {
        lines.push(format!(
            "  verified    {} bench-3 runs COMPLETED by ListRuns",
            f.verified.1
        ));
    }
    lines.push(format!(
        "floor         read RPC p50 {:.2} ms, durable write RPC p50 {:.2} ms ({} samples, concurrency 1)",
        ms(f.floor.read_p50),
        ms(f.floor.write_p50),
        f.floor.samples
    ));
    lines.push(format!(
        "  commit      the server's apply and commit per batch (railyard_commit_duration) mean {:.2} ms over {} commits; the write RPC's mean {:.2} ms is {:.2}x that",
        ms(f.floor.commit_mean),
        f.floor.commits,
        ms(f.floor.write_mean),
        write_per_commit(&f.floor)
    ));
    table.push(format!(
        "| floor: one read RPC / one durable write RPC (p50) | {:.2} ms / {:.2} ms |",
        ms(f.floor.read_p50),
        ms(f.floor.write_p50)
    ));
    table.push(format!(
        "| durable write RPC / the commit under it (means) | {:.2} ms / {:.2} ms ({:.2}x) |",
        ms(f.floor.write_mean),
        ms(f.floor.commit_mean),
        write_per_commit(&f.floor)
    ));
    lines.push(format!("server        CPU {:.2} s over all phases", f.cpu_s));
    if let Some(m) = f.memory {
        lines.push(format!("memory        server {}", m.line()));
        table.push(format!(
            "| server resident memory after the phases | {:.0} MiB (peak {:.0} MiB) |",
            m.rss_kib as f64 / 1024.0,
            m.peak_kib as f64 / 1024.0
        ));
    }
    lines.push(String::new());
    lines.extend(table);
    for line in lines {
        output::line(line)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_are_shared_out_without_empty_processes() {
        assert_eq!(shares(32, 4), vec![8, 8, 8, 8]);
        assert_eq!(shares(5, 2), vec![3, 2]);
        assert_eq!(shares(2, 8), vec![1, 1]);
        assert_eq!(shares(1, 1), vec![1]);
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
