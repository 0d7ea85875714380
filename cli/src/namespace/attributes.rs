//! `railyard namespace attribute add|list|remove`: the search attributes a namespace
//! declares (name and type), which its runs may carry (`run start --attr`) and
//! queries may name (`run list --query`). Removing one leaves runs' values as they
//! are, no longer settable or queryable.

use clap::{Args, Subcommand};
use railyard_proto::v1::SearchAttributeDeclaration;
use serde_json::json;

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table};

/// `railyard namespace attribute` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum AttributeCommand {
    /// Declare a search attribute: NAME TYPE (keyword, text, int, double, bool,
    /// datetime, keyword_list).
    Add(AddArgs),
    /// List the declared search attributes.
    List(NamespaceArg),
    /// Remove a declaration (runs keep their values, no longer queryable).
    Remove(RemoveArgs),
}

/// The namespace (default: the global --namespace).
#[derive(Debug, Args)]
pub(crate) struct NamespaceArg {
    /// The namespace (default: --namespace).
    #[arg(long = "in", value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// `namespace attribute add`.
#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// Letters, digits and _ (at most 64 bytes).
    pub name: String,
    /// keyword, text, int, double, bool, datetime or keyword_list.
    pub r#type: String,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

/// `namespace attribute remove`.
#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    pub name: String,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

/// Runs one `railyard namespace attribute` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: AttributeCommand) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let ns = |a: NamespaceArg| a.namespace.unwrap_or_else(|| global.namespace.clone());
    let (note, all) = match command {
        AttributeCommand::Add(a) => {
            let all = client.add_search_attribute(&ns(a.ns), &a.name, &a.r#type).await?;
            (Some(format!("declared {} ({})", a.name, a.r#type)), all)
        }
        AttributeCommand::List(a) => (None, client.list_search_attributes(&ns(a)).await?),
        AttributeCommand::Remove(a) => {
            let all = client.remove_search_attribute(&ns(a.ns), &a.name).await?;
            (Some(format!("removed {}", a.name)), all)
        }
    };
    if global.output.is_json() {
        output::json(&json!({ "search_attributes": declarations_json(&all) }))?;
        return Ok(());
    }
    if let Some(note) = note {
        output::line(note)?;
    }
    for line in table(&all) {
        output::line(line)?;
    }
    Ok(())
}

/// Declarations as JSON: `[{"name": .., "type": ..}]`.
pub(crate) fn declarations_json(all: &[SearchAttributeDeclaration]) -> serde_json::Value {
    all.iter()
        .map(|d| json!({ "name": d.name, "type": d.r#type }))
        .collect()
}

fn table(all: &[SearchAttributeDeclaration]) -> Vec<String> {
    let mut t = Table::new(["ATTRIBUTE", "TYPE"]);
    for d in all {
        t.row([d.name.clone(), d.r#type.clone()]);
    }
    t.render()
}
