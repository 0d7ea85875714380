//! `railyard schedule ...`: create, inspect, change and remove schedules that start
//! runs on cron or interval specs (the server's `Schedules` service).
//!
//! [`flags`] holds the spec flags and how `update` merges them into the described
//! schedule; [`show`] the JSON and human renderings.

pub(crate) mod flags;
pub(crate) mod show;

use clap::{ArgGroup, Args, Subcommand};
use railyard_proto::v1::{
    CreateScheduleRequest, DeleteScheduleRequest, ListSchedulesRequest, OverlapPolicy, PatchScheduleRequest,
    ScheduleBackfill, ScheduleInfo, ScheduleTrigger, UpdateScheduleRequest,
};
use railyard_sdk::Client;
use serde_json::json;

use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output;
use flags::{OVERLAP_HELP, SpecFlags};
use show::clean;

/// `railyard schedule` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Create a schedule that starts runs of a workflow on cron expressions or an interval.
    Create(CreateArgs),
    /// Show a schedule: spec, policies, state, next fire times (local and UTC), recent
    /// actions, fires that started no run, and buffered starts.
    Describe(DescribeArgs),
    /// List the namespace's schedules.
    List(ListArgs),
    /// Change a schedule: only the flags given change; its state and history are kept.
    Update(UpdateArgs),
    /// Pause a schedule: no fire starts a run until it is unpaused.
    Pause(PauseArgs),
    /// Unpause a schedule; fires resume from now.
    Unpause(PauseArgs),
    /// Take one action now, as if the schedule had fired.
    Trigger(TriggerArgs),
    /// Take every fire time of the spec in a past range, as if the schedule had been running then.
    Backfill(BackfillArgs),
    /// Delete a schedule (the runs it started are left as they are).
    Delete(IdArg),
}

/// Flags of `schedule create`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("calendar").args(["cron", "interval"]).required(true)))]
pub(crate) struct CreateArgs {
    /// The schedule id (also the prefix of the run ids it starts).
    pub schedule_id: String,
    /// Workflow each fire starts a run of.
    #[arg(long, value_name = "WF")]
    pub workflow: String,
    #[command(flatten)]
    pub spec: SpecFlags,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    /// Why it is paused.
    #[arg(long, value_name = "TEXT", requires = "paused")]
    pub note: Option<String>,
    /// Idempotency key: creating again with the same id changes nothing.
    #[arg(long, value_name = "ID")]
    pub request_id: Option<String>,
}

/// Flags of `schedule update`.
#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// The schedule to change.
    pub schedule_id: String,
    /// Start runs of this workflow instead.
    #[arg(long, value_name = "WF")]
    pub workflow: Option<String>,
    /// Drop the current context entries (before any --context is added).
    #[arg(long)]
    pub clear_context: bool,
    #[command(flatten)]
    pub spec: SpecFlags,
}

/// Flags of `schedule describe`.
#[derive(Debug, Args)]
pub(crate) struct DescribeArgs {
    /// The schedule.
    pub schedule_id: String,
    /// How many next fire times to show (the server's default when absent).
    #[arg(long, value_name = "N")]
    pub next: Option<u32>,
}

/// Flags of `schedule list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// At most this many schedules (one page).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: u32,
    /// Continue a listing from the token an earlier page printed.
    #[arg(long, value_name = "T")]
    pub page_token: Option<String>,
}

/// Flags of `schedule pause` and `schedule unpause`.
#[derive(Debug, Args)]
pub(crate) struct PauseArgs {
    /// The schedule.
    pub schedule_id: String,
    /// Why (shown by describe and list).
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
}

/// Flags of `schedule trigger`.
#[derive(Debug, Args)]
pub(crate) struct TriggerArgs {
    /// The schedule.
    pub schedule_id: String,
    /// Overlap policy for this one action (the schedule's own when absent).
    #[arg(long, value_name = "POLICY", value_parser = flags::overlap, help = OVERLAP_HELP)]
    pub overlap: Option<OverlapPolicy>,
}

/// Flags of `schedule backfill`.
#[derive(Debug, Args)]
pub(crate) struct BackfillArgs {
    /// The schedule.
    pub schedule_id: String,
    /// First time of the range (inclusive): RFC 3339, or a duration back from now (2h).
    #[arg(long, value_name = "TIME", value_parser = flags::past_time)]
    pub start: i64,
    /// Last time of the range (inclusive): RFC 3339, or a duration back from now, or `now`.
    #[arg(long, value_name = "TIME", value_parser = flags::past_time)]
    pub end: i64,
    /// Overlap policy of the backfilled actions (buffer-all when absent).
    #[arg(long, value_name = "POLICY", value_parser = flags::overlap, help = OVERLAP_HELP)]
    pub overlap: Option<OverlapPolicy>,
}

