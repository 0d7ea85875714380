//! `railyard run count`: how many runs a query matches, whole or by group
//! (`History.CountRuns`).

use clap::Args;
use railyard_proto::v1::CountRunsRequest;
use serde_json::json;

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table};

/// Flags of `run count`.
#[derive(Debug, Args)]
pub(crate) struct CountArgs {
    /// Only runs this query matches (docs/search-and-queries.md), e.g.
    /// 'WorkflowId = "review-pr" AND Status = "FAILED"'.
    #[arg(long, value_name = "QUERY")]
    pub query: Option<String>,
    /// Count by this keyword field: Status, WorkflowId, WorkflowVersion, TaskQueue,
    /// FailureType or ParentRunId.
    #[arg(long, value_name = "FIELD")]
    pub group_by: Option<String>,
}

pub(crate) async fn count(global: &GlobalOpts, a: CountArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client
        .count_runs(CountRunsRequest {
            namespace: global.namespace.clone(),
            query: a.query.unwrap_or_default(),
            group_by: a.group_by.clone().unwrap_or_default(),
        })
        .await?;
    if global.output.is_json() {
        let groups: Vec<_> = resp
            .groups
            .iter()
            .map(|g| json!({ "value": (!g.is_null).then_some(&g.value), "count": g.count }))
            .collect();
        let mut doc = json!({ "count": resp.count });
        if a.group_by.is_some() {
            doc["groups"] = json!(groups);
            if resp.other_groups > 0 {
                doc["other"] = json!({ "groups": resp.other_groups, "count": resp.other_count });
            }
        }
        output::json(&doc)?;
        return Ok(());
    }
    match a.group_by {
        None => output::line(resp.count)?,
        Some(field) => {
            let mut table = Table::new([field.to_uppercase().as_str(), "COUNT"]);
            for g in &resp.groups {
                let value = if g.is_null {
                    "(null)".to_string()
                } else {
                    g.value.clone()
                };
                table.row([value, g.count.to_string()]);
            }
            if resp.other_groups > 0 {
                table.row([
                    format!("({} other values)", resp.other_groups),
                    resp.other_count.to_string(),
                ]);
            }
            table.row(["TOTAL".to_string(), resp.count.to_string()]);
            table.print()?;
        }
    }
    Ok(())
}
