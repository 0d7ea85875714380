//! `railyard run ...`: start, inspect, list and steer workflow runs.
//!
//! Reading commands (`describe`, `history`, `watch`) live in [`view`].

pub(crate) mod approval;
mod count;
pub(crate) mod issues;
mod reset;
mod stream;
mod tree;
pub(crate) mod view;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use railyard_proto::v1::{
    CancelRunRequest, ListRunsRequest, RunStatus, SignalRunRequest, StartRunRequest, TerminateRunRequest,
};
use serde_json::json;

use crate::client::args::{self, Since};
use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output::{self, Table, truncate};
use crate::client::timefmt::{now_unix_ms, rfc3339};
use crate::client::view::{run_json, status_name};

/// `railyard run` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum RunCommand {
    /// Start a run of a workflow.
    Start(StartArgs),
    /// Show a run: status, goal, context and its steps.
    Describe(view::DescribeArgs),
    /// Print a run's event history (JSON: an array; with --follow, one event per line).
    History(view::HistoryArgs),
    /// Follow a run's events live until it closes, then print its status.
    ///
    /// Exits 0 only if the run COMPLETED (3 otherwise). JSON: one event per line, then
    /// a last line {"run": {...}}. With --stream: the run's live output instead (text
    /// as the model writes it, tool calls and results marked).
    Watch(view::WatchArgs),
    /// List runs, newest first, with filters or a query (--query).
    List(ListArgs),
    /// Count the runs a query matches, whole or by a field (--group-by Status).
    Count(count::CountArgs),
    /// Send a signal (e.g. `steer`) to a running run.
    Signal(SignalArgs),
    /// Ask a run to cancel (its step sees the request on its next heartbeat).
    Cancel(StopArgs),
    /// End a run at once, without letting its step finish.
    Terminate(StopArgs),
    /// Show a run and the child runs it spawned, recursively: status, current step,
    /// what each waits for, duration.
    Tree(tree::TreeArgs),
    /// Pause a run and the runs it spawned: no step is dispatched; a step in flight
    /// suspends at its next turn, keeping its checkpoint.
    Pause(StopArgs),
    /// Unpause a run and the runs it spawned: a suspended step resumes from its checkpoint.
    Unpause(UnpauseArgs),
    /// Retry a closed run's failed result delivery (callback or subscription).
    Redeliver(crate::delivery::RedeliverArgs),
    /// Approve the result a step holds for approval (requireConfirmation): the step
    /// completes with it and the run moves on.
    Approve(approval::ApproveArgs),
    /// Reject the held result with feedback: the step re-opens on its transcript and
    /// the agent reads the feedback.
    Reject(approval::RejectArgs),
    /// Start a new run from this one's state at a step: the steps before it are
    /// carried over as they completed (not run again); the old run, if still open,
    /// is terminated in the same commit. Both runs are linked.
    Reset(reset::ResetArgs),
    /// Start a new run of this one's workflow version from its first step, with its
    /// inputs or edited ones; the old run is left as it is, but linked.
    Rerun(reset::RerunArgs),
}

/// Flags of `run unpause`.
#[derive(Debug, Args)]
pub(crate) struct UnpauseArgs {
    /// The run to unpause.
    pub run_id: String,
}

