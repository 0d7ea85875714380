//! `railyard bench-process ROLE` (hidden): one worker or client process of
//! `railyard bench --processes`, talking to the server over the SDK. It writes
//! [`Report`]s to stdout, one JSON line each, and takes its cues from stdin: a
//! client waits for a line (`go`) before it starts measuring, a worker works until
//! stdin closes. Each ends when the bench that started it does (see
//! [`die_with_parent`](crate::child::die_with_parent)).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use railyard_sdk::{Client, ConnectOptions, StepWorker};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::{QUEUE, work};

/// What a role process tells the bench, one JSON line each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "snake_case")]
pub(crate) enum Report {
    /// Connected (a worker: its polls are parked); waiting for `go` or for stdin to close.
    Ready,
    /// A worker completed the last step of another run: `runs` so far, this process.
    Completed { runs: u64 },
    /// A worker stopped: steps completed and calls that failed.
    Worker { steps: u64, errors: u64 },
    /// The starts are done: runs started, starts that failed, and how long from `go`.
    Started {
        started: u64,
        errors: u64,
        elapsed_us: u64,
    },
    /// The closed loop is done: each run's start to its close as this client saw it,
    /// the runs that closed COMPLETED, calls that failed, and how long from `go` to
    /// the last close.
    Drove {
        samples_us: Vec<u64>,
        completed: u64,
        errors: u64,
        elapsed_us: u64,
    },
    /// One read RPC (DescribeRun) and one durable write RPC (StartRun) at a time.
    Floor { read_us: Vec<u64>, write_us: Vec<u64> },
}

/// The roles of `railyard bench-process`.
#[derive(Debug, Subcommand)]
pub enum Role {
    /// StepWorker loops completing every step at once until stdin closes.
    Worker {
        #[command(flatten)]
        conn: Conn,
        /// Concurrent poll-and-complete loops.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        loops: u32,
        /// Report each run whose last step this process completed.
        #[arg(long)]
        report_runs: bool,
    },
    /// After `go`, start --runs runs from --starters concurrent starters, not waiting
    /// for them to finish.
    Start {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        load: Load,
        /// Concurrent starters.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
        starters: u32,
    },
    /// After `go`, --concurrency loops each start a run and watch it to its close
    /// (WatchRun), then start the next, until --runs runs closed.
    Drive {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        load: Load,
        /// Runs in flight at once.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        concurrency: u32,
    },
    /// After `go`, --samples times: describe a run, start a run (nothing polls).
    Floor {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        load: Load,
    },
}

/// Where a role connects.
#[derive(Debug, Args)]
pub struct Conn {
    /// The server's gRPC URL.
    #[arg(long)]
    server: String,
    /// gRPC connections to spread the calls over.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    connections: u32,
    /// The namespace the bench's runs live in (on a shared database, one of each
    /// bench's own, so an earlier bench's leftover tasks are never leased).
    #[arg(long, default_value = railyard_proto::DEFAULT_NAMESPACE)]
    namespace: String,
}

/// What a client role starts.
#[derive(Debug, Args)]
pub struct Load {
    /// The workflow to start.
    #[arg(long)]
    workflow: String,
    /// Runs to start (the floor: samples).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
}

/// Runs one role process.
pub async fn run(role: Role) -> anyhow::Result<()> {
    match role {
        Role::Worker {
            conn,
            loops,
            report_runs,
        } => worker(&conn, loops, report_runs).await,
        Role::Start { conn, load, starters } => {
            let clients = connect(&conn).await?;
            ready_then_go().await?;
            let report = start(&clients, &conn.namespace, &load, starters).await;
            emit(&report)
        }
        Role::Drive {
            conn,
            load,
            concurrency,
        } => {
            let clients = connect(&conn).await?;
            ready_then_go().await?;
            let report = drive(&clients, &conn.namespace, &load, concurrency).await;
            emit(&report)
        }
        Role::Floor { conn, load } => {
            let clients = connect(&conn).await?;
            ready_then_go().await?;
            let report = floor(&clients[0], &conn.namespace, &load).await?;
            emit(&report)
        }
    }
}

async fn connect(conn: &Conn) -> anyhow::Result<Vec<Client>> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let mut clients = Vec::new();
    for _ in 0..conn.connections {
        clients.push(
            Client::connect_with(&conn.server, opts.clone())
                .await
                .with_context(|| format!("cannot connect to {}", conn.server))?,
        );
    }
    Ok(clients)
}

/// Writes one report line and flushes it: the bench reads them as they come.
fn emit(report: &Report) -> anyhow::Result<()> {
    let line = serde_json::to_string(report)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Reports [`Report::Ready`] and waits for a line on stdin; fails if stdin closes first.
async fn ready_then_go() -> anyhow::Result<()> {
    emit(&Report::Ready)?;
    let read = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|n| n > 0)
    })
    .await??;
    if !read {
        bail!("stdin closed before go: the bench stopped");
    }
    Ok(())
}

