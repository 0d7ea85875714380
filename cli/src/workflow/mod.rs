//! `railyard workflow ...`: the workflow definitions a namespace offers (the
//! server's files and those registered from code), and registering one.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use railyard_engine::registry::MAX_DEFINITION_BYTES;
use railyard_proto::v1::{ListWorkflowsResponse, RegisterWorkflowResponse};
use serde_json::json;

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table, truncate};
use crate::client::view::{invalid_workflow_json, workflow_json};
use crate::serve::builtin;

/// `railyard workflow` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowCommand {
    /// List the valid workflow definitions (the server's, then those registered in
    /// the namespace), then the files that failed validation.
    List,
    /// Register a workflow definition file in the namespace (the server keeps it in
    /// its store): validated as the server's own files are; the same content again
    /// changes nothing, a changed one is what new runs start with.
    Apply(ApplyArgs),
}

/// Flags of `workflow apply`.
#[derive(Debug, Args)]
pub(crate) struct ApplyArgs {
    /// The definition file (JSON, a regular file of at most 1 MiB).
    pub file: PathBuf,
}

/// Runs one `railyard workflow` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: WorkflowCommand) -> anyhow::Result<()> {
    match command {
        WorkflowCommand::List => list(global).await,
        WorkflowCommand::Apply(a) => apply(global, a).await,
    }
}

async fn apply(global: &GlobalOpts, a: ApplyArgs) -> anyhow::Result<()> {
    let text = railyard_files::read_regular_text(&a.file, MAX_DEFINITION_BYTES)
        .with_context(|| format!("workflow definition {}", a.file.display()))?;
    let client = global.connect().await?;
    let resp = client.register_workflow(&global.namespace, text).await?;
    if global.output.is_json() {
        output::json(&json!({
            "changed": resp.changed,
            "workflow": resp.workflow.as_ref().map(workflow_json),
        }))?;
        return Ok(());
    }
    output::line(apply_line(&global.namespace, &resp))?;
    Ok(())
}

/// The human rendering of `workflow apply`.
pub(crate) fn apply_line(namespace: &str, resp: &RegisterWorkflowResponse) -> String {
    let Some(wf) = &resp.workflow else {
        return "registered (the server named no workflow)".to_string();
    };
    let ns = if namespace.is_empty() {
        railyard_proto::DEFAULT_NAMESPACE
    } else {
        namespace
    };
    let hash = wf.content_hash.get(..12).unwrap_or(&wf.content_hash);
    if resp.changed {
        format!(
            "registered workflow {} version {} in namespace {ns} (content {hash}); new runs start with it",
            wf.id, wf.version
        )
    } else {
        format!(
            "workflow {} unchanged: version {} (content {hash}) is registered in namespace {ns} already",
            wf.id, wf.version
        )
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
        if resp.workflows.iter().any(|wf| wf.registered) {
            lines.push(String::new());
            lines.push(
                "<registered>: registered from code in this namespace (railyard workflow apply, \
                 History.RegisterWorkflow), kept in the server's store"
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
