//! `railyard limit set|list|remove`: a namespace's flow-control rules on keys
//! (docs/flow-control.md): how many runs with a key may have a step leased at once,
//! the key's fairness weight, and the rates workers share under it (requests and
//! tokens per minute, asked for with `Capacity.AcquireCapacity`). A rule's key is exact, a prefix ending in `*`, or
//! `*` for every key; the most specific rule wins.

use clap::{Args, Subcommand};
use railyard_proto::v1::KeyRule;
use serde_json::json;

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table};

/// `railyard limit` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum LimitCommand {
    /// Set the rule on a key (replacing its rule): --concurrency N, --weight N,
    /// --requests-per-minute N, --tokens-per-minute N.
    Set(SetArgs),
    /// List the namespace's rules, with the runs of each exact key holding a slot.
    List(NamespaceArg),
    /// Remove the rule on a key.
    Remove(RemoveArgs),
}

/// The namespace (default: the global --namespace).
#[derive(Debug, Args)]
pub(crate) struct NamespaceArg {
    /// The namespace (default: --namespace).
    #[arg(long = "in", value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// `limit set`.
#[derive(Debug, Args)]
pub(crate) struct SetArgs {
    /// The key: exact (customer:acme), a prefix ending in `*` (customer:*), or `*`.
    #[arg(long)]
    pub key: String,
    /// Most runs with the key that may have a step leased at once.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub concurrency: Option<i64>,
    /// The key's fairness weight (1 to 1000), over each run's own.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub weight: Option<i64>,
    /// Model calls per minute the fleet may make under the key (workers ask first).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub requests_per_minute: Option<i64>,
    /// Model tokens per minute the fleet may use under the key.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub tokens_per_minute: Option<i64>,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

/// `limit remove`.
#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    /// The rule's key.
    #[arg(long)]
    pub key: String,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

/// Runs one `railyard limit` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: LimitCommand) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let ns = |a: NamespaceArg| a.namespace.unwrap_or_else(|| global.namespace.clone());
    let (note, all) = match command {
        LimitCommand::Set(a) => {
            let rule = KeyRule {
                key: a.key.clone(),
                concurrency: a.concurrency.unwrap_or(0),
                weight: a.weight.unwrap_or(0),
                running: 0,
                requests_per_minute: a.requests_per_minute.unwrap_or(0),
                tokens_per_minute: a.tokens_per_minute.unwrap_or(0),
            };
            let all = client.set_key_rule(&ns(a.ns), rule).await?;
            (Some(format!("set the rule on {}", a.key)), all)
        }
        LimitCommand::List(a) => (None, client.list_key_rules(&ns(a)).await?),
        LimitCommand::Remove(a) => {
            let all = client.remove_key_rule(&ns(a.ns), &a.key).await?;
            (Some(format!("removed the rule on {}", a.key)), all)
        }
    };
    if global.output.is_json() {
        output::json(&json!({ "rules": rules_json(&all) }))?;
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

fn figure(n: i64) -> String {
    if n == 0 { "-".into() } else { n.to_string() }
}

/// Rules as JSON: `[{"key": .., "concurrency": .., "weight": .., "running": ..}]`,
/// an unset figure as null.
pub(crate) fn rules_json(rules: &[KeyRule]) -> serde_json::Value {
    rules
        .iter()
        .map(|r| {
            json!({
                "key": r.key,
                "concurrency": (r.concurrency != 0).then_some(r.concurrency),
                "weight": (r.weight != 0).then_some(r.weight),
                "requests_per_minute": (r.requests_per_minute != 0).then_some(r.requests_per_minute),
                "tokens_per_minute": (r.tokens_per_minute != 0).then_some(r.tokens_per_minute),
                "running": r.running,
            })
        })
        .collect()
}

/// Rules as a table, or a line saying there are none.
pub(crate) fn table(rules: &[KeyRule]) -> Vec<String> {
    if rules.is_empty() {
        return vec!["no rules".into()];
    }
    let mut t = Table::new(["KEY", "CONCURRENCY", "WEIGHT", "REQ/MIN", "TOKENS/MIN", "RUNNING"]);
    for r in rules {
        t.row([
            r.key.clone(),
            figure(r.concurrency),
            figure(r.weight),
            figure(r.requests_per_minute),
            figure(r.tokens_per_minute),
            r.running.to_string(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_render_with_unset_figures_as_dashes_and_null() {
        let rules = [KeyRule {
            key: "customer:*".into(),
            concurrency: 3,
            weight: 0,
            running: 0,
            requests_per_minute: 50,
            tokens_per_minute: 0,
        }];
        let lines = table(&rules);
        assert!(
            lines[1].contains("customer:*") && lines[1].contains('3') && lines[1].contains('-'),
            "{lines:?}"
        );
        assert_eq!(rules_json(&rules)[0]["weight"], serde_json::Value::Null);
        assert_eq!(table(&[]), ["no rules"]);
    }
}
