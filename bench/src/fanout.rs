//! `railyard bench --fanout N`: one parent run spawning N children of a no-op
//! workflow and waiting for all of them, on a real `railyard server` process (this
//! binary, on a temporary data directory, fsync on, `--max-children-per-run N`).
//! The bench plays the workers over the SDK: it leases the parent's step, starts the
//! children with one `SpawnChildRuns` that also suspends the step, completes every
//! child step with `--fanout-pollers` concurrent pollers, then leases the resumed
//! parent step and completes it. Prints the time from the parent's start to its
//! completion and the server's durable commits per child (`railyard_commits_total`
//! from its `/metrics`, read before the start and after the parent completed).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use railyard_engine::service::children::MAX_CHILDREN_PER_REQUEST;
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_proto::v1::{ChildRunSpec, RunStatus};
use railyard_sdk::{Client, Completion, StepWorker};
use serde_json::json;
use tokio::task::JoinSet;

use crate::BenchArgs;
use crate::output::{self, Output};
use crate::schedules::spawn_server;

const PARENT: &str = "bench-fanout-parent";
const CHILD: &str = "bench-fanout-child";
/// The children's queue (the parent's step is on the default queue).
const CHILD_QUEUE: &str = "bench-children";
/// How long one child poll waits before the poller looks again whether all are done.
const POLL_WAIT: Duration = Duration::from_millis(500);

/// What the bench measured.
struct Figures {
    elapsed: Duration,
    spawn: Duration,
    commits: u64,
    children_closed: usize,
    /// The server process's memory once the fan-out is done.
    memory: Option<super::Memory>,
}

