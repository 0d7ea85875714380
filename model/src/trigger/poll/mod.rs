//! Polling trigger sources, pure: what a trigger polls ([`PollSource`]: GitHub
//! issues or pull requests, GitLab merge requests), its durable cursor and status
//! ([`PollState`]), and what the poller needs that does no I/O: the first page's
//! URL, the `Link` header's next page, an item's fields, the filters, the event
//! keys that deduplicate, and the backoff. The fetching is the server's
//! (`engine/poller/`).

use serde_json::Value;

use crate::{Millis, Rejection, echo};

/// Poll interval when a trigger names none.
pub const DEFAULT_EVERY_MS: u64 = 60_000;
/// Shortest poll interval.
pub const MIN_EVERY_MS: u64 = 1_000;
/// Longest poll interval (a day).
pub const MAX_EVERY_MS: u64 = 86_400_000;
/// Longest wait after errors or a rate limit (an hour).
pub const MAX_BACKOFF_MS: u64 = 3_600_000;
/// Most labels a trigger filters by.
pub const MAX_LABELS: usize = 16;
/// Longest label, author, state or repository name.
pub const MAX_FIELD: usize = 256;
/// Longest base URL.
pub const MAX_BASE_URL: usize = 1024;
/// Longest `updated_at` an item may carry to be counted (it is part of a key).
pub const MAX_TIMESTAMP: usize = 64;
/// Longest last error kept.
pub const MAX_ERROR: usize = 512;

/// What a trigger polls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SourceKind {
    /// `GET /repos/{owner}/{repo}/issues`, pull requests left out.
    #[default]
    GithubIssues,
    /// The same listing, pull requests only (GitHub lists them as issues).
    GithubPulls,
    /// `GET /api/v4/projects/{path}/merge_requests`.
    GitlabMergeRequests,
}

impl SourceKind {
    /// Every kind, for messages.
    pub const ALL: [Self; 3] = [Self::GithubIssues, Self::GithubPulls, Self::GitlabMergeRequests];

    /// The kind's name, as in a trigger's spec (`github-issues` ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::GithubIssues => "github-issues",
            Self::GithubPulls => "github-pulls",
            Self::GitlabMergeRequests => "gitlab-merge-requests",
        }
    }

    /// The kind a name stands for.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == text)
    }

    /// Whether it polls GitLab.
    pub fn is_gitlab(self) -> bool {
        self == Self::GitlabMergeRequests
    }

    /// The public API when a trigger names no base URL.
    pub fn default_base_url(self) -> &'static str {
        if self.is_gitlab() {
            "https://gitlab.com"
        } else {
            "https://api.github.com"
        }
    }

    /// The state filter when a trigger names none.
    pub fn default_state(self) -> &'static str {
        if self.is_gitlab() { "opened" } else { "open" }
    }

    fn states(self) -> &'static [&'static str] {
        if self.is_gitlab() {
            &["opened", "closed", "merged", "locked", "all"]
        } else {
            &["open", "closed", "all"]
        }
    }
}

/// What counts as an event of an item, chosen per trigger. An item observed with
/// any event not seen before starts one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Events {
    /// The item was created since the trigger began polling.
    pub new: bool,
    /// The item carries the trigger's labels (whenever it was created): once per
    /// item, so adding the label to an older item starts a run.
    pub labeled: bool,
    /// The item changed (after its creation): once per `updated_at`.
    pub updated: bool,
}

impl Default for Events {
    fn default() -> Self {
        Self {
            new: true,
            labeled: false,
            updated: false,
        }
    }
}

impl Events {
    /// The events named (`new`, `labeled`, `updated`); empty: [`Events::default`].
    pub fn parse(names: &[String]) -> Result<Self, String> {
        if names.is_empty() {
            return Ok(Self::default());
        }
        let mut e = Self {
            new: false,
            labeled: false,
            updated: false,
        };
        for n in names {
            match n.as_str() {
                "new" => e.new = true,
                "labeled" => e.labeled = true,
                "updated" => e.updated = true,
                other => return Err(format!("{} is not new, labeled or updated", echo(other))),
            }
        }
        Ok(e)
    }

