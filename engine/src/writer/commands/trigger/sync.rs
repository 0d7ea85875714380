//! Write the configuration's triggers into storage (at start): each is saved
//! (replacing an API-made trigger of the same id, with a warning: the file is
//! the operator's word), and a trigger an earlier configuration defined that this
//! one does not is deleted.

use super::*;

/// The configuration's triggers, checked by the service layer.
#[derive(Debug)]
pub struct SyncConfigTriggers {
    pub triggers: Vec<Trigger>,
}

/// What a sync changed: (saved, deleted).
pub type Synced = (usize, usize);

impl Apply for SyncConfigTriggers {
    type Output = Synced;
    const NAME: &'static str = "sync_config_triggers";

    fn apply(self, cx: &mut Cx) -> Result<Synced, CommandError> {
        for t in &self.triggers {
            if cx.tx.namespace(&t.namespace)?.is_none() {
                return Err(Rejection::InvalidArgument(format!(
                    "trigger {:?}: namespace {:?} does not exist",
                    t.id, t.namespace
                ))
                .into());
            }
        }
        let mut stale = Vec::new();
        cx.tx.triggers(None, "", &mut |t| {
            let kept = self
                .triggers
                .iter()
                .any(|c| c.namespace == t.namespace && c.id == t.id);
            if t.source == Source::Config && !kept {
                stale.push((t.namespace, t.id));
            }
            true
        })?;
        for (ns, id) in &stale {
            cx.tx.delete_trigger(ns, id)?;
            tracing::info!(trigger_id = %id, namespace = %ns, "trigger no longer in the configuration; deleted");
        }
        let saved = self.triggers.len();
        for mut t in self.triggers {
            let old = cx.tx.trigger(&t.namespace, &t.id)?;
            if old.as_ref().is_some_and(|o| o.source == Source::Api) {
                tracing::warn!(trigger_id = %t.id, namespace = %t.namespace, "the configuration replaces a trigger made through the API");
            }
            t.source = Source::Config;
            t.created_ms = old.as_ref().map_or(cx.now(), |o| o.created_ms);
            t.recent = old.as_ref().map(|o| o.recent.clone()).unwrap_or_default();
            t.poll_state = poll_state_of(&t, old.as_ref(), cx.now());
            t.updated_ms = match old {
                Some(o) if o.source == Source::Config && same_definition(&o, &t) => o.updated_ms,
                _ => cx.now(),
            };
            cx.tx.save_trigger(&t)?;
        }
        Ok((saved, stale.len()))
    }
}

fn same_definition(a: &Trigger, b: &Trigger) -> bool {
    let strip = |t: &Trigger| Trigger {
        created_ms: 0,
        updated_ms: 0,
        source: Source::Config,
        recent: Vec::new(),
        poll_state: Default::default(),
        ..t.clone()
    };
    strip(a) == strip(b)
}