/// A command that takes only a schedule id.
#[derive(Debug, Args)]
pub(crate) struct IdArg {
    /// The schedule.
    pub schedule_id: String,
}

/// Runs one `railyard schedule` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: ScheduleCommand) -> anyhow::Result<()> {
    match command {
        ScheduleCommand::Create(a) => create(global, a).await,
        ScheduleCommand::Describe(a) => describe(global, a).await,
        ScheduleCommand::List(a) => list(global, a).await,
        ScheduleCommand::Update(a) => update(global, a).await,
        ScheduleCommand::Pause(a) => pause(global, a, true).await,
        ScheduleCommand::Unpause(a) => pause(global, a, false).await,
        ScheduleCommand::Trigger(a) => trigger(global, a).await,
        ScheduleCommand::Backfill(a) => backfill(global, a).await,
        ScheduleCommand::Delete(a) => delete(global, a).await,
    }
}

async fn create(global: &GlobalOpts, a: CreateArgs) -> anyhow::Result<()> {
    let parts = a.spec.to_parts(&a.workflow);
    let client = global.connect().await?;
    client
        .create_schedule(CreateScheduleRequest {
            namespace: global.namespace.clone(),
            schedule_id: a.schedule_id.clone(),
            spec: Some(parts.spec),
            action: Some(parts.action),
            policies: Some(parts.policies),
            paused: a.paused,
            note: a.note.unwrap_or_default(),
            remaining_actions: parts.remaining_actions,
            memo: parts.memo,
            identity: cli_identity(),
            request_id: a.request_id.unwrap_or_default(),
        })
        .await?;
    let paused = if a.paused { " (paused)" } else { "" };
    let done = format!(
        "created schedule {} of {}{paused}",
        clean(&a.schedule_id),
        clean(&a.workflow)
    );
    read_back(&client, global, &a.schedule_id, "created", done).await
}

/// After a create or update: prints what was done and the next fire times the server
/// computed, so the user can check the spec. The change is made either way, so a
/// failed read-back is only a warning.
async fn read_back(
    client: &Client,
    global: &GlobalOpts,
    schedule_id: &str,
    key: &str,
    done: String,
) -> anyhow::Result<()> {
    let info = client.describe_schedule(&global.namespace, schedule_id, 3).await;
    if let Err(e) = &info {
        tracing::warn!(error = %e, schedule_id, "could not read the schedule back");
    }
    if global.output.is_json() {
        let schedule = info.as_ref().ok().map(show::schedule_json);
        output::json(&json!({ key: true, "schedule_id": schedule_id, "schedule": schedule }))?;
        return Ok(());
    }
    output::line(done)?;
    match info {
        Ok(info) => next_fires(&info),
        Err(_) => Ok(()),
    }
}

/// Prints `next fire  <in the schedule's zone>  (<UTC>)` lines.
fn next_fires(info: &ScheduleInfo) -> anyhow::Result<()> {
    let zone = show::schedule_zone(info.spec.as_ref());
    if info.next_fire_times_unix_ms.is_empty() {
        output::line("next fire  none")?;
    }
    for &t in &info.next_fire_times_unix_ms {
        output::line(format!(
            "next fire  {}  ({})",
            show::local_time(t, zone),
            crate::client::timefmt::rfc3339(t)
        ))?;
    }
    Ok(())
}

async fn describe(global: &GlobalOpts, a: DescribeArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let info = client
        .describe_schedule(&global.namespace, &a.schedule_id, a.next.unwrap_or(0))
        .await?;
    if global.output.is_json() {
        output::json(&show::schedule_json(&info))?;
    } else {
        for text in show::describe_lines(&info) {
            output::line(text)?;
        }
    }
    Ok(())
}

async fn list(global: &GlobalOpts, a: ListArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client
        .list_schedules(ListSchedulesRequest {
            namespace: global.namespace.clone(),
            page_size: a.limit,
            page_token: a.page_token.unwrap_or_default(),
        })
        .await?;
    if global.output.is_json() {
        let rows: Vec<_> = resp.schedules.iter().map(show::summary_json).collect();
        output::json(&json!({ "schedules": rows, "next_page_token": resp.next_page_token }))?;
        return Ok(());
    }
    if resp.schedules.is_empty() {
        output::line("no schedules")?;
    } else {
        show::list_table(&resp.schedules).print()?;
    }
    if !resp.next_page_token.is_empty() {
        output::line(format!(
            "next page: --page-token {}",
            clean(&resp.next_page_token)
        ))?;
    }
    Ok(())
}