    /// The events it counts, by name (`new`, `labeled`, `updated`).
    pub fn names(self) -> Vec<String> {
        let mut out = Vec::new();
        for (on, name) in [
            (self.new, "new"),
            (self.labeled, "labeled"),
            (self.updated, "updated"),
        ] {
            if on {
                out.push(name.to_string());
            }
        }
        out
    }
}

/// A polled source: a trigger with one starts runs from the items it finds
/// instead of from webhook deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollSource {
    /// What it lists.
    pub kind: SourceKind,
    /// `owner/name` on GitHub; the project's path (`group/sub/name`) on GitLab.
    pub repo: String,
    /// Empty: [`SourceKind::default_base_url`]. GitHub Enterprise:
    /// `https://host/api/v3`; self-hosted GitLab: `https://host`.
    pub base_url: String,
    /// `$ENV_NAME` of the API token (empty: none, public repositories only).
    pub token: String,
    /// Every one must be on an item.
    pub labels: Vec<String>,
    /// Empty: [`SourceKind::default_state`].
    pub state: String,
    /// The login (GitHub) or username (GitLab) that opened the item; empty: anyone.
    pub author: String,
    /// Which changes of an item start a run.
    pub events: Events,
    /// How often it polls, in milliseconds.
    pub every_ms: u64,
}

impl PollSource {
    /// The API's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        let b = if self.base_url.is_empty() {
            self.kind.default_base_url()
        } else {
            &self.base_url
        };
        b.trim_end_matches('/')
    }

    /// The item state it asks for.
    pub fn state(&self) -> &str {
        if self.state.is_empty() {
            self.kind.default_state()
        } else {
            &self.state
        }
    }

    /// Checks every field, naming it (`poll.repo`, ...).
    pub fn check(&self) -> Result<(), Rejection> {
        let repo_ok = !self.repo.is_empty()
            && self.repo.len() <= MAX_FIELD
            && self
                .repo
                .split('/')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
            && if self.kind.is_gitlab() {
                self.repo.contains('/')
            } else {
                self.repo.split('/').count() == 2
            };
        if !repo_ok {
            let want = if self.kind.is_gitlab() {
                "group/project"
            } else {
                "owner/name"
            };
            return Err(Rejection::field(
                "poll.repo",
                format!("{} is not {want}", echo(&self.repo)),
            ));
        }
        if !self.base_url.is_empty() {
            crate::limits::check_len("poll.base_url", &self.base_url, MAX_BASE_URL)?;
            let ok = url::Url::parse(&self.base_url)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                .filter(|u| u.query().is_none() && u.fragment().is_none() && u.username().is_empty());
            if ok.is_none() {
                return Err(Rejection::field(
                    "poll.base_url",
                    format!(
                        "{} is not an http(s) URL without query or credentials",
                        echo(&self.base_url)
                    ),
                ));
            }
        }
        crate::limits::check_count("poll.labels", self.labels.len(), MAX_LABELS)?;
        for (i, l) in self.labels.iter().enumerate() {
            if l.is_empty() || l.contains(',') || l.len() > MAX_FIELD || l.chars().any(char::is_control) {
                return Err(Rejection::field(
                    &format!("poll.labels[{i}]"),
                    format!("{} is not a label (1 to {MAX_FIELD} bytes, no comma)", echo(l)),
                ));
            }
        }
        if !self.state.is_empty() && !self.kind.states().contains(&self.state.as_str()) {
            return Err(Rejection::field(
                "poll.state",
                format!(
                    "{} is not one of {} for {}",
                    echo(&self.state),
                    self.kind.states().join(", "),
                    self.kind.name()
                ),
            ));
        }
        if !self.author.is_empty()
            && (self.author.len() > MAX_FIELD
                || !self
                    .author
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.[]".contains(c)))
        {
            return Err(Rejection::field(
                "poll.author",
                format!("{} is not a user name", echo(&self.author)),
            ));
        }
        if !(self.events.new || self.events.labeled || self.events.updated) {
            return Err(Rejection::field("poll.events", "names no event"));
        }
        if self.events.labeled && self.labels.is_empty() {
            return Err(Rejection::field(
                "poll.events",
                "labeled needs at least one label (poll.labels)",
            ));
        }
        if !(MIN_EVERY_MS..=MAX_EVERY_MS).contains(&self.every_ms) {
            return Err(Rejection::field(
                "poll.every",
                format!(
                    "{} ms is not between {} s and {} h",
                    self.every_ms,
                    MIN_EVERY_MS / 1000,
                    MAX_EVERY_MS / 3_600_000
                ),
            ));
        }
        Ok(())
    }

    /// The first page's URL: items updated at or after `since` (RFC 3339; empty:
    /// all), oldest change first, so a poll cut short by its bounds goes on from
    /// where it stopped.
    pub fn first_page_url(&self, since: &str, per_page: u32) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        q.append_pair("state", self.state());
        if !self.labels.is_empty() {
            q.append_pair("labels", &self.labels.join(","));
        }
        q.append_pair("per_page", &per_page.to_string());
        let path = if self.kind.is_gitlab() {
            q.append_pair("order_by", "updated_at").append_pair("sort", "asc");
            if !self.author.is_empty() {
                q.append_pair("author_username", &self.author);
            }
            if !since.is_empty() {
                q.append_pair("updated_after", since);
            }
            let project: String = url::form_urlencoded::byte_serialize(self.repo.as_bytes()).collect();
            format!("/api/v4/projects/{project}/merge_requests")
        } else {
            q.append_pair("sort", "updated").append_pair("direction", "asc");
            if !self.author.is_empty() {
                q.append_pair("creator", &self.author);
            }
            if !since.is_empty() {
                q.append_pair("since", since);
            }
            format!("/repos/{}/issues", self.repo)
        };
        format!("{}{path}?{}", self.base_url(), q.finish())
    }
}

