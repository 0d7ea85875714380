//! `railyard bench --preload N`: does the server stay fast as closed runs pile up?
//! It measures the same calls on two stores, each served by a `railyard server`
//! process (this binary, fsync on, a temporary directory): a baseline holding only
//! `--preload-open` open runs, and one holding N closed runs besides them, written
//! straight through the redb backend in large batches ([`generate`]). On each, at
//! concurrency 1, `--latency-runs` times: the first page of `ListRuns` filtered by
//! status (RUNNING) and by workflow (`bench-3`, a workflow with a few runs), a
//! `DescribeRun`, a `StartRun`; then `--preload-steps` step completions of a
//! 64-step workflow (the most steps a definition may have), each taking the next
//! step. It prints the p50/p99 of each side by side with their ratio, the server's
//! resident memory after it opened the store and after the calls, and how long the
//! store took to write.

pub(crate) mod generate;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_proto::v1::{ListRunsRequest, RunStatus};
use railyard_sdk::{Client, Completion, ConnectOptions, StepWorker};
use serde_json::{Value, json};

use crate::output::{self, Output};
use crate::schedules::spawn_server;
use crate::timefmt::now_unix_ms;
use crate::{BenchArgs, Memory, percentile, write_workflows};

/// The long workflow: 64 steps (`railyard_model::workflow::MAX_STEPS`) on a queue of
/// their own.
const LONG: &str = "bench-long";
const LONG_QUEUE: &str = "bench-long";
/// Runs of `bench-3` started before the lists: the workflow filter's few matches.
const FEW: u32 = 20;

/// The calls measured, in the order they run.
const CALLS: [&str; 5] = [
    "list_by_status",
    "list_by_workflow",
    "describe",
    "start",
    "complete",
];

/// One store's figures.
struct Side {
    closed: u64,
    open: u64,
    generated_in: Duration,
    /// Sorted samples of each of [`CALLS`].
    samples: Vec<Vec<Duration>>,
    /// Runs on the first page of each list (to check they listed something).
    listed: (usize, usize),
    rss_open: Option<Memory>,
    rss_after: Option<Memory>,
}

/// Runs the bench with `closed` preloaded closed runs.
pub(crate) async fn run(output: Output, args: &BenchArgs, closed: u64) -> anyhow::Result<()> {
    if args.store.is_some() {
        bail!("--preload writes a redb store; it does not take --store");
    }
    let baseline = side(args, 0).await?;
    let loaded = side(args, closed).await?;
    report(output, args, &baseline, &loaded)
}

async fn side(args: &BenchArgs, closed: u64) -> anyhow::Result<Side> {
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-preload-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows = dir.path().join("workflows");
    write_workflows(&workflows)?;
    let steps: Vec<_> = (1..=railyard_model::workflow::MAX_STEPS)
        .map(|i| json!({ "id": format!("s{i}"), "title": format!("Step {i}"), "prompt": "Bench {{goal}}", "taskQueue": LONG_QUEUE }))
        .collect();
    let long = json!({ "id": LONG, "version": "1", "name": "Bench: the most steps", "steps": steps });
    std::fs::write(workflows.join("bench-long.json"), serde_json::to_vec(&long)?)?;
    let data = dir.path().join("data");
    let open = u64::from(args.preload_open);
    let t0 = Instant::now();
    let written = tokio::task::block_in_place(|| generate::generate(&data, closed, open, now_unix_ms()))?;
    let generated_in = t0.elapsed();
    tracing::info!(
        closed = written.closed,
        open = written.open,
        secs = generated_in.as_secs_f64(),
        "store written"
    );

    let server = spawn_server(&data, &workflows, &[], &[])?;
    let pid = server.child.id().to_string();
    let client = Client::connect_with(
        &server.url,
        ConnectOptions {
            request_timeout: Duration::from_secs(120),
            ..ConnectOptions::default()
        },
    )
    .await?;
    let loaded = client.list_workflows(DEFAULT_NAMESPACE).await?;
    for id in ["bench-1", "bench-3", LONG] {
        if !loaded.workflows.iter().any(|w| w.id == id) {
            let why: Vec<_> = loaded.invalid.iter().map(|i| i.error.clone()).collect();
            bail!("the server did not load bench workflow {id}: {}", why.join("; "));
        }
    }
    let rss_open = Memory::of(&pid);
    let (samples, listed) = measure(&client, args).await?;
    let rss_after = Memory::of(&pid);
    drop(server);
    Ok(Side {
        closed: written.closed,
        open: written.open,
        generated_in,
        samples,
        listed,
        rss_open,
        rss_after,
    })
}

async fn timed<T, F: Future<Output = Result<T, railyard_sdk::ClientError>>>(
    into: &mut Vec<Duration>,
    call: F,
) -> anyhow::Result<T> {
    let t0 = Instant::now();
    let out = call.await?;
    into.push(t0.elapsed());
    Ok(out)
}

