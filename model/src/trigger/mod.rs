//! Triggers, pure: what a trigger is ([`Trigger`]), a webhook's or a polled
//! source's ([`poll`]); its payload templates
//! are [`crate::template::payload`]. How a delivery is verified is the server's
//! (`signature.rs`), and so are the webhook route (`http.rs`), the request logic
//! (`service::triggers`) and the writer command that starts, deduplicates and
//! serialises per key (`engine/writer/commands/trigger/`).

use std::collections::BTreeMap;

pub mod poll;

use crate::Millis;

/// The signature header when a trigger names none: GitHub's.
pub const DEFAULT_SIGNATURE_HEADER: &str = "X-Hub-Signature-256";
/// The delivery id header when a trigger names none: GitHub's.
pub const DEFAULT_DEDUP_HEADER: &str = "X-GitHub-Delivery";
/// Longest delivery id kept, in bytes (a longer one is refused with `400`).
pub const MAX_DELIVERY_ID: usize = 256;
/// Longest rendered concurrency key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// How deliveries with the same concurrency key run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Each starts at once.
    #[default]
    Parallel,
    /// One run at a time per key; later deliveries wait, in arrival order, and
    /// each starts in the transaction that closes the run before it.
    Serial,
    /// A new delivery cancels the key's open run and starts, in one transaction.
    Replace,
}

impl Mode {
    /// The mode's name, as in the API (`parallel` ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Parallel => "parallel",
            Self::Serial => "serial",
            Self::Replace => "replace",
        }
    }

    /// The mode named `text` (as [`Mode::name`] writes it).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "parallel" => Some(Self::Parallel),
            "serial" => Some(Self::Serial),
            "replace" => Some(Self::Replace),
            _ => None,
        }
    }
}

/// Where a trigger was defined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Source {
    /// Through the API (`railyard trigger create`).
    #[default]
    Api,
    /// In the server's configuration: written into storage at each start, and
    /// read-only through the API.
    Config,
}

/// A webhook trigger: `POST /hooks/{namespace}/{id}` starts `workflow_id` with a
/// goal and context rendered from the JSON payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trigger {
    /// Its namespace.
    pub namespace: String,
    /// Its id, the last segment of its URL.
    pub id: String,
    /// The workflow each delivery starts.
    pub workflow_id: String,
    /// Empty: the workflow's.
    pub task_queue: String,
    /// Templates over the payload ([`crate::template::payload`]).
    pub goal: String,
    /// The context, each value a template over the payload.
    pub context: BTreeMap<String, String>,
    /// Search attributes of the runs it starts: name → template over the payload,
    /// rendered and then read by the namespace's declarations.
    pub attributes: BTreeMap<String, String>,
    /// Passed to the start as its callback URL (empty: none).
    pub callback_url: String,
    /// `$ENV_NAME` of the HMAC-SHA256 secret (empty: no signature checked).
    pub signature_secret: String,
    /// Empty: [`DEFAULT_SIGNATURE_HEADER`].
    pub signature_header: String,
    /// `$ENV_NAME` of a shared bearer token (empty: none); used when no signature
    /// secret is set.
    pub bearer_token: String,
    /// Empty: [`DEFAULT_DEDUP_HEADER`].
    pub dedup_header: String,
    /// Template of the concurrency key (empty: every delivery runs in parallel).
    pub concurrency_key: String,
    /// How deliveries with the same concurrency key run.
    pub mode: Mode,
    /// Free text about it.
    pub description: String,
    /// Where it was defined.
    pub source: Source,
    /// What the trigger polls (`None`: a webhook trigger).
    pub poll: Option<poll::PollSource>,
    /// The poll's cursor and status (default for a webhook trigger).
    pub poll_state: poll::PollState,
    /// When it was created.
    pub created_ms: Millis,
    /// When it was last changed.
    pub updated_ms: Millis,
    /// The latest deliveries that started or queued a run, oldest first (at most
    /// [`RECENT_DELIVERIES`]): what the trigger did lately, for its describe.
    pub recent: Vec<RecentDelivery>,
}

/// Deliveries a trigger keeps in [`Trigger::recent`].
pub const RECENT_DELIVERIES: usize = 20;

/// A delivery a trigger accepted: when, its delivery id (empty: none was sent), the
/// run it started or queued, and what became of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentDelivery {
    /// When the delivery came.
    pub received_ms: Millis,
    /// Its delivery id (empty: none was sent).
    pub delivery_id: String,
    /// The run it started or queued.
    pub run_id: String,
    /// `started`, `queued` (behind its concurrency key's open run) or `replaced`
    /// (the key's open run was canceled for it).
    pub outcome: String,
}

impl Trigger {
    /// Remembers an accepted delivery, dropping the oldest past [`RECENT_DELIVERIES`].
    pub fn record_delivery(&mut self, d: RecentDelivery) {
        self.recent.push(d);
        if self.recent.len() > RECENT_DELIVERIES {
            let extra = self.recent.len() - RECENT_DELIVERIES;
            self.recent.drain(..extra);
        }
    }

    /// The header carrying the signature.
    pub fn signature_header(&self) -> &str {
        if self.signature_header.is_empty() {
            DEFAULT_SIGNATURE_HEADER
        } else {
            &self.signature_header
        }
    }

    /// The header carrying the delivery id.
    pub fn dedup_header(&self) -> &str {
        if self.dedup_header.is_empty() {
            DEFAULT_DEDUP_HEADER
        } else {
            &self.dedup_header
        }
    }

    /// Whether deliveries must prove who sent them.
    pub fn verified(&self) -> bool {
        !self.signature_secret.is_empty() || !self.bearer_token.is_empty()
    }
}

/// A delivery remembered for deduplication: the run it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookDelivery {
    /// The run the delivery answered.
    pub run_id: String,
    /// When the delivery came.
    pub received_ms: Millis,
}

/// A start waiting for its key's run to close (serial mode), with everything it
/// needs: the rendered goal and context, and the run id its delivery was answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueuedStart {
    /// The run id its delivery was answered.
    pub run_id: String,
    /// The workflow to start.
    pub workflow_id: String,
    /// The rendered goal.
    pub goal: String,
    /// The rendered context.
    pub context: BTreeMap<String, String>,
    /// The queue of its steps (empty: the workflow's).
    pub task_queue: String,
    /// Its callback URL (empty: none).
    pub callback_url: String,
    /// Who starts it.
    pub identity: String,
    /// When the delivery came.
    pub received_ms: Millis,
    /// Its search attributes, rendered (name → text).
    pub attributes: BTreeMap<String, String>,
    /// The trace the delivery came with (`None`: the run's own, derived).
    pub trace: Option<crate::trace::TraceContext>,
}

/// The trigger and key a run holds, for the hook on its close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHolder {
    /// The trigger.
    pub trigger_id: String,
    /// The rendered concurrency key.
    pub key: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_keeps_only_its_latest_deliveries() {
        let mut t = Trigger::default();
        for i in 0..(RECENT_DELIVERIES as i64 + 5) {
            t.record_delivery(RecentDelivery {
                received_ms: i,
                run_id: format!("r{i}"),
                outcome: "started".into(),
                ..RecentDelivery::default()
            });
        }
        assert_eq!(t.recent.len(), RECENT_DELIVERIES);
        assert_eq!(
            t.recent.first().map(|d| d.received_ms),
            Some(5),
            "the oldest dropped"
        );
        assert_eq!(t.recent.last().map(|d| d.run_id.as_str()), Some("r24"));
    }
}
