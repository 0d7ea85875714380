//! The agent loop of one step: model call, tool calls, results back, heartbeat, repeat
//! until the model calls `complete_step` or a limit is hit.
//!
//! # Tool errors: recoverable or fatal
//!
//! A failure the model can act on goes back to it as an error result (`is_error`), and
//! the loop goes on: a command's non-zero exit, a missing file, bad or missing
//! arguments, a path outside the workspace, a tool the step does not allow, a
//! `complete_step` the server refused. The stuck detector (`stuck`) watches these, so
//! a model that keeps making the same mistake is stopped.
//!
//! A failure it cannot act on ends the step at once, with a typed reason and no further
//! model call:
//!
//! | what | outcome |
//! |---|---|
//! | the lease is gone (a heartbeat refused `FAILED_PRECONDITION`/`NOT_FOUND`: expired, taken over, the run terminated) | [`Outcome::LeaseLost`]: nothing is reported |
//! | the run's cancellation was requested | [`Outcome::Canceled`]: reported `canceled` |
//! | the server failed the step on a heartbeat (its token budget) | [`Outcome::EndedByServer`]: nothing more is reported |
//! | the workspace is unusable (its directory gone, the disk full or read-only) | [`Outcome::Failed`] `workspace_unusable`, retryable |
//! | the token budget is spent | [`Outcome::Failed`] `token_budget_exceeded`, non-retryable |
//! | the agent is stuck after a warning | [`Outcome::Failed`] `agent_stuck`, non-retryable |

mod between_turns;
mod calls;
mod capacity;
mod checkpoint;
mod issue;
pub(crate) mod principles;
mod spawn;
mod stuck;
mod tool_call;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_proto::v1::{ChildRunSpec, CoordinatorNote, Signal, StepTask, StuckReport, TokenUsage};
use railyard_sdk::{Completion, Failure};
use serde_json::Value;
use tracing::{Instrument, debug, info, warn};

use crate::events::{EventKind, EventSink, StepRef, WorkerEvent, one_line, summarize_tool_input};
use crate::mcp::{McpHub, McpSettings, StepMcp};
use crate::output::OutputChunk;
use crate::prompt;
use crate::provider::{
    Block, BoxFuture, Message, ModelRequest, Models, Provider, ProviderError, RequestMetadata, Role,
    is_overload,
};
use crate::tools::{
    self, AWAIT_RUNS, COMPLETE_STEP, REPORT_ISSUE, SET_SEARCH_ATTRIBUTES, SIGNAL_COORDINATOR, SPAWN_AGENT,
    ToolBox, ToolLimits, ToolOutput, WEB_FETCH, WORKSPACE_TOOLS,
};

use crate::usage::{Budget, ModelPrice, Usage};
use calls::{parse_completion, parse_note, steer_text, with_contract};
use checkpoint::CheckpointWriter;
pub use checkpoint::{Checkpoint, CheckpointError};
use stuck::{CallOutcome, StuckDetector, StuckThresholds, StuckVerdict};

/// Error type of a step stopped by its token budget (non-retryable).
pub const TOKEN_BUDGET_EXCEEDED: &str = "token_budget_exceeded";
/// Error type of a step whose agent stayed stuck after a warning (non-retryable).
pub const AGENT_STUCK: &str = "agent_stuck";
/// Error type of a step whose model this worker cannot serve (non-retryable).
pub const MODEL_UNAVAILABLE: &str = "model_unavailable";
/// The kind of the coordinator note recording a fallback to another model.
pub const MODEL_FALLBACK: &str = "model_fallback";
/// Error type of a step whose workspace cannot be used (retryable).
const WORKSPACE_UNUSABLE: &str = "workspace_unusable";

/// Bytes of a tool's result shown to watchers of the step's live output.
const TOOL_RESULT_EXCERPT: usize = 2048;

/// Turns allowed when a step sets no `maxTurns`.
const DEFAULT_MAX_TURNS: u32 = 30;

