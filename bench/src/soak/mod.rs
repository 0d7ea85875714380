//! `railyard bench --soak DURATION --store postgres://... [--hold-transaction]`:
//! steady load (starts, leases, completions of the one-step `bench-1` workflow) on an
//! in-process server on PostgreSQL for DURATION, optionally while another connection
//! holds a transaction open (`BEGIN; SELECT txid_current()`, left idle), which holds
//! back vacuum on the whole database. Every `--report-every` it prints the dequeue
//! latency (poll to lease) p50/p99, the throughput, and the size and dead tuples of
//! the backend's tables (docs/postgres.md, "A soak under a long transaction").
//!
//! The starters keep at most `--backlog` runs started and not yet completed, so that
//! a poll finds work ready and its latency is the dequeue, not a wait for work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_sdk::{Client, Completion, ConnectOptions, StepWorker};
use railyard_server::{RunningServer, ServerConfig};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::{
    BenchArgs, POLL_WAIT, QUEUE, count_completed, ms, percentile, with_bench_store, write_workflows,
};
use crate::output::{self, Output};
use crate::timefmt::{human_duration, parse_duration};
use watch::{HeldTransaction, TableFigures, TableWatch};

mod watch;

/// Tables a text report shows: the queue's (a row deleted per task taken, timer
/// fired or run closed), then the largest others up to [`SHOWN_TABLES`]; JSON has
/// them all.
const QUEUE_TABLES: [&str; 3] = ["tasks", "open_runs", "timers"];
const SHOWN_TABLES: usize = 6;

/// The soak's flags (part of `railyard bench`).
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Instead of the run phases: steady load (starts, leases, completions of a
    /// one-step workflow, from --starters and --workers) on PostgreSQL (--store) for
    /// DURATION, reporting every --report-every the dequeue latency (poll to lease)
    /// p50/p99, the throughput, and the size and dead tuples of the tables.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "store")]
    pub soak: Option<Duration>,
    /// With --soak: hold a transaction open on another connection for the whole soak
    /// (BEGIN; SELECT txid_current(), then idle), which keeps vacuum from removing
    /// any row deleted or updated meanwhile.
    #[arg(long, requires = "soak")]
    pub hold_transaction: bool,
    /// With --soak: time between reports.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    pub report_every: Duration,
    /// With --soak: most runs started and not yet completed; the starters wait above
    /// it, so that a poll finds work ready.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    pub backlog: u64,
}

/// What the load's tasks count, shared.
#[derive(Default)]
struct Counts {
    started: AtomicU64,
    completed: AtomicU64,
    start_errors: AtomicU64,
    worker_errors: AtomicU64,
    /// Poll-to-lease times since the last report.
    dequeues: std::sync::Mutex<Vec<Duration>>,
}

