//! `railyard workflow ...`: the workflow definitions the server has loaded.

use clap::Subcommand;
use railyard_proto::v1::ListWorkflowsResponse;
use serde_json::json;

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table, truncate};
use crate::client::view::{invalid_workflow_json, workflow_json};
use crate::serve::builtin;

/// `railyard workflow` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowCommand {
    /// List the valid workflow definitions, then the files that failed validation.
    List,
}

/// Runs one `railyard workflow` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: WorkflowCommand) -> anyhow::Result<()> {
    match command {
        WorkflowCommand::List => list(global).await,
    }
}

async fn list(global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client.list_workflows(&global.namespace).await?;
    if global.output.is_json() {
        output::json(&json!({
            "workflows": resp.workflows.iter().map(workflow_json).collect::<Vec<_>>(),
            "invalid": resp.invalid.iter().map(invalid_workflow_json).collect::<Vec<_>>(),
        }))?;
        return Ok(());
    }
    for text in list_lines(&resp) {
        output::line(text)?;
    }
    Ok(())
}

/// The human rendering of `workflow list`.
pub(crate) fn list_lines(resp: &ListWorkflowsResponse) -> Vec<String> {
    let mut lines = Vec::new();
    if resp.workflows.is_empty() {
        lines.push("no valid workflows".to_string());
    } else {
        let mut table = Table::new(["ID", "VERSION", "STEPS", "NAME", "FILE"]);
        for wf in &resp.workflows {
            table.row([
                wf.id.clone(),
                wf.version.clone(),
                wf.step_ids.len().to_string(),
                truncate(&wf.name, 40),
                wf.source_file.clone(),
            ]);
        }
        lines.extend(table.render());
        if resp
            .workflows
            .iter()
            .any(|wf| builtin::is_built_in(&wf.source_file))
        {
            lines.push(String::new());
            lines.push(
                "<built-in>: built into the railyard binary, served because the server found no definitions \
                 in its workflows directory and none was given (--workflows)"
                    .to_string(),
            );
        }
    }
    if !resp.invalid.is_empty() {
        lines.push(String::new());
        lines.push(format!("invalid workflow files ({}):", resp.invalid.len()));
        for bad in &resp.invalid {
            // The server's error already reads "file: JSON path: problem".
            let error = if bad.error.starts_with(&bad.source_file) || bad.source_file.is_empty() {
                bad.error.clone()
            } else {
                format!("{}: {}", bad.source_file, bad.error)
            };
            lines.push(format!("  {error}"));
        }
    }
    lines
}

#[cfg(test)]
mod tests;
