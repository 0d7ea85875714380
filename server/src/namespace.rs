//! Namespaces: what is stored of one, and the set of names the server answers for.

use std::collections::HashSet;
use std::sync::RwLock;

use crate::clock::Millis;
use crate::model::RunStatus;

/// Most namespaces a server holds.
pub const MAX_NAMESPACES: usize = 1000;

/// A namespace as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespace {
    pub name: String,
    pub description: String,
    pub created_ms: Millis,
    pub updated_ms: Millis,
    /// Notification subscriptions: where every closed run of the namespace (that a
    /// subscription's filters match) is delivered.
    pub subscriptions: Vec<Subscription>,
}

/// Most notification subscriptions a namespace holds.
pub const MAX_SUBSCRIPTIONS: usize = 16;

/// A URL that gets the signed result of every run of its namespace that closes,
/// optionally only for some workflows and some outcomes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    pub id: String,
    pub url: String,
    /// Only runs of these workflows (empty: all).
    pub workflows: Vec<String>,
    /// Only runs that closed with these statuses (empty: all).
    pub outcomes: Vec<RunStatus>,
    pub created_ms: Millis,
}

impl Subscription {
    /// Whether a run of `workflow` that closed as `status` is delivered here.
    pub fn matches(&self, workflow: &str, status: RunStatus) -> bool {
        (self.workflows.is_empty() || self.workflows.iter().any(|w| w == workflow))
            && (self.outcomes.is_empty() || self.outcomes.contains(&status))
    }
}

/// The names of the namespaces that exist, in memory: loaded at start, changed after
/// each commit that creates or deletes one.
#[derive(Debug, Default)]
pub struct NamespaceSet(RwLock<HashSet<String>>);

impl NamespaceSet {
    pub fn contains(&self, name: &str) -> bool {
        self.read().contains(name)
    }

    pub fn insert(&self, name: String) {
        self.write().insert(name);
    }

    pub fn remove(&self, name: &str) {
        self.write().remove(name);
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

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
    }
}