/// Flags of `run start`.
#[derive(Debug, Args)]
pub(crate) struct StartArgs {
    /// Workflow id to run (see `railyard workflow list`).
    pub workflow: String,
    /// What the run should achieve (the prompts' `{{goal}}`).
    #[arg(long)]
    pub goal: String,
    /// A context entry (the prompts' `{{context.KEY}}`); repeatable, wins over --context-file.
    #[arg(long = "context", value_name = "KEY=VALUE", value_parser = args::key_value)]
    pub context: Vec<(String, String)>,
    /// A search attribute of the run (the namespace declares it: `railyard namespace
    /// attribute add`); repeatable. The value is read by the attribute's type.
    #[arg(long = "attr", value_name = "NAME=VALUE", value_parser = args::key_value)]
    pub attrs: Vec<(String, String)>,
    /// A JSON object of context entries.
    #[arg(long, value_name = "FILE.json")]
    pub context_file: Option<PathBuf>,
    /// Idempotency key: starting again with the same id returns the same run.
    #[arg(long, value_name = "ID")]
    pub request_id: Option<String>,
    /// Choose the run id instead of letting the server generate one.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Follow the run until it closes; exit non-zero unless it COMPLETED.
    #[arg(long)]
    pub wait: bool,
    /// The run's token budget, all kinds counted (default: the workflow's `maxTokens`).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// The run's estimated cost cap in US dollars (default: the workflow's `maxCostUsd`).
    #[arg(long, value_name = "USD")]
    pub max_cost_usd: Option<f64>,
    /// POST the run's result here, signed, when it closes (http:// or https://; the
    /// server needs a delivery signing secret).
    #[arg(long, value_name = "URL")]
    pub callback_url: Option<String>,
    /// A W3C traceparent (00-<trace id>-<parent id>-<flags>): the run's OpenTelemetry
    /// spans join that trace, under that span [default: a trace derived from the run id].
    #[arg(long, value_name = "TRACEPARENT", env = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// Dispatch priority, 1 (first) to 5 (last) [default: 3].
    #[arg(long, value_name = "N")]
    pub priority: Option<u32>,
    /// The key the run's steps share the queue fairly under (e.g. customer:acme;
    /// at most 64 bytes).
    #[arg(long, value_name = "KEY")]
    pub fairness_key: Option<String>,
    /// The fairness key's share, 1 to 1000 [default: 1; a namespace rule overrides it].
    #[arg(long, value_name = "N")]
    pub fairness_weight: Option<u32>,
    /// The key the run's concurrency limit counts under [default: the fairness key].
    #[arg(long, value_name = "KEY")]
    pub concurrency_key: Option<String>,
}

/// Flags of `run list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only runs in this status (RUNNING, COMPLETED, FAILED, CANCELED, TERMINATED, TIMED_OUT).
    #[arg(long, value_name = "S", value_parser = args::run_status)]
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    #[arg(long, value_name = "W")]
    pub workflow: Option<String>,
    /// Only child runs of this run.
    #[arg(long, value_name = "RUN_ID")]
    pub parent: Option<String>,
    /// Only runs started since: a duration back from now (30m, 1h, 2d) or an RFC 3339 time.
    #[arg(long, value_name = "TIME|DURATION", value_parser = args::since)]
    pub since: Option<Since>,
    /// Only runs started before: a duration back from now or an RFC 3339 time.
    #[arg(long, value_name = "TIME|DURATION", value_parser = args::since)]
    pub until: Option<Since>,
    /// At most this many runs (one page).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub limit: u32,
    /// Continue a listing from the token an earlier page printed.
    #[arg(long, value_name = "T")]
    pub page_token: Option<String>,
    /// Only runs whose agents reported an issue (report_issue).
    #[arg(long)]
    pub has_issues: bool,
    /// Only runs this query matches, ANDed with the flags above
    /// (docs/search-and-queries.md): e.g. 'WorkflowId = "review-pr" AND Status =
    /// "FAILED" AND StartTime > "2026-11-20T00:00:00Z" ORDER BY StartTime DESC'.
    #[arg(long, value_name = "QUERY")]
    pub query: Option<String>,
}

/// Flags of `run signal`.
#[derive(Debug, Args)]
pub(crate) struct SignalArgs {
    /// The run to signal.
    pub run_id: String,
    /// Signal name (`steer` becomes a user message in the agent's next turn).
    pub name: String,
    /// Signal payload as JSON (e.g. '{"text":"focus on tests"}').
    #[arg(long, value_name = "JSON", value_parser = args::json_text)]
    pub payload: Option<String>,
    /// Idempotency key for the signal (generated when absent).
    #[arg(long, value_name = "ID")]
    pub request_id: Option<String>,
}

/// Flags of `run cancel` and `run terminate`.
#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// The run to stop.
    pub run_id: String,
    /// Why, recorded in the run's history.
    #[arg(long)]
    pub reason: Option<String>,
}

