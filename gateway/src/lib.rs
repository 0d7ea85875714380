//! The MCP gateway: a worker whose agent is outside Railyard. An agent someone
//! already uses (Claude Code, Cursor, any MCP client) lists workflows, starts a run
//! and works through it one step at a time, under the same leases, task tokens and
//! history as any worker.
//!
//! The gateway talks to the server over gRPC ([`Client`]) like any worker, so the
//! same code serves `railyard mcp` on stdio and `/mcp` on the server's HTTP listener
//! (see [`stdio`] and [`http`]; both answer input that is not a JSON-RPC message with
//! a JSON-RPC error, `jsonrpc`). Runs it starts go to its own task queue (`StartRunRequest.task_queue`),
//! so no ordinary worker of the workflow's queue takes their steps; it leases a
//! run's step with a run-specific poll (`PollStepTaskRequest.run_id`), keeps the
//! lease alive while the agent works ([`held`]), and hands the agent a continue
//! token instead of the raw task token. Every failure — the server unreachable, a
//! refused token, bad input — is a tool result with `isError: true` that says what
//! to do next; nothing here ends the MCP session.
//!
//! On `/mcp`, each tool call acts for the HTTP request that carried it ([`CallAs`]):
//! the gateway's calls carry that request's API key and the subject of its verified
//! client certificate, so the server applies the caller's role, namespace and queues
//! exactly as to any client, and a continue token is good only for the caller it was
//! handed to.

// The doc comments of the tools' arguments are their JSON Schema descriptions, which
// MCP clients read verbatim: `[NOT]` and `<step id>` are for them, not rustdoc.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

mod held;
pub mod http;
mod jsonrpc;
pub mod sessions;
pub mod stdio;
mod tail;
mod tools;
mod view;

use std::sync::Arc;
use std::time::Duration;

use railyard_proto::v1::{PollStepTaskRequest, RunInfo, StepTask};
use railyard_sdk::{ApiKey, Client};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, tool_handler};
use serde_json::{Value, json};

use held::{Holdings, Owner};

/// The gateway's default task queue.
pub const DEFAULT_QUEUE: &str = "mcp";
/// Steps one gateway process holds at most (each costs a heartbeat task).
const DEFAULT_MAX_HELD: usize = 64;
/// How long `resume_run` waits by default for a step still leased elsewhere.
const DEFAULT_RESUME_WAIT: Duration = Duration::from_secs(90);
/// The longest wait `resume_run` accepts.
const MAX_RESUME_WAIT: Duration = Duration::from_secs(300);
/// How long starting or continuing a run waits for its next step to be ready.
const NEXT_STEP_WAIT: Duration = Duration::from_secs(20);
/// One run-specific poll's wait (the server caps polls at 60 s).
const POLL_SLICE: Duration = Duration::from_secs(30);

/// What the gateway tells the agent about itself when it connects.
const INSTRUCTIONS: &str = "Railyard runs durable, multi-step agent workflows. You drive a run one step at a time: \
     list_workflows shows what can run; start_workflow starts a run and hands you its first step (a prompt and a \
     continue token); do the work, then complete_step with the token and your notes, which hands you the next step \
     or the run's result. If this gateway restarted, resume_run gives you the current step again with a fresh token. \
     get_run, list_runs and signal_run read and steer runs.";

/// How a gateway is set up.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// The namespace of every request.
    pub namespace: String,
    /// The queue of the runs it starts, and of the steps it leases.
    pub queue: String,
    /// The identity it reports as (in every event it causes).
    pub identity: String,
    /// Steps held at most at once.
    pub max_held: usize,
}

impl GatewayOptions {
    /// The defaults: the [`DEFAULT_QUEUE`], at most 64 steps held.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            queue: DEFAULT_QUEUE.to_string(),
            identity: identity.into(),
            max_held: DEFAULT_MAX_HELD,
        }
    }
}

/// The MCP server. Clones share the held steps, so every MCP session of one process
/// (the HTTP transport makes one per client) sees the same continue tokens.
#[derive(Clone)]
pub struct Gateway {
    client: Client,
    opts: Arc<GatewayOptions>,
    held: Holdings,
    tool_router: ToolRouter<Self>,
}

impl Gateway {
    /// A gateway sending its requests through `client` (on `/mcp`, with each HTTP
    /// caller's credentials instead of the client's own: see [`CallAs`]).
    pub fn new(client: Client, opts: GatewayOptions) -> Self {
        let held = Holdings::new(opts.identity.clone(), opts.max_held);
        Self {
            client,
            opts: Arc::new(opts),
            held,
            tool_router: Self::tool_router(),
        }
    }

