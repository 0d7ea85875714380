//! `railyard key ...`: API keys of a server that runs with auth (create, list,
//! revoke). Every one needs an admin key (`--api-key` / `RAILYARD_API_KEY`).
//!
//! `key create` prints the new key alone on stdout (so `KEY=$(railyard key create ...)`
//! works) and what it may do on stderr; the server keeps only its hash, so this is
//! the one time it is shown.

use std::time::Duration;

use clap::{Args, Subcommand};
use railyard_proto::v1::{ApiKeyInfo, ApiKeyRole, CreateApiKeyRequest, ListApiKeysRequest};
use serde_json::{Value, json};

use crate::client::global::GlobalOpts;
use crate::client::output::{self, Table};
use crate::client::timefmt::{self, rfc3339, rfc3339_or_null};

/// `railyard key` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum KeyCommand {
    /// Create an API key for --namespace ("*" for every namespace) and print it, once.
    Create(CreateArgs),
    /// List the API keys of --namespace ("*" for every namespace).
    List(ListArgs),
    /// Revoke an API key and every key made from it: they are refused from the next request on.
    Revoke(RevokeArgs),
}

/// A key's role, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RoleArg {
    /// Poll task queues and report on leased steps.
    Worker,
    /// Start, read and steer runs; list workflows.
    Client,
    /// A client's rights, plus registering workflows (`workflow apply`) in its namespace.
    Developer,
    /// Everything in its namespace, plus keys, schedules and triggers.
    Admin,
}

impl RoleArg {
    fn proto(self) -> ApiKeyRole {
        match self {
            Self::Worker => ApiKeyRole::Worker,
            Self::Client => ApiKeyRole::Client,
            Self::Developer => ApiKeyRole::Developer,
            Self::Admin => ApiKeyRole::Admin,
        }
    }
}

/// Flags of `key create`.
#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// What the key may do.
    #[arg(long, value_enum)]
    pub role: RoleArg,

    /// Limit a worker key to this task queue; repeat for several [default: any queue].
    #[arg(long = "queue", value_name = "NAME")]
    pub queues: Vec<String>,

    /// The key stops working this long after it is made, by the server's clock
    /// (30d, 12h, 1w ...); never later than the key making it, whose expiry is the
    /// default [default: never, for a key made by a key that never expires].
    #[arg(long, value_name = "DURATION", value_parser = timefmt::parse_duration)]
    pub expires: Option<Duration>,

    /// A note on what the key is for, shown by `key list`.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub description: String,
}

/// Flags of `key list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Show revoked keys too.
    #[arg(long)]
    pub all: bool,
}

/// Flags of `key revoke`.
#[derive(Debug, Args)]
pub(crate) struct RevokeArgs {
    /// The key's id (the 16 hex digits after `ry_`), or the whole key.
    #[arg(value_name = "KEY_ID")]
    pub key: String,
}

/// Runs one `railyard key` subcommand.
pub(crate) async fn run(global: &GlobalOpts, command: KeyCommand) -> anyhow::Result<()> {
    let client = global.connect().await?;
    match command {
        KeyCommand::Create(a) => {
            let req = CreateApiKeyRequest {
                namespace: global.namespace.clone(),
                role: a.role.proto() as i32,
                task_queues: a.queues,
                expires_in_seconds: a.expires.map_or(0, |d| d.as_secs().max(1)),
                description: a.description,
            };
            let created = client.create_api_key(req).await?;
            let info = created.key.unwrap_or_default();
            if global.output.is_json() {
                let mut value = key_json(&info);
                value["api_key"] = json!(created.api_key);
                output::json(&value)?;
            } else {
                output::line(&created.api_key)?;
                eprintln!(
                    "created API key {} ({}); it is shown only this once: keep it safe",
                    info.key_id,
                    summary(&info)
                );
            }
        }
        KeyCommand::List(a) => {
            let mut keys = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .list_api_keys(ListApiKeysRequest {
                        namespace: global.namespace.clone(),
                        include_revoked: a.all,
                        page_size: 0,
                        page_token,
                    })
                    .await?;
                keys.extend(page.keys);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            if global.output.is_json() {
                output::json(&json!({ "keys": keys.iter().map(key_json).collect::<Vec<_>>() }))?;
            } else {
                for line in list_lines(&keys) {
                    output::line(line)?;
                }
            }
        }
        KeyCommand::Revoke(a) => {
            let key_id = key_id_of(&a.key);
            let info = client.revoke_api_key(key_id).await?;
            if global.output.is_json() {
                output::json(&key_json(&info))?;
            } else {
                output::line(format!(
                    "revoked API key {} at {}",
                    info.key_id,
                    rfc3339(info.revoke_time_unix_ms)
                ))?;
            }
        }
    }
    Ok(())
}

