//! `railyard queue ...`: task queue state.

use clap::{Args, Subcommand};
use railyard_proto::v1::DescribeTaskQueueResponse;

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table};
use crate::client::timefmt::rfc3339;
use crate::client::view::queue_json;

/// `railyard queue` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum QueueCommand {
    /// Show a task queue's backlog, recent pollers and dispatched-task count.
    Describe(DescribeArgs),
}

/// Flags of `queue describe`.
#[derive(Debug, Args)]
pub(crate) struct DescribeArgs {
    /// The task queue.
    pub queue: String,
}

/// Runs one `railyard queue` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: QueueCommand) -> anyhow::Result<()> {
    match command {
        QueueCommand::Describe(a) => {
            let client = global.connect().await?;
            let resp = client.describe_task_queue(&global.namespace, &a.queue).await?;
            if global.output.is_json() {
                output::json(&queue_json(&a.queue, &resp))?;
            } else {
                for text in describe_lines(&a.queue, &resp) {
                    output::line(text)?;
                }
            }
            Ok(())
        }
    }
}

/// The human rendering of `queue describe`.
pub(crate) fn describe_lines(queue: &str, q: &DescribeTaskQueueResponse) -> Vec<String> {
    let mut lines = vec![
        format!("queue       {queue}"),
        format!("backlog     {}", q.backlog),
        format!("dispatched  {} since the server started", q.dispatched_total),
    ];
    if q.pollers.is_empty() {
        lines.push("pollers     none".to_string());
    } else {
        lines.push(format!("pollers     {}", q.pollers.len()));
        let mut table = Table::new(["  IDENTITY", "LAST SEEN"]);
        for p in &q.pollers {
            table.row([format!("  {}", p.identity), rfc3339(p.last_access_unix_ms)]);
        }
        lines.extend(table.render());
    }
    if !q.keys.is_empty() {
        lines.push(format!("keys        {}", q.keys.len()));
        let mut table = Table::new(["  KEY", "QUEUED", "RUNNING", "LIMIT"]);
        for k in &q.keys {
            let limit = if k.limit == 0 {
                "-".to_string()
            } else {
                k.limit.to_string()
            };
            table.row([
                format!("  {}", k.key),
                k.queued.to_string(),
                k.running.to_string(),
                limit,
            ]);
        }
        lines.extend(table.render());
    }
    lines
}

#[cfg(test)]
mod tests;