    /// Whom a tool call acts for. On stdio (no HTTP request): the gateway's own
    /// client. On `/mcp`: its client with the request's `authorization: Bearer` key and
    /// the subject the server's HTTP layer verified ([`railyard_proto::PEER_SUBJECT`],
    /// a header the server sets itself after removing any the client sent).
    fn call_as(&self, extensions: &rmcp::model::Extensions) -> Result<CallAs, String> {
        let Some(parts) = extensions.get::<::http::request::Parts>() else {
            return Ok(CallAs {
                client: self.client.clone(),
                owner: Owner::default(),
            });
        };
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let api_key = header(::http::header::AUTHORIZATION.as_str())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, key)| scheme.eq_ignore_ascii_case("bearer") && !key.trim().is_empty())
            .map(|(_, key)| key.trim().to_string());
        let peer_subject = header(railyard_proto::PEER_SUBJECT).map(str::to_string);
        if api_key.is_none() && peer_subject.is_none() {
            return Ok(CallAs {
                client: self.client.clone(),
                owner: Owner::default(),
            });
        }
        let client = self
            .client
            .with_caller(api_key.clone().map(ApiKey::new).as_ref(), peer_subject.as_deref())
            .map_err(|e| format!("cannot call the Railyard server with these credentials: {e}"))?;
        Ok(CallAs {
            client,
            owner: Owner {
                api_key,
                peer_subject,
            },
        })
    }

    /// The run as the server has it now.
    async fn describe(&self, call: &CallAs, run_id: &str) -> Result<RunInfo, String> {
        call.client
            .describe_run(&self.opts.namespace, run_id)
            .await
            .map_err(|e| {
                format!(
                    "cannot read run {:?} from the Railyard server at {}: {e}",
                    short(run_id),
                    call.client.url()
                )
            })?
            .run
            .ok_or_else(|| format!("the server answered without run {:?}", short(run_id)))
    }

    /// Leases `run_id`'s current step on this gateway's queue, waiting up to `wait`.
    async fn lease_run(
        &self,
        call: &CallAs,
        run_id: &str,
        wait: Duration,
    ) -> Result<Option<StepTask>, String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let slice = left.min(POLL_SLICE).max(Duration::from_millis(1));
            let req = PollStepTaskRequest {
                namespace: self.opts.namespace.clone(),
                task_queue: self.opts.queue.clone(),
                identity: self.opts.identity.clone(),
                wait_timeout_ms: u32::try_from(slice.as_millis()).unwrap_or(u32::MAX),
                run_id: run_id.to_string(),
            };
            match call.client.poll_step_task(req).await {
                Ok(Some(task)) => return Ok(Some(task)),
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    // A closed run answers at once; do not spin on it.
                    let run = self.describe(call, run_id).await?;
                    if !is_open(&run) {
                        return Ok(None);
                    }
                    // An early empty answer (a server shutting down) must not become a busy loop.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(None) => return Ok(None),
                Err(e) => {
                    return Err(format!(
                        "cannot lease the step of run {:?} from the Railyard server at {}: {e}",
                        short(run_id),
                        call.client.url()
                    ));
                }
            }
        }
    }

    /// Holds a step leased for `call` and answers it to the agent.
    fn hand_over(&self, call: &CallAs, task: StepTask) -> Value {
        let token = self
            .held
            .hold(task.clone(), call.client.clone(), call.owner.clone());
        tracing::info!(run_id = %task.run_id, step = %task.step_id, attempt = task.attempt, queue = %self.opts.queue, "step handed to the agent");
        view::step(&task, &token)
    }

    /// Where `run_id` goes next, for the agent: its current step leased and held, or
    /// its result when it has ended, or why the agent has nothing to do now.
    async fn next_for_agent(&self, call: &CallAs, run_id: &str, wait: Duration) -> Result<Value, String> {
        let run = self.describe(call, run_id).await?;
        if !is_open(&run) {
            return Ok(view::finished(&run));
        }
        if let Some(off) = self.elsewhere(&run) {
            return Ok(off);
        }
        if !self.held.has_room() {
            return Err(self.full());
        }
        match self.lease_run(call, run_id, wait).await? {
            Some(task) => Ok(self.hand_over(call, task)),
            None => {
                let run = self.describe(call, run_id).await?;
                if !is_open(&run) {
                    return Ok(view::finished(&run));
                }
                Err(format!(
                    "{}: its step did not become ready for this gateway within {} s. Call resume_run with \
                     run_id {run_id:?} to wait for it.",
                    view::where_run_is(&run),
                    wait.as_secs()
                ))
            }
        }
    }

    /// When the run's current step is on another queue than this gateway's: the
    /// answer saying that workers there run it.
    fn elsewhere(&self, run: &RunInfo) -> Option<Value> {
        let step = run.steps.get(run.current_step as usize)?;
        (!step.task_queue.is_empty() && step.task_queue != self.opts.queue).then(|| {
            json!({
                "status": "elsewhere",
                "run_id": run.run_id,
                "message": format!(
                    "{}; that step runs on task queue {:?}, served by ordinary workers, not on this gateway's queue \
                     {:?}. Follow it with get_run; when the run comes back to this gateway's queue, resume_run \
                     hands you its step.",
                    view::where_run_is(run), step.task_queue, self.opts.queue
                ),
            })
        })
    }

    fn full(&self) -> String {
        format!(
            "this gateway already holds {} steps, its limit: complete some before starting or resuming more",
            self.held.len()
        )
    }
}

/// Whom one tool call acts for (see [`Gateway::call_as`]).
struct CallAs {
    /// The gateway's client, with the caller's credentials.
    client: Client,
    /// Who holds what this call leases.
    owner: Owner,
}

/// At most the first 64 characters of what the agent sent, for messages.
fn short(s: &str) -> String {
    const SHOWN: usize = 64;
    match s.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_string(),
    }
}

fn is_open(run: &RunInfo) -> bool {
    railyard_proto::v1::RunStatus::try_from(run.status).is_ok_and(|s| s.is_open())
}

/// A tool result the agent reads as a failure.
fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("railyard", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS.to_string())
    }
}
