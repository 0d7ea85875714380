//! `railyard trigger ...`: create, inspect, change and remove triggers (the
//! server's `Triggers` service). A webhook trigger answers
//! `POST /hooks/{namespace}/{id}` on the server's HTTP listener; a polled one
//! (`--source`, [`poll`]) polls GitHub or GitLab.

mod poll;

use clap::{Args, Subcommand};
use railyard_proto::v1::{
    CreateTriggerRequest, DeleteTriggerRequest, ListTriggersRequest, TriggerInfo, TriggerMode, TriggerSpec,
    UpdateTriggerRequest,
};
use serde_json::json;

use crate::client::args;
use crate::client::global::{GlobalOpts, cli_identity};
use crate::client::output::{self, Table};

/// `railyard trigger` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TriggerCommand {
    /// Create a trigger: a webhook (POST /hooks/{namespace}/{id} starts its workflow
    /// with a goal and context rendered from the JSON payload), or with --source one
    /// that polls GitHub issues or pull requests or GitLab merge requests.
    Create(CreateArgs),
    /// Show a trigger.
    Describe(IdArg),
    /// List the namespace's triggers.
    List(ListArgs),
    /// Change a trigger: only the flags given change.
    Update(UpdateArgs),
    /// Delete a trigger (the runs it started are left as they are).
    Delete(IdArg),
}

/// What a trigger is, as flags (all optional, so `update` can merge them).
#[derive(Debug, Default, Args)]
pub(crate) struct SpecFlags {
    /// Goal template over the payload, e.g. 'Review PR #{{$.number}}: {{$.pull_request.title}}'.
    #[arg(long, value_name = "TEMPLATE")]
    pub goal: Option<String>,
    /// A context entry (a template like --goal); repeatable.
    #[arg(long = "context", value_name = "KEY=TEMPLATE", value_parser = args::key_value)]
    pub context: Vec<(String, String)>,
    /// A search attribute of each run it starts (a template like --goal; the
    /// namespace declares it); repeatable.
    #[arg(long = "attr", value_name = "NAME=TEMPLATE", value_parser = args::key_value)]
    pub attrs: Vec<(String, String)>,
    /// Queue of steps that name none (the workflow's when absent).
    #[arg(long, value_name = "Q")]
    pub task_queue: Option<String>,
    /// URL each run it starts posts its result to.
    #[arg(long, value_name = "URL")]
    pub callback_url: Option<String>,
    /// HMAC-SHA256 secret, as the server's environment variable that holds it: '$NAME'
    /// (one its [secrets] declares for the namespace).
    #[arg(long, value_name = "$ENV")]
    pub signature_secret: Option<String>,
    /// Header of the signature [default: X-Hub-Signature-256].
    #[arg(long, value_name = "HEADER")]
    pub signature_header: Option<String>,
    /// Shared bearer token instead of a signature, as an environment variable: '$NAME'.
    #[arg(long, value_name = "$ENV")]
    pub bearer_token: Option<String>,
    /// Header of the delivery id that deduplicates [default: X-GitHub-Delivery].
    #[arg(long, value_name = "HEADER")]
    pub dedup_header: Option<String>,
    /// Concurrency key template, e.g. '{{$.repository.full_name}}#{{$.number}}'.
    #[arg(long = "key", value_name = "TEMPLATE")]
    pub concurrency_key: Option<String>,
    /// What deliveries with the same key do: parallel, serial (one run at a time,
    /// in arrival order) or replace (cancel the open run, start the new one).
    #[arg(long, value_name = "MODE", value_parser = mode)]
    pub mode: Option<TriggerMode>,
    /// Free text shown by describe and list.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
}

fn mode(text: &str) -> Result<TriggerMode, String> {
    match text {
        "parallel" => Ok(TriggerMode::Parallel),
        "serial" => Ok(TriggerMode::Serial),
        "replace" => Ok(TriggerMode::Replace),
        _ => Err(format!("{text:?} is not parallel, serial or replace")),
    }
}