/// Runs one `railyard run` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: RunCommand) -> anyhow::Result<ExitCode> {
    match command {
        RunCommand::Start(a) => start(global, a).await,
        RunCommand::Describe(a) => view::describe(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::History(a) => view::history(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Watch(a) if a.stream => {
            let client = global.connect().await?;
            stream::watch_output(global, &client, &a.run_id, a.from_offset).await
        }
        RunCommand::Watch(a) => view::watch(global, a).await,
        RunCommand::List(a) => list(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Count(a) => count::count(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Signal(a) => signal(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Cancel(a) => stop(global, a, false).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Terminate(a) => stop(global, a, true).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Tree(a) => tree::tree(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Pause(a) => pause(global, a.run_id, a.reason, true)
            .await
            .map(|()| ExitCode::SUCCESS),
        RunCommand::Unpause(a) => pause(global, a.run_id, None, false)
            .await
            .map(|()| ExitCode::SUCCESS),
        RunCommand::Redeliver(a) => crate::delivery::redeliver(global, a)
            .await
            .map(|()| ExitCode::SUCCESS),
        RunCommand::Approve(a) => approval::approve(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Reject(a) => approval::reject(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Reset(a) => reset::reset(global, a).await.map(|()| ExitCode::SUCCESS),
        RunCommand::Rerun(a) => reset::rerun(global, a).await.map(|()| ExitCode::SUCCESS),
    }
}

async fn start(global: &GlobalOpts, a: StartArgs) -> anyhow::Result<ExitCode> {
    let context = args::build_context(a.context_file.as_deref(), &a.context).map_err(anyhow::Error::msg)?;
    let client = global.connect().await?;
    let req = StartRunRequest {
        namespace: global.namespace.clone(),
        workflow_id: a.workflow.clone(),
        goal: a.goal,
        context,
        request_id: a.request_id.unwrap_or_default(),
        run_id: a.run_id.unwrap_or_default(),
        identity: cli_identity(),
        max_tokens: a.max_tokens.unwrap_or(0),
        max_cost_usd: a.max_cost_usd.unwrap_or(0.0),
        callback_url: a.callback_url.unwrap_or_default(),
        traceparent: a.traceparent.unwrap_or_default(),
        search_attributes: a.attrs.into_iter().collect(),
        priority: a.priority.unwrap_or(0),
        fairness_key: a.fairness_key.unwrap_or_default(),
        fairness_weight: a.fairness_weight.unwrap_or(0),
        concurrency_key: a.concurrency_key.unwrap_or_default(),
        ..Default::default()
    };
    let resp = client.start_run_with(req).await?;
    if !a.wait {
        if global.output.is_json() {
            output::json(&json!({ "run_id": resp.run_id, "started": resp.started }))?;
        } else if resp.started {
            output::line(format!("started run {} of {}", resp.run_id, a.workflow))?;
        } else {
            output::line(format!(
                "run {} was already started with this request id",
                resp.run_id
            ))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !global.output.is_json() {
        let verb = if resp.started {
            "started"
        } else {
            "following already-started"
        };
        output::line(format!("{verb} run {} of {}", resp.run_id, a.workflow))?;
    }
    let run = view::follow(&client, global, &resp.run_id, 1, !global.output.is_json()).await?;
    if global.output.is_json() {
        output::json(&json!({ "run_id": resp.run_id, "started": resp.started, "run": run_json(&run) }))?;
    }
    Ok(view::exit_for(&run))
}

async fn list(global: &GlobalOpts, a: ListArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let now = now_unix_ms();
    let req = ListRunsRequest {
        namespace: global.namespace.clone(),
        status: a.status.map_or(0, |s| s as i32),
        workflow_id: a.workflow.unwrap_or_default(),
        parent_run_id: a.parent.unwrap_or_default(),
        started_after_unix_ms: a.since.map_or(0, |s| s.to_unix_ms(now)),
        started_before_unix_ms: a.until.map_or(0, |s| s.to_unix_ms(now)),
        page_size: a.limit,
        page_token: a.page_token.unwrap_or_default(),
        has_issues: a.has_issues,
        query: a.query.unwrap_or_default(),
    };
    let resp = client.list_runs(req).await?;
    if global.output.is_json() {
        let runs: Vec<_> = resp.runs.iter().map(run_json).collect();
        output::json(&json!({ "runs": runs, "next_page_token": resp.next_page_token }))?;
        return Ok(());
    }
    if resp.runs.is_empty() && !resp.next_page_token.is_empty() {
        output::line("no runs among those read (the server reads at most 10,000 a page)")?;
    } else if resp.runs.is_empty() {
        output::line("no runs")?;
    } else {
        // The attributes column only when a run on the page has some.
        let with_attrs = resp.runs.iter().any(|r| !r.search_attributes.is_empty());
        let mut headers = vec![
            "RUN ID", "WORKFLOW", "STATUS", "DONE", "ISSUES", "DELIVERY", "STARTED", "CLOSED", "TOKENS",
            "COST",
        ];
        if with_attrs {
            headers.push("ATTRIBUTES");
        }
        headers.push("GOAL");
        let mut table = Table::new(headers);
        for r in &resp.runs {
            let done = r.steps.iter().filter(|s| s.state == "COMPLETED").count();
            let steps = if r.steps.is_empty() {
                "-".to_string()
            } else {
                format!("{done}/{}", r.steps.len())
            };
            let status = match &r.waiting {
                Some(w) => format!(
                    "{} ({})",
                    status_name(r.status),
                    crate::client::view::waiting_text(w)
                ),
                None => status_name(r.status),
            };
            let mut row = vec![
                r.run_id.clone(),
                r.workflow_id.clone(),
                status,
                steps,
                if r.issue_count == 0 {
                    "-".to_string()
                } else {
                    r.issue_count.to_string()
                },
                crate::delivery::list_cell(r),
                rfc3339(r.start_time_unix_ms),
                rfc3339(r.close_time_unix_ms),
                r.usage.as_ref().map_or("-".to_string(), |u| {
                    u.input_tokens
                        .saturating_add(u.output_tokens)
                        .saturating_add(u.cache_read_tokens)
                        .saturating_add(u.cache_write_tokens)
                        .to_string()
                }),
                r.usage
                    .as_ref()
                    .filter(|u| u.cost_usd > 0.0)
                    .map_or("-".to_string(), |u| format!("${:.4}", u.cost_usd)),
            ];
            if with_attrs {
                row.push(truncate(
                    &crate::client::view::attributes_text(&r.search_attributes),
                    50,
                ));
            }
            row.push(truncate(&r.goal, 50));
            table.row(row);
        }
        table.print()?;
    }
    if !resp.next_page_token.is_empty() {
        output::line(format!("next page: --page-token {}", resp.next_page_token))?;
    }
    Ok(())
}

async fn signal(global: &GlobalOpts, a: SignalArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let req = SignalRunRequest {
        namespace: global.namespace.clone(),
        run_id: a.run_id.clone(),
        signal_name: a.name.clone(),
        payload_json: a.payload.unwrap_or_default(),
        identity: cli_identity(),
        request_id: a.request_id.unwrap_or_default(),
    };
    client.signal_run(req).await?;
    if global.output.is_json() {
        output::json(&json!({ "run_id": a.run_id, "signal_name": a.name, "sent": true }))?;
    } else {
        output::line(format!("sent signal {} to run {}", a.name, a.run_id))?;
    }
    Ok(())
}

async fn pause(
    global: &GlobalOpts,
    run_id: String,
    reason: Option<String>,
    pause: bool,
) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let (namespace, identity) = (global.namespace.clone(), cli_identity());
    let changed = if pause {
        client
            .pause_run(railyard_proto::v1::PauseRunRequest {
                namespace,
                run_id: run_id.clone(),
                reason: reason.unwrap_or_default(),
                identity,
            })
            .await?
    } else {
        client
            .unpause_run(railyard_proto::v1::UnpauseRunRequest {
                namespace,
                run_id: run_id.clone(),
                identity,
            })
            .await?
    };
    let (verb, already) = if pause {
        ("paused", "was already paused")
    } else {
        ("unpaused", "was not paused")
    };
    if global.output.is_json() {
        output::json(&json!({ "run_id": run_id, verb: true, "changed": changed }))?;
    } else if changed {
        output::line(format!("{verb} run {run_id} and the runs it spawned"))?;
    } else {
        output::line(format!("run {run_id} {already}"))?;
    }
    Ok(())
}

async fn stop(global: &GlobalOpts, a: StopArgs, terminate: bool) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let (namespace, run_id, reason, identity) = (
        global.namespace.clone(),
        a.run_id.clone(),
        a.reason.unwrap_or_default(),
        cli_identity(),
    );
    if terminate {
        client
            .terminate_run(TerminateRunRequest {
                namespace,
                run_id,
                reason,
                identity,
            })
            .await?;
    } else {
        client
            .cancel_run(CancelRunRequest {
                namespace,
                run_id,
                reason,
                identity,
            })
            .await?;
    }
    let action = if terminate {
        "terminated"
    } else {
        "cancel_requested"
    };
    if global.output.is_json() {
        output::json(&json!({ "run_id": a.run_id, action: true }))?;
    } else if terminate {
        output::line(format!("terminated run {}", a.run_id))?;
    } else {
        output::line(format!("requested cancellation of run {}", a.run_id))?;
    }
    Ok(())
}
