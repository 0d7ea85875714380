//! Namespaces: what is stored of one, and the set of names the server answers for.

use std::collections::HashSet;
use std::sync::RwLock;

use crate::Millis;
use crate::run::RunStatus;

/// The namespace that exists from the start (the wire's default).
pub use railyard_wire::DEFAULT_NAMESPACE;

/// Most namespaces a server holds.
pub const MAX_NAMESPACES: usize = 1000;

/// How long closed runs are kept when a namespace says nothing else: 30 days.
pub const DEFAULT_RETENTION_MS: Millis = 30 * DAY_MS;
/// The shortest retention a namespace may set (0, keeping runs for good, aside).
pub const MIN_RETENTION_MS: Millis = 60_000;
/// The longest retention a namespace may set: 100 years.
pub const MAX_RETENTION_MS: Millis = 36_500 * DAY_MS;
/// Open runs a namespace may hold when it says nothing else.
pub const DEFAULT_MAX_OPEN_RUNS: u64 = 100_000;
/// Starts per second a namespace may make when it says nothing else (0: no limit).
pub const DEFAULT_MAX_STARTS_PER_SECOND: u64 = 0;
/// Signals pending on one run when its namespace says nothing else.
pub const DEFAULT_MAX_PENDING_SIGNALS: u64 = 1_000;
/// The largest value any of the limits may be set to.
pub const MAX_LIMIT: u64 = 100_000_000;

const DAY_MS: Millis = 86_400_000;

/// A namespace as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// Its name.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// When it was created.
    pub created_ms: Millis,
    /// When it was last changed.
    pub updated_ms: Millis,
    /// How long a closed run is kept after it closed; then it is purged with its
    /// history. 0: kept for good.
    pub retention_ms: Millis,
    /// What it may hold and do.
    pub limits: NamespaceLimits,
    /// Notification subscriptions: where every closed run of the namespace (that a
    /// subscription's filters match) is delivered.
    pub subscriptions: Vec<Subscription>,
    /// Its principles, between the server's and a definition's
    /// (`crate::principles`; `None`: none of its own).
    pub principles: Option<crate::principles::Layer>,
    /// The search attributes its runs may carry: name → type (`crate::attributes`).
    pub attributes: crate::query::AttributeTypes,
    /// Flow-control rules on keys (`crate::flow`): concurrency limits and weights.
    pub key_rules: crate::flow::KeyRules,
}

impl Default for Namespace {
    fn default() -> Self {
        Self {
            name: String::new(),
            description: String::new(),
            created_ms: 0,
            updated_ms: 0,
            retention_ms: DEFAULT_RETENTION_MS,
            limits: NamespaceLimits::default(),
            subscriptions: Vec::new(),
            principles: None,
            attributes: crate::query::AttributeTypes::new(),
            key_rules: crate::flow::KeyRules::new(),
        }
    }
}

/// What one namespace may hold and do; 0 in any of them means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceLimits {
    /// Most runs open at once: a start past it is refused.
    pub max_open_runs: u64,
    /// Most starts per second (a token bucket holding one second's worth).
    pub max_starts_per_second: u64,
    /// Most signals pending on one run (beside the byte cap of `model::size`).
    pub max_pending_signals: u64,
}

impl Default for NamespaceLimits {
    fn default() -> Self {
        Self {
            max_open_runs: DEFAULT_MAX_OPEN_RUNS,
            max_starts_per_second: DEFAULT_MAX_STARTS_PER_SECOND,
            max_pending_signals: DEFAULT_MAX_PENDING_SIGNALS,
        }
    }
}

/// A change to a namespace's settings: `None` leaves a setting as it is (or, on
/// create, at its default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceChange {
    /// A new description.
    pub description: Option<String>,
    /// A new retention (0: keep closed runs for good).
    pub retention_ms: Option<Millis>,
    /// A new limit of open runs (0: none).
    pub max_open_runs: Option<u64>,
    /// A new limit of starts per second (0: none).
    pub max_starts_per_second: Option<u64>,
    /// A new limit of signals pending per run (0: none).
    pub max_pending_signals: Option<u64>,
    /// New principles: a layer with empty text that extends clears them.
    pub principles: Option<crate::principles::Layer>,
}

impl NamespaceChange {
    /// Applies the change to `ns`.
    pub fn apply_to(&self, ns: &mut Namespace) {
        if let Some(d) = &self.description {
            ns.description = d.clone();
        }
        if let Some(p) = &self.principles {
            let clear = p.text.trim().is_empty() && p.mode == crate::principles::Mode::Extend;
            ns.principles = (!clear).then(|| p.clone());
        }
        if let Some(r) = self.retention_ms {
            ns.retention_ms = r;
        }
        let l = &mut ns.limits;
        l.max_open_runs = self.max_open_runs.unwrap_or(l.max_open_runs);
        l.max_starts_per_second = self.max_starts_per_second.unwrap_or(l.max_starts_per_second);
        l.max_pending_signals = self.max_pending_signals.unwrap_or(l.max_pending_signals);
    }
}

/// Most notification subscriptions a namespace holds.
pub const MAX_SUBSCRIPTIONS: usize = 16;

