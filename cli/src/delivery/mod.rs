//! Result delivery on the command line: `run redeliver`, `namespace subscribe` /
//! `unsubscribe`, and how a run's delivery state is shown by `run describe` and
//! `run list` (apart from its status: a COMPLETED run may have delivery FAILED).

use clap::Args;
use railyard_proto::v1::{
    DeliveryState, NamespaceInfo, RedeliverResultRequest, RunInfo, RunStatus, Subscription,
};
use serde_json::{Value, json};

use crate::client::args;
use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output::{self, truncate};
use crate::client::timefmt::rfc3339_or_null;
use crate::client::view::{delivery_state_name, status_name};

/// Flags of `run redeliver`.
#[derive(Debug, Args)]
pub(crate) struct RedeliverArgs {
    /// The closed run whose failed delivery to retry.
    pub run_id: String,
    /// Only this target (`callback` or `subscription:<id>`); default: every failed one.
    #[arg(long, value_name = "TARGET")]
    pub target: Option<String>,
}

/// Flags of `namespace subscribe`.
#[derive(Debug, Args)]
pub(crate) struct SubscribeArgs {
    /// The namespace.
    pub namespace: String,
    /// The subscription's id (a name, unique in the namespace).
    pub id: String,
    /// Where to POST each closed run's result (http:// or https://).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Only runs of this workflow; repeatable (default: every workflow).
    #[arg(long = "workflow", value_name = "W")]
    pub workflows: Vec<String>,
    /// Only runs that closed so (COMPLETED, FAILED, CANCELED, TERMINATED, TIMED_OUT);
    /// repeatable (default: every outcome).
    #[arg(long = "outcome", value_name = "S", value_parser = args::run_status)]
    pub outcomes: Vec<RunStatus>,
    /// What to send: run.closed (each closed run's result) and/or issue.reported
    /// (each issue an agent reports, at once); repeatable (default: run.closed).
    #[arg(long = "event", value_name = "KIND", value_parser = ["run.closed", "issue.reported"])]
    pub events: Vec<String>,
}

/// Flags of `namespace unsubscribe`.
#[derive(Debug, Args)]
pub(crate) struct UnsubscribeArgs {
    /// The namespace.
    pub namespace: String,
    /// The subscription to remove.
    pub id: String,
}

/// `railyard run redeliver`.
pub(crate) async fn redeliver(global: &GlobalOpts, a: RedeliverArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let targets = client
        .redeliver_result(RedeliverResultRequest {
            namespace: global.namespace.clone(),
            run_id: a.run_id.clone(),
            identity: cli_identity(),
            target: a.target.unwrap_or_default(),
        })
        .await?;
    if global.output.is_json() {
        output::json(&json!({ "run_id": a.run_id, "redelivering": targets }))?;
    } else {
        output::line(format!(
            "redelivering the result of run {} to {}",
            a.run_id,
            targets.join(", ")
        ))?;
    }
    Ok(())
}

/// `railyard namespace subscribe`: answers the namespace as it now is.
pub(crate) async fn subscribe(global: &GlobalOpts, a: SubscribeArgs) -> anyhow::Result<NamespaceInfo> {
    let client = global.connect().await?;
    let sub = Subscription {
        id: a.id,
        url: a.url,
        workflows: a.workflows,
        outcomes: a.outcomes.into_iter().map(|o| o as i32).collect(),
        create_time_unix_ms: 0,
        events: a.events,
    };
    Ok(client.subscribe_namespace(&a.namespace, sub).await?)
}

/// `railyard namespace unsubscribe`: answers the namespace as it now is.
pub(crate) async fn unsubscribe(global: &GlobalOpts, a: UnsubscribeArgs) -> anyhow::Result<NamespaceInfo> {
    let client = global.connect().await?;
    Ok(client.unsubscribe_namespace(&a.namespace, &a.id).await?)
}

/// The `DELIVERY` cell of `run list`: the state, `-` when none.
pub(crate) fn list_cell(run: &RunInfo) -> String {
    match DeliveryState::try_from(run.delivery_state) {
        Ok(DeliveryState::None) => "-".into(),
        _ => delivery_state_name(run.delivery_state),
    }
}

/// `run describe`'s delivery lines (none when the run has no targets).
pub(crate) fn describe_lines(run: &RunInfo) -> Vec<String> {
    if run.deliveries.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!("delivery  {}", delivery_state_name(run.delivery_state))];
    for d in &run.deliveries {
        let mut line = format!(
            "  {}  {}  {}  attempts {}",
            d.target,
            d.url,
            delivery_state_name(d.state),
            d.attempts
        );
        if d.in_flight {
            line.push_str("  (sending)");
        }
        if !d.last_error.is_empty() {
            line.push_str(&format!("  last error: {}", truncate(&d.last_error, 80)));
        }
        lines.push(line);
    }
    lines
}

/// A namespace's subscriptions as JSON.
pub(crate) fn subscriptions_json(ns: &NamespaceInfo) -> Value {
    Value::Array(
        ns.subscriptions
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "url": s.url,
                    "workflows": s.workflows,
                    "outcomes": s.outcomes.iter().map(|o| status_name(*o)).collect::<Vec<_>>(),
                    "create_time": rfc3339_or_null(s.create_time_unix_ms),
                    "events": if s.events.is_empty() { vec!["run.closed".to_string()] } else { s.events.clone() },
                })
            })
            .collect(),
    )
}

/// `namespace describe`'s subscription lines.
pub(crate) fn subscription_lines(ns: &NamespaceInfo) -> Vec<String> {
    let all = |v: Vec<String>| {
        if v.is_empty() {
            "all".to_string()
        } else {
            v.join(",")
        }
    };
    ns.subscriptions
        .iter()
        .map(|s| {
            format!(
                "subscription {}  {}  workflows {}  outcomes {}  events {}",
                s.id,
                s.url,
                all(s.workflows.clone()),
                all(s.outcomes.iter().map(|o| status_name(*o)).collect()),
                if s.events.is_empty() {
                    "run.closed".to_string()
                } else {
                    s.events.join(",")
                }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