async fn measure(client: &Client, args: &BenchArgs) -> anyhow::Result<(Vec<Vec<Duration>>, (usize, usize))> {
    let n = args.latency_runs.max(1);
    let mut samples = vec![Vec::new(); CALLS.len()];
    for i in 0..FEW {
        client
            .start_run(DEFAULT_NAMESPACE, "bench-3", &format!("few {i}"), HashMap::new())
            .await?;
    }
    let list = |status: RunStatus, workflow: &str| ListRunsRequest {
        namespace: DEFAULT_NAMESPACE.into(),
        status: status as i32,
        workflow_id: workflow.into(),
        ..Default::default()
    };
    let (mut by_status, mut by_workflow) = (0, 0);
    let mut newest = String::new();
    for _ in 0..n {
        let page = timed(&mut samples[0], client.list_runs(list(RunStatus::Running, ""))).await?;
        by_status = page.runs.len();
        newest = page.runs.first().map(|r| r.run_id.clone()).unwrap_or_default();
        let page = timed(
            &mut samples[1],
            client.list_runs(list(RunStatus::Unspecified, "bench-3")),
        )
        .await?;
        by_workflow = page.runs.len();
    }
    for _ in 0..n {
        timed(&mut samples[2], client.describe_run(DEFAULT_NAMESPACE, &newest)).await?;
    }
    for i in 0..n {
        timed(
            &mut samples[3],
            client.start_run(
                DEFAULT_NAMESPACE,
                "bench-1",
                &format!("start {i}"),
                HashMap::new(),
            ),
        )
        .await?;
    }
    let worker = StepWorker::new(client.clone(), DEFAULT_NAMESPACE, LONG_QUEUE, "bench-preload");
    let mut left = args.preload_steps;
    while left > 0 {
        client
            .start_run(DEFAULT_NAMESPACE, LONG, "long", HashMap::new())
            .await?;
        let Some(mut task) = worker.poll(Duration::from_secs(10)).await? else {
            bail!("no step of {LONG} was handed out");
        };
        loop {
            let next = timed(
                &mut samples[4],
                worker.complete_and_take_next(&task.task_token, Completion::notes("ok")),
            )
            .await?;
            left -= 1;
            match next {
                Some(next) if left > 0 => task = next,
                _ => break,
            }
        }
    }
    for s in &mut samples {
        s.sort();
    }
    Ok((samples, (by_status, by_workflow)))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn mib(m: Option<Memory>) -> f64 {
    m.map_or(0.0, |m| m.rss_kib as f64 / 1024.0)
}

fn side_json(s: &Side) -> Value {
    let calls: serde_json::Map<String, Value> = CALLS
        .iter()
        .zip(&s.samples)
        .map(|(name, v)| {
            (
                (*name).to_string(),
                json!({ "samples": v.len(), "p50_ms": ms(percentile(v, 50.0)), "p99_ms": ms(percentile(v, 99.0)) }),
            )
        })
        .collect();
    json!({
        "closed_runs": s.closed, "open_runs": s.open,
        "generate_s": s.generated_in.as_secs_f64(),
        "listed_by_status": s.listed.0, "listed_by_workflow": s.listed.1,
        "calls": calls,
        "server_rss_mib_opened": mib(s.rss_open), "server_rss_mib_after": mib(s.rss_after),
        "server_peak_rss_mib": s.rss_after.map_or(0.0, |m| m.peak_kib as f64 / 1024.0),
    })
}

fn report(output: Output, args: &BenchArgs, base: &Side, loaded: &Side) -> anyhow::Result<()> {
    let ratio = |i: usize| {
        ms(percentile(&loaded.samples[i], 50.0)) / ms(percentile(&base.samples[i], 50.0)).max(1e-6)
    };
    if output.is_json() {
        let ratios: serde_json::Map<String, Value> = CALLS
            .iter()
            .enumerate()
            .map(|(i, name)| ((*name).to_string(), json!(ratio(i))))
            .collect();
        output::json(&json!({
            "settings": {
                "closed_runs": loaded.closed, "open_runs": loaded.open, "samples": args.latency_runs.max(1),
                "completions": args.preload_steps, "fsync": true,
            },
            "baseline": side_json(base),
            "preloaded": side_json(loaded),
            "p50_ratio": ratios,
        }))?;
        return Ok(());
    }
    let labels = [
        "ListRuns first page, status RUNNING",
        "ListRuns first page, workflow bench-3",
        "DescribeRun",
        "StartRun (durable write)",
        "step completion, 64-step workflow",
    ];
    let fig = |s: &Side, i: usize| {
        format!(
            "{:.2} / {:.2} ms",
            ms(percentile(&s.samples[i], 50.0)),
            ms(percentile(&s.samples[i], 99.0))
        )
    };
    output::line(format!(
        "railyard bench --preload: a railyard server process on two redb stores (fsync on), calls at concurrency 1; {} samples each, {} completions",
        args.latency_runs.max(1),
        args.preload_steps
    ))?;
    output::line(format!(
        "stores        baseline: {} open runs, written in {:.1} s; preloaded: {} closed + {} open runs, written in {:.1} s ({:.0} runs/s)",
        base.open,
        base.generated_in.as_secs_f64(),
        loaded.closed,
        loaded.open,
        loaded.generated_in.as_secs_f64(),
        (loaded.closed + loaded.open) as f64 / loaded.generated_in.as_secs_f64().max(1e-9)
    ))?;
    output::line(format!(
        "listed        first pages: by status {} / {} runs, by workflow {} / {} runs (baseline / preloaded)",
        base.listed.0, loaded.listed.0, base.listed.1, loaded.listed.1
    ))?;
    output::line(String::new())?;
    output::line(format!(
        "| p50 / p99 | baseline ({} open runs) | {} closed + {} open runs | p50 ratio |",
        base.open, loaded.closed, loaded.open
    ))?;
    output::line("|---|---|---|---|".to_string())?;
    for (i, label) in labels.iter().enumerate() {
        output::line(format!(
            "| {label} | {} | {} | {:.2}x |",
            fig(base, i),
            fig(loaded, i),
            ratio(i)
        ))?;
    }
    output::line(format!(
        "| server RSS: store opened / after the calls | {:.0} / {:.0} MiB | {:.0} / {:.0} MiB | {:.2}x |",
        mib(base.rss_open),
        mib(base.rss_after),
        mib(loaded.rss_open),
        mib(loaded.rss_after),
        mib(loaded.rss_after) / mib(base.rss_after).max(1e-6)
    ))?;
    Ok(())
}
