//! Namespaces: what is stored of one, and the set of names the server answers for.

use std::collections::HashSet;
use std::sync::RwLock;

use crate::clock::Millis;

/// Most namespaces a server holds.
pub const MAX_NAMESPACES: usize = 1000;

/// A namespace as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespace {
    pub name: String,
    pub description: String,
    pub created_ms: Millis,
    pub updated_ms: Millis,
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