fn mode_name(m: TriggerMode) -> &'static str {
    match m {
        TriggerMode::Unspecified | TriggerMode::Parallel => "parallel",
        TriggerMode::Serial => "serial",
        TriggerMode::Replace => "replace",
    }
}

impl SpecFlags {
    /// These flags over `spec` (a new trigger's empty spec, or the described one).
    fn apply(self, spec: &mut TriggerSpec) {
        let set = |dst: &mut String, v: Option<String>| {
            if let Some(v) = v {
                *dst = v;
            }
        };
        set(&mut spec.goal, self.goal);
        spec.context.extend(self.context);
        spec.search_attributes.extend(self.attrs);
        set(&mut spec.task_queue, self.task_queue);
        set(&mut spec.callback_url, self.callback_url);
        set(&mut spec.signature_secret, self.signature_secret);
        set(&mut spec.signature_header, self.signature_header);
        set(&mut spec.bearer_token, self.bearer_token);
        set(&mut spec.dedup_header, self.dedup_header);
        set(&mut spec.concurrency_key, self.concurrency_key);
        set(&mut spec.description, self.description);
        if let Some(m) = self.mode {
            spec.mode = m.into();
        }
    }

    fn is_empty(&self) -> bool {
        self.goal.is_none()
            && self.context.is_empty()
            && self.attrs.is_empty()
            && self.task_queue.is_none()
            && self.callback_url.is_none()
            && self.signature_secret.is_none()
            && self.signature_header.is_none()
            && self.bearer_token.is_none()
            && self.dedup_header.is_none()
            && self.concurrency_key.is_none()
            && self.mode.is_none()
            && self.description.is_none()
    }
}

/// Flags of `trigger create`.
#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The trigger id (the last part of its URL).
    pub trigger_id: String,
    /// Workflow each delivery starts a run of.
    #[arg(long, value_name = "WF")]
    pub workflow: String,
    #[command(flatten)]
    pub spec: SpecFlags,
    #[command(flatten)]
    pub poll: poll::PollFlags,
}

/// Flags of `trigger update`.
#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    /// The trigger to change.
    pub trigger_id: String,
    /// Start runs of this workflow instead.
    #[arg(long, value_name = "WF")]
    pub workflow: Option<String>,
    /// Drop the current context entries (before any --context is added).
    #[arg(long)]
    pub clear_context: bool,
    #[command(flatten)]
    pub spec: SpecFlags,
    #[command(flatten)]
    pub poll: poll::PollFlags,
}

/// Flags of `trigger list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// At most this many triggers (one page).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: u32,
    /// Continue a listing from the token an earlier page printed.
    #[arg(long, value_name = "T")]
    pub page_token: Option<String>,
}

/// A command that takes only a trigger id.
#[derive(Debug, Args)]
pub(crate) struct IdArg {
    /// The trigger.
    pub trigger_id: String,
}

/// Runs one `railyard trigger` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: TriggerCommand) -> anyhow::Result<()> {
    match command {
        TriggerCommand::Create(a) => create(global, a).await,
        TriggerCommand::Describe(a) => describe(global, a).await,
        TriggerCommand::List(a) => list(global, a).await,
        TriggerCommand::Update(a) => update(global, a).await,
        TriggerCommand::Delete(a) => delete(global, a).await,
    }
}

