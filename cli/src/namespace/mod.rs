//! `railyard namespace ...`: namespaces (create, describe, list, update, delete). An
//! admin key of every namespace (`*`) creates, lists all and deletes; an admin key of
//! a namespace describes and updates it. Each namespace has a retention (closed
//! runs are purged that long after they close) and limits (open runs, starts per
//! second, pending signals per run; 0 is no limit).

mod attributes;

use clap::{Args, Subcommand};
use railyard_proto::v1::{CreateNamespaceRequest, NamespaceInfo, UpdateNamespaceRequest};
use serde_json::{Value, json};

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table};
use crate::client::timefmt::{parse_duration, rfc3339, rfc3339_or_null};

/// `railyard namespace` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum NamespaceCommand {
    /// Create a namespace (settings not given take their defaults).
    Create(CreateArgs),
    /// Show a namespace.
    Describe(Name),
    /// List the namespaces your key reaches.
    List,
    /// Change a namespace's description, retention or limits (those given).
    Update(UpdateArgs),
    /// Delete an empty namespace (no runs); its API keys are revoked with it.
    Delete(Name),
    /// Add a notification subscription: every run of the namespace that closes
    /// (filtered by --workflow and --outcome) is POSTed, signed, to --url.
    Subscribe(crate::delivery::SubscribeArgs),
    /// Remove a notification subscription.
    Unsubscribe(crate::delivery::UnsubscribeArgs),
    /// Search attributes the namespace declares: add, list, remove.
    #[command(subcommand)]
    Attribute(attributes::AttributeCommand),
}

/// A namespace's name.
#[derive(Debug, Args)]
pub(crate) struct Name {
    /// The namespace.
    pub name: String,
}

/// `namespace create`.
#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The namespace.
    pub name: String,
    /// What the namespace is for.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub description: String,
    #[command(flatten)]
    pub settings: Settings,
}

/// `namespace update`.
#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// The namespace.
    pub name: String,
    /// What the namespace is for.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    #[command(flatten)]
    pub settings: Settings,
    /// The namespace's principles for its runs' agents, after the server's and before
    /// a workflow's (at most 16 KiB; "" clears them). New runs only: a run pins its
    /// principles when it starts.
    #[arg(long, value_name = "TEXT", conflicts_with = "principles_file")]
    pub principles: Option<String>,
    /// --principles, read from a file.
    #[arg(long, value_name = "FILE")]
    pub principles_file: Option<std::path::PathBuf>,
    /// How the namespace's principles combine with the server's: extend (default) or
    /// replace.
    #[arg(long, value_name = "MODE", value_parser = ["extend", "replace"])]
    pub principles_mode: Option<String>,
}

/// Retention and limits; a flag not given leaves the setting as it is (on create:
/// its default).
#[derive(Debug, Args)]
pub(crate) struct Settings {
    /// How long a closed run is kept after it closes, then purged with its history
    /// (30d, 12h, 1w; 0 keeps closed runs for good; default 30d).
    #[arg(long, value_name = "DURATION", value_parser = parse_retention)]
    pub retention: Option<u64>,
    /// Most runs open at once (0: no limit; default 100000).
    #[arg(long, value_name = "N")]
    pub max_open_runs: Option<u64>,
    /// Most runs started per second, schedules' fires included (0: no limit; the default).
    #[arg(long, value_name = "N")]
    pub max_starts_per_second: Option<u64>,
    /// Most signals pending on one run (0: no limit; default 1000).
    #[arg(long, value_name = "N")]
    pub max_pending_signals: Option<u64>,
}

/// A retention in whole seconds: a duration (`30d`) or `0`.
fn parse_retention(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    let d = parse_duration(text)?;
    if d.subsec_millis() != 0 || d.as_secs() == 0 {
        return Err(format!(
            "retention {text:?} is not a whole number of seconds (use 0 to keep closed runs for good)"
        ));
    }
    Ok(d.as_secs())
}