/// What a heartbeat brought back.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatOutcome {
    pub cancel_requested: bool,
    /// The run is paused: the step suspends at this turn (reported as `paused`).
    pub pause_requested: bool,
    /// Signals not handed over before.
    pub signals: Vec<Signal>,
    /// The server failed the step on this heartbeat (its token budget); the message
    /// says why. The lease is gone.
    pub budget_exceeded: Option<String>,
}

/// Why a heartbeat failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaseError {
    /// The server no longer holds this lease (it expired or went to another worker):
    /// the step must stop and report nothing.
    #[error("lease lost: {0}")]
    Lost(String),
    /// The heartbeat did not get through; the lease may still be fine.
    #[error("heartbeat failed: {0}")]
    Failed(String),
}

/// Why starting child runs failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpawnError {
    /// The server refused (a limit, an unknown workflow, a bad run id): the model
    /// reads the message as the tool's error.
    #[error("{0}")]
    Refused(String),
    /// The lease is gone: the step must stop and report nothing.
    #[error("lease lost: {0}")]
    Lost(String),
}

/// The agent's handle on its lease.
pub trait Lease: Send + Sync {
    /// Extends the lease, stores `checkpoint` when non-empty and delivers `notes`.
    fn heartbeat(
        &self,
        checkpoint: Vec<u8>,
        notes: Vec<CoordinatorNote>,
    ) -> BoxFuture<'_, Result<HeartbeatOutcome, LeaseError>>;

    /// Called just before the step's result is reported: delivers `notes` and
    /// acknowledges the signals already handed to the agent, without handing over new
    /// ones (those stay pending on the server for the next step). Without it, a steer
    /// the model already read would be delivered again to the next step.
    ///
    /// The default heartbeats and ignores any signals that come back.
    fn settle(&self, notes: Vec<CoordinatorNote>) -> BoxFuture<'_, Result<(), LeaseError>> {
        Box::pin(async move { self.heartbeat(Vec::new(), notes).await.map(|_| ()) })
    }

    /// Starts child runs under the lease; with `wait`, ends the lease with the step
    /// waiting for them and `await_run_ids`, `checkpoint` being its transcript.
    /// Answers the new children's run ids.
    ///
    /// The default refuses: a lease that cannot reach a server cannot start runs.
    fn spawn(
        &self,
        children: Vec<ChildRunSpec>,
        wait: bool,
        await_run_ids: Vec<String>,
        checkpoint: Vec<u8>,
    ) -> BoxFuture<'_, Result<Vec<String>, SpawnError>> {
        let _ = (children, wait, await_run_ids, checkpoint);
        Box::pin(async { Err(SpawnError::Refused("this worker cannot start child runs".into())) })
    }

    /// Asks the fleet's rate limit for one model call of about `tokens` under the
    /// worker's rate-limit key: `Ok(None)` to go, `Ok(Some(t))` to ask again at `t`
    /// (milliseconds since the Unix epoch). The default (no key) always goes.
    fn acquire_capacity(&self, tokens: u64) -> BoxFuture<'_, Result<Option<i64>, LeaseError>> {
        let _ = tokens;
        Box::pin(async { Ok(None) })
    }

    /// Tells the fleet the provider refused under the worker's key until
    /// `reset_unix_ms`. Best effort; the default tells no one.
    fn report_rate_limited(&self, reset_unix_ms: i64) -> BoxFuture<'_, ()> {
        let _ = reset_unix_ms;
        Box::pin(async {})
    }

    /// Reports the step's completion from inside the loop, so that a result the
    /// server refuses for breaking the step's output contract (or any other input it
    /// refuses as `INVALID_ARGUMENT`) goes back to the model as `complete_step`'s
    /// error, and the step goes on. `Err` carries that refusal; `Ok` means reported,
    /// or left to the caller to report with the step's outcome.
    ///
    /// `checkpoint` is the transcript that proposed the result, sent only for a step
    /// that requires confirmation (a rejection resumes from it); empty otherwise.
    ///
    /// The default leaves it to the caller.
    fn complete(&self, _completion: &Completion, _checkpoint: Vec<u8>) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    /// The attempt's token usage so far (cumulative) and the model it is from: sent
    /// with every heartbeat from now on. The default keeps nothing.
    fn report_usage(&self, _usage: TokenUsage, _model: &str) {}

    /// A sign of a stuck agent, sent with the next heartbeat and recorded in history.
    /// The default keeps nothing.
    fn report_stuck(&self, _report: StuckReport) {}

    /// A piece of the step's live output, for watchers; see [`crate::output`].
    /// Must not block or fail. The default drops it.
    fn output(&self, _chunk: OutputChunk) {}

    /// Records an issue the agent reported (`report_issue`) at once: answers whether
    /// it was recorded and the step's issues so far, or why not. The default records
    /// nothing.
    /// Sets search attributes of the step's run at once (`set_search_attributes`,
    /// name → text): answers how many changed, or why not. The default sets none.
    fn set_search_attributes(
        &self,
        _attributes: std::collections::HashMap<String, String>,
    ) -> BoxFuture<'_, Result<u32, String>> {
        Box::pin(async { Err("this worker cannot set search attributes".to_string()) })
    }

    fn report_issue(
        &self,
        _severity: String,
        _summary: String,
        _details: String,
    ) -> BoxFuture<'_, Result<(bool, u32), String>> {
        Box::pin(async { Err("this worker cannot record issues".to_string()) })
    }
}

