//! `railyard batch ...`: batch operations (the server's `Batches` service): one
//! action applied to every run a list query matches, at a bounded rate, as a
//! durable job on the server; `describe`, `list` and `stop` follow it. Needs an
//! admin key (docs/batches.md).

use clap::{Args, Subcommand};
use railyard_proto::v1::{
    BatchAction, BatchInfo, BatchRunOutcome, ListBatchesRequest, StartBatchRequest, StopBatchRequest,
};
use serde_json::json;

use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output::{self, Table};
use crate::client::timefmt;

/// `railyard batch` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum BatchCommand {
    /// Cancel every open run a query matches.
    Cancel(Common),
    /// Terminate every open run a query matches.
    Terminate(Common),
    /// Reset every run a query matches (closed ones too) to a step.
    Reset(ResetArgs),
    /// Rerun every run a query matches (closed ones too) from its first step.
    Rerun(Common),
    /// Signal every open run a query matches.
    Signal(SignalArgs),
    /// A batch's progress, and the runs it skipped or failed on with the reasons.
    Describe(IdArg),
    /// The namespace's batches, oldest first.
    List(ListArgs),
    /// Stop a running batch: the runs it has not reached are left as they are.
    Stop(StopArgs),
}

/// Flags every action takes.
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// The runs to act on: a list query (docs/search-and-queries.md), e.g.
    /// 'WorkflowId = "review-pr" AND Status = "RUNNING"'. At most 10,000 may match.
    #[arg(long, value_name = "QUERY")]
    pub query: String,
    /// Recorded with each action (the cancel, terminate or reset reason).
    #[arg(long)]
    pub reason: Option<String>,
    /// Runs acted on per second, 1 to 1000: `20` or `20/s` [default: 50].
    #[arg(long, value_name = "N/s", value_parser = rate)]
    pub rate: Option<u32>,
    /// Only say how many runs match, and the first few; start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Choose the batch's id [default: one generated for this command, kept across
    /// its retries].
    #[arg(long, value_name = "ID")]
    pub batch_id: Option<String>,
}

/// Flags of `batch reset`.
#[derive(Debug, Args)]
pub(crate) struct ResetArgs {
    #[command(flatten)]
    pub common: Common,
    /// The step each new run starts at [default: each run's first failed step].
    #[arg(long, value_name = "STEP")]
    pub to_step: Option<String>,
}

/// Flags of `batch signal`.
#[derive(Debug, Args)]
pub(crate) struct SignalArgs {
    #[command(flatten)]
    pub common: Common,
    /// The signal's name.
    #[arg(long)]
    pub name: String,
    /// The signal's payload, a JSON document.
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
}

/// A batch id.
#[derive(Debug, Args)]
pub(crate) struct IdArg {
    pub batch_id: String,
}

/// Flags of `batch list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Most batches to show [default and most: 100].
    #[arg(long, default_value_t = 0)]
    pub limit: u32,
    #[arg(long, value_name = "TOKEN")]
    pub page_token: Option<String>,
}

/// Flags of `batch stop`.
#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    pub batch_id: String,
    #[arg(long)]
    pub reason: Option<String>,
}

/// A rate: `N` or `N/s`.
fn rate(text: &str) -> Result<u32, String> {
    let n = text.strip_suffix("/s").unwrap_or(text);
    n.trim()
        .parse::<u32>()
        .map_err(|_| format!("{text:?} is not a rate: give runs per second, e.g. 20 or 20/s"))
}

