//! Create a namespace.

use super::*;
use crate::namespace::{MAX_NAMESPACES, Namespace};

/// A new namespace (its times are the writer's clock).
#[derive(Debug)]
pub struct CreateNamespace {
    pub name: String,
    pub description: String,
}

impl Apply for CreateNamespace {
    type Output = Namespace;
    const NAME: &'static str = "create_namespace";

    fn apply(self, cx: &mut Cx) -> Result<Result<Namespace, ApiError>, StorageError> {
        if cx.tx.namespace(&self.name)?.is_some() {
            return Ok(Err(ApiError::AlreadyExists(format!(
                "namespace {:?} already exists",
                self.name
            ))));
        }
        if cx.tx.namespaces()?.len() >= MAX_NAMESPACES {
            return Ok(Err(ApiError::ResourceExhausted(format!(
                "a server holds at most {MAX_NAMESPACES} namespaces"
            ))));
        }
        let ns = Namespace {
            name: self.name,
            description: self.description,
            created_ms: cx.now(),
            updated_ms: cx.now(),
            subscriptions: Vec::new(),
        };
        cx.tx.put_namespace(&ns)?;
        Ok(Ok(ns))
    }
}
