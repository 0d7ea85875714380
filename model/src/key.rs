//! A run's key: the namespace it lives in and its id, the pair every table, cache
//! and lease names a run by.

use std::fmt;

/// A run, named by its namespace and its id (run ids are unique per namespace only).
///
/// Owned, so that whoever keeps runs in a map or hands a lease on holds one value;
/// a read takes `&RunKey`. Ordered by namespace, then id, as the tables are.
/// Shown as `namespace/run_id` (run ids never hold `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RunKey {
    /// The namespace the run lives in.
    pub namespace: String,
    /// The run's id, unique in its namespace.
    pub run_id: String,
}

impl RunKey {
    /// The key of run `run_id` in namespace `namespace`.
    pub fn new(namespace: impl Into<String>, run_id: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            run_id: run_id.into(),
        }
    }
}

impl crate::run::RunState {
    /// The run's key.
    pub fn key(&self) -> RunKey {
        RunKey::new(&self.namespace, &self.run_id)
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.run_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_namespace_then_id_and_shows_both() {
        let (a, b) = (RunKey::new("a", "z"), RunKey::new("b", "a"));
        assert!(a < b);
        assert_eq!(a.to_string(), "a/z");
    }
}
