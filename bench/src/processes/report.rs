//! What `railyard bench --processes` prints: the figures for a person (ending in a
//! Markdown table to paste) or as one JSON document.

use std::time::Duration;

use serde_json::json;

use super::{Closed, Figures, Floor, shares};
use crate::output::{self, Output};
use crate::{BenchArgs, percentile};

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// The write RPC's mean over the mean commit under it.
fn write_per_commit(f: &Floor) -> f64 {
    f.write_mean.as_secs_f64() / f.commit_mean.as_secs_f64().max(1e-9)
}

/// `n` rounded, with thousands separated by commas.
pub(super) fn thousands(n: f64) -> String {
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

pub(super) fn report(output: Output, args: &BenchArgs, store: &str, f: &Figures) -> anyhow::Result<()> {
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
    if output.is_json() {
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