/// Runs the fan-out bench with `count` children.
pub(crate) async fn run(output: Output, args: &BenchArgs, count: u32) -> anyhow::Result<()> {
    if count as usize > MAX_CHILDREN_PER_REQUEST {
        bail!(
            "--fanout takes 1 to {MAX_CHILDREN_PER_REQUEST} children (one SpawnChildRuns request), got {count}"
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-fanout-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows = dir.path().join("workflows");
    std::fs::create_dir_all(&workflows)?;
    let defs = [
        json!({
            "id": PARENT, "version": "1", "name": "Fan-out bench parent",
            "description": "Written by `railyard bench --fanout`.",
            "steps": [{ "id": "fan", "title": "Fan out", "prompt": "Fan out {{goal}}" }],
        }),
        json!({
            "id": CHILD, "version": "1", "name": "Fan-out bench child", "taskQueue": CHILD_QUEUE,
            "description": "Written by `railyard bench --fanout`; its step does nothing.",
            "steps": [{ "id": "noop", "title": "No-op", "prompt": "Nothing: {{goal}}" }],
        }),
    ];
    for def in &defs {
        let id = def["id"].as_str().unwrap_or_default();
        std::fs::write(
            workflows.join(format!("{id}.json")),
            serde_json::to_vec_pretty(def)?,
        )?;
    }
    let limit = count.to_string();
    let server = spawn_server(
        &dir.path().join("data"),
        &workflows,
        &["--max-children-per-run", &limit],
        &[],
    )?;
    tracing::info!(url = %server.url, http = %server.http_addr, "bench server started");
    let timeout = Duration::from_secs(args.timeout);
    let mut figures = tokio::time::timeout(timeout, measure(&server.url, &server.http_addr, args, count))
        .await
        .map_err(|_| anyhow!("the fan-out did not finish within {}s", args.timeout))??;
    figures.memory = super::Memory::of(&server.child.id().to_string());
    drop(server);
    report(output, args, count, &figures)
}

async fn measure(url: &str, http_addr: &str, args: &BenchArgs, count: u32) -> anyhow::Result<Figures> {
    let client = Client::connect(url).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let metrics = format!("http://{http_addr}/metrics");
    let commits_before = commits(&http, &metrics).await?;

    let t0 = Instant::now();
    let parent = client
        .start_run(DEFAULT_NAMESPACE, PARENT, "the bench", HashMap::new())
        .await?;
    let w = StepWorker::new(client.clone(), DEFAULT_NAMESPACE, "default", "bench-parent");
    let task = w
        .poll(Duration::from_secs(10))
        .await?
        .ok_or_else(|| anyhow!("the parent's step was not handed out"))?;
    if task.run_id != parent {
        bail!("leased run {} instead of the parent {parent}", task.run_id);
    }
    let specs: Vec<ChildRunSpec> = (0..count)
        .map(|i| ChildRunSpec {
            workflow_id: CHILD.into(),
            goal: format!("child {i}"),
            ..Default::default()
        })
        .collect();
    let spawned_at = Instant::now();
    let child_ids = w
        .spawn_children(&task.task_token, specs, true, vec![], vec![])
        .await?;
    let spawn = spawned_at.elapsed();

    let done = Arc::new(AtomicU32::new(0));
    let mut pollers = JoinSet::new();
    for p in 0..args.fanout_pollers {
        let (client, done) = (client.clone(), done.clone());
        pollers.spawn(async move {
            let w = StepWorker::new(
                client,
                DEFAULT_NAMESPACE,
                CHILD_QUEUE,
                &format!("bench-child-{p}"),
            );
            while done.load(Ordering::Relaxed) < count {
                if let Some(t) = w.poll(POLL_WAIT).await? {
                    w.complete(&t.task_token, Completion::notes("nothing to do"))
                        .await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(joined) = pollers.join_next().await {
        joined.context("a child poller panicked")??;
    }

    let resumed = w
        .poll(Duration::from_secs(30))
        .await?
        .ok_or_else(|| anyhow!("the parent did not resume after its children closed"))?;
    if resumed.run_id != parent || resumed.resume_messages.is_empty() {
        bail!(
            "expected the parent's resumed step, got a task of run {}",
            resumed.run_id
        );
    }
    w.complete(&resumed.task_token, Completion::notes("fanned out"))
        .await?;
    let elapsed = t0.elapsed();
    let commits = commits(&http, &metrics).await?.saturating_sub(commits_before);

    let status = run_status(&client, &parent).await?;
    if status != RunStatus::Completed {
        bail!("the parent ended {}, not COMPLETED", status.as_str_name());
    }
    let mut children_closed = 0;
    for id in &child_ids {
        let status = run_status(&client, id).await?;
        if status != RunStatus::Completed {
            bail!("child {id} is {}, not COMPLETED", status.as_str_name());
        }
        children_closed += 1;
    }
    Ok(Figures {
        elapsed,
        spawn,
        commits,
        children_closed,
        memory: None,
    })
}

async fn run_status(client: &Client, run_id: &str) -> anyhow::Result<RunStatus> {
    Ok(client
        .describe_run(DEFAULT_NAMESPACE, run_id)
        .await?
        .run
        .ok_or_else(|| anyhow!("run {run_id} not described"))?
        .status())
}

/// The server's `railyard_commits_total`, read from its `/metrics`.
async fn commits(http: &reqwest::Client, url: &str) -> anyhow::Result<u64> {
    let text = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?
        .error_for_status()?
        .text()
        .await?;
    parse_commits(&text).ok_or_else(|| anyhow!("no railyard_commits_total in the server's /metrics"))
}

fn parse_commits(metrics: &str) -> Option<u64> {
    metrics.lines().find_map(|l| {
        let value = l.strip_prefix("railyard_commits_total ")?;
        // OpenMetrics may write a counter as a float.
        value.trim().parse::<f64>().ok().map(|v| v as u64)
    })
}

fn report(output: Output, args: &BenchArgs, count: u32, f: &Figures) -> anyhow::Result<()> {
    let per_child = f.commits as f64 / f64::from(count);
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    if output.is_json() {
        output::json(&json!({
            "children": count,
            "pollers": args.fanout_pollers,
            "parent_status": "COMPLETED",
            "children_closed": f.children_closed,
            "elapsed_ms": ms(f.elapsed),
            "spawn_ms": ms(f.spawn),
            "commits": f.commits,
            "commits_per_child": per_child,
            "server_memory": f.memory.map(|m| m.json()),
        }))?;
    } else {
        output::line(format!(
            "fanout    1 parent, {count} children of a no-op workflow, {} pollers: parent COMPLETED, {} children COMPLETED",
            args.fanout_pollers, f.children_closed
        ))?;
        output::line(format!(
            "time      {:.1} ms from the parent's start to its completion (SpawnChildRuns {:.1} ms)",
            ms(f.elapsed),
            ms(f.spawn)
        ))?;
        output::line(format!(
            "commits   {} durable commits, {per_child:.2} per child",
            f.commits
        ))?;
        if let Some(m) = f.memory {
            output::line(format!("memory    server {}", m.line()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_commit_counter_from_openmetrics_text() {
        let text =
            "# TYPE railyard_commits counter\nrailyard_commits_total 42\nrailyard_commits_created 1.7e9\n";
        assert_eq!(parse_commits(text), Some(42));
        assert_eq!(parse_commits("railyard_commits_total 7.0\n"), Some(7));
        assert_eq!(parse_commits("other_total 1\n"), None);
    }
}
