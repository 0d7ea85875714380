//! Register a workflow definition from code into one namespace
//! (`History.RegisterWorkflow`): a new id, a changed definition of an id (the version
//! new runs start with; runs already started keep the one they pinned), or the same
//! content again, which writes nothing.

use super::*;
use railyard_model::workflow::{MAX_REGISTERED_WORKFLOWS, RegisteredWorkflow};

/// Register `definition` in `namespace`.
#[derive(Debug)]
pub struct RegisterWorkflow {
    pub namespace: String,
    /// Validated by the service layer (`parse_definition`).
    pub definition: Arc<WorkflowDef>,
    /// Its content hash (`railyard_store::records::definition_hash`), computed
    /// before the command so that the writer thread does not encode it twice.
    pub hash: String,
    /// Who registers it.
    pub identity: String,
}

/// What a registration did.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The registration as stored now.
    pub workflow: RegisteredWorkflow,
    /// False when the same content was registered already (nothing was written).
    pub changed: bool,
}

impl Apply for RegisterWorkflow {
    type Output = Registered;
    const NAME: &'static str = "register_workflow";

    fn apply(self, cx: &mut Cx) -> Result<Registered, CommandError> {
        let (ns, id) = (self.namespace.as_str(), self.definition.id.as_str());
        if let Some((_, file)) = cx.workflows.valid.get(id) {
            return Err(Rejection::AlreadyExists(format!(
                "workflow {id:?} is defined by the server's {}; a registered workflow cannot take its id",
                file.display()
            ))
            .into());
        }
        // Checked again here: the namespace may have been deleted since the request
        // was resolved.
        if cx.tx.namespace(ns)?.is_none() {
            return Err(Rejection::NotFound(format!("namespace {ns:?} does not exist")).into());
        }
        let existing = cx.tx.registered_workflow(ns, id)?;
        if let Some(w) = existing.as_ref().filter(|w| w.hash == self.hash) {
            return Ok(Registered {
                workflow: w.clone(),
                changed: false,
            });
        }
        if existing.is_none() {
            let mut count = 0usize;
            cx.tx.registered_workflows(ns, &mut |_| {
                count += 1;
                count < MAX_REGISTERED_WORKFLOWS
            })?;
            if count >= MAX_REGISTERED_WORKFLOWS {
                return Err(Rejection::ResourceExhausted(format!(
                    "namespace {ns:?} has {MAX_REGISTERED_WORKFLOWS} registered workflows, the most it may have"
                ))
                .into());
            }
        }
        let workflow = RegisteredWorkflow {
            namespace: self.namespace,
            definition: self.definition,
            hash: self.hash,
            registered_ms: cx.now(),
            registered_by: self.identity,
        };
        cx.tx.put_registered_workflow(&workflow)?;
        Ok(Registered {
            workflow,
            changed: true,
        })
    }
}
