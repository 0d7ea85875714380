//! The workflow definitions the server loaded.

use railyard_model::Rejection;
use std::path::PathBuf;
use std::sync::Arc;

use super::{Caller, Core};
use railyard_model::echo;

use crate::error::ApiError;
use crate::registry::InvalidDefinition;
use railyard_model::workflow::WorkflowDef;

/// A loaded definition and the file it came from.
#[derive(Debug, Clone)]
pub struct ListedWorkflow {
    pub definition: Arc<WorkflowDef>,
    pub source_file: PathBuf,
}

/// Every definition, the valid ones by id and the files that failed to load.
#[derive(Debug, Clone)]
pub struct WorkflowListing {
    pub workflows: Vec<ListedWorkflow>,
    pub invalid: Vec<InvalidDefinition>,
}

/// Lists the definitions. Every namespace sees the same ones.
pub fn list(core: &Core, _caller: &Caller) -> WorkflowListing {
    let reg = &core.workflows;
    WorkflowListing {
        workflows: reg
            .valid
            .values()
            .map(|(definition, file)| ListedWorkflow {
                definition: definition.clone(),
                source_file: file.clone(),
            })
            .collect(),
        invalid: reg.invalid.clone(),
    }
}

/// The definition of `workflow_id` (`NOT_FOUND`, naming the known ones, if none).
pub fn get(core: &Core, workflow_id: &str) -> Result<Arc<WorkflowDef>, ApiError> {
    core.workflows.get(workflow_id).cloned().ok_or_else(|| {
        let known: Vec<_> = core.workflows.valid.keys().map(String::as_str).collect();
        ApiError::Rejected(Rejection::NotFound(format!(
            "workflow {} not found (known: {})",
            echo(workflow_id),
            known.join(", ")
        )))
    })
}
