//! The `workflows` table (definitions registered from code): [`WorkflowReads`] for
//! snapshots and the writer's transaction, [`WorkflowWrites`] for the writer's.

use railyard_model::workflow::RegisteredWorkflow;
use railyard_store::backend::{WorkflowReads, WorkflowWrites};
use railyard_store::{StorageError, records};

use crate::conn::params;
use crate::txn::{PgTxn, col};

/// Registrations fetched at a time by a listing its visitor may stop.
const PAGE: i64 = 100;

impl WorkflowReads for PgTxn {
    fn registered_workflow(&self, ns: &str, id: &str) -> Result<Option<RegisteredWorkflow>, StorageError> {
        let row = self.conn().query_opt(
            "SELECT record FROM workflows WHERE ns = $1 AND workflow_id = $2",
            params![ns.to_string(), id.to_string()],
        )?;
        row.map(|r| {
            records::decode_registered_workflow(&col::<Vec<u8>>(&r, 0)?, &self.defs, &self.definitions())
        })
        .transpose()
    }

    fn registered_workflows(
        &self,
        ns: &str,
        visit: &mut dyn FnMut(RegisteredWorkflow) -> bool,
    ) -> Result<(), StorageError> {
        let mut after = String::new();
        loop {
            let rows = self.conn().query(
                "SELECT workflow_id, record FROM workflows WHERE ns = $1 AND workflow_id > $2
                 ORDER BY workflow_id LIMIT $3",
                params![ns.to_string(), after.clone(), PAGE],
            )?;
            for row in &rows {
                let w = records::decode_registered_workflow(
                    &col::<Vec<u8>>(row, 1)?,
                    &self.defs,
                    &self.definitions(),
                )?;
                if !visit(w) {
                    return Ok(());
                }
                after = col(row, 0)?;
            }
            if (rows.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }
}

impl WorkflowWrites for PgTxn {
    fn put_registered_workflow(&mut self, w: &RegisteredWorkflow) -> Result<(), StorageError> {
        let (row, key, definition) = records::encode_registered_workflow(w, &self.defs)?;
        // Its definition's row in this same transaction, unless the table has it, as
        // a start writes it.
        self.conn().write(
            "INSERT INTO definitions (workflow_id, version, hash, record) VALUES ($1, $2, $3, $4)
             ON CONFLICT (workflow_id, version, hash) DO NOTHING",
            params![key.workflow_id, key.version, key.hash, definition],
        )?;
        self.conn().write(
            "INSERT INTO workflows (ns, workflow_id, record) VALUES ($1, $2, $3)
             ON CONFLICT (ns, workflow_id) DO UPDATE SET record = excluded.record",
            params![w.namespace.clone(), w.definition.id.clone(), row],
        )?;
        Ok(())
    }

    fn delete_registered_workflow(&mut self, ns: &str, id: &str) -> Result<(), StorageError> {
        self.conn().write(
            "DELETE FROM workflows WHERE ns = $1 AND workflow_id = $2",
            params![ns.to_string(), id.to_string()],
        )?;
        Ok(())
    }
}
