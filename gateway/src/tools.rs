//! The gateway's MCP tools: each a description, a JSON schema of its input (from the
//! argument struct), and an answer that is either structured JSON or a tool error
//! the agent can read.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use railyard_proto::v1::{
    CompleteStepTaskRequest, HeartbeatStepTaskRequest, ListRunsRequest, ReportIssueRequest, ResetRunRequest,
    RunStatus, SignalRunRequest, StartRunRequest, UpsertSearchAttributesRequest,
};
use railyard_sdk::ClientError;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Extensions};
use rmcp::schemars::JsonSchema;
use rmcp::{ErrorData, tool, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::held::Refused;
use super::{DEFAULT_RESUME_WAIT, Gateway, MAX_RESUME_WAIT, NEXT_STEP_WAIT, short, tool_error, view};

/// Arguments of `start_workflow`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct StartArgs {
    /// The workflow to run: an id from list_workflows.
    pub workflow_id: String,
    /// What the run is for, in plain words; step prompts quote it as {{goal}}.
    pub goal: String,
    /// Named values the step prompts read as {{context.KEY}}.
    #[serde(default)]
    pub context: Option<BTreeMap<String, String>>,
    /// Search attributes of the run (name to value as text), each one the namespace declares.
    #[serde(default)]
    pub search_attributes: Option<BTreeMap<String, String>>,
}

/// Arguments of `complete_step`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct CompleteArgs {
    /// The continue token handed out with the step you are reporting.
    pub continue_token: String,
    /// What you did and found. Later steps see these notes; the last step's notes are the run's result.
    pub notes: String,
    /// Files, URLs or other references the step produced.
    #[serde(default)]
    pub artifacts: Option<Vec<String>>,
    /// Values to set in the run's context, for later steps' prompts ({{context.KEY}}).
    #[serde(default)]
    pub context_updates: Option<BTreeMap<String, String>>,
    /// The step's structured result. A JSON object is the step's result proper: checked against the step's
    /// output_schema when it has one, shown to later steps ({{steps.ID.result.FIELD}}). Any JSON is also kept
    /// in the run's context under "<step id>.result".
    #[serde(default)]
    pub result: Option<Value>,
    /// The run you are working on. When given, a token of another run is refused.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Search attributes to set on the run (name to value as text; an empty value unsets one), each one the
    /// namespace declares, with the step's completion.
    #[serde(default)]
    pub search_attributes: Option<BTreeMap<String, String>>,
}

/// Arguments of `set_search_attributes`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct AttributesArgs {
    /// The continue token of the step you hold.
    pub continue_token: String,
    /// Name to value as text (a keyword list as a JSON array or comma-separated, a datetime in RFC 3339); an
    /// empty value unsets the attribute. Each name must be one the namespace declares.
    pub search_attributes: BTreeMap<String, String>,
}

/// Arguments naming one run.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct RunArgs {
    /// The run's id (from start_workflow or list_runs).
    pub run_id: String,
}

/// Arguments of `resume_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct ResumeArgs {
    /// The run to continue.
    pub run_id: String,
    /// How long to wait, in seconds, for a step still leased by a gateway that stopped (default 90, at most 300).
    #[serde(default)]
    pub wait_seconds: Option<u32>,
}

/// Arguments of `reset_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct ResetArgs {
    /// The run to reset (from start_workflow or list_runs).
    pub run_id: String,
    /// The step id the new run starts at; the steps before it are carried over as they completed (default: the
    /// first step that failed).
    #[serde(default)]
    pub to_step: Option<String>,
    /// Why, recorded on both runs.
    #[serde(default)]
    pub reason: Option<String>,
    /// A new goal (default: the old run's).
    #[serde(default)]
    pub goal: Option<String>,
    /// Context entries replacing or adding to the old run's starting context.
    #[serde(default)]
    pub context: Option<BTreeMap<String, String>>,
}

