//! `railyard bench --webhooks N`: N signed webhook deliveries from `--senders`
//! concurrent senders to one trigger on a real `railyard server` process (this
//! binary, on a temporary data directory, fsync on). Every delivery must be
//! answered `202` with a run id of its own, and `ListRuns` must show each of those
//! runs once and no other: started exactly once. Prints the rate and the latency
//! p50/p99/max of the answers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use railyard_engine::signature::sign;
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_proto::v1::ListRunsRequest;
use railyard_sdk::Client;
use serde_json::json;
use tokio::task::JoinSet;

use crate::output::{self, Output};
use crate::schedules::spawn_server;
use crate::{BenchArgs, percentile};

/// The trigger every delivery goes to.
const TRIGGER: &str = "bench-hook";
/// The HMAC secret, handed to the server child in its environment.
const SECRET: &str = "railyard bench webhook secret";
const SECRET_ENV: &str = "BENCH_HOOK_SECRET";

/// Runs the webhook bench with `count` deliveries.
pub(crate) async fn run(output: Output, args: &BenchArgs, count: u32) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-webhooks-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows = dir.path().join("workflows");
    std::fs::create_dir_all(&workflows)?;
    let def = json!({
        "id": "bench-hook", "version": "1", "name": "Webhook bench",
        "description": "Written by `railyard bench --webhooks`; nothing works its step.",
        "steps": [{ "id": "only", "title": "Only", "prompt": "Bench {{goal}}" }],
    });
    std::fs::write(
        workflows.join("bench-hook.json"),
        serde_json::to_vec_pretty(&def)?,
    )?;
    let config = dir.path().join("railyard.toml");
    std::fs::write(
        &config,
        format!(
            "[[triggers]]\nid = \"{TRIGGER}\"\nworkflow = \"bench-hook\"\n\
             goal = \"PR #{{{{$.number}}}}: {{{{$.pull_request.title}}}}\"\n\
             context = {{ repo = \"{{{{$.repository.full_name}}}}\" }}\n\
             signature_secret = \"${SECRET_ENV}\"\n"
        ),
    )?;
    let config_arg = config.display().to_string();
    let server = spawn_server(
        &dir.path().join("data"),
        &workflows,
        &["--config", &config_arg],
        &[(SECRET_ENV, SECRET)],
    )?;
    tracing::info!(url = %server.url, http = %server.http_addr, "bench server started");
    let hook = format!("http://{}/hooks/{DEFAULT_NAMESPACE}/{TRIGGER}", server.http_addr);
    let timeout = Duration::from_secs(args.timeout);

    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.senders as usize)
        .timeout(timeout)
        .build()?;
    let next = Arc::new(AtomicU32::new(0));
    let t0 = Instant::now();
    let mut senders = JoinSet::new();
    for _ in 0..args.senders {
        let (http, hook, next) = (http.clone(), hook.clone(), next.clone());
        senders.spawn(async move {
            let mut answered = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(answered);
                }
                let body = json!({
                    "number": i,
                    "pull_request": { "title": format!("change {i}") },
                    "repository": { "full_name": "acme/bench" },
                })
                .to_string();
                let signature = sign(SECRET.as_bytes(), body.as_bytes());
                let sent = Instant::now();
                let resp = http
                    .post(&hook)
                    .header("content-type", "application/json")
                    .header("X-Hub-Signature-256", signature)
                    .header("X-GitHub-Delivery", format!("bench-{i}"))
                    .body(body)
                    .send()
                    .await
                    .with_context(|| format!("delivery {i}"))?;
                let status = resp.status().as_u16();
                let answer: serde_json::Value = resp.json().await.with_context(|| format!("delivery {i}"))?;
                let took = sent.elapsed();
                if status != 202 {
                    bail!("delivery {i} was answered {status}: {answer}");
                }
                let run_id = answer["runId"].as_str().unwrap_or_default().to_string();
                answered.push((run_id, took));
            }
        });
    }
    let mut latencies = Vec::with_capacity(count as usize);
    let mut run_ids = BTreeSet::new();
    while let Some(joined) = senders.join_next().await {
        for (run_id, took) in joined.context("a sender panicked")?? {
            run_ids.insert(run_id);
            latencies.push(took);
        }
    }
    let elapsed = t0.elapsed();
    if run_ids.len() != count as usize {
        bail!("{count} deliveries answered {} distinct run ids", run_ids.len());
    }

    // Exactly once: the server's runs are the answered ones, each once.
    let client = Client::connect(&server.url).await?;
    let listed = all_runs(&client).await?;
    let distinct: BTreeSet<_> = listed.iter().cloned().collect();
    if listed.len() != count as usize || distinct != run_ids {
        bail!(
            "{count} deliveries answered, but the server lists {} runs ({} distinct, {} of them answered)",
            listed.len(),
            distinct.len(),
            distinct.intersection(&run_ids).count()
        );
    }
    let memory = super::Memory::of(&server.child.id().to_string());
    drop(server);

    latencies.sort();
    let rate = f64::from(count) / elapsed.as_secs_f64();
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    let (p50, p99, max) = (
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or_default(),
    );
    if output.is_json() {
        output::json(&json!({
            "deliveries": count,
            "senders": args.senders,
            "all_accepted": true,
            "started_exactly_once": true,
            "elapsed_ms": ms(elapsed),
            "rate_per_s": rate,
            "latency_ms": { "p50": ms(p50), "p99": ms(p99), "max": ms(max) },
            "server_memory": memory.map(|m| m.json()),
        }))?;
    } else {
        output::line(format!(
            "webhooks  {count} signed deliveries from {} senders: all 202, each started exactly once (ListRuns)",
            args.senders
        ))?;
        output::line(format!(
            "rate      {rate:.0}/s over {:.2}s",
            elapsed.as_secs_f64()
        ))?;
        output::line(format!(
            "latency   p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            ms(p50),
            ms(p99),
            ms(max)
        ))?;
        if let Some(m) = memory {
            output::line(format!("memory    server {}", m.line()))?;
        }
    }
    Ok(())
}

/// Every run id in the default namespace, page by page.
async fn all_runs(client: &Client) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_runs(ListRunsRequest {
                namespace: DEFAULT_NAMESPACE.into(),
                page_size: 1000,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await?;
        out.extend(page.runs.into_iter().map(|r| r.run_id));
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}
