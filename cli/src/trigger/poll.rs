//! The flags of a polled trigger (`--source github-issues --repo owner/name ...`)
//! and how `describe` shows one: its source, filters and poll status.

use clap::Args;
use railyard_proto::v1::{TriggerInfo, TriggerPollSource, TriggerSpec};
use serde_json::json;

use crate::client::timefmt::rfc3339;

/// What a polled trigger polls (all optional, so `update` can merge them).
#[derive(Debug, Default, Args)]
pub(crate) struct PollFlags {
    /// Poll instead of taking webhooks: github-issues, github-pulls or gitlab-merge-requests.
    #[arg(long, value_name = "KIND")]
    pub source: Option<String>,
    /// The repository (owner/name) or GitLab project path (group/project).
    #[arg(long, value_name = "REPO")]
    pub repo: Option<String>,
    /// The API's base URL [default: https://api.github.com or https://gitlab.com];
    /// GitHub Enterprise: https://HOST/api/v3. No internal address unless the server's
    /// delivery.allow_networks lists it; setting it takes an admin key of '*'.
    #[arg(long, value_name = "URL")]
    pub api_url: Option<String>,
    /// The API token, as the server's environment variable that holds it: '$NAME' (one
    /// its [secrets] declares for the namespace); setting it takes an admin key of '*'.
    #[arg(long, value_name = "$ENV")]
    pub token: Option<String>,
    /// Only items with this label; repeatable (every one must be on an item).
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// Only items in this state [default: open (GitHub), opened (GitLab)]; all for any.
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
    /// Only items opened by this user.
    #[arg(long, value_name = "USER")]
    pub author: Option<String>,
    /// What starts a run: new (created since polling began; the default), labeled
    /// (comes to carry the labels), updated (any change); repeatable.
    #[arg(long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// How often to poll, e.g. 60s or 5m [default: 60s].
    #[arg(long, value_name = "DURATION")]
    pub every: Option<String>,
}

impl PollFlags {
    pub(crate) fn is_empty(&self) -> bool {
        self.source.is_none()
            && self.repo.is_none()
            && self.api_url.is_none()
            && self.token.is_none()
            && self.labels.is_empty()
            && self.state.is_none()
            && self.author.is_none()
            && self.events.is_empty()
            && self.every.is_none()
    }

    /// These flags over `spec`'s source: a trigger gets one when `--source` is
    /// given or it has one already; other poll flags on a webhook trigger are an error.
    pub(crate) fn apply(self, spec: &mut TriggerSpec) -> anyhow::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        if spec.poll.is_none() && self.source.is_none() {
            anyhow::bail!("--repo, --label and the other poll flags need --source (a polled trigger)");
        }
        let p = spec.poll.get_or_insert_with(TriggerPollSource::default);
        let set = |dst: &mut String, v: Option<String>| {
            if let Some(v) = v {
                *dst = v;
            }
        };
        set(&mut p.source, self.source);
        set(&mut p.repo, self.repo);
        set(&mut p.base_url, self.api_url);
        set(&mut p.token, self.token);
        set(&mut p.state, self.state);
        set(&mut p.author, self.author);
        set(&mut p.every, self.every);
        if !self.labels.is_empty() {
            p.labels = self.labels;
        }
        if !self.events.is_empty() {
            p.events = self.events;
        }
        Ok(())
    }
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_string()
    }
}

fn time_or_never(ms: i64) -> String {
    if ms == 0 { "never".into() } else { rfc3339(ms) }
}

/// The lines `describe` shows for a polled trigger instead of a webhook's.
pub(crate) fn fields(t: &TriggerInfo, p: &TriggerPollSource) -> Vec<(&'static str, String)> {
    let st = t.poll_status.clone().unwrap_or_default();
    let base = if p.base_url.is_empty() {
        "default API".to_string()
    } else {
        p.base_url.clone()
    };
    let mut out = vec![
        ("source", format!("{} {} ({base})", p.source, p.repo)),
        ("token", or_dash(&p.token)),
        ("labels", or_dash(&p.labels.join(", "))),
        ("state", or_dash(&p.state)),
        ("author", or_dash(&p.author)),
        (
            "events",
            if p.events.is_empty() {
                "new".into()
            } else {
                p.events.join(", ")
            },
        ),
        ("every", or_dash(&p.every)),
        ("last poll", time_or_never(st.last_poll_unix_ms)),
        (
            "next poll",
            if st.next_poll_unix_ms == 0 {
                "now".into()
            } else {
                rfc3339(st.next_poll_unix_ms)
            },
        ),
    ];
    let error = if st.last_error.is_empty() {
        "none".to_string()
    } else {
        format!("{} ({})", st.last_error, rfc3339(st.last_error_unix_ms))
    };
    out.extend([
        ("last error", error),
        ("errors in a row", st.errors_in_row.to_string()),
        ("polls", st.polls.to_string()),
        ("items seen", st.items_seen.to_string()),
        ("runs started", st.runs_started.to_string()),
        ("cursor", or_dash(&st.cursor)),
    ]);
    out
}

/// A polled trigger's source and status as `--output json` prints them.
pub(crate) fn json(t: &TriggerInfo) -> serde_json::Value {
    let Some(p) = t.spec.as_ref().and_then(|s| s.poll.as_ref()) else {
        return serde_json::Value::Null;
    };
    let st = t.poll_status.clone().unwrap_or_default();
    json!({
        "source": p.source,
        "repo": p.repo,
        "base_url": p.base_url,
        "token": p.token,
        "labels": p.labels,
        "state": p.state,
        "author": p.author,
        "events": p.events,
        "every": p.every,
        "status": {
            "last_poll_time": (st.last_poll_unix_ms != 0).then(|| rfc3339(st.last_poll_unix_ms)),
            "next_poll_time": rfc3339(st.next_poll_unix_ms),
            "last_error": st.last_error,
            "last_error_time": (st.last_error_unix_ms != 0).then(|| rfc3339(st.last_error_unix_ms)),
            "errors_in_row": st.errors_in_row,
            "polls": st.polls,
            "items_seen": st.items_seen,
            "runs_started": st.runs_started,
            "cursor": st.cursor,
        },
    })
}