/// Runs the soak and prints its reports and summary.
pub(crate) async fn run(output: Output, args: &BenchArgs, duration: Duration) -> anyhow::Result<()> {
    let soak = &args.soak;
    if soak.report_every.is_zero() {
        bail!("--report-every must be more than zero");
    }
    let Some(store) = &args.store else {
        bail!("--soak runs on PostgreSQL: give --store postgres://USER@HOST:PORT/DB");
    };
    if !crate::store::is_postgres(store) {
        bail!("--store: --soak takes a postgres://USER@HOST:PORT/DB URL");
    }
    let url = store;
    let options = crate::store::options(args.store_ca.as_deref())?;

    let dir = tempfile::Builder::new()
        .prefix("railyard-soak-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows_dir = dir.path().join("workflows");
    write_workflows(&workflows_dir)?;
    let mut config = ServerConfig::new(dir.path().join("data"), workflows_dir);
    config.grpc_listen = ([127, 0, 0, 1], 0).into();
    config.http_listen = ([127, 0, 0, 1], 0).into();
    let (config, shown) = with_bench_store(config, args).await?;
    let server = RunningServer::start(config)
        .await
        .context("cannot start the in-process server")?;

    let (u, o) = (url.clone(), options.clone());
    let watch = Arc::new(
        tokio::task::spawn_blocking(move || TableWatch::open(&u, &o))
            .await?
            .context("cannot connect to watch the tables")?,
    );
    let held = if soak.hold_transaction {
        let (u, o) = (url.clone(), options.clone());
        let held = tokio::task::spawn_blocking(move || HeldTransaction::begin(&u, &o))
            .await?
            .context("cannot begin the held transaction")?;
        tracing::info!(txid = held.txid, pid = held.pid, "holding a transaction open");
        Some(held)
    } else {
        None
    };
    if !output.is_json() {
        output::line(format!(
            "soak for {} on {shown}: {} starters, {} workers, backlog {}, {}",
            human_duration(duration),
            args.starters,
            args.workers,
            soak.backlog,
            match &held {
                Some(h) => format!("holding transaction {} open (server pid {})", h.txid, h.pid),
                None => "no transaction held".into(),
            }
        ))?;
    }

    let url_grpc = format!("http://{}", server.grpc_addr);
    let result = drive(output, args, &url_grpc, duration, &watch, held.as_ref()).await;
    let held_txid = held.as_ref().map(|h| h.txid);
    drop(held);
    server.shutdown().await;
    let (intervals, counts, verified) = result?;
    let started = counts.started.load(Ordering::Relaxed);
    let completed = counts.completed.load(Ordering::Relaxed);
    let start_errors = counts.start_errors.load(Ordering::Relaxed);
    let worker_errors = counts.worker_errors.load(Ordering::Relaxed);
    if output.is_json() {
        output::json(&json!({
            "settings": {
                "store": shown,
                "duration_ms": duration.as_millis() as u64,
                "report_every_ms": soak.report_every.as_millis() as u64,
                "starters": args.starters,
                "workers": args.workers,
                "backlog": soak.backlog,
                "held_txid": held_txid,
            },
            "intervals": intervals,
            "started": started,
            "completed": completed,
            "verified_completed": verified,
            "start_errors": start_errors,
            "worker_errors": worker_errors,
        }))?;
    } else {
        output::line(format!(
            "soak done: {started} runs started, {completed} completed ({verified} completed by ListRuns), \
             {start_errors} start errors, {worker_errors} worker errors"
        ))?;
    }
    Ok(())
}

type Driven = (Vec<Value>, Arc<Counts>, u64);

/// The load for `duration`, a report every interval; then the backlog drained.
async fn drive(
    output: Output,
    args: &BenchArgs,
    url: &str,
    duration: Duration,
    watch: &Arc<TableWatch>,
    held: Option<&HeldTransaction>,
) -> anyhow::Result<Driven> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(Client::connect_with(url, opts.clone()).await?);
    }
    let counts = Arc::new(Counts::default());
    let stop_starting = Arc::new(AtomicBool::new(false));
    let stop_working = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    for i in 0..args.starters {
        let client = clients[i as usize % clients.len()].clone();
        let (counts, stop, backlog) = (counts.clone(), stop_starting.clone(), args.soak.backlog);
        tasks.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let in_flight =
                    counts.started.load(Ordering::Relaxed) - counts.completed.load(Ordering::Relaxed);
                if in_flight >= backlog {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                n += 1;
                match client
                    .start_run(
                        DEFAULT_NAMESPACE,
                        "bench-1",
                        &format!("soak {i}-{n}"),
                        Default::default(),
                    )
                    .await
                {
                    Ok(_) => counts.started.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tracing::warn!(error = %e, "soak start failed");
                        counts.start_errors.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    for i in 0..args.workers {
        let client = clients[(i as usize + 1) % clients.len()].clone();
        let worker = StepWorker::new(client, DEFAULT_NAMESPACE, QUEUE, &format!("soak-worker-{i}"));
        let (counts, stop) = (counts.clone(), stop_working.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let polled = Instant::now();
                let task = match worker.poll(POLL_WAIT).await {
                    Ok(Some(task)) => task,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "soak poll failed");
                        counts.worker_errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let took = polled.elapsed();
                if let Ok(mut d) = counts.dequeues.lock() {
                    d.push(took);
                }
                match worker.complete(&task.task_token, Completion::notes("ok")).await {
                    Ok(()) => counts.completed.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tracing::warn!(error = %e, "soak complete failed");
                        counts.worker_errors.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }

    let begun = Instant::now();
    let mut intervals = Vec::new();
    let mut last = (begun, 0u64);
    while begun.elapsed() < duration {
        let left = duration.saturating_sub(begun.elapsed());
        tokio::time::sleep(args.soak.report_every.min(left)).await;
        let now = Instant::now();
        let completed = counts.completed.load(Ordering::Relaxed);
        let mut dequeues = counts
            .dequeues
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default();
        dequeues.sort();
        let w = watch.clone();
        let tables = tokio::task::spawn_blocking(move || w.tables()).await?;
        let xmin_age = match held {
            Some(h) => {
                let (w, pid) = (watch.clone(), h.pid);
                tokio::task::spawn_blocking(move || w.xmin_age(pid))
                    .await?
                    .ok()
                    .flatten()
            }
            None => None,
        };
        let tables = tables.context("cannot read the table figures")?;
        let secs = now.duration_since(last.0).as_secs_f64().max(1e-9);
        let interval = Interval {
            at: now.duration_since(begun),
            completed: completed - last.1,
            per_sec: (completed - last.1) as f64 / secs,
            p50: percentile(&dequeues, 50.0),
            p99: percentile(&dequeues, 99.0),
            samples: dequeues.len(),
            xmin_age,
            tables,
        };
        if output.is_json() {
            intervals.push(interval.json());
        } else {
            interval.print()?;
        }
        last = (now, completed);
    }

    // Drain: no new starts; every run started is completed before the workers stop.
    stop_starting.store(true, Ordering::Relaxed);
    let drained_by = Instant::now() + Duration::from_secs(args.timeout);
    while counts.completed.load(Ordering::Relaxed) + counts.worker_errors.load(Ordering::Relaxed)
        < counts.started.load(Ordering::Relaxed)
        && Instant::now() < drained_by
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop_working.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
    let verified = count_completed(&clients[0], railyard_proto::DEFAULT_NAMESPACE, "bench-1").await?;
    Ok((intervals, counts, verified))
}

/// One report's figures.
struct Interval {
    /// Since the load began.
    at: Duration,
    completed: u64,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    samples: usize,
    /// Age of the held transaction's snapshot, in transactions.
    xmin_age: Option<i32>,
    tables: Vec<TableFigures>,
}

impl Interval {
    fn json(&self) -> Value {
        json!({
            "at_ms": self.at.as_millis() as u64,
            "completed": self.completed,
            "runs_per_sec": self.per_sec,
            "dequeue_p50_ms": ms(self.p50),
            "dequeue_p99_ms": ms(self.p99),
            "dequeues": self.samples,
            "held_xmin_age": self.xmin_age,
            "tables": self.tables.iter().map(|t| json!({
                "table": t.table,
                "total_bytes": t.total_bytes,
                "live_tuples": t.live_tuples,
                "dead_tuples": t.dead_tuples,
            })).collect::<Vec<_>>(),
        })
    }

    fn print(&self) -> anyhow::Result<()> {
        let held = match self.xmin_age {
            Some(age) => format!(", held snapshot {age} transactions old"),
            None => String::new(),
        };
        output::line(format!(
            "{}: {:.0} runs/s ({} completed), dequeue p50 {:.2} ms p99 {:.2} ms ({} polls){held}",
            human_duration(self.at),
            self.per_sec,
            self.completed,
            ms(self.p50),
            ms(self.p99),
            self.samples,
        ))?;
        let total: i64 = self.tables.iter().map(|t| t.total_bytes).sum();
        let dead: i64 = self.tables.iter().map(|t| t.dead_tuples).sum();
        let queue = self
            .tables
            .iter()
            .filter(|t| QUEUE_TABLES.contains(&t.table.as_str()));
        let others = self
            .tables
            .iter()
            .filter(|t| !QUEUE_TABLES.contains(&t.table.as_str()));
        let shown: Vec<String> = queue
            .chain(others)
            .take(SHOWN_TABLES)
            .map(|t| {
                format!(
                    "{} {:.1} MiB ({} live, {} dead)",
                    t.table,
                    mib(t.total_bytes),
                    t.live_tuples,
                    t.dead_tuples
                )
            })
            .collect();
        output::line(format!(
            "  tables {:.1} MiB, {dead} dead tuples: {}",
            mib(total),
            shown.join(", ")
        ))?;
        Ok(())
    }
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
