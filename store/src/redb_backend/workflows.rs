//! The `workflows` table in redb (definitions registered from code): reads for
//! snapshots and write transactions, writes for write transactions. Made at every
//! open when missing, so an older file gains it empty.

use redb::{ReadableTable, TableDefinition};

use super::snapshot::RedbSnapshot;
use super::{DEFINITIONS, RedbTx};
use crate::backend::{WorkflowReads, WorkflowWrites};
use crate::error::StorageError;
use crate::records::{self, DefinitionRows, Definitions};
use railyard_model::workflow::RegisteredWorkflow;

/// (namespace, workflow id) → registered workflow record, naming its `definitions` row.
pub(crate) const WORKFLOWS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("workflows");

/// Creates the table (at open).
pub(super) fn create_tables(tx: &super::logged::LoggedTx<'_>) -> Result<(), StorageError> {
    tx.open_table(WORKFLOWS)?;
    Ok(())
}

fn one(
    t: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    defs: &Definitions,
    definitions: &impl DefinitionRows,
    ns: &str,
    id: &str,
) -> Result<Option<RegisteredWorkflow>, StorageError> {
    t.get((ns, id))?
        .map(|v| records::decode_registered_workflow(v.value(), defs, definitions))
        .transpose()
}

fn each(
    t: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    defs: &Definitions,
    definitions: &impl DefinitionRows,
    ns: &str,
    visit: &mut dyn FnMut(RegisteredWorkflow) -> bool,
) -> Result<(), StorageError> {
    for row in t.range((ns, "")..)? {
        let (k, v) = row?;
        if k.value().0 != ns {
            break;
        }
        if !visit(records::decode_registered_workflow(v.value(), defs, definitions)?) {
            break;
        }
    }
    Ok(())
}

impl WorkflowReads for RedbSnapshot {
    fn registered_workflow(&self, ns: &str, id: &str) -> Result<Option<RegisteredWorkflow>, StorageError> {
        let definitions = self.tx.open_table(DEFINITIONS)?;
        one(&self.tx.open_table(WORKFLOWS)?, &self.defs, &definitions, ns, id)
    }

    fn registered_workflows(
        &self,
        ns: &str,
        visit: &mut dyn FnMut(RegisteredWorkflow) -> bool,
    ) -> Result<(), StorageError> {
        let definitions = self.tx.open_table(DEFINITIONS)?;
        each(
            &self.tx.open_table(WORKFLOWS)?,
            &self.defs,
            &definitions,
            ns,
            visit,
        )
    }
}

impl WorkflowReads for RedbTx<'_> {
    fn registered_workflow(&self, ns: &str, id: &str) -> Result<Option<RegisteredWorkflow>, StorageError> {
        one(
            &self.tx.open_table(WORKFLOWS)?,
            self.defs,
            &self.definitions,
            ns,
            id,
        )
    }

    fn registered_workflows(
        &self,
        ns: &str,
        visit: &mut dyn FnMut(RegisteredWorkflow) -> bool,
    ) -> Result<(), StorageError> {
        each(
            &self.tx.open_table(WORKFLOWS)?,
            self.defs,
            &self.definitions,
            ns,
            visit,
        )
    }
}

impl WorkflowWrites for RedbTx<'_> {
    fn put_registered_workflow(&mut self, w: &RegisteredWorkflow) -> Result<(), StorageError> {
        let (row, _, _) = records::encode_registered_workflow(w, self.defs)?;
        self.defs.store(&w.definition, &mut self.definitions)?;
        self.tx
            .open_table(WORKFLOWS)?
            .insert((w.namespace.as_str(), w.definition.id.as_str()), row.as_slice())?;
        Ok(())
    }

    fn delete_registered_workflow(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.tx.open_table(WORKFLOWS)?.remove((ns, id))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::Backend;
    use crate::redb_backend::RedbBackend;
    use railyard_model::workflow::parse_definition;

    fn registration(ns: &str, prompt: &str) -> RegisteredWorkflow {
        let def = parse_definition(&format!(
            r#"{{"id":"wf","version":"1","name":"W","steps":[{{"id":"a","title":"A","prompt":"{prompt}"}}]}}"#
        ))
        .unwrap();
        RegisteredWorkflow {
            namespace: ns.into(),
            hash: records::definition_hash(&def).unwrap(),
            definition: Arc::new(def),
            registered_ms: 1,
            registered_by: "me".into(),
        }
    }

    #[test]
    fn a_file_from_before_the_table_opens_and_registrations_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            // A file as the release before registered workflows left it.
            let backend = RedbBackend::open(dir.path()).unwrap();
            let tx = backend.db().begin_write().unwrap();
            tx.delete_table(WORKFLOWS).unwrap();
            tx.commit().unwrap();
        }
        let backend = RedbBackend::open(dir.path()).unwrap();
        let mut seen = 0;
        backend
            .snapshot()
            .unwrap()
            .registered_workflows("default", &mut |_| {
                seen += 1;
                true
            })
            .unwrap();
        assert_eq!(seen, 0);
        let (one, two, other) = (
            registration("default", "p"),
            registration("default", "q"),
            registration("team", "p"),
        );
        backend
            .write(&mut |tx| {
                tx.put_registered_workflow(&one)?;
                tx.put_registered_workflow(&other)?;
                tx.put_registered_workflow(&two)
            })
            .unwrap();
        drop(backend);
        let backend = RedbBackend::open(dir.path()).unwrap();
        let snap = backend.snapshot().unwrap();
        assert_eq!(
            snap.registered_workflow("default", "wf").unwrap(),
            Some(two.clone())
        );
        assert_eq!(snap.registered_workflow("team", "wf").unwrap(), Some(other));
        assert_eq!(snap.registered_workflow("none", "wf").unwrap(), None);
        let mut listed = Vec::new();
        snap.registered_workflows("default", &mut |w| {
            listed.push(w);
            true
        })
        .unwrap();
        assert_eq!(listed, [two]);
        backend
            .write(&mut |tx| tx.delete_registered_workflow("default", "wf"))
            .unwrap();
        assert_eq!(
            backend
                .snapshot()
                .unwrap()
                .registered_workflow("default", "wf")
                .unwrap(),
            None
        );
    }
}