/// A polled trigger's cursor and status, kept with the trigger and written in the
/// commit that starts a poll's runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollState {
    /// Items changed at or after this time are asked for next (RFC 3339, as the
    /// API wrote the last item's `updated_at`; empty: all).
    pub since: String,
    /// The first page's `ETag`, and the URL it answered.
    pub etag: String,
    /// The URL that `etag` answered.
    pub etag_url: String,
    /// Items created before this are never `new` (when polling began).
    pub baseline_ms: Millis,
    /// The last poll's end (0: never polled).
    pub last_poll_ms: Millis,
    /// When the next poll is due (0: at once).
    pub next_poll_ms: Millis,
    /// The last poll's error (empty: it succeeded).
    pub last_error: String,
    /// When it failed.
    pub last_error_ms: Millis,
    /// Polls that failed in a row (the backoff grows with it).
    pub errors: u32,
    /// Polls made.
    pub polls: u64,
    /// Items fetched that passed the filters.
    pub items_seen: u64,
    /// Runs the polls started.
    pub runs_started: u64,
}

/// What the poller reads of an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The number (GitHub) or `iid` (GitLab), as text.
    pub id: String,
    /// When it was created.
    pub created_ms: Millis,
    /// When it last changed.
    pub updated_ms: Millis,
    /// `updated_at` as the API wrote it (the cursor, and part of a key).
    pub updated_at: String,
    /// Its labels.
    pub labels: Vec<String>,
    /// Its state (`open`, `closed`, `opened` ...).
    pub state: String,
    /// Who opened it.
    pub author: String,
    /// A GitHub pull request (the issues listing has both).
    pub is_pull: bool,
}

