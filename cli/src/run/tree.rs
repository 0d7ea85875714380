//! `railyard run tree RUN`: a run and the child runs it spawned, recursively, with
//! each one's status, current step, what it waits for, and duration.

use std::time::Duration;

use clap::Args;
use railyard_proto::v1::{RunInfo, SessionNode};
use serde_json::{Value, json};

use crate::client::global::GlobalOpts;
use crate::client::output;
use crate::client::timefmt::{human_duration, now_unix_ms};
use crate::client::view::{run_json, status_name, waiting_text};

/// Flags of `run tree`.
#[derive(Debug, Args)]
pub(crate) struct TreeArgs {
    /// The root run.
    pub run_id: String,
}

/// `run tree`.
pub(crate) async fn tree(global: &GlobalOpts, a: TreeArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client.get_session_tree(&global.namespace, &a.run_id).await?;
    let Some(root) = resp.root else {
        anyhow::bail!("the server answered no tree for run {}", a.run_id);
    };
    let now = now_unix_ms();
    if global.output.is_json() {
        output::json(&node_json(&root, now))?;
    } else {
        let mut lines = Vec::new();
        node_lines(&root, "", true, true, now, &mut lines);
        for l in lines {
            output::line(l)?;
        }
    }
    Ok(())
}

/// The step in flight, by id (`-` once the run is done).
fn current_step(run: &RunInfo) -> String {
    run.steps
        .get(run.current_step as usize)
        .map(|s| s.step_id.clone())
        .unwrap_or_else(|| "-".to_string())
}

fn node_json(node: &SessionNode, now: i64) -> Value {
    let Some(run) = &node.run else {
        return Value::Null;
    };
    let mut v = run_json(run);
    if let Value::Object(m) = &mut v {
        m.insert("current_step_id".into(), json!(current_step(run)));
        m.insert(
            "duration_ms".into(),
            json!(railyard_view::run_elapsed_ms(run, now)),
        );
        m.insert(
            "children".into(),
            Value::Array(node.children.iter().map(|c| node_json(c, now)).collect()),
        );
    }
    v
}

fn node_lines(node: &SessionNode, prefix: &str, last: bool, root: bool, now: i64, out: &mut Vec<String>) {
    let Some(run) = &node.run else {
        return;
    };
    let branch = match (root, last) {
        (true, _) => "",
        (false, true) => "└─ ",
        (false, false) => "├─ ",
    };
    let mut line = format!(
        "{prefix}{branch}{} {} {} step {} {}",
        run.run_id,
        run.workflow_id,
        status_name(run.status),
        current_step(run),
        human_duration(Duration::from_millis(
            railyard_view::run_elapsed_ms(run, now) as u64
        )),
    );
    if let Some(w) = &run.waiting {
        line.push_str(&format!(" ({})", waiting_text(w)));
    }
    out.push(line);
    let child_prefix = match (root, last) {
        (true, _) => prefix.to_string(),
        (false, true) => format!("{prefix}   "),
        (false, false) => format!("{prefix}│  "),
    };
    for (i, c) in node.children.iter().enumerate() {
        node_lines(c, &child_prefix, i + 1 == node.children.len(), false, now, out);
    }
}