/// How a step ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The model called `complete_step`.
    Completed(Completion),
    /// A limit or error ended the step; to be reported with `FailStepTask`.
    Failed(Failure),
    /// Cancellation was requested; reported as `canceled`, non-retryable.
    Canceled { checkpoint: Vec<u8> },
    /// The lease is gone; nothing may be reported.
    LeaseLost(String),
    /// The run was paused: the step suspends, reported with the error type `paused`
    /// and this checkpoint (the server parks it; no attempt is used up).
    Paused { checkpoint: Vec<u8> },
    /// A rate limit holds the step until `until_unix_ms`: reported with the error
    /// type `rate_limited` and this checkpoint, the server parks it (no attempt is
    /// used up) and dispatches it again then.
    RateLimited { checkpoint: Vec<u8>, until_unix_ms: i64 },
    /// The step ended its lease to wait for child runs (the server resumes it, on
    /// any worker, when they have closed); nothing more is reported.
    Waiting { child_run_ids: Vec<String> },
    /// The server failed the step itself (on a heartbeat past its token budget);
    /// nothing more may be reported.
    EndedByServer { error_type: String, message: String },
}

/// The outcome and what it took.
#[derive(Debug, Clone)]
pub struct AgentReport {
    pub outcome: Outcome,
    /// Model turns taken, counting those of earlier attempts restored from the checkpoint.
    pub turns: u32,
    /// Tool calls refused because the step does not allow the tool (or it does not exist).
    pub refused_tool_calls: u32,
    /// Tokens this attempt's model turns used.
    pub usage: Usage,
    /// Their estimated cost in US dollars (0 without a price for the model).
    pub cost_usd: f64,
}

/// Tunables of the loop.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Turns allowed when the step sets none.
    pub default_max_turns: u32,
    pub tool_limits: ToolLimits,
    /// The price of the provider's model, for the estimated cost (none: cost 0).
    pub price: Option<ModelPrice>,
    /// Prices of other models (a step's own, fallbacks), by name.
    pub prices: std::collections::BTreeMap<String, ModelPrice>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            default_max_turns: DEFAULT_MAX_TURNS,
            tool_limits: ToolLimits::default(),
            price: None,
            prices: Default::default(),
        }
    }
}

/// Runs steps with one provider.
#[derive(Clone)]
pub struct Agent {
    models: Arc<Models>,
    options: AgentOptions,
    events: Option<EventSink>,
    mcp: Arc<McpHub>,
}

impl Agent {
    /// An agent on `provider` with default options and no event hook.
    pub fn new(provider: Arc<dyn Provider>) -> Self {
        Self {
            models: Arc::new(Models::single(provider)),
            options: AgentOptions::default(),
            events: None,
            mcp: Arc::new(McpHub::new(McpSettings::default(), Vec::new())),
        }
    }

