//! The workflow definitions a namespace offers: the server's (the files of its
//! workflows directory, the built-in demo), the same in every namespace, and those
//! registered from code into the namespace (`History.RegisterWorkflow`), kept in
//! the store.

use railyard_model::Rejection;
use std::path::PathBuf;
use std::sync::Arc;

use super::{Caller, Core};
use railyard_model::echo;

use crate::error::ApiError;
use crate::registry::{InvalidDefinition, MAX_DEFINITION_BYTES, MAX_LOAD_ERROR, REGISTERED_PREFIX};
use crate::writer::{RegisterWorkflow, Registered};
use railyard_model::workflow::{RegisteredWorkflow, WorkflowDef, parse_definition};

/// A definition a namespace offers and where it came from.
#[derive(Debug, Clone)]
pub struct ListedWorkflow {
    pub definition: Arc<WorkflowDef>,
    /// The file it was loaded from, `<built-in>/<name>` for one built into the
    /// binary, `<registered>/<namespace>/<id>` for one registered from code.
    pub source_file: PathBuf,
    /// The registration, for one registered from code.
    pub registered: Option<RegisteredWorkflow>,
}

/// Every definition, the valid ones by id and the files that failed to load.
#[derive(Debug, Clone)]
pub struct WorkflowListing {
    pub workflows: Vec<ListedWorkflow>,
    pub invalid: Vec<InvalidDefinition>,
}

/// Where listings say a registered definition came from: `<registered>/<ns>/<id>`.
pub fn registered_source(ns: &str, id: &str) -> PathBuf {
    PathBuf::from(format!("{REGISTERED_PREFIX}{ns}/{id}"))
}

/// The workflows registered in `ns`, in id order.
fn registered(core: &Core, ns: &str) -> Result<Vec<RegisteredWorkflow>, ApiError> {
    let mut out = Vec::new();
    core.store.snapshot()?.registered_workflows(ns, &mut |w| {
        out.push(w);
        true
    })?;
    Ok(out)
}

/// Lists the definitions the caller's namespace offers: the server's, then those
/// registered in it, each set in id order.
pub fn list(core: &Core, caller: &Caller) -> Result<WorkflowListing, ApiError> {
    let reg = &core.workflows;
    let mut workflows: Vec<ListedWorkflow> = reg
        .valid
        .values()
        .map(|(definition, file)| ListedWorkflow {
            definition: definition.clone(),
            source_file: file.clone(),
            registered: None,
        })
        .collect();
    for w in registered(core, &caller.namespace)? {
        workflows.push(ListedWorkflow {
            definition: w.definition.clone(),
            source_file: registered_source(&w.namespace, &w.definition.id),
            registered: Some(w),
        });
    }
    Ok(WorkflowListing {
        workflows,
        invalid: reg.invalid.clone(),
    })
}

/// The definition a new run of `workflow_id` in `ns` starts with: the server's, else
/// the one registered in `ns` (`NOT_FOUND`, naming the known ones, if none).
pub fn get(core: &Core, ns: &str, workflow_id: &str) -> Result<Arc<WorkflowDef>, ApiError> {
    if let Some(def) = core.workflows.get(workflow_id) {
        return Ok(def.clone());
    }
    if let Some(w) = core.store.snapshot()?.registered_workflow(ns, workflow_id)? {
        return Ok(w.definition);
    }
    Err(ApiError::Rejected(Rejection::NotFound(format!(
        "workflow {} not found (known: {})",
        echo(workflow_id),
        known(core, ns)?
    ))))
}

/// The ids a namespace offers, for "not found" messages: the server's, then the
/// registered ones.
pub fn known(core: &Core, ns: &str) -> Result<String, ApiError> {
    let mut ids: Vec<String> = core.workflows.valid.keys().cloned().collect();
    ids.extend(registered(core, ns)?.into_iter().map(|w| w.definition.id.clone()));
    Ok(ids.join(", "))
}

/// Registers `definition_json` in the caller's namespace: validated exactly as a
/// definition file is (at most [`MAX_DEFINITION_BYTES`], [`parse_definition`],
/// errors naming the JSON path), refused (`ALREADY_EXISTS`) for an id one of the
/// server's files defines. The same content again changes nothing; a changed one is
/// what new runs start with. Answered once committed.
pub async fn register(core: &Core, caller: &Caller, definition_json: String) -> Result<Registered, ApiError> {
    let len = definition_json.len();
    if len as u64 > MAX_DEFINITION_BYTES {
        return Err(ApiError::field(
            "definition_json",
            format!("{len} bytes, more than the limit of {MAX_DEFINITION_BYTES}"),
        ));
    }
    let definition = parse_definition(&definition_json).map_err(|e| {
        ApiError::field(
            "definition_json",
            railyard_model::text::cut(&e, MAX_LOAD_ERROR, "…"),
        )
    })?;
    let hash = railyard_store::records::definition_hash(&definition)?;
    let id = definition.id.clone();
    let registered = core
        .writer
        .call(RegisterWorkflow {
            namespace: caller.namespace.clone(),
            definition: Arc::new(definition),
            hash,
            identity: caller.identity.clone(),
        })
        .await?;
    tracing::info!(
        namespace = %caller.namespace, workflow = %id, changed = registered.changed,
        hash = %registered.workflow.hash, "workflow registered"
    );
    Ok(registered)
}