/// A trigger as `--output json` prints it (secrets are `$ENV` names, never values).
pub(crate) fn trigger_json(t: &TriggerInfo) -> serde_json::Value {
    let s = t.spec.clone().unwrap_or_default();
    json!({
        "namespace": t.namespace,
        "trigger_id": t.trigger_id,
        "hook_path": t.hook_path,
        "from_config": t.from_config,
        "workflow_id": s.workflow_id,
        "task_queue": s.task_queue,
        "goal": s.goal,
        "context": s.context.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "search_attributes": s.search_attributes.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "callback_url": s.callback_url,
        "signature_secret": s.signature_secret,
        "signature_header": s.signature_header,
        "bearer_token": s.bearer_token,
        "dedup_header": s.dedup_header,
        "concurrency_key": s.concurrency_key,
        "mode": mode_name(s.mode()),
        "description": s.description,
        "create_time": crate::client::timefmt::rfc3339(t.create_time_unix_ms),
        "update_time": crate::client::timefmt::rfc3339(t.update_time_unix_ms),
        "poll": poll::json(t),
    })
}

fn or_none(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_string()
    }
}

fn describe_fields(t: &TriggerInfo) -> Vec<(&'static str, String)> {
    let s = t.spec.clone().unwrap_or_default();
    let verify = if !s.signature_secret.is_empty() {
        let header = if s.signature_header.is_empty() {
            "X-Hub-Signature-256"
        } else {
            &s.signature_header
        };
        format!("HMAC-SHA256 in {header}, secret {}", s.signature_secret)
    } else if !s.bearer_token.is_empty() {
        format!("bearer token {}", s.bearer_token)
    } else {
        "none (anyone who reaches the URL can start runs)".into()
    };
    let mut fields = vec![("trigger", t.trigger_id.clone())];
    if s.poll.is_none() {
        fields.push(("url", format!("POST {}", t.hook_path)));
    }
    fields.extend([
        ("workflow", s.workflow_id.clone()),
        ("task queue", or_none(&s.task_queue)),
        ("goal", s.goal.clone()),
    ]);
    let mut context: Vec<_> = s.context.iter().collect();
    context.sort();
    for (k, v) in context {
        fields.push(("context", format!("{k} = {v}")));
    }
    let mut attributes: Vec<_> = s.search_attributes.iter().collect();
    attributes.sort();
    for (k, v) in attributes {
        fields.push(("attribute", format!("{k} = {v}")));
    }
    match &s.poll {
        Some(p) => fields.extend(poll::fields(t, p)),
        None => fields.extend([
            ("verify", verify),
            (
                "dedup",
                if s.dedup_header.is_empty() {
                    "X-GitHub-Delivery".into()
                } else {
                    s.dedup_header.clone()
                },
            ),
        ]),
    }
    fields.extend([
        ("key", or_none(&s.concurrency_key)),
        ("mode", mode_name(s.mode()).to_string()),
        ("callback", or_none(&s.callback_url)),
        (
            "defined in",
            if t.from_config {
                "configuration (read-only)"
            } else {
                "API"
            }
            .into(),
        ),
        ("description", or_none(&s.description)),
        ("created", crate::client::timefmt::rfc3339(t.create_time_unix_ms)),
        ("updated", crate::client::timefmt::rfc3339(t.update_time_unix_ms)),
    ]);
    fields
}

fn show(global: &GlobalOpts, key: &str, t: &TriggerInfo) -> anyhow::Result<()> {
    if global.output.is_json() {
        let mut v = trigger_json(t);
        if !key.is_empty() {
            v[key] = json!(true);
        }
        output::json(&v)?;
    } else {
        if !key.is_empty() {
            output::line(format!("{key} trigger {}", t.trigger_id))?;
        }
        output::print_fields(&describe_fields(t))?;
    }
    Ok(())
}

async fn create(global: &GlobalOpts, a: CreateArgs) -> anyhow::Result<()> {
    let mut spec = TriggerSpec {
        workflow_id: a.workflow,
        ..TriggerSpec::default()
    };
    a.spec.apply(&mut spec);
    a.poll.apply(&mut spec)?;
    let client = global.connect().await?;
    let t = client
        .create_trigger(CreateTriggerRequest {
            namespace: global.namespace.clone(),
            trigger_id: a.trigger_id,
            spec: Some(spec),
            identity: cli_identity(),
        })
        .await?;
    show(global, "created", &t)
}

