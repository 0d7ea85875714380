//! `railyard namespace ...`: namespaces (create, describe, list, update, delete). An
//! admin key of every namespace (`*`) creates, lists all and deletes; an admin key of
//! a namespace describes and updates it.

use clap::{Args, Subcommand};
use railyard_proto::v1::NamespaceInfo;
use serde_json::{Value, json};

use crate::global::GlobalOpts;
use crate::output::{self, Table};
use crate::timefmt::{rfc3339, rfc3339_or_null};

/// `railyard namespace` subcommands.
#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// Create a namespace.
    Create(NameDescription),
    /// Show a namespace.
    Describe(Name),
    /// List the namespaces your key reaches.
    List,
    /// Change a namespace's description.
    Update(NameDescription),
    /// Delete an empty namespace (no runs); its API keys are revoked with it.
    Delete(Name),
    /// Add a notification subscription: every run of the namespace that closes
    /// (filtered by --workflow and --outcome) is POSTed, signed, to --url.
    Subscribe(crate::delivery::SubscribeArgs),
    /// Remove a notification subscription.
    Unsubscribe(crate::delivery::UnsubscribeArgs),
}

/// A namespace's name.
#[derive(Debug, Args)]
pub struct Name {
    /// The namespace.
    pub name: String,
}

/// A namespace's name and description.
#[derive(Debug, Args)]
pub struct NameDescription {
    /// The namespace.
    pub name: String,
    /// What the namespace is for.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub description: String,
}

/// Runs one `railyard namespace` subcommand.
pub async fn run(global: &GlobalOpts, command: NamespaceCommand) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let shown = match command {
        NamespaceCommand::Create(a) => Some(client.create_namespace(&a.name, &a.description).await?),
        NamespaceCommand::Describe(a) => Some(client.describe_namespace(&a.name).await?),
        NamespaceCommand::Update(a) => Some(client.update_namespace(&a.name, &a.description).await?),
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
            output::line(format!("namespace    {}", ns.name))?;
            output::line(format!("description  {}", ns.description))?;
            output::line(format!("created      {}", rfc3339(ns.create_time_unix_ms)))?;
            output::line(format!("updated      {}", rfc3339(ns.update_time_unix_ms)))?;
            for line in crate::delivery::subscription_lines(&ns) {
                output::line(line)?;
            }
        }
    }
    Ok(())
}

/// The human rendering of `namespace list`.
pub fn list_lines(all: &[NamespaceInfo]) -> Vec<String> {
    let mut table = Table::new(["NAMESPACE", "CREATED", "DESCRIPTION"]);
    for ns in all {
        table.row([
            ns.name.clone(),
            rfc3339(ns.create_time_unix_ms),
            output::truncate(&ns.description, 60),
        ]);
    }
    table.render()
}

/// A namespace as JSON.
pub fn namespace_json(ns: &NamespaceInfo) -> Value {
    json!({
        "name": ns.name,
        "description": ns.description,
        "create_time": rfc3339_or_null(ns.create_time_unix_ms),
        "update_time": rfc3339_or_null(ns.update_time_unix_ms),
        "subscriptions": crate::delivery::subscriptions_json(ns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_listed() {
        let ns = NamespaceInfo {
            name: "team".into(),
            description: "the team's runs".into(),
            create_time_unix_ms: 1_714_564_800_000,
            update_time_unix_ms: 1_714_564_800_000,
            subscriptions: Vec::new(),
        };
        assert_eq!(
            list_lines(std::slice::from_ref(&ns)),
            vec![
                "NAMESPACE  CREATED               DESCRIPTION",
                "team       2024-05-01T12:00:00Z  the team's runs",
            ]
        );
        assert_eq!(namespace_json(&ns)["create_time"], "2024-05-01T12:00:00.000Z");
    }
}