    /// Serves the models steps name (and their fallbacks) from `models`.
    pub fn with_models(mut self, models: Arc<Models>) -> Self {
        self.models = models;
        self
    }

    /// Runs MCP servers through `hub` (the worker's servers and settings).
    pub fn with_mcp(mut self, hub: Arc<McpHub>) -> Self {
        self.mcp = hub;
        self
    }

    /// Replaces the options.
    pub fn with_options(mut self, options: AgentOptions) -> Self {
        self.options = options;
        self
    }

    /// Sends progress events to `sink`.
    pub fn with_events(mut self, sink: Option<EventSink>) -> Self {
        self.events = sink;
        self
    }

    /// Runs one leased step to its outcome. `workspace` must exist; file tools are
    /// confined to it. Never panics on model, tool or network input.
    pub async fn run_step(
        &self,
        task: &StepTask,
        queue: &str,
        workspace: &Path,
        lease: &dyn Lease,
    ) -> AgentReport {
        let step = StepRef {
            run_id: task.run_id.clone(),
            step_id: task.step_id.clone(),
            attempt: task.attempt,
            queue: queue.to_string(),
        };
        let tools = match ToolBox::new(workspace, self.options.tool_limits.clone()) {
            Ok(t) => t,
            Err(e) => {
                let failure = Failure {
                    error_type: "workspace_error".into(),
                    message: format!("cannot open the workspace {}: {e}", workspace.display()),
                    non_retryable: false,
                    checkpoint: task.checkpoint.clone(),
                };
                return AgentReport {
                    outcome: Outcome::Failed(failure),
                    turns: 0,
                    refused_tool_calls: 0,
                    usage: Usage::default(),
                    cost_usd: 0.0,
                };
            }
        };
        let chain = match self.model_chain(task) {
            Ok(chain) => chain,
            Err(message) => {
                warn!(run_id = %task.run_id, step = %task.step_id, attempt = task.attempt, %message,
                    "the step's model cannot be served");
                let failure = Failure {
                    error_type: MODEL_UNAVAILABLE.into(),
                    message,
                    non_retryable: true,
                    checkpoint: task.checkpoint.clone(),
                };
                return AgentReport {
                    outcome: Outcome::Failed(failure),
                    turns: 0,
                    refused_tool_calls: 0,
                    usage: Usage::default(),
                    cost_usd: 0.0,
                };
            }
        };
        let max_turns = if task.max_turns == 0 {
            self.options.default_max_turns
        } else {
            task.max_turns
        };
        let mcp = self
            .mcp
            .open(&task.mcp_servers_json, tools.root(), &task.allowed_tools)
            .await;
        let mut specs = with_contract(tools::specs(&task.allowed_tools), task);
        specs.extend(mcp.specs());
        let mut system = principles::system_prompt(task, max_turns, &specs);
        for note in &mcp.notes {
            system.push_str(&format!("\n\nNote: {note}."));
        }
        let mut run = StepRun {
            agent: self,
            task,
            lease,
            tools,
            mcp,
            req: ModelRequest {
                system,
                messages: Vec::new(),
                tools: specs,
                max_tokens: None,
                metadata: RequestMetadata {
                    run_id: task.run_id.clone(),
                    step_id: task.step_id.clone(),
                    goal: task.goal.clone(),
                },
            },
            turns: 0,
            max_turns,
            chain,
            current: 0,
            cost_usd: 0.0,
            refused: 0,
            notes: Vec::new(),
            signals_through: 0,
            unacked_signals: false,
            step,
            turn_waits: Vec::new(),
            call_index: 0,
            usage: Usage::default(),
            budget: Budget::from_task(task),
            stuck: StuckDetector::new(StuckThresholds::from_task(task)),
            // A resumed attempt extends the stream it was handed.
            checkpoint: std::sync::Mutex::new(CheckpointWriter::resuming(&task.checkpoint)),
        };
        run.restore();
        let outcome = if task.start_to_close_timeout_ms == 0 {
            run.drive().await
        } else {
            // Stop a little before the server's own deadline so the failure (with the
            // checkpoint) is still accepted.
            let limit = Duration::from_millis(task.start_to_close_timeout_ms.into());
            let margin = (limit / 20).min(Duration::from_secs(2));
            match tokio::time::timeout(limit - margin, run.drive()).await {
                Ok(outcome) => outcome,
                // Retryable, as in Temporal: the step's retry policy decides whether
                // another attempt (resuming from the checkpoint) gets a fresh timeout.
                Err(_) => run.fail(
                    "timed_out",
                    format!("the step did not finish within its start-to-close timeout of {limit:?}"),
                    false,
                ),
            }
        };
        AgentReport {
            outcome,
            turns: run.turns,
            refused_tool_calls: run.refused,
            usage: run.usage,
            cost_usd: run.cost(),
        }
    }
}