async fn update(global: &GlobalOpts, a: UpdateArgs) -> anyhow::Result<()> {
    if a.spec.is_empty() && a.workflow.is_none() && !a.clear_context {
        anyhow::bail!("nothing to change: give at least one flag (see railyard schedule update --help)");
    }
    let client = global.connect().await?;
    let current = client
        .describe_schedule(&global.namespace, &a.schedule_id, 0)
        .await?;
    let parts = a
        .spec
        .merged(&current, a.workflow.as_deref(), a.clear_context)
        .map_err(anyhow::Error::msg)?;
    client
        .update_schedule(UpdateScheduleRequest {
            namespace: global.namespace.clone(),
            schedule_id: a.schedule_id.clone(),
            spec: Some(parts.spec),
            action: Some(parts.action),
            policies: Some(parts.policies),
            remaining_actions: parts.remaining_actions,
            memo: parts.memo,
            identity: cli_identity(),
        })
        .await?;
    let done = format!("updated schedule {}", clean(&a.schedule_id));
    read_back(&client, global, &a.schedule_id, "updated", done).await
}

async fn pause(global: &GlobalOpts, a: PauseArgs, pause: bool) -> anyhow::Result<()> {
    let client = global.connect().await?;
    client
        .patch_schedule(PatchScheduleRequest {
            namespace: global.namespace.clone(),
            schedule_id: a.schedule_id.clone(),
            pause,
            unpause: !pause,
            note: a.note.clone().unwrap_or_default(),
            identity: cli_identity(),
            ..Default::default()
        })
        .await?;
    let verb = if pause { "paused" } else { "unpaused" };
    if global.output.is_json() {
        output::json(
            &json!({ "schedule_id": a.schedule_id, verb: true, "note": a.note.unwrap_or_default() }),
        )?;
    } else {
        let note = a.note.map(|n| format!(": {}", clean(&n))).unwrap_or_default();
        output::line(format!("{verb} schedule {}{note}", clean(&a.schedule_id)))?;
    }
    Ok(())
}

async fn trigger(global: &GlobalOpts, a: TriggerArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client
        .patch_schedule(PatchScheduleRequest {
            namespace: global.namespace.clone(),
            schedule_id: a.schedule_id.clone(),
            trigger: Some(ScheduleTrigger {
                overlap: a.overlap.map_or(0, |p| p as i32),
            }),
            identity: cli_identity(),
            ..Default::default()
        })
        .await?;
    if global.output.is_json() {
        output::json(&json!({
            "schedule_id": a.schedule_id,
            "triggered": true,
            "run_id": resp.triggered_run_id,
        }))?;
    } else if resp.triggered_run_id.is_empty() {
        output::line(format!(
            "triggered schedule {}: no run started now (the overlap policy skipped or buffered it; see describe)",
            clean(&a.schedule_id)
        ))?;
    } else {
        output::line(format!(
            "triggered schedule {}: started run {}",
            clean(&a.schedule_id),
            clean(&resp.triggered_run_id)
        ))?;
    }
    Ok(())
}

async fn backfill(global: &GlobalOpts, a: BackfillArgs) -> anyhow::Result<()> {
    if a.end < a.start {
        anyhow::bail!(
            "--end {} is before --start {}",
            crate::client::timefmt::rfc3339(a.end),
            crate::client::timefmt::rfc3339(a.start)
        );
    }
    let client = global.connect().await?;
    client
        .patch_schedule(PatchScheduleRequest {
            namespace: global.namespace.clone(),
            schedule_id: a.schedule_id.clone(),
            backfill: vec![ScheduleBackfill {
                start_time_unix_ms: a.start,
                end_time_unix_ms: a.end,
                overlap: a.overlap.map_or(0, |p| p as i32),
            }],
            identity: cli_identity(),
            ..Default::default()
        })
        .await?;
    let (start, end) = (
        crate::client::timefmt::rfc3339(a.start),
        crate::client::timefmt::rfc3339(a.end),
    );
    if global.output.is_json() {
        output::json(&json!({
            "schedule_id": a.schedule_id,
            "backfilled": true,
            "start_time": start,
            "end_time": end,
        }))?;
    } else {
        output::line(format!(
            "backfilling schedule {} from {start} to {end} (see describe for the runs)",
            clean(&a.schedule_id)
        ))?;
    }
    Ok(())
}

async fn delete(global: &GlobalOpts, a: IdArg) -> anyhow::Result<()> {
    let client = global.connect().await?;
    client
        .delete_schedule_with(DeleteScheduleRequest {
            namespace: global.namespace.clone(),
            schedule_id: a.schedule_id.clone(),
            identity: cli_identity(),
        })
        .await?;
    if global.output.is_json() {
        output::json(&json!({ "schedule_id": a.schedule_id, "deleted": true }))?;
    } else {
        output::line(format!("deleted schedule {}", clean(&a.schedule_id)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