/// Runs a `batch` subcommand.
pub(crate) async fn run(global: &GlobalOpts, c: BatchCommand) -> anyhow::Result<()> {
    let (action, common, to_step, signal) = match c {
        BatchCommand::Cancel(a) => (BatchAction::Cancel, a, None, None),
        BatchCommand::Terminate(a) => (BatchAction::Terminate, a, None, None),
        BatchCommand::Rerun(a) => (BatchAction::Rerun, a, None, None),
        BatchCommand::Reset(a) => (BatchAction::Reset, a.common, a.to_step, None),
        BatchCommand::Signal(a) => (BatchAction::Signal, a.common, None, Some((a.name, a.payload))),
        BatchCommand::Describe(a) => return describe(global, &a.batch_id).await,
        BatchCommand::List(a) => return list(global, a).await,
        BatchCommand::Stop(a) => return stop(global, a).await,
    };
    let (signal_name, signal_payload_json) = signal
        .map(|(n, p)| (n, p.unwrap_or_default()))
        .unwrap_or_default();
    let client = global.connect().await?;
    let resp = client
        .start_batch(StartBatchRequest {
            namespace: global.namespace.clone(),
            identity: cli_identity(),
            action: action as i32,
            query: common.query,
            reason: common.reason.unwrap_or_default(),
            rate_per_second: common.rate,
            dry_run: common.dry_run,
            batch_id: common.batch_id.unwrap_or_default(),
            to_step: to_step.unwrap_or_default(),
            signal_name,
            signal_payload_json,
        })
        .await?;
    if global.output.is_json() {
        let mut doc = json!({
            "dry_run": common.dry_run,
            "matched": resp.matched,
            "over_limit": resp.over_limit,
            "sample_run_ids": resp.sample_run_ids,
        });
        if let Some(b) = &resp.batch {
            doc["batch"] = batch_json(b);
            doc["created"] = json!(resp.created);
        }
        output::json(&doc)?;
        return Ok(());
    }
    let more = if resp.over_limit { "more than " } else { "" };
    let Some(b) = resp.batch else {
        output::line(format!(
            "{more}{} run(s) match; a {} batch would act on them",
            resp.matched.min(10_000),
            action_name(action)
        ))?;
        if resp.over_limit {
            output::line("a batch acts on at most 10000 runs: narrow the query")?;
        }
        for id in &resp.sample_run_ids {
            output::line(format!("  {id}"))?;
        }
        if resp.matched > resp.sample_run_ids.len() as u64 {
            output::line(format!(
                "  ... and {} more",
                resp.matched - resp.sample_run_ids.len() as u64
            ))?;
        }
        return Ok(());
    };
    let verb = if resp.created {
        "started"
    } else {
        "already started:"
    };
    output::line(format!(
        "{verb} batch {}: {} {} run(s) at {}/s (railyard batch describe {})",
        b.batch_id,
        action_name(b.action()),
        b.total,
        b.rate_per_second,
        b.batch_id
    ))?;
    Ok(())
}

fn action_name(a: BatchAction) -> &'static str {
    match a {
        BatchAction::Cancel => "cancel",
        BatchAction::Terminate => "terminate",
        BatchAction::Reset => "reset",
        BatchAction::Rerun => "rerun",
        BatchAction::Signal => "signal",
        BatchAction::Unspecified => "unknown",
    }
}

fn batch_json(b: &BatchInfo) -> serde_json::Value {
    json!({
        "batch_id": b.batch_id,
        "namespace": b.namespace,
        "action": action_name(b.action()),
        "query": b.query,
        "reason": b.reason,
        "rate_per_second": b.rate_per_second,
        "identity": b.identity,
        "state": b.state,
        "total": b.total,
        "reached": b.reached,
        "succeeded": b.succeeded,
        "skipped": b.skipped,
        "failed": b.failed,
        "to_step": b.to_step,
        "signal_name": b.signal_name,
        "create_time_unix_ms": b.create_time_unix_ms,
        "create_time": timefmt::rfc3339(b.create_time_unix_ms),
        "close_time_unix_ms": b.close_time_unix_ms,
        "close_time": timefmt::rfc3339_or_null(b.close_time_unix_ms),
        "stopped_by": b.stopped_by,
        "stop_reason": b.stop_reason,
    })
}

fn outcome_json(o: &BatchRunOutcome) -> serde_json::Value {
    json!({
        "index": o.index,
        "run_id": o.run_id,
        "outcome": o.outcome,
        "reason": o.reason,
        "time_unix_ms": o.time_unix_ms,
    })
}

