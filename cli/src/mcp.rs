//! `railyard mcp`: an MCP server on stdin/stdout (the `rmcp` crate), so that an agent
//! someone already uses (Claude Code, Cursor, any MCP client) can work with a Railyard
//! server.
//!
//! stdout carries MCP messages and nothing else; logs go to stderr. The Railyard server
//! is reached through [`railyard_proto::Client`] (`--server`, `RAILYARD_SERVER`); a
//! server that cannot be reached, or that refuses a request, is a tool error the agent
//! can read (`isError: true`), never the end of this process. The process ends when
//! the client closes stdin (or stdout breaks).
//!
//! Tools so far: `list_workflows`. The step-by-step tools of issue 9 (`start_workflow`,
//! `complete_step`, ...) go next to it.

use std::time::Duration;

use anyhow::Context;
use railyard_proto::v1::ListWorkflowsResponse;
use railyard_proto::{Client, ConnectOptions};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde_json::{Value, json};

use crate::global::GlobalOpts;

/// What the gateway tells the agent about itself when it connects.
const INSTRUCTIONS: &str = "Railyard runs durable, multi-step agent workflows. \
     `list_workflows` shows the workflow definitions the Railyard server has loaded.";

/// The MCP server: one Railyard client, one namespace, and the tools (built once).
#[derive(Clone)]
pub struct Gateway {
    client: Client,
    namespace: String,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Gateway {
    /// A gateway that sends its requests through `client`, in `namespace`.
    pub fn new(client: Client, namespace: String) -> Self {
        Self {
            client,
            namespace,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "List the workflows the Railyard server can run: for each its id (what start_workflow takes), \
                       name, description, version and number of steps; then any definition files the server \
                       rejected, with the reason."
    )]
    async fn list_workflows(&self) -> Result<CallToolResult, ErrorData> {
        Ok(match self.client.list_workflows(&self.namespace).await {
            Ok(resp) => CallToolResult::structured(workflows_json(&resp)),
            Err(e) => tool_error(format!(
                "cannot list workflows from the Railyard server at {}: {e}",
                self.client.url()
            )),
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("railyard", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS.to_string())
    }
}

/// A tool result the agent reads as a failure.
fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The `list_workflows` result.
fn workflows_json(resp: &ListWorkflowsResponse) -> Value {
    json!({
        "workflows": resp.workflows.iter().map(|wf| json!({
            "id": wf.id,
            "name": wf.name,
            "description": wf.description,
            "version": wf.version,
            "steps": wf.step_ids.len(),
            "source": wf.source_file,
        })).collect::<Vec<_>>(),
        "invalid": resp.invalid.iter().map(|bad| json!({
            "source": bad.source_file,
            "error": bad.error,
        })).collect::<Vec<_>>(),
    })
}

/// `railyard mcp`: serves MCP on stdin/stdout until the client goes away.
pub async fn run(global: &GlobalOpts) -> anyhow::Result<()> {
    // Fewer, shorter retries than a worker's: an agent waits on each tool call.
    let opts = ConnectOptions {
        max_attempts: 3,
        request_timeout: Duration::from_secs(15),
        ..global.connect_options()
    };
    let client = Client::connect_with(&global.server, opts).await?;
    tracing::info!(server = %global.server, namespace = %global.namespace, "railyard mcp: serving MCP on stdio");
    let service = Gateway::new(client, global.namespace.clone())
        .serve(rmcp::transport::stdio())
        .await
        .context("MCP session did not start")?;
    let reason = service.waiting().await.context("MCP session failed")?;
    tracing::info!(?reason, "railyard mcp: the MCP client went away");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_proto::v1::{InvalidWorkflow, WorkflowInfo};

    #[test]
    fn workflows_are_listed_with_step_counts_and_rejected_files() {
        let resp = ListWorkflowsResponse {
            workflows: vec![WorkflowInfo {
                id: "demo".into(),
                version: "1".into(),
                name: "Demo".into(),
                description: "d".into(),
                step_ids: vec!["a".into(), "b".into()],
                source_file: "<built-in>/demo.json".into(),
            }],
            invalid: vec![InvalidWorkflow {
                source_file: "w/bad.json".into(),
                error: "w/bad.json: $: missing field `id`".into(),
            }],
        };
        assert_eq!(
            workflows_json(&resp),
            json!({
                "workflows": [{"id": "demo", "name": "Demo", "description": "d", "version": "1",
                               "steps": 2, "source": "<built-in>/demo.json"}],
                "invalid": [{"source": "w/bad.json", "error": "w/bad.json: $: missing field `id`"}],
            })
        );
    }
}
