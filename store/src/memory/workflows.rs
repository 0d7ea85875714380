//! The `workflows` table as a map, for the reference backend.

use std::collections::BTreeMap;

use super::{Data, MemorySnapshot, MemoryTx};
use crate::backend::{WorkflowReads, WorkflowWrites};
use crate::error::StorageError;
use railyard_model::workflow::RegisteredWorkflow;

/// The `workflows` table: (namespace, workflow id) → registration.
pub(super) type WorkflowData = BTreeMap<(String, String), RegisteredWorkflow>;

fn one(d: &Data, ns: &str, id: &str) -> Option<RegisteredWorkflow> {
    d.workflows.get(&(ns.to_string(), id.to_string())).cloned()
}

fn each(d: &Data, ns: &str, visit: &mut dyn FnMut(RegisteredWorkflow) -> bool) {
    for ((row_ns, _), w) in d.workflows.range((ns.to_string(), String::new())..) {
        if row_ns != ns || !visit(w.clone()) {
            break;
        }
    }
}

impl WorkflowReads for MemorySnapshot {
    fn registered_workflow(&self, ns: &str, id: &str) -> Result<Option<RegisteredWorkflow>, StorageError> {
        Ok(one(&self.0, ns, id))
    }

    fn registered_workflows(
        &self,
        ns: &str,
        visit: &mut dyn FnMut(RegisteredWorkflow) -> bool,
    ) -> Result<(), StorageError> {
        each(&self.0, ns, visit);
        Ok(())
    }
}

impl WorkflowReads for MemoryTx<'_> {
    fn registered_workflow(&self, ns: &str, id: &str) -> Result<Option<RegisteredWorkflow>, StorageError> {
        Ok(one(&self.data, ns, id))
    }

    fn registered_workflows(
        &self,
        ns: &str,
        visit: &mut dyn FnMut(RegisteredWorkflow) -> bool,
    ) -> Result<(), StorageError> {
        each(&self.data, ns, visit);
        Ok(())
    }
}

impl WorkflowWrites for MemoryTx<'_> {
    fn put_registered_workflow(&mut self, w: &RegisteredWorkflow) -> Result<(), StorageError> {
        self.change(|d| {
            d.workflows
                .insert((w.namespace.clone(), w.definition.id.clone()), w.clone());
        })
    }

    fn delete_registered_workflow(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.change(|d| {
            d.workflows.remove(&(ns.to_string(), id.to_string()));
        })
    }
}