impl Agent {
    /// The step's model and its fallbacks, as providers; a fallback this worker
    /// cannot serve is left out, the step's own model must be served.
    fn model_chain(&self, task: &StepTask) -> Result<Vec<Arc<dyn Provider>>, String> {
        let primary = self
            .models
            .get(&task.provider, &task.model)
            .map_err(|e| format!("the step's model cannot be served: {e}"))?;
        let mut chain = vec![primary];
        for f in &task.fallback_models {
            let provider = if f.provider.is_empty() {
                &task.provider
            } else {
                &f.provider
            };
            match self.models.get(provider, &f.model) {
                Ok(p) => chain.push(p),
                Err(e) => warn!(run_id = %task.run_id, step = %task.step_id, model = %f.model, error = %e,
                    "fallback model left out"),
            }
        }
        Ok(chain)
    }

    /// The price of `model`.
    fn price_of(&self, model: &str) -> Option<ModelPrice> {
        self.options.prices.get(model).copied().or_else(|| {
            (model == self.models.default_provider().model())
                .then_some(self.options.price)
                .flatten()
        })
    }
}

/// The state of one step's loop; everything the checkpoint and the failure paths need.
struct StepRun<'a> {
    agent: &'a Agent,
    task: &'a StepTask,
    lease: &'a dyn Lease,
    tools: ToolBox,
    /// The step's MCP tools.
    mcp: StepMcp,
    /// The step's model, then its fallbacks; `current` answers now.
    chain: Vec<Arc<dyn Provider>>,
    current: usize,
    /// This attempt's estimated cost, each turn at its model's price.
    cost_usd: f64,
    req: ModelRequest,
    turns: u32,
    max_turns: u32,
    refused: u32,
    /// `signal_coordinator` notes not yet delivered by a heartbeat.
    notes: Vec<CoordinatorNote>,
    /// Highest signal event id already in the transcript (kept in the checkpoint).
    signals_through: u64,
    /// Signals were handed to the model that no heartbeat has acknowledged yet.
    unacked_signals: bool,
    step: StepRef,
    /// This turn's `spawn_agent` (waiting) and `await_runs` calls: the index of
    /// their result in the turn's results, and what they asked for.
    turn_waits: Vec<(usize, TurnWait)>,
    /// Index of the tool call being run in its turn.
    call_index: usize,
    /// This attempt's tokens so far.
    usage: Usage,
    budget: Budget,
    stuck: StuckDetector,
    /// The transcript's checkpoint stream, which heartbeats extend (a mutex only
    /// because the checkpoint is taken through `&self`).
    checkpoint: std::sync::Mutex<CheckpointWriter>,
}

/// A call of this turn that makes the step wait.
enum TurnWait {
    Spawn(ChildRunSpec),
    Await(Vec<String>),
}