/// The key id of a whole key (`ry_<id>_<secret>`), or the text as given.
fn key_id_of(text: &str) -> &str {
    let text = text.trim();
    match text.strip_prefix("ry_").and_then(|rest| rest.split_once('_')) {
        Some((id, _)) => id,
        None => text,
    }
}

fn role_name(role: i32) -> &'static str {
    match ApiKeyRole::try_from(role) {
        Ok(ApiKeyRole::Worker) => "worker",
        Ok(ApiKeyRole::Client) => "client",
        Ok(ApiKeyRole::Developer) => "developer",
        Ok(ApiKeyRole::Admin) => "admin",
        _ => "unknown",
    }
}

fn queues(k: &ApiKeyInfo) -> String {
    if k.task_queues.is_empty() {
        "any".to_string()
    } else {
        k.task_queues.join(",")
    }
}

/// "role worker, namespace default, queues a,b, expires 2026-..."
fn summary(k: &ApiKeyInfo) -> String {
    let mut s = format!("role {}, namespace {}", role_name(k.role), k.namespace);
    if !k.task_queues.is_empty() {
        s.push_str(&format!(", queues {}", queues(k)));
    }
    if k.expire_time_unix_ms != 0 {
        s.push_str(&format!(", expires {}", rfc3339(k.expire_time_unix_ms)));
    }
    s
}

fn state(k: &ApiKeyInfo) -> String {
    if k.revoke_time_unix_ms != 0 {
        format!("revoked {}", rfc3339(k.revoke_time_unix_ms))
    } else if k.expire_time_unix_ms != 0 {
        format!("expires {}", rfc3339(k.expire_time_unix_ms))
    } else {
        "active".to_string()
    }
}

/// The human rendering of `key list`.
pub(crate) fn list_lines(keys: &[ApiKeyInfo]) -> Vec<String> {
    if keys.is_empty() {
        return vec!["no API keys".to_string()];
    }
    let mut table = Table::new([
        "KEY ID",
        "NAMESPACE",
        "ROLE",
        "QUEUES",
        "CREATED",
        "STATE",
        "DESCRIPTION",
    ]);
    for k in keys {
        table.row([
            k.key_id.clone(),
            k.namespace.clone(),
            role_name(k.role).to_string(),
            queues(k),
            rfc3339(k.create_time_unix_ms),
            state(k),
            output::truncate(&k.description, 40),
        ]);
    }
    table.render()
}

/// A key as JSON (never its secret: the server does not have it).
pub(crate) fn key_json(k: &ApiKeyInfo) -> Value {
    json!({
        "key_id": k.key_id,
        "namespace": k.namespace,
        "role": role_name(k.role),
        "task_queues": k.task_queues,
        "create_time": rfc3339_or_null(k.create_time_unix_ms),
        "expire_time": rfc3339_or_null(k.expire_time_unix_ms),
        "revoke_time": rfc3339_or_null(k.revoke_time_unix_ms),
        "created_by": k.created_by,
        "description": k.description,
    })
}

#[cfg(test)]
mod tests;