async fn describe(global: &GlobalOpts, a: IdArg) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let t = client.describe_trigger(&global.namespace, &a.trigger_id).await?;
    show(global, "", &t)
}

async fn list(global: &GlobalOpts, a: ListArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client
        .list_triggers(ListTriggersRequest {
            namespace: global.namespace.clone(),
            page_size: a.limit,
            page_token: a.page_token.unwrap_or_default(),
        })
        .await?;
    if global.output.is_json() {
        let rows: Vec<_> = resp.triggers.iter().map(trigger_json).collect();
        output::json(&json!({ "triggers": rows, "next_page_token": resp.next_page_token }))?;
        return Ok(());
    }
    if resp.triggers.is_empty() {
        output::line("no triggers")?;
    } else {
        let mut table = Table::new(["TRIGGER", "WORKFLOW", "MODE", "KEY", "VERIFY", "DEFINED IN"]);
        // A polled trigger's VERIFY column names its source instead.
        for t in &resp.triggers {
            let s = t.spec.clone().unwrap_or_default();
            let verify = if let Some(p) = &s.poll {
                p.source.as_str()
            } else if !s.signature_secret.is_empty() {
                "hmac"
            } else if !s.bearer_token.is_empty() {
                "token"
            } else {
                "none"
            };
            table.row([
                t.trigger_id.clone(),
                s.workflow_id.clone(),
                mode_name(s.mode()).to_string(),
                or_none(&s.concurrency_key),
                verify.to_string(),
                if t.from_config { "config" } else { "api" }.to_string(),
            ]);
        }
        table.print()?;
    }
    if !resp.next_page_token.is_empty() {
        output::line(format!("next page: --page-token {}", resp.next_page_token))?;
    }
    Ok(())
}

async fn update(global: &GlobalOpts, a: UpdateArgs) -> anyhow::Result<()> {
    if a.spec.is_empty() && a.poll.is_empty() && a.workflow.is_none() && !a.clear_context {
        anyhow::bail!("nothing to change: give at least one flag (see railyard trigger update --help)");
    }
    let client = global.connect().await?;
    let current = client.describe_trigger(&global.namespace, &a.trigger_id).await?;
    let mut spec = current.spec.unwrap_or_default();
    if let Some(w) = a.workflow {
        spec.workflow_id = w;
    }
    if a.clear_context {
        spec.context.clear();
    }
    a.spec.apply(&mut spec);
    a.poll.apply(&mut spec)?;
    let t = client
        .update_trigger(UpdateTriggerRequest {
            namespace: global.namespace.clone(),
            trigger_id: a.trigger_id,
            spec: Some(spec),
            identity: cli_identity(),
        })
        .await?;
    show(global, "updated", &t)
}

async fn delete(global: &GlobalOpts, a: IdArg) -> anyhow::Result<()> {
    let client = global.connect().await?;
    client
        .delete_trigger(DeleteTriggerRequest {
            namespace: global.namespace.clone(),
            trigger_id: a.trigger_id.clone(),
            identity: cli_identity(),
        })
        .await?;
    if global.output.is_json() {
        output::json(&json!({ "trigger_id": a.trigger_id, "deleted": true }))?;
    } else {
        output::line(format!("deleted trigger {}", a.trigger_id))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_the_actions_search_attributes_sorted() {
        let t = TriggerInfo {
            trigger_id: "pr".into(),
            hook_path: "/hooks/default/pr".into(),
            spec: Some(TriggerSpec {
                workflow_id: "review".into(),
                search_attributes: [("repo", "{{$.repository.full_name}}"), ("customer", "acme")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let attrs: Vec<String> = describe_fields(&t)
            .into_iter()
            .filter(|(k, _)| *k == "attribute")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(attrs, ["customer = acme", "repo = {{$.repository.full_name}}"]);
        assert_eq!(
            trigger_json(&t)["search_attributes"]["repo"],
            "{{$.repository.full_name}}"
        );
    }
}
