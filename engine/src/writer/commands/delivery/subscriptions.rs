//! Add or remove a namespace's notification subscription.

use super::*;
use railyard_model::namespace::{MAX_SUBSCRIPTIONS, Namespace, Subscription};

fn no_namespace(name: &str) -> Rejection {
    Rejection::NotFound(format!("namespace {name:?} does not exist"))
}

/// Adds a subscription (checked by the service layer) to a namespace.
#[derive(Debug)]
pub struct Subscribe {
    pub namespace: String,
    pub subscription: Subscription,
}

impl Apply for Subscribe {
    type Output = Namespace;
    const NAME: &'static str = "subscribe";

    fn apply(self, cx: &mut Cx) -> Result<Namespace, CommandError> {
        let Some(mut ns) = cx.tx.namespace(&self.namespace)? else {
            return Err(no_namespace(&self.namespace).into());
        };
        let mut sub = self.subscription;
        if ns.subscriptions.iter().any(|s| s.id == sub.id) {
            return Err(Rejection::AlreadyExists(format!(
                "namespace {:?} has a subscription {:?} already",
                ns.name, sub.id
            ))
            .into());
        }
        if ns.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(Rejection::ResourceExhausted(format!(
                "namespace {:?} has {MAX_SUBSCRIPTIONS} subscriptions, the most it may hold",
                ns.name
            ))
            .into());
        }
        sub.created_ms = cx.now();
        ns.subscriptions.push(sub);
        ns.updated_ms = cx.now();
        cx.tx.put_namespace(&ns)?;
        Ok(ns)
    }
}

/// Removes a subscription. Deliveries it already planned carry on (each run keeps
/// its own copy of the URL).
#[derive(Debug)]
pub struct Unsubscribe {
    pub namespace: String,
    pub id: String,
}

impl Apply for Unsubscribe {
    type Output = Namespace;
    const NAME: &'static str = "unsubscribe";

    fn apply(self, cx: &mut Cx) -> Result<Namespace, CommandError> {
        let Some(mut ns) = cx.tx.namespace(&self.namespace)? else {
            return Err(no_namespace(&self.namespace).into());
        };
        let before = ns.subscriptions.len();
        ns.subscriptions.retain(|s| s.id != self.id);
        if ns.subscriptions.len() == before {
            return Err(Rejection::NotFound(format!(
                "namespace {:?} has no subscription {:?}",
                ns.name, self.id
            ))
            .into());
        }
        ns.updated_ms = cx.now();
        cx.tx.put_namespace(&ns)?;
        Ok(ns)
    }
}