/// Milliseconds since the epoch of an RFC 3339 time.
pub fn parse_time(text: &str) -> Option<Millis> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// An RFC 3339 time (UTC, seconds) for `ms`.
pub fn format_time(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// An item of a listing (`None`: not an object with the fields the poller needs).
pub fn item(kind: SourceKind, v: &Value) -> Option<Item> {
    let id = match v.get(if kind.is_gitlab() { "iid" } else { "number" })? {
        Value::Number(n) => n.as_u64()?.to_string(),
        _ => return None,
    };
    let created_ms = parse_time(v.get("created_at")?.as_str()?)?;
    let updated_at = v.get("updated_at")?.as_str()?;
    if updated_at.len() > MAX_TIMESTAMP {
        return None;
    }
    let updated_ms = parse_time(updated_at)?;
    let labels = v
        .get("labels")
        .and_then(Value::as_array)
        .map(|ls| {
            ls.iter()
                .filter_map(|l| match l {
                    Value::String(s) => Some(s.clone()),
                    // GitHub's labels are objects; GitLab's `with_labels_details` too.
                    other => other.get("name").and_then(Value::as_str).map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default();
    let author = v
        .get(if kind.is_gitlab() { "author" } else { "user" })
        .and_then(|u| u.get(if kind.is_gitlab() { "username" } else { "login" }))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Some(Item {
        id,
        created_ms,
        updated_ms,
        updated_at: updated_at.to_string(),
        labels,
        state: v
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        author,
        is_pull: !kind.is_gitlab() && v.get("pull_request").is_some_and(|p| !p.is_null()),
    })
}

/// Whether an item passes the trigger's filters (the API was asked for them too;
/// this holds whatever the API answered).
pub fn matches(src: &PollSource, it: &Item) -> bool {
    let kind_ok = match src.kind {
        SourceKind::GithubIssues => !it.is_pull,
        SourceKind::GithubPulls => it.is_pull,
        SourceKind::GitlabMergeRequests => true,
    };
    let state = src.state();
    kind_ok
        && (state == "all" || it.state == state)
        && (src.author.is_empty() || it.author.eq_ignore_ascii_case(&src.author))
        && src.labels.iter().all(|l| it.labels.iter().any(|il| il == l))
}

/// An event key and whether it is remembered for as long as the trigger exists
/// (`new`, `labeled`: one per item) rather than for the dedup window (`updated`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventKey {
    /// The key.
    pub key: String,
    /// Kept for as long as the trigger exists.
    pub kept: bool,
}

/// The event keys of a matching item that the trigger counts: `{id}:new`,
/// `{id}:labeled`, `{id}:updated:{updated_at}`. `updated_after`: changes before it
/// are not counted (older than the dedup window, their keys may be forgotten).
pub fn event_keys(src: &PollSource, it: &Item, baseline_ms: Millis, updated_after: Millis) -> Vec<EventKey> {
    let mut out = Vec::new();
    if src.events.new && it.created_ms >= baseline_ms {
        out.push(EventKey {
            key: format!("{}:new", it.id),
            kept: true,
        });
    }
    if src.events.labeled {
        out.push(EventKey {
            key: format!("{}:labeled", it.id),
            kept: true,
        });
    }
    if src.events.updated && it.updated_ms > it.created_ms && it.updated_ms >= updated_after {
        out.push(EventKey {
            key: format!("{}:updated:{}", it.id, it.updated_at),
            kept: false,
        });
    }
    out
}

/// The `rel="next"` URL of a `Link` header (GitHub's and GitLab's pagination).
pub fn next_link(header: &str) -> Option<String> {
    for part in header.split(',') {
        let mut pieces = part.split(';');
        let target = pieces.next()?.trim();
        let is_next = pieces.any(|p| {
            let p = p.trim();
            p.strip_prefix("rel=")
                .map(|r| r.trim_matches('"').split_ascii_whitespace().any(|r| r == "next"))
                .unwrap_or(false)
        });
        if is_next && target.starts_with('<') && target.ends_with('>') && target.len() > 2 {
            return Some(target[1..target.len() - 1].to_string());
        }
    }
    None
}

/// The wait after `errors` failed polls in a row: the interval doubled for each,
/// at most [`MAX_BACKOFF_MS`].
pub fn backoff_ms(every_ms: u64, errors: u32) -> u64 {
    let factor = 1u64 << errors.min(20);
    every_ms
        .saturating_mul(factor)
        .clamp(every_ms, MAX_BACKOFF_MS.max(every_ms))
}

#[cfg(test)]
mod tests;