/// A URL that gets the signed result of every run of its namespace that closes,
/// optionally only for some workflows and some outcomes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    /// Its id, unique in the namespace.
    pub id: String,
    /// Where results are posted.
    pub url: String,
    /// Only runs of these workflows (empty: all).
    pub workflows: Vec<String>,
    /// Only runs that closed with these statuses (empty: all).
    pub outcomes: Vec<RunStatus>,
    /// When it was added.
    pub created_ms: Millis,
    /// What it is sent: [`EVENT_RUN_CLOSED`] and/or [`EVENT_ISSUE_REPORTED`] (empty:
    /// run.closed only, as before the kinds existed).
    pub events: Vec<String>,
}

/// The event kind of a run's result, sent when it closes.
pub const EVENT_RUN_CLOSED: &str = "run.closed";
/// The event kind of an issue an agent reported (`report_issue`), sent at once.
pub const EVENT_ISSUE_REPORTED: &str = "issue.reported";
/// Every event kind a subscription may name.
pub const EVENT_KINDS: [&str; 2] = [EVENT_RUN_CLOSED, EVENT_ISSUE_REPORTED];

impl Subscription {
    /// Whether a run of `workflow` that closed as `status` is delivered here.
    pub fn matches(&self, workflow: &str, status: RunStatus) -> bool {
        self.wants(EVENT_RUN_CLOSED)
            && self.covers(workflow)
            && (self.outcomes.is_empty() || self.outcomes.contains(&status))
    }

    /// Whether an issue reported in a run of `workflow` is sent here (its outcome is
    /// not known yet, so `outcomes` does not apply).
    pub fn matches_issue(&self, workflow: &str) -> bool {
        self.wants(EVENT_ISSUE_REPORTED) && self.covers(workflow)
    }

    fn covers(&self, workflow: &str) -> bool {
        self.workflows.is_empty() || self.workflows.iter().any(|w| w == workflow)
    }

    fn wants(&self, kind: &str) -> bool {
        if self.events.is_empty() {
            kind == EVENT_RUN_CLOSED
        } else {
            self.events.iter().any(|e| e == kind)
        }
    }
}

/// The names of the namespaces that exist, in memory: loaded at start, changed after
/// each commit that creates or deletes one.
#[derive(Debug, Default)]
pub struct NamespaceSet(RwLock<HashSet<String>>);

impl NamespaceSet {
    /// Whether namespace `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.read().contains(name)
    }

    /// Records that `name` exists.
    pub fn insert(&self, name: String) {
        self.write().insert(name);
    }

    /// Records that `name` is gone.
    pub fn remove(&self, name: &str) {
        self.write().remove(name);
    }

    /// How many namespaces exist.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether none exists.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<String>> {
        // Inserts and removes cannot leave the set half-changed.
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<String>> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl From<HashSet<String>> for NamespaceSet {
    fn from(set: HashSet<String>) -> Self {
        Self(RwLock::new(set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_matches_by_workflow_and_outcome() {
        let all = Subscription::default();
        assert!(all.matches("any", RunStatus::Completed));
        let s = Subscription {
            workflows: vec!["review".into()],
            outcomes: vec![RunStatus::Failed, RunStatus::TimedOut],
            ..Subscription::default()
        };
        assert!(s.matches("review", RunStatus::Failed));
        assert!(s.matches("review", RunStatus::TimedOut));
        assert!(!s.matches("review", RunStatus::Completed));
        assert!(!s.matches("other", RunStatus::Failed));
        assert!(!s.matches_issue("review"), "run.closed only by default");
    }

    #[test]
    fn a_change_sets_or_clears_the_principles() {
        use crate::principles::{Layer, Mode};
        let mut ns = Namespace::default();
        let set = |text: &str, mode| NamespaceChange {
            principles: Some(Layer {
                text: text.into(),
                mode,
            }),
            ..NamespaceChange::default()
        };
        set("be kind", Mode::Replace).apply_to(&mut ns);
        assert_eq!(ns.principles.as_ref().map(|p| p.mode), Some(Mode::Replace));
        NamespaceChange::default().apply_to(&mut ns);
        assert!(ns.principles.is_some(), "unchanged when not given");
        set("", Mode::Replace).apply_to(&mut ns);
        assert!(
            ns.principles.is_some(),
            "an empty replacing layer means none at all"
        );
        set(" ", Mode::Extend).apply_to(&mut ns);
        assert_eq!(ns.principles, None, "cleared");
    }

    #[test]
    fn a_subscription_chooses_its_event_kinds() {
        let issues = Subscription {
            workflows: vec!["review".into()],
            outcomes: vec![RunStatus::Failed],
            events: vec![EVENT_ISSUE_REPORTED.into()],
            ..Subscription::default()
        };
        assert!(issues.matches_issue("review"));
        assert!(!issues.matches_issue("other"));
        assert!(!issues.matches("review", RunStatus::Failed));
        let both = Subscription {
            events: EVENT_KINDS.iter().map(|k| k.to_string()).collect(),
            ..Subscription::default()
        };
        assert!(both.matches_issue("any") && both.matches("any", RunStatus::Completed));
    }
}
