//! Create a namespace.

use super::*;
use railyard_model::namespace::{MAX_NAMESPACES, Namespace, NamespaceChange};

/// A new namespace (its times are the writer's clock; settings not given take
/// their defaults).
#[derive(Debug)]
pub struct CreateNamespace {
    pub name: String,
    pub settings: NamespaceChange,
}

impl Apply for CreateNamespace {
    type Output = Namespace;
    const NAME: &'static str = "create_namespace";

    fn apply(self, cx: &mut Cx) -> Result<Namespace, CommandError> {
        if cx.tx.namespace(&self.name)?.is_some() {
            return Err(Rejection::AlreadyExists(format!("namespace {:?} already exists", self.name)).into());
        }
        if cx.tx.namespaces()?.len() >= MAX_NAMESPACES {
            return Err(Rejection::ResourceExhausted(format!(
                "a server holds at most {MAX_NAMESPACES} namespaces"
            ))
            .into());
        }
        let mut ns = Namespace {
            principles: None,
            name: self.name,
            created_ms: cx.now(),
            updated_ms: cx.now(),
            ..Namespace::default()
        };
        self.settings.apply_to(&mut ns);
        cx.tx.put_namespace(&ns)?;
        Ok(ns)
    }
}