/// Arguments of `list_runs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct ListArgs {
    /// Only runs in this status: RUNNING, COMPLETED, FAILED, CANCELED, TERMINATED or TIMED_OUT.
    #[serde(default)]
    pub status: Option<String>,
    /// Only runs of this workflow.
    #[serde(default)]
    pub workflow_id: Option<String>,
    /// At most this many runs (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The next_page_token of an earlier answer, for the page after it.
    #[serde(default)]
    pub page_token: Option<String>,
    /// Only runs this list query matches, ANDed with the other arguments, e.g.
    /// `WorkflowId = "review-pr" AND Status = "FAILED" AND StartTime > "2026-11-20T00:00:00Z"`
    /// (fields: RunId, WorkflowId, WorkflowVersion, Status, StartTime, CloseTime,
    /// ParentRunId, TaskQueue, Tokens, Cost, FailureType, Goal (a word match:
    /// `Goal = "flaky"`), and the namespace's search attributes; AND, OR, parentheses,
    /// = != < > <= >=, IN (...), STARTS_WITH, IS [NOT] NULL).
    #[serde(default)]
    pub query: Option<String>,
}

/// Arguments of `signal_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct SignalArgs {
    /// The run to signal.
    pub run_id: String,
    /// The signal's name (letters, digits and - _ . : @), e.g. "steer".
    pub name: String,
    /// The signal's payload: any JSON.
    #[serde(default)]
    pub payload: Option<Value>,
}

/// Arguments of `report_issue`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct IssueArgs {
    /// The continue token of the step you hold.
    pub continue_token: String,
    /// How bad it is: info, warning, error or critical.
    pub severity: String,
    /// One line saying what is wrong (at most 256 bytes).
    pub summary: String,
    /// What you saw, where, and what would fix it (at most 4096 bytes).
    #[serde(default)]
    pub details: Option<String>,
}

/// How the server's refusal of a result that breaks the step's output contract
/// begins (`contract::Violations::message`).
const RESULT_REFUSED: &str = "result refused:";

/// Default and largest `list_runs` page.
const LIST_DEFAULT: u32 = 20;
const LIST_MAX: u32 = 100;

fn structured(v: Value) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::structured(v))
}

fn refused(message: String) -> Result<CallToolResult, ErrorData> {
    Ok(tool_error(message))
}