impl StepRun<'_> {
    fn emit(&self, kind: EventKind) {
        if let Some(sink) = &self.agent.events {
            sink(WorkerEvent {
                step: self.step.clone(),
                kind,
            });
        }
    }

    /// Starts the transcript, from the checkpoint when there is a usable one.
    fn restore(&mut self) {
        let task = self.task;
        let restored = (!task.checkpoint.is_empty()).then(|| Checkpoint::decode(&task.checkpoint));
        match restored {
            Some(Ok(cp)) if !cp.messages.is_empty() => {
                info!(run_id = %task.run_id, step = %task.step_id, attempt = task.attempt,
                    turns = cp.turns, messages = cp.messages.len(), "resuming from checkpoint");
                self.turns = cp.turns;
                self.signals_through = cp.signals_through;
                self.req.messages = cp.messages;
                // A tool call cut off before its result is answered, or providers refuse the transcript.
                if let Some(last) = self.req.messages.last().filter(|m| m.role == Role::Assistant) {
                    let interrupted: Vec<Block> = last
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            Block::ToolUse { id, .. } => Some(Block::ToolResult {
                                tool_use_id: id.clone(),
                                content:
                                    "not run: the step was interrupted first; call it again if still needed"
                                        .into(),
                                is_error: true,
                                images: Vec::new(),
                            }),
                            _ => None,
                        })
                        .collect();
                    self.req.messages.push(Message {
                        role: Role::User,
                        content: interrupted,
                    });
                }
                if task.resume_messages.is_empty() {
                    self.push_user_text(prompt::resume_note(task));
                } else {
                    // Resumed from a wait: what it waited for, on the same transcript.
                    info!(run_id = %task.run_id, step = %task.step_id, attempt = task.attempt,
                        "resuming from a wait");
                    for m in &task.resume_messages {
                        self.push_user_text(m.clone());
                    }
                }
            }
            unusable => {
                if let Some(decoded) = unusable {
                    let reason = decoded.map_or_else(|e| e.to_string(), |_| "it holds no messages".into());
                    warn!(run_id = %task.run_id, step = %task.step_id, attempt = task.attempt, %reason,
                        "checkpoint is not a transcript of this worker; starting the step afresh");
                }
                self.req
                    .messages
                    .push(Message::user_text(prompt::first_message(task)));
            }
        }
        // Signals that were waiting when the step was leased reach the first turn.
        let queued = task.signals.clone();
        self.take_signals(&queued);
    }

    /// Hands `signals` not yet in the transcript to the model (`steer` ones become user
    /// text; others are only acknowledged).
    fn take_signals(&mut self, signals: &[Signal]) {
        for signal in signals {
            if signal.event_id != 0 && signal.event_id <= self.signals_through {
                continue; // already in the transcript (a resumed attempt)
            }
            self.signals_through = self.signals_through.max(signal.event_id);
            self.unacked_signals = true;
            if signal.name != "steer" {
                continue;
            }
            let message = steer_text(&signal.payload_json);
            info!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                message = %one_line(&message, 200), "steer signal");
            self.emit(EventKind::Steered {
                message: message.clone(),
            });
            self.push_user_text(format!("[steer] {message}"));
        }
    }

    /// Adds text to the last user message (or a new one), keeping roles alternating.
    fn push_user_text(&mut self, text: String) {
        match self.req.messages.last_mut() {
            Some(m) if m.role == Role::User => m.content.push(Block::text(text)),
            _ => self.req.messages.push(Message::user_text(text)),
        }
    }

    async fn drive(&mut self) -> Outcome {
        loop {
            if self.turns >= self.max_turns {
                return self.fail(
                    "max_turns_exceeded",
                    format!(
                        "the step did not call complete_step within {} turns",
                        self.max_turns
                    ),
                    true,
                );
            }
            if let Some(why) = self.budget.exceeded(&self.usage, self.cost()) {
                return self.fail(TOKEN_BUDGET_EXCEEDED, why, true);
            }
            // The answer's live output goes to watchers as it arrives.
            let lease = self.lease;
            let live = move |chunk: OutputChunk| lease.output(chunk);
            if let Some(outcome) = self.await_capacity().await {
                return outcome;
            }
            let (turn, provider) = loop {
                let provider = self.chain[self.current].clone();
                let call = crate::trace::ModelCall::start(provider.name(), provider.model());
                let turn = provider.complete(&self.req, &live).instrument(call.span()).await;
                call.done(&turn);
                match turn {
                    Ok(t) => break (t, provider),
                    Err(e) if is_overload(&e) && self.current + 1 < self.chain.len() => self.fall_back(&e),
                    Err(ProviderError::RateLimited { reset_in, .. }) => {
                        return self.rate_limited(reset_in).await;
                    }
                    Err(e) => return self.provider_failure(provider.as_ref(), e),
                }
            };
            self.turns += 1;
            self.usage.add(&turn.usage);
            self.cost_usd += self
                .agent
                .price_of(provider.model())
                .map_or(0.0, |p| p.cost(&turn.usage));
            self.lease
                .report_usage(self.usage.to_proto(self.cost()), provider.model());
            self.emit(EventKind::Usage {
                usage: self.usage,
                cost_usd: self.cost(),
            });
            if let Some(why) = self.budget.exceeded(&self.usage, self.cost()) {
                // Past the budget: no tool of this turn runs and no model call follows.
                // The usage goes to the server first, which may fail the step itself.
                warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                    tokens = self.usage.total(), reason = %why, "token budget exceeded");
                if let Some(outcome) = self.heartbeat().await {
                    return outcome;
                }
                return self.fail(TOKEN_BUDGET_EXCEEDED, why, true);
            }
            debug!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
                turn = self.turns, stop_reason = ?turn.stop_reason, "model turn");
            let mut blocks = turn.blocks;
            if blocks.is_empty() {
                // Providers refuse empty assistant messages in a transcript.
                blocks.push(Block::text("(no output)"));
            }
            for b in &blocks {
                if let Block::Text { text } = b
                    && !text.trim().is_empty()
                {
                    self.emit(EventKind::ModelText { text: text.clone() });
                }
            }
            let calls: Vec<(String, String, Value)> = blocks
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse { id, name, input } => Some((id.clone(), name.clone(), input.clone())),
                    _ => None,
                })
                .collect();
            self.req.messages.push(Message {
                role: Role::Assistant,
                content: blocks,
            });

            let mut results = Vec::new();
            let mut outputs = Vec::new();
            let mut completion = None;
            self.turn_waits.clear();
            let mut completion_call = None;
            for (i, (id, name, input)) in calls.iter().enumerate() {
                self.call_index = i;
                let had = completion.is_some();
                let span = crate::trace::tool_span(name);
                let out = self
                    .call_tool(name, input, &mut completion)
                    .instrument(span.clone())
                    .await;
                if out.is_error {
                    crate::trace::tool_failed(&span);
                }
                if !had && completion.is_some() {
                    completion_call = Some(id.clone());
                }

                if out.is_error
                    && WORKSPACE_TOOLS.contains(&name.as_str())
                    && let Some(problem) = workspace_problem(self.tools.root(), &out.content)
                {
                    return self.fail(WORKSPACE_UNUSABLE, problem, false);
                }
                results.push(Block::ToolResult {
                    tool_use_id: id.clone(),
                    content: out.content.clone(),
                    is_error: out.is_error,
                    images: out.images.clone(),
                });
                outputs.push(out);
            }
            if calls.is_empty() {
                results.push(Block::text(prompt::NUDGE));
            }
            if !self.turn_waits.is_empty() && completion.is_some() {
                // The step cannot both finish and wait: the wait wins, the model is told.
                completion = None;
                for (b, (_, name, _)) in results.iter_mut().zip(&calls) {
                    if name == COMPLETE_STEP
                        && let Block::ToolResult {
                            content, is_error, ..
                        } = b
                    {
                        *content = "complete_step was not applied: this turn also waits for child runs; \
                                    call it again once their outcomes have come"
                            .into();
                        *is_error = true;
                    }
                }
            }

            let seen: Vec<CallOutcome<'_>> = calls
                .iter()
                .zip(&outputs)
                .map(|((_, name, input), out)| CallOutcome {
                    name,
                    input,
                    is_error: out.is_error,
                    content: &out.content,
                })
                .collect();
            let verdict = if completion.is_some() {
                None
            } else {
                self.stuck.observe_turn(&seen)
            };
            if let Some(v) = verdict
                && let Some(outcome) = self.on_stuck(v, &mut results).await
            {
                return outcome;
            }
            self.req.messages.push(Message {
                role: Role::User,
                content: results,
            });
            crate::provider::keep_recent_images(
                &mut self.req.messages,
                crate::provider::MAX_TRANSCRIPT_IMAGES,
            );
            if !self.turn_waits.is_empty()
                && let Some(outcome) = self.wait_for_children().await
            {
                return outcome;
            }

            if let Some(completion) = completion {
                // Notes sent in the same turn must reach history, and signals the model
                // read must be acknowledged, before the step closes.
                if (!self.notes.is_empty() || self.unacked_signals)
                    && let Some(Outcome::LeaseLost(m)) = self.settle().await
                {
                    return Outcome::LeaseLost(m);
                }
                // A result held for approval may be rejected: the transcript that
                // proposed it (this very turn) is what the step resumes from.
                let checkpoint = if self.task.require_confirmation {
                    self.checkpoint()
                } else {
                    Vec::new()
                };
                match self.lease.complete(&completion, checkpoint).await {
                    Ok(()) => return Outcome::Completed(completion),
                    // Refused (the step's output contract, most often): the model reads
                    // why as complete_step's error and the step goes on.
                    Err(why) => self.completion_refused(completion_call.as_deref(), why),
                }
            }
            if let Some(outcome) = self.heartbeat().await {
                return outcome;
            }
        }
    }

    /// The estimated cost of this attempt's tokens.
    fn cost(&self) -> f64 {
        self.cost_usd
    }

    /// The model answering now refused for load or did not answer: the next one of
    /// the chain answers from now on, and history and the live output say so.
    fn fall_back(&mut self, e: &ProviderError) {
        let (from, to) = (&self.chain[self.current], &self.chain[self.current + 1]);
        let message = format!(
            "{} ({}) failed: {}; falling back to {} ({})",
            from.model(),
            from.name(),
            one_line(&e.to_string(), 200),
            to.model(),
            to.name()
        );
        warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
            from = from.model(), to = to.model(), error = %e, "model fallback");
        self.emit(EventKind::Note {
            kind: MODEL_FALLBACK.into(),
            message: message.clone(),
        });
        self.notes.push(CoordinatorNote {
            kind: MODEL_FALLBACK.into(),
            message,
        });
        self.current += 1;
    }

    fn provider_failure(&self, provider: &dyn Provider, e: ProviderError) -> Outcome {
        let retryable = e.is_retryable();
        warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
            provider = provider.name(), model = provider.model(), retryable, error = %e, "model call failed");
        let error_type = if retryable {
            "provider_unavailable"
        } else {
            "provider_error"
        };
        self.fail(error_type, e.to_string(), !retryable)
    }

    fn fail(&self, error_type: &str, message: String, non_retryable: bool) -> Outcome {
        Outcome::Failed(Failure {
            error_type: error_type.to_string(),
            message,
            non_retryable,
            checkpoint: self.checkpoint(),
        })
    }

    /// The transcript as checkpoint bytes (format version 2: each call's bytes extend
    /// the last's, unless the stream is rewritten), compacted past the budget.
    fn checkpoint(&self) -> Vec<u8> {
        let mut writer = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        writer.encode(self.turns, self.signals_through, &self.req.messages)
    }
}

/// Why the workspace cannot be used, if a tool's error shows it cannot: its directory
/// is gone (or no longer one), or the disk is full or read-only. Any other error is
/// the model's to act on.
fn workspace_problem(root: &Path, error: &str) -> Option<String> {
    match std::fs::metadata(root) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Some(format!(
                "the workspace {} is no longer a directory",
                root.display()
            ));
        }
        Err(e) => return Some(format!("the workspace {} cannot be used: {e}", root.display())),
    }
    // io::Error's text ends "(os error N)": ENOSPC 28, EROFS 30, EDQUOT 122.
    ["(os error 28)", "(os error 30)", "(os error 122)"]
        .iter()
        .any(|code| error.contains(code))
        .then(|| {
            format!(
                "the workspace {} cannot be written: {}",
                root.display(),
                one_line(error, 200)
            )
        })
}