async fn worker(conn: &Conn, loops: u32, report_runs: bool) -> anyhow::Result<()> {
    let clients = connect(conn).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let steps = Arc::new(AtomicU64::new(0));
    let runs = Arc::new(std::sync::Mutex::new(0u64));
    let pid = std::process::id();
    let mut set = JoinSet::new();
    for i in 0..loops as usize {
        let client = clients[i % clients.len()].clone();
        let worker = StepWorker::new(client, &conn.namespace, QUEUE, &format!("bench-{pid}-{i}"));
        let (steps, runs) = (steps.clone(), runs.clone());
        set.spawn(work(worker, stop.clone(), errors.clone(), move |task, _| {
            steps.fetch_add(1, Ordering::Relaxed);
            if task.step_index + 1 >= task.step_count {
                // Counted and written under one lock, so the reports of this
                // process's loops go out in order.
                let mut runs = runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *runs += 1;
                if report_runs && emit(&Report::Completed { runs: *runs }).is_err() {
                    // The bench is gone; it kills this process too.
                    tracing::warn!("cannot report a completed run");
                }
            }
        }));
    }
    // Let the loops park their polls before saying so.
    tokio::time::sleep(Duration::from_millis(200)).await;
    emit(&Report::Ready)?;
    // Until stdin closes: the bench's signal to stop.
    tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink()))
        .await??;
    stop.store(true, Ordering::Relaxed);
    // Polls parked for up to a few seconds would hold the stop up; every run is
    // closed by now, so nothing a poll could lease is lost.
    set.abort_all();
    while set.join_next().await.is_some() {}
    emit(&Report::Worker {
        steps: steps.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
    })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

async fn start(clients: &[Client], ns: &str, load: &Load, starters: u32) -> Report {
    let next = Arc::new(AtomicU32::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut set = JoinSet::new();
    for i in 0..starters as usize {
        let client = clients[i % clients.len()].clone();
        let (next, errors, runs) = (next.clone(), errors.clone(), load.runs);
        let (workflow, ns) = (load.workflow.clone(), ns.to_string());
        set.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= runs {
                    break;
                }
                if let Err(e) = client
                    .start_run(&ns, &workflow, &format!("run {n}"), HashMap::new())
                    .await
                {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "bench start failed");
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    let errors = errors.load(Ordering::Relaxed);
    Report::Started {
        started: u64::from(load.runs) - errors,
        errors,
        elapsed_us: micros(t0.elapsed()),
    }
}

/// One run of the closed loop: start it, watch it to its close.
/// Whether it closed COMPLETED.
async fn start_and_watch(client: &Client, ns: &str, workflow: &str, n: u32) -> anyhow::Result<bool> {
    let run_id = client
        .start_run(ns, workflow, &format!("run {n}"), HashMap::new())
        .await?;
    let mut events = client.watch_run(ns, &run_id, 1).await?;
    let mut last = String::new();
    while let Some(event) = events
        .message()
        .await
        .map_err(|s| anyhow!("watching run {run_id}: {s}"))?
    {
        last = event.event_type;
    }
    Ok(last == "RunCompleted")
}

async fn drive(clients: &[Client], ns: &str, load: &Load, concurrency: u32) -> Report {
    let next = Arc::new(AtomicU32::new(0));
    let t0 = Instant::now();
    let mut set = JoinSet::new();
    for i in 0..concurrency as usize {
        let client = clients[i % clients.len()].clone();
        let (next, runs, workflow, ns) = (next.clone(), load.runs, load.workflow.clone(), ns.to_string());
        set.spawn(async move {
            let (mut samples, mut completed, mut errors) = (Vec::new(), 0u64, 0u64);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= runs {
                    break;
                }
                let started = Instant::now();
                match start_and_watch(&client, &ns, &workflow, n).await {
                    Ok(done) => {
                        samples.push(micros(started.elapsed()));
                        completed += u64::from(done);
                    }
                    Err(e) => {
                        errors += 1;
                        tracing::warn!(error = %e, "bench run failed");
                    }
                }
            }
            (samples, completed, errors)
        });
    }
    let (mut samples_us, mut completed, mut errors) = (Vec::new(), 0, 0);
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((s, c, e)) => {
                samples_us.extend(s);
                completed += c;
                errors += e;
            }
            Err(_) => errors += 1,
        }
    }
    Report::Drove {
        samples_us,
        completed,
        errors,
        elapsed_us: micros(t0.elapsed()),
    }
}

async fn floor(client: &Client, ns: &str, load: &Load) -> anyhow::Result<Report> {
    let run_id = client
        .start_run(ns, &load.workflow, "floor", HashMap::new())
        .await?;
    let (mut read_us, mut write_us) = (Vec::new(), Vec::new());
    for _ in 0..load.runs {
        let t0 = Instant::now();
        client.describe_run(ns, &run_id).await?;
        read_us.push(micros(t0.elapsed()));
        let t0 = Instant::now();
        client
            .start_run(ns, &load.workflow, "floor", HashMap::new())
            .await?;
        write_us.push(micros(t0.elapsed()));
    }
    Ok(Report::Floor { read_us, write_us })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_one_json_line_each_and_read_back() {
        let reports = [
            Report::Ready,
            Report::Completed { runs: 3 },
            Report::Worker { steps: 9, errors: 0 },
            Report::Started {
                started: 5,
                errors: 1,
                elapsed_us: 70,
            },
            Report::Drove {
                samples_us: vec![1, 2],
                completed: 2,
                errors: 0,
                elapsed_us: 9,
            },
            Report::Floor {
                read_us: vec![4],
                write_us: vec![8],
            },
        ];
        for r in reports {
            let line = serde_json::to_string(&r).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<Report>(&line).unwrap(), r);
        }
        assert_eq!(
            serde_json::to_string(&Report::Ready).unwrap(),
            r#"{"report":"ready"}"#
        );
    }
}
