//! Set or remove a namespace's flow-control rule on a key.

use super::*;
use railyard_model::flow::{KeyRule, KeyRules, MAX_RULES};

/// Sets `rule` on `key` in namespace `namespace`, or (`None`) removes the key's rule.
/// Matching hears the namespace's rules once committed.
#[derive(Debug)]
pub struct ChangeKeyRule {
    pub namespace: String,
    pub key: String,
    pub rule: Option<KeyRule>,
}

impl Apply for ChangeKeyRule {
    /// The namespace's rules after the change.
    type Output = KeyRules;
    const NAME: &'static str = "change_key_rule";

    fn apply(self, cx: &mut Cx) -> Result<KeyRules, CommandError> {
        let Some(mut ns) = cx.tx.namespace(&self.namespace)? else {
            return Err(Rejection::NotFound(format!("namespace {:?} does not exist", self.namespace)).into());
        };
        match self.rule {
            Some(rule) => {
                rule.check()?;
                if !ns.key_rules.contains_key(&self.key) && ns.key_rules.len() >= MAX_RULES {
                    return Err(Rejection::field(
                        "key",
                        format!("namespace {:?} has {MAX_RULES} rules already, the most it keeps", self.namespace),
                    )
                    .into());
                }
                ns.key_rules.insert(self.key, rule);
            }
            None => {
                if ns.key_rules.remove(&self.key).is_none() {
                    return Err(Rejection::NotFound(format!(
                        "namespace {:?} has no rule on key {}",
                        self.namespace,
                        railyard_model::echo(&self.key)
                    ))
                    .into());
                }
            }
        }
        ns.updated_ms = cx.now();
        cx.tx.put_namespace(&ns)?;
        cx.after.push(After::Rules {
            ns: self.namespace,
            rules: ns.key_rules.clone(),
        });
        Ok(ns.key_rules)
    }
}