#[tool_router(vis = "pub(super)")]
impl Gateway {
    #[tool(
        description = "List the workflows the Railyard server can run: for each its id (what start_workflow takes), \
                       name, description, version and number of steps; then any definition files the server \
                       rejected, with the reason."
    )]
    async fn list_workflows(&self, ext: Extensions) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        match call.client.list_workflows(&self.opts.namespace).await {
            Ok(resp) => structured(view::workflows(&resp)),
            Err(e) => refused(format!(
                "cannot list workflows from the Railyard server at {}: {e}",
                call.client.url()
            )),
        }
    }

    #[tool(
        description = "Start a run of a workflow and take its first step. Answers the step's title, its prompt (what \
                       to do, with the goal and context filled in), the run id, the step's number and the step \
                       count, and a continue_token. Do the work, then call complete_step with that token. When \
                       require_confirmation is true, the result you report is held until a person approves it."
    )]
    async fn start_workflow(
        &self,
        Parameters(args): Parameters<StartArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        if !self.held.has_room() {
            return refused(self.full());
        }
        let req = StartRunRequest {
            namespace: self.opts.namespace.clone(),
            workflow_id: args.workflow_id.clone(),
            goal: args.goal,
            context: args
                .context
                .unwrap_or_default()
                .into_iter()
                .collect::<HashMap<_, _>>(),
            task_queue: self.opts.queue.clone(),
            identity: self.opts.identity.clone(),
            search_attributes: args.search_attributes.unwrap_or_default().into_iter().collect(),
            ..Default::default()
        };
        let run_id = match call.client.start_run_with(req).await {
            Ok(resp) => resp.run_id,
            Err(e) => {
                return refused(format!(
                    "cannot start workflow {:?} on the Railyard server at {}: {e}",
                    short(&args.workflow_id),
                    call.client.url()
                ));
            }
        };
        tracing::info!(%run_id, workflow = %args.workflow_id, queue = %self.opts.queue, "run started for the agent");
        match self.next_for_agent(&call, &run_id, NEXT_STEP_WAIT).await {
            Ok(v) => structured(v),
            Err(e) => refused(format!("run {run_id} started, but {e}")),
        }
    }

    #[tool(
        description = "Report the step you hold as done: its continue_token, your notes, and optionally artifacts, \
                       context_updates and a structured result (required, as an object matching its output_schema, \
                       when the step has one; a result that breaks it is refused with each violation, and the \
                       step stays yours to fix and report again). Answers the run's next step with a new \
                       continue_token, or, after the last step, the run's final result (status \"finished\"). A \
                       token that is not the current one (an earlier step's, another run's, a mistyped one) is \
                       refused with the run's current step, and nothing is recorded."
    )]
    async fn complete_step(
        &self,
        Parameters(args): Parameters<CompleteArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        let (token, held) = match self
            .held
            .take(&args.continue_token, args.run_id.as_deref(), &call.owner)
        {
            Ok(found) => found,
            Err(why) => return refused(self.refusal(&call, why).await),
        };
        let (run_id, step_id) = (held.task.run_id.clone(), held.task.step_id.clone());
        let mut context: HashMap<String, String> =
            args.context_updates.unwrap_or_default().into_iter().collect();
        let mut result_json = String::new();
        if let Some(result) = args.result {
            context.insert(format!("{step_id}.result"), result.to_string());
            if result.is_object() {
                result_json = result.to_string();
            }
        }
        // The agent saw the signals handed out with the step: acknowledge them, so the
        // next step does not show them again.
        if held.shown_signal > 0 {
            let ack = HeartbeatStepTaskRequest {
                task_token: held.task.task_token.clone(),
                identity: self.opts.identity.clone(),
                acked_signal_event_id: held.shown_signal,
                ..Default::default()
            };
            if let Err(e) = call.client.heartbeat_step_task(ack).await {
                tracing::warn!(%run_id, step = %step_id, error = %e, "acknowledging signals failed");
            }
        }
        let req = CompleteStepTaskRequest {
            task_token: held.task.task_token.clone(),
            notes: args.notes,
            artifacts: args.artifacts.unwrap_or_default(),
            context_updates: context,
            identity: self.opts.identity.clone(),
            take_next: true,
            result_json,
            // An outside agent's transcript is not ours to keep.
            checkpoint: Vec::new(),
            search_attributes: args.search_attributes.unwrap_or_default().into_iter().collect(),
        };
        match call.client.complete_step_task(req).await {
            Ok(resp) if resp.held_for_approval => {
                drop(held);
                tracing::info!(%run_id, step = %step_id, "step result held for approval");
                structured(view::held_for_approval(&run_id, &step_id))
            }
            Ok(resp) => {
                drop(held);
                tracing::info!(%run_id, step = %step_id, "step completed by the agent");
                match resp.next_task {
                    Some(next) => structured(self.hand_over(&call, next)),
                    None => match self.next_for_agent(&call, &run_id, NEXT_STEP_WAIT).await {
                        Ok(v) => structured(v),
                        Err(e) => refused(format!("step {step_id:?} was completed, but {e}")),
                    },
                }
            }
            Err(ClientError::InvalidArgument(why)) if why.starts_with(RESULT_REFUSED) => {
                // Broke the output contract: recorded in history, nothing else changed.
                self.held.put_back(token, held);
                refused(format!(
                    "step {step_id:?} was not completed: {why}\nThe step is still yours: call complete_step \
                     again with the same continue_token and a result that fixes every violation."
                ))
            }
            Err(
                e @ (ClientError::InvalidArgument(_)
                | ClientError::ResourceExhausted(_)
                | ClientError::Unauthenticated(_)),
            ) => {
                // Refused before anything changed: the step is still held, the token still good.
                self.held.put_back(token, held);
                refused(format!(
                    "step {step_id:?} was not completed: {e}. Nothing was recorded; fix the input and call \
                     complete_step again with the same continue_token."
                ))
            }
            Err(e) if e.is_transient() => {
                self.held.put_back(token, held);
                refused(format!(
                    "cannot reach the Railyard server at {} to complete step {step_id:?}: {e}. The continue_token \
                     is still valid; call complete_step again.",
                    call.client.url()
                ))
            }
            Err(e) => {
                drop(held);
                let place = match self.describe(&call, &run_id).await {
                    Ok(run) => view::where_run_is(&run),
                    Err(read) => read,
                };
                refused(format!(
                    "step {step_id:?} was not completed: the server refused its lease ({e}); the step probably ran \
                     past its timeout. Now {place}. Call resume_run with run_id {run_id:?} for a fresh continue token."
                ))
            }
        }
    }

    #[tool(
        description = "Report a problem you found while working on the step you hold (a bug, a risk, broken or \
                       unclear inputs) without ending the step: it is recorded in the run's history, counted on \
                       the run, sent with the run's result, and at once to subscriptions that take \
                       issue.reported. severity is \
                       info, warning, error or critical. The continue_token stays valid; carry on and call \
                       complete_step when the step is done."
    )]
    async fn report_issue(
        &self,
        Parameters(args): Parameters<IssueArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        let (task_token, client) = match self.held.lease_of(&args.continue_token, &call.owner) {
            Ok(found) => found,
            Err(why) => return refused(self.refusal(&call, why).await),
        };
        let req = ReportIssueRequest {
            task_token,
            identity: self.opts.identity.clone(),
            severity: args.severity,
            summary: args.summary,
            details: args.details.unwrap_or_default(),
        };
        match client.report_issue(req).await {
            Ok(r) => structured(json!({
                "recorded": r.recorded,
                "step_issues": r.step_issues,
                "note": if r.recorded {
                    "recorded; the step is still yours"
                } else {
                    "not recorded: this attempt reported as many issues as it may (10); the step is still yours"
                },
            })),
            Err(e) => refused(format!("the issue was not recorded: {e}")),
        }
    }

    #[tool(
        description = "Set search attributes of the run whose step you hold, while you work on it (the continue_token \
                       stays valid): name to value as text, each a name the namespace declares (an undeclared name or \
                       a value not of its type is refused naming it, and nothing is set); an empty value unsets one. \
                       At most 20 changes per step attempt. get_run shows them; list_runs' query can find the run \
                       by them."
    )]
    async fn set_search_attributes(
        &self,
        Parameters(args): Parameters<AttributesArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        let (task_token, client) = match self.held.lease_of(&args.continue_token, &call.owner) {
            Ok(found) => found,
            Err(why) => return refused(self.refusal(&call, why).await),
        };
        let req = UpsertSearchAttributesRequest {
            task_token,
            identity: self.opts.identity.clone(),
            search_attributes: args.search_attributes.into_iter().collect(),
        };
        match client.upsert_search_attributes(req).await {
            Ok(r) => structured(json!({
                "changed": r.changed,
                "note": "set; the step is still yours",
            })),
            Err(e) => refused(format!("the search attributes were not set: {e}")),
        }
    }

    #[tool(
        description = "Show a run: its status, goal, context, search attributes, every step with its state, attempt and notes, and \
                       the current step. held_here says whether this gateway holds the current step for you. \
                       output_tail: the end of the run's live output (what its model wrote, tool calls marked \
                       with arrows), at most 4096 characters."
    )]
    async fn get_run(
        &self,
        Parameters(args): Parameters<RunArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        match self.describe(&call, &args.run_id).await {
            Ok(run) => {
                let mut v = view::run(&run);
                v["held_here"] = json!(self.held.token_of_run(&run.run_id, &call.owner).is_some());
                v["output_tail"] =
                    json!(super::tail::output_tail(&call.client, &self.opts.namespace, &run.run_id).await);
                structured(v)
            }
            Err(e) => refused(e),
        }
    }

    #[tool(
        description = "List runs, newest first, optionally only those in one status or of one workflow, or those a \
                       query matches (query). Pages: pass next_page_token back as page_token."
    )]
    async fn list_runs(
        &self,
        Parameters(args): Parameters<ListArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        let status = match args.status.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => RunStatus::Unspecified,
            Some(name) => match RunStatus::from_short_name(name) {
                Some(s) => s,
                None => {
                    let shown = railyard_text::prefix_chars(name, 32);
                    return refused(format!(
                        "status {shown:?} is not one of RUNNING, COMPLETED, FAILED, CANCELED, TERMINATED, TIMED_OUT"
                    ));
                }
            },
        };
        let req = ListRunsRequest {
            namespace: self.opts.namespace.clone(),
            status: status as i32,
            workflow_id: args.workflow_id.unwrap_or_default(),
            page_size: args.limit.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX),
            page_token: args.page_token.unwrap_or_default(),
            query: args.query.unwrap_or_default(),
            ..Default::default()
        };
        match call.client.list_runs(req).await {
            Ok(resp) => structured(json!({
                "runs": resp.runs.iter().map(view::run_line).collect::<Vec<_>>(),
                "next_page_token": resp.next_page_token,
            })),
            Err(e) => refused(format!(
                "cannot list runs on the Railyard server at {}: {e}",
                call.client.url()
            )),
        }
    }

    #[tool(
        description = "Send a signal to a run: a name and a JSON payload, recorded in its history and delivered to \
                       whoever works on its steps (\"steer\" signals reach an agent step as a message)."
    )]
    async fn signal_run(
        &self,
        Parameters(args): Parameters<SignalArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        let req = SignalRunRequest {
            namespace: self.opts.namespace.clone(),
            run_id: args.run_id.clone(),
            signal_name: args.name.clone(),
            payload_json: args.payload.map(|p| p.to_string()).unwrap_or_default(),
            identity: self.opts.identity.clone(),
            ..Default::default()
        };
        match call.client.signal_run(req).await {
            Ok(()) => structured(json!({"status": "signaled", "run_id": args.run_id, "name": args.name})),
            Err(e) => refused(format!("cannot signal run {:?}: {e}", short(&args.run_id))),
        }
    }

    #[tool(
        description = "Reset a run that went wrong: a new run of the same workflow version that keeps the steps before \
                       to_step as they completed (not run again) and starts at to_step (default: the first step that \
                       failed), optionally with a new goal or context entries. The old run, if still running, is \
                       terminated. Answers the new run's first step with a continue_token, like start_workflow, and \
                       what was carried over."
    )]
    async fn reset_run(
        &self,
        Parameters(args): Parameters<ResetArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        if !self.held.has_room() {
            return refused(self.full());
        }
        let req = ResetRunRequest {
            namespace: self.opts.namespace.clone(),
            run_id: args.run_id.clone(),
            to_step: args.to_step.unwrap_or_default(),
            reason: args.reason.unwrap_or_default(),
            goal: args.goal.unwrap_or_default(),
            context: args.context.unwrap_or_default().into_iter().collect(),
            identity: self.opts.identity.clone(),
            ..Default::default()
        };
        let done = match call.client.reset_run(req).await {
            Ok(done) => done,
            Err(e) => return refused(format!("cannot reset run {:?}: {e}", short(&args.run_id))),
        };
        tracing::info!(run_id = %done.run_id, from_run_id = %args.run_id, step = %done.step_id, "run reset for the agent");
        let reset = json!({
            "from_run_id": args.run_id,
            "run_id": done.run_id,
            "starts_at_step": done.step_id,
            "carried_steps": done.carried_steps,
            "old_run_terminated": done.terminated,
        });
        match self.next_for_agent(&call, &done.run_id, NEXT_STEP_WAIT).await {
            Ok(mut v) => {
                v["reset"] = reset;
                structured(v)
            }
            Err(e) => refused(format!(
                "run {} was made by the reset ({reset}), but {e}",
                done.run_id
            )),
        }
    }

    #[tool(
        description = "Take up a run again after this gateway restarted or you lost its continue token: answers its \
                       current step with a fresh continue_token (any earlier token of it is refused from then on). \
                       If the step is still leased by a gateway that stopped, waits (up to wait_seconds) for that \
                       lease to expire, then takes the step and says so."
    )]
    async fn resume_run(
        &self,
        Parameters(args): Parameters<ResumeArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let call = match self.call_as(&ext) {
            Ok(call) => call,
            Err(e) => return refused(e),
        };
        let run_id = args.run_id;
        if let Some(old) = self.held.token_of_run(&run_id, &call.owner)
            && let Some((token, task)) = self.held.reissue(&old)
        {
            let mut v = view::step(&task, &token);
            v["resumed"] =
                json!("this gateway already held the step; here it is again under a new continue token");
            return structured(v);
        }
        let run = match self.describe(&call, &run_id).await {
            Ok(run) => run,
            Err(e) => return refused(e),
        };
        if !super::is_open(&run) {
            return structured(view::finished(&run));
        }
        let leased_elsewhere = run
            .steps
            .get(run.current_step as usize)
            .map(|s| (s.state == "STARTED", s.attempt));
        let wait = args
            .wait_seconds
            .map_or(DEFAULT_RESUME_WAIT, |s| Duration::from_secs(s.into()))
            .min(MAX_RESUME_WAIT);
        match self.next_for_agent(&call, &run_id, wait).await {
            Ok(mut v) => {
                if let (Some((true, old_attempt)), Some(step)) = (leased_elsewhere, v.get("step"))
                    && v["status"] == "step"
                {
                    let attempt = step["attempt"].as_u64().unwrap_or_default();
                    v["waited_for_lease"] = json!(true);
                    v["resumed"] = json!(format!(
                        "the step was still leased (attempt {old_attempt}), probably by a gateway that stopped; this \
                         gateway waited for that lease to expire and took the step again (attempt {attempt})"
                    ));
                } else if v["status"] == "step" {
                    v["waited_for_lease"] = json!(false);
                    v["resumed"] = json!("the step was ready; this gateway took it");
                }
                structured(v)
            }
            Err(e) => refused(e),
        }
    }
}

impl Gateway {
    /// The message for a refused continue token: why, and where the run is.
    async fn refusal(&self, call: &super::CallAs, why: Refused) -> String {
        let (reason, hint) = match why {
            Refused::Malformed => {
                return "continue_token refused: it is not a continue token this gateway issued (corrupted or \
                        mistyped). Nothing was recorded. Find your run with list_runs or get_run, then call \
                        resume_run for its current step."
                    .to_string();
            }
            Refused::NotHeld(hint) => (
                format!(
                    "it is not the current token of step {:?} (attempt {}): an earlier step's, a replaced one, or \
                     one from a gateway that restarted",
                    hint.step_id, hint.attempt
                ),
                hint,
            ),
            Refused::OtherRun(hint) => (
                format!("it belongs to run {:?}, not to the run_id you gave", hint.run_id),
                hint,
            ),
        };
        let place = match self.describe(call, &hint.run_id).await {
            Ok(run) => format!("{}.", view::where_run_is(&run)),
            Err(e) => e,
        };
        format!(
            "continue_token refused: {reason}. Nothing was recorded. Now {place} Call resume_run with run_id {:?} \
             for a fresh continue token of the current step.",
            hint.run_id
        )
    }
}
