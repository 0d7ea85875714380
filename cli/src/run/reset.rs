//! `railyard run reset` and `railyard run rerun`: a new run from an old one's state
//! (`History.ResetRun`, `History.RerunRun`).

use std::path::PathBuf;

use clap::Args;
use railyard_proto::v1::{RerunRunRequest, ResetRunRequest, ResetRunResponse};
use serde_json::json;

use crate::client::args;
use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output;

/// The inputs a reset or rerun may change, and its request id.
#[derive(Debug, Args)]
pub(crate) struct NewInputs {
    /// Why, recorded on both runs (and, for a reset, the old run's termination reason).
    #[arg(long)]
    pub reason: Option<String>,
    /// A new goal [default: the old run's].
    #[arg(long)]
    pub goal: Option<String>,
    /// A context entry replacing or adding to the old run's starting context;
    /// repeatable, wins over --context-file.
    #[arg(long = "context", value_name = "KEY=VALUE", value_parser = args::key_value)]
    pub context: Vec<(String, String)>,
    /// A JSON object of context entries.
    #[arg(long, value_name = "FILE.json")]
    pub context_file: Option<PathBuf>,
    /// Choose the new run's id instead of letting the server generate one.
    #[arg(long, value_name = "ID")]
    pub new_run_id: Option<String>,
    /// Idempotency key: the same request again answers the same new run
    /// [default: one generated for this command, kept across its retries].
    #[arg(long, value_name = "ID")]
    pub request_id: Option<String>,
}

/// Flags of `run reset`.
#[derive(Debug, Args)]
pub(crate) struct ResetArgs {
    /// The run to reset.
    pub run_id: String,
    /// The step the new run starts at; the steps before it are carried over as they
    /// completed [default: the first step that failed, else the step a terminated,
    /// canceled or timed-out run stopped at].
    #[arg(long, value_name = "STEP")]
    pub to_step: Option<String>,
    #[command(flatten)]
    pub inputs: NewInputs,
}

/// Flags of `run rerun`.
#[derive(Debug, Args)]
pub(crate) struct RerunArgs {
    /// The run to rerun.
    pub run_id: String,
    #[command(flatten)]
    pub inputs: NewInputs,
}

/// Resets a run and prints the new one.
pub(crate) async fn reset(global: &GlobalOpts, a: ResetArgs) -> anyhow::Result<()> {
    let i = a.inputs;
    let context = args::build_context(i.context_file.as_deref(), &i.context).map_err(anyhow::Error::msg)?;
    let client = global.connect().await?;
    let resp = client
        .reset_run(ResetRunRequest {
            namespace: global.namespace.clone(),
            run_id: a.run_id.clone(),
            to_step: a.to_step.unwrap_or_default(),
            reason: i.reason.unwrap_or_default(),
            goal: i.goal.unwrap_or_default(),
            context,
            new_run_id: i.new_run_id.unwrap_or_default(),
            request_id: i.request_id.unwrap_or_default(),
            identity: cli_identity(),
        })
        .await?;
    print(global, "reset", &a.run_id, &resp)
}

/// Reruns a run and prints the new one.
pub(crate) async fn rerun(global: &GlobalOpts, a: RerunArgs) -> anyhow::Result<()> {
    let i = a.inputs;
    let context = args::build_context(i.context_file.as_deref(), &i.context).map_err(anyhow::Error::msg)?;
    let client = global.connect().await?;
    let resp = client
        .rerun_run(RerunRunRequest {
            namespace: global.namespace.clone(),
            run_id: a.run_id.clone(),
            reason: i.reason.unwrap_or_default(),
            goal: i.goal.unwrap_or_default(),
            context,
            new_run_id: i.new_run_id.unwrap_or_default(),
            request_id: i.request_id.unwrap_or_default(),
            identity: cli_identity(),
        })
        .await?;
    print(global, "rerun", &a.run_id, &resp)
}

fn print(global: &GlobalOpts, kind: &str, from: &str, r: &ResetRunResponse) -> anyhow::Result<()> {
    if global.output.is_json() {
        output::json(&json!({
            "run_id": r.run_id,
            "from_run_id": from,
            "kind": kind,
            "started": r.started,
            "step_id": r.step_id,
            "carried_steps": r.carried_steps,
            "terminated": r.terminated,
        }))?;
        return Ok(());
    }
    if !r.started {
        output::line(format!(
            "run {} was already made from run {from} with this request id",
            r.run_id
        ))?;
        return Ok(());
    }
    let mut line = format!(
        "{kind} run {from} as run {}: starts at step {}",
        r.run_id, r.step_id
    );
    if r.carried_steps > 0 {
        line.push_str(&format!(", {} step(s) carried over", r.carried_steps));
    }
    if r.terminated {
        line.push_str(&format!("; run {from} terminated"));
    }
    output::line(line)?;
    Ok(())
}
