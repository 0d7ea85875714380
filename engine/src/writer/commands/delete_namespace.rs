//! Delete an empty namespace (no runs, no schedules), revoking its API keys and
//! removing its registered workflows in the same commit (so a namespace made again
//! under the name does not take them back).

use super::*;

/// Delete namespace `name`.
#[derive(Debug)]
pub struct DeleteNamespace {
    pub name: String,
}

impl Apply for DeleteNamespace {
    type Output = ();
    const NAME: &'static str = "delete_namespace";

    fn apply(self, cx: &mut Cx) -> Result<(), CommandError> {
        let name = self.name.as_str();
        if name == railyard_model::namespace::DEFAULT_NAMESPACE {
            return Err(
                Rejection::FailedPrecondition("namespace \"default\" cannot be deleted".into()).into(),
            );
        }
        if cx.tx.namespace(name)?.is_none() {
            return Err(Rejection::NotFound(format!("namespace {name:?} does not exist")).into());
        }
        let mut has_runs = false;
        cx.tx
            .runs_by_start(name, Millis::MIN, (Millis::MAX, ""), &mut |_, _, _| {
                has_runs = true;
                false
            })?;
        if has_runs {
            return Err(Rejection::FailedPrecondition(format!(
                "namespace {name:?} still holds runs; only an empty namespace can be deleted"
            ))
            .into());
        }
        let mut schedules = 0usize;
        cx.tx.schedules(name, "", &mut |_| {
            schedules += 1;
            true
        })?;
        if schedules > 0 {
            let noun = if schedules == 1 { "schedule" } else { "schedules" };
            return Err(Rejection::FailedPrecondition(format!(
                "namespace {name:?} still holds {schedules} {noun}; delete them first \
                 (railyard schedule delete), then the namespace"
            ))
            .into());
        }

        let mut has_triggers = false;
        cx.tx.triggers(Some(name), "", &mut |_| {
            has_triggers = true;
            false
        })?;
        if has_triggers {
            return Err(Rejection::FailedPrecondition(format!(
                "namespace {name:?} still holds triggers; delete them first"
            ))
            .into());
        }
        let mut keys = Vec::new();
        cx.tx.api_keys("", &mut |k| {
            if k.namespace == name && k.revoked_ms.is_none() {
                keys.push(k);
            }
            true
        })?;
        for mut key in keys {
            key.revoked_ms = Some(cx.now());
            cx.tx.put_api_key(&key)?;
        }
        // Its registered workflows go with it, so a namespace made again under the
        // name starts with none.
        let mut registered = Vec::new();
        cx.tx.registered_workflows(name, &mut |w| {
            registered.push(w.definition.id.clone());
            true
        })?;
        for id in registered {
            cx.tx.delete_registered_workflow(name, &id)?;
        }
        cx.tx.remove_namespace(name)?;
        cx.limits.forget(name);
        Ok(())
    }
}