/// A retention as `parse_retention` reads it: `30d`, `1d12h`, `90s`; `forever` for 0.
pub(crate) fn retention_text(seconds: i64) -> String {
    if seconds <= 0 {
        return "forever".into();
    }
    let mut left = seconds;
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if left >= size {
            out.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    out
}

/// A limit for people: `none` for 0.
fn limit_text(n: u64) -> String {
    if n == 0 { "none".into() } else { n.to_string() }
}

/// Runs one `railyard namespace` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: NamespaceCommand) -> anyhow::Result<()> {
    if let NamespaceCommand::Attribute(a) = command {
        return attributes::run(global, a).await;
    }
    let client = global.connect().await?;
    let shown = match command {
        NamespaceCommand::Attribute(_) => None,
        NamespaceCommand::Create(a) => {
            let s = a.settings;
            let req = CreateNamespaceRequest {
                name: a.name,
                description: a.description,
                retention_seconds: s.retention.map(seconds).transpose()?,
                max_open_runs: s.max_open_runs,
                max_starts_per_second: s.max_starts_per_second,
                max_pending_signals: s.max_pending_signals,
            };
            Some(client.create_namespace_with(req).await?)
        }
        NamespaceCommand::Describe(a) => Some(client.describe_namespace(&a.name).await?),
        NamespaceCommand::Update(a) => {
            let s = a.settings;
            let req = UpdateNamespaceRequest {
                name: a.name,
                description: a.description,
                retention_seconds: s.retention.map(seconds).transpose()?,
                max_open_runs: s.max_open_runs,
                max_starts_per_second: s.max_starts_per_second,
                max_pending_signals: s.max_pending_signals,
                principles: match (a.principles, &a.principles_file) {
                    (Some(text), _) => Some(text),
                    (None, Some(file)) => Some(
                        railyard_files::read_regular_text(
                            file,
                            railyard_model::principles::MAX_LAYER_BYTES as u64,
                        )
                        .map_err(|e| anyhow::anyhow!("--principles-file {}: {e}", file.display()))?,
                    ),
                    (None, None) if a.principles_mode.is_some() => {
                        anyhow::bail!("--principles-mode needs --principles or --principles-file")
                    }
                    (None, None) => None,
                },
                principles_mode: a.principles_mode.unwrap_or_default(),
            };
            Some(client.update_namespace_with(req).await?)
        }
        NamespaceCommand::Subscribe(a) => Some(crate::delivery::subscribe(global, a).await?),
        NamespaceCommand::Unsubscribe(a) => Some(crate::delivery::unsubscribe(global, a).await?),
        NamespaceCommand::Delete(a) => {
            client.delete_namespace(&a.name).await?;
            if global.output.is_json() {
                output::json(&json!({ "deleted": a.name }))?;
            } else {
                output::line(format!("deleted namespace {}", a.name))?;
            }
            None
        }
        NamespaceCommand::List => {
            let all = client.list_namespaces().await?;
            if global.output.is_json() {
                output::json(&json!({ "namespaces": all.iter().map(namespace_json).collect::<Vec<_>>() }))?;
            } else {
                for line in list_lines(&all) {
                    output::line(line)?;
                }
            }
            None
        }
    };
    if let Some(ns) = shown {
        if global.output.is_json() {
            output::json(&namespace_json(&ns))?;
        } else {
            for line in describe_lines(&ns) {
                output::line(line)?;
            }
            for line in crate::delivery::subscription_lines(&ns) {
                output::line(line)?;
            }
            if !ns.principles.is_empty() {
                output::line(format!("principles ({})", ns.principles_mode))?;
                for l in ns.principles.lines() {
                    output::line(format!("  {l}"))?;
                }
            }
        }
    }
    Ok(())
}

fn seconds(s: u64) -> anyhow::Result<i64> {
    i64::try_from(s).map_err(|_| anyhow::anyhow!("retention of {s} s is too long"))
}

/// The human rendering of one namespace (create, describe, update).
pub(crate) fn describe_lines(ns: &NamespaceInfo) -> Vec<String> {
    let limits = ns.limits.unwrap_or_default();
    vec![
        format!("namespace    {}", ns.name),
        format!("description  {}", ns.description),
        format!("created      {}", rfc3339(ns.create_time_unix_ms)),
        format!("updated      {}", rfc3339(ns.update_time_unix_ms)),
        format!("retention    {}", retention_text(ns.retention_seconds)),
        format!(
            "limits       open runs {}, starts per second {}, pending signals per run {}",
            limit_text(limits.max_open_runs),
            limit_text(limits.max_starts_per_second),
            limit_text(limits.max_pending_signals)
        ),
        format!(
            "attributes   {}",
            if ns.search_attributes.is_empty() {
                "none".to_string()
            } else {
                ns.search_attributes
                    .iter()
                    .map(|d| format!("{} ({})", d.name, d.r#type))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    ]
}

/// The human rendering of `namespace list`.
pub(crate) fn list_lines(all: &[NamespaceInfo]) -> Vec<String> {
    let mut table = Table::new(["NAMESPACE", "CREATED", "RETENTION", "DESCRIPTION"]);
    for ns in all {
        table.row([
            ns.name.clone(),
            rfc3339(ns.create_time_unix_ms),
            retention_text(ns.retention_seconds),
            output::truncate(&ns.description, 60),
        ]);
    }
    table.render()
}

/// A namespace as JSON (a limit of 0 is no limit).
pub(crate) fn namespace_json(ns: &NamespaceInfo) -> Value {
    let limits = ns.limits.unwrap_or_default();
    json!({
        "name": ns.name,
        "description": ns.description,
        "create_time": rfc3339_or_null(ns.create_time_unix_ms),
        "update_time": rfc3339_or_null(ns.update_time_unix_ms),
        "retention_seconds": ns.retention_seconds,
        "limits": {
            "max_open_runs": limits.max_open_runs,
            "max_starts_per_second": limits.max_starts_per_second,
            "max_pending_signals": limits.max_pending_signals,
        },
        "subscriptions": crate::delivery::subscriptions_json(ns),
        "principles": ns.principles,
        "principles_mode": ns.principles_mode,
        "search_attributes": attributes::declarations_json(&ns.search_attributes),
    })
}

#[cfg(test)]
mod tests;