fn fields(b: &BatchInfo) -> Vec<(&'static str, String)> {
    let mut f = vec![
        ("batch", b.batch_id.clone()),
        ("action", action_name(b.action()).to_string()),
        ("query", b.query.clone()),
        ("state", b.state.clone()),
        (
            "progress",
            format!(
                "{}/{} reached: {} done, {} skipped, {} failed",
                b.reached, b.total, b.succeeded, b.skipped, b.failed
            ),
        ),
        ("rate", format!("{}/s", b.rate_per_second)),
        ("started by", b.identity.clone()),
        ("created", timefmt::rfc3339(b.create_time_unix_ms)),
    ];
    if b.close_time_unix_ms > 0 {
        f.push(("closed", timefmt::rfc3339(b.close_time_unix_ms)));
    }
    if !b.reason.is_empty() {
        f.push(("reason", b.reason.clone()));
    }
    if !b.to_step.is_empty() {
        f.push(("to step", b.to_step.clone()));
    }
    if !b.signal_name.is_empty() {
        f.push(("signal", b.signal_name.clone()));
    }
    if b.state == "stopped" {
        f.push(("stopped by", b.stopped_by.clone()));
        f.push(("stop reason", b.stop_reason.clone()));
    }
    f
}

async fn describe(global: &GlobalOpts, batch_id: &str) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client.describe_batch(&global.namespace, batch_id).await?;
    let b = resp.batch.unwrap_or_default();
    if global.output.is_json() {
        let mut doc = batch_json(&b);
        doc["problems"] = json!(resp.problems.iter().map(outcome_json).collect::<Vec<_>>());
        output::json(&doc)?;
        return Ok(());
    }
    output::print_fields(&fields(&b))?;
    if !resp.problems.is_empty() {
        output::line("")?;
        let mut table = Table::new(["RUN", "OUTCOME", "REASON"]);
        for p in &resp.problems {
            table.row([
                p.run_id.clone(),
                p.outcome.clone(),
                output::truncate(&p.reason, 120),
            ]);
        }
        table.print()?;
    }
    Ok(())
}

async fn list(global: &GlobalOpts, a: ListArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client
        .list_batches(ListBatchesRequest {
            namespace: global.namespace.clone(),
            page_size: a.limit,
            page_token: a.page_token.unwrap_or_default(),
        })
        .await?;
    if global.output.is_json() {
        let rows: Vec<_> = resp.batches.iter().map(batch_json).collect();
        output::json(&json!({ "batches": rows, "next_page_token": resp.next_page_token }))?;
        return Ok(());
    }
    if resp.batches.is_empty() {
        output::line("no batches")?;
    } else {
        let mut table = Table::new([
            "BATCH", "ACTION", "STATE", "REACHED", "DONE", "SKIPPED", "FAILED", "CREATED",
        ]);
        for b in &resp.batches {
            table.row([
                b.batch_id.clone(),
                action_name(b.action()).to_string(),
                b.state.clone(),
                format!("{}/{}", b.reached, b.total),
                b.succeeded.to_string(),
                b.skipped.to_string(),
                b.failed.to_string(),
                timefmt::rfc3339(b.create_time_unix_ms),
            ]);
        }
        table.print()?;
    }
    if !resp.next_page_token.is_empty() {
        output::line(format!("next page: --page-token {}", resp.next_page_token))?;
    }
    Ok(())
}

async fn stop(global: &GlobalOpts, a: StopArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let b = client
        .stop_batch(StopBatchRequest {
            namespace: global.namespace.clone(),
            batch_id: a.batch_id,
            identity: cli_identity(),
            reason: a.reason.unwrap_or_default(),
        })
        .await?
        .batch
        .unwrap_or_default();
    if global.output.is_json() {
        output::json(&batch_json(&b))?;
        return Ok(());
    }
    output::line(format!(
        "batch {} is {}: {}/{} reached",
        b.batch_id, b.state, b.reached, b.total
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_rate_is_a_number_per_second() {
        assert_eq!(super::rate("20"), Ok(20));
        assert_eq!(super::rate("20/s"), Ok(20));
        assert!(super::rate("fast").unwrap_err().contains("runs per second"));
        assert!(super::rate("-1/s").is_err());
    }
}
