//! Rows of the `workflows` table: a definition registered from code
//! (`History.RegisterWorkflow`), by namespace and workflow id. The row names the
//! definition by its key in the `definitions` table (written with it, never
//! removed), as a run does, so a run started from it pins the very row.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::definitions::{DefinitionKey, DefinitionRows, Definitions};
use super::{Record, decode_record, encode_record, v1};
use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::workflow::{RegisteredWorkflow, WorkflowDef};

#[derive(Debug, Serialize, Deserialize)]
struct RegisteredWorkflowRecord {
    #[serde(default = "v1")]
    v: u32,
    namespace: String,
    /// The `definitions` row it names.
    definition: DefinitionKey,
    #[serde(default)]
    registered_ms: Millis,
    #[serde(default)]
    registered_by: String,
}

impl Record for RegisteredWorkflowRecord {
    const WHAT: &'static str = "registered workflow";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// The content hash the store names `def` by (the hash of its `definitions`
/// record): what tells a changed registration from the same one again.
pub fn definition_hash(def: &WorkflowDef) -> Result<String, StorageError> {
    Ok(super::definitions::encode_key(def)?.hash)
}

/// Encodes a registration's row, with the key of its definition's row and that
/// row's bytes (for the caller to write when its table lacks it).
pub fn encode_registered_workflow(
    w: &RegisteredWorkflow,
    defs: &Definitions,
) -> Result<(Vec<u8>, DefinitionKey, Vec<u8>), StorageError> {
    let (key, definition) = defs.record_of(&w.definition)?;
    let row = encode_record(&RegisteredWorkflowRecord {
        v: RegisteredWorkflowRecord::VERSION,
        namespace: w.namespace.clone(),
        definition: key.clone(),
        registered_ms: w.registered_ms,
        registered_by: w.registered_by.clone(),
    })?;
    Ok((row, key, definition))
}

/// Decodes a registration's row, its definition read through `defs` (shared with
/// the runs that name it) or from `definitions`.
pub fn decode_registered_workflow(
    bytes: &[u8],
    defs: &Definitions,
    definitions: &impl DefinitionRows,
) -> Result<RegisteredWorkflow, StorageError> {
    let r: RegisteredWorkflowRecord = decode_record(bytes)?;
    let definition: Arc<WorkflowDef> = defs.resolve(&r.definition, definitions)?;
    Ok(RegisteredWorkflow {
        namespace: r.namespace,
        definition,
        hash: r.definition.hash,
        registered_ms: r.registered_ms,
        registered_by: r.registered_by,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_model::workflow::parse_definition;

    #[test]
    fn a_registration_round_trips_through_its_definition_row_and_is_pinned() {
        let def = Arc::new(
            parse_definition(
                r#"{"id":"wf","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
            )
            .unwrap(),
        );
        let w = RegisteredWorkflow {
            namespace: "team".into(),
            definition: def.clone(),
            hash: definition_hash(&def).unwrap(),
            registered_ms: 7,
            registered_by: "key:abc".into(),
        };
        let (row, key, record) = encode_registered_workflow(&w, &Definitions::default()).unwrap();
        assert_eq!(key.hash, w.hash);
        let text = std::str::from_utf8(&row).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"v":1,"namespace":"team","definition":{{"workflow_id":"wf","version":"1","hash":"{}"}},"registered_ms":7,"registered_by":"key:abc"}}"#,
                w.hash
            )
        );
        // A fresh cache reads the definition from its row.
        let rows = super::super::DefinitionLookup(|k: &DefinitionKey| {
            Ok((k.hash == key.hash).then(|| record.clone()))
        });
        let back = decode_registered_workflow(&row, &Definitions::default(), &rows).unwrap();
        assert_eq!(back, w);
        // A newer record is refused, not misread.
        let newer = text.replace(r#""v":1"#, r#""v":2"#);
        assert!(decode_registered_workflow(newer.as_bytes(), &Definitions::default(), &rows).is_err());
    }
}
