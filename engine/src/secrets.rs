//! Which environment variables a trigger may name as a secret (`$NAME`: a webhook's
//! signature secret or bearer token, a polled trigger's API token), and reading
//! them. A trigger made through the API may name only a variable the operator
//! declared for its namespace (`[secrets]` in the server's configuration:
//! `GITHUB_TOKEN = ["team-a"]`, or `["*"]` for every namespace); a trigger in the
//! configuration, written by the operator, may name any variable. No trigger may
//! name one of the server's own settings (`RAILYARD_*`), whatever is declared.
//!
//! The check is made when a trigger is created or changed (naming the field) and
//! again at each use, so a declaration withdrawn takes effect at once.

use std::collections::BTreeMap;

use railyard_model::auth::ALL_NAMESPACES;
use railyard_model::trigger::{Source, Trigger};

/// The prefix of the server's own settings: never a trigger's secret.
pub const SERVER_PREFIX: &str = "RAILYARD_";

/// Most names `[secrets]` declares.
pub const MAX_DECLARED: usize = 1024;

/// Why a trigger may not use a secret it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Not a `$NAME` reference.
    #[error("must name an environment variable of the server, as $NAME: secrets are never stored")]
    NotReference,
    /// One of the server's own settings.
    #[error("{0} is one of the server's own settings (RAILYARD_*), which no trigger may name")]
    ServerOwn(String),
    /// Not declared for the trigger's namespace.
    #[error(
        "{name} is not a secret the server declares for namespace {namespace}: its operator \
         lists the variables triggers may name in the [secrets] section of its configuration \
         ({name} = [\"{namespace}\"])"
    )]
    Undeclared { name: String, namespace: String },
    /// Declared, but not set in the server's environment.
    #[error("the environment variable {0} is not set on the server")]
    Unset(String),
}

/// The declared secrets: each variable's name and the namespaces whose API-made
/// triggers may name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretPolicy {
    declared: BTreeMap<String, Vec<String>>,
}

/// Whether `name` is an environment variable name (letters, digits, `_`, not
/// starting with a digit, at most 128 bytes).
pub fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl SecretPolicy {
    /// The policy `declared` says (variable → namespaces, `*` for every one). The
    /// error names the entry that is wrong.
    pub fn new(declared: BTreeMap<String, Vec<String>>) -> Result<Self, String> {
        if declared.len() > MAX_DECLARED {
            return Err(format!(
                "declares {} secrets, more than {MAX_DECLARED}",
                declared.len()
            ));
        }
        for (name, namespaces) in &declared {
            let shown = railyard_model::echo(name);
            if !is_env_name(name) {
                return Err(format!("{shown} is not an environment variable name"));
            }
            if name.starts_with(SERVER_PREFIX) {
                return Err(format!(
                    "{shown}: the server's own settings (RAILYARD_*) cannot be triggers' secrets"
                ));
            }
            if namespaces.is_empty() {
                return Err(format!("{shown}: lists no namespace (\"*\" for every namespace)"));
            }
            for ns in namespaces {
                if ns != ALL_NAMESPACES && railyard_model::limits::check_name("namespace", ns).is_err() {
                    return Err(format!(
                        "{shown}: {} is not a namespace name",
                        railyard_model::echo(ns)
                    ));
                }
            }
        }
        Ok(Self { declared })
    }

    /// Whether an API-made trigger of namespace `ns` may name variable `name`.
    fn declares(&self, name: &str, ns: &str) -> bool {
        self.declared
            .get(name)
            .is_some_and(|list| list.iter().any(|n| n == ALL_NAMESPACES || n == ns))
    }

    /// The variable `reference` (`$NAME`) names, if a trigger of namespace `ns`
    /// defined in `source` may use it.
    pub fn check<'a>(&self, source: Source, ns: &str, reference: &'a str) -> Result<&'a str, SecretError> {
        let name = reference
            .strip_prefix('$')
            .filter(|n| is_env_name(n))
            .ok_or(SecretError::NotReference)?;
        if name.starts_with(SERVER_PREFIX) {
            return Err(SecretError::ServerOwn(name.to_string()));
        }
        if source == Source::Api && !self.declares(name, ns) {
            return Err(SecretError::Undeclared {
                name: name.to_string(),
                namespace: railyard_model::echo(ns),
            });
        }
        Ok(name)
    }

    /// The value of the secret `reference` of trigger `t`, read now.
    pub fn read(&self, t: &Trigger, reference: &str) -> Result<Vec<u8>, SecretError> {
        let name = self.check(t.source, &t.namespace, reference)?;
        match std::env::var_os(name) {
            Some(v) if !v.is_empty() => Ok(v.into_encoded_bytes()),
            _ => Err(SecretError::Unset(name.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[(&str, &[&str])]) -> Result<SecretPolicy, String> {
        SecretPolicy::new(
            entries
                .iter()
                .map(|(n, ns)| (n.to_string(), ns.iter().map(|s| s.to_string()).collect()))
                .collect(),
        )
    }

    #[test]
    fn only_declared_names_in_their_namespaces_and_never_the_servers_own() {
        let p = policy(&[("GITHUB_TOKEN", &["team-a"]), ("SHARED", &["*"])]).unwrap();
        assert_eq!(
            p.check(Source::Api, "team-a", "$GITHUB_TOKEN"),
            Ok("GITHUB_TOKEN")
        );
        assert!(matches!(
            p.check(Source::Api, "team-b", "$GITHUB_TOKEN"),
            Err(SecretError::Undeclared { .. })
        ));
        assert_eq!(p.check(Source::Api, "team-b", "$SHARED"), Ok("SHARED"));
        assert!(matches!(
            p.check(Source::Api, "team-a", "$HOME"),
            Err(SecretError::Undeclared { .. })
        ));
        assert_eq!(p.check(Source::Config, "team-a", "$HOME"), Ok("HOME"));
        for source in [Source::Api, Source::Config] {
            assert!(matches!(
                p.check(source, "team-a", "$RAILYARD_DELIVERY_SIGNING_SECRET"),
                Err(SecretError::ServerOwn(_))
            ));
        }
        assert_eq!(
            p.check(Source::Api, "team-a", "GITHUB_TOKEN"),
            Err(SecretError::NotReference)
        );
    }

    #[test]
    fn a_declaration_is_checked() {
        assert!(policy(&[("RAILYARD_DELIVERY_SIGNING_SECRET", &["*"])]).is_err());
        assert!(policy(&[("A-B", &["*"])]).is_err());
        assert!(policy(&[("TOKEN", &[])]).is_err());
        assert!(policy(&[("TOKEN", &["bad name!"])]).is_err());
        assert!(policy(&[("TOKEN", &["*", "ns1"])]).is_ok());
    }
}
