//! Verifying a webhook delivery: an HMAC-SHA256 of the raw body in a header
//! (GitHub's `X-Hub-Signature-256: sha256=<hex>` by default), or a shared bearer
//! token. Secrets are named as `$ENV_NAME` in the trigger and read from the
//! server's environment at each delivery (only the names `crate::secrets`
//! permits), so they are never stored or logged.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use railyard_model::trigger::Trigger;

use crate::secrets::SecretPolicy;

/// Longest header value looked at (a signature or an authorization header).
pub const MAX_HEADER_BYTES: usize = 1024;

/// Why a delivery is refused (answered `401`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing {0} header")]
    Missing(String),
    #[error("the {0} header does not match the body")]
    BadSignature(String),
    #[error("the bearer token does not match")]
    BadToken,
    /// The trigger names a secret the server's environment does not have, or one
    /// it may not use: the server is misconfigured, and the delivery is refused
    /// rather than let in.
    #[error("the server cannot check this delivery: the secret it names is not set")]
    SecretUnset,
}

/// Whether `text` is a secret reference: `$` and an environment variable name.
pub fn is_env_ref(text: &str) -> bool {
    text.strip_prefix('$').is_some_and(crate::secrets::is_env_name)
}

/// The secret a `$ENV_NAME` reference of `t` names, read now.
fn resolve(policy: &SecretPolicy, t: &Trigger, reference: &str) -> Result<Vec<u8>, VerifyError> {
    policy.read(t, reference).map_err(|e| {
        tracing::error!(trigger_id = %t.id, namespace = %t.namespace, error = %e, "a trigger's secret cannot be read");
        VerifyError::SecretUnset
    })
}

/// The `sha256=<hex>` signature of `body` under `secret`, as a sender makes it.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a delivery against the trigger's signature or token settings; `header`
/// reads a request header by name (`None` when absent or not text).
pub fn verify(
    policy: &SecretPolicy,
    t: &Trigger,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<(), VerifyError> {
    if !t.signature_secret.is_empty() {
        let name = t.signature_header();
        let presented = header(name).ok_or_else(|| VerifyError::Missing(name.to_string()))?;
        let bad = || VerifyError::BadSignature(name.to_string());
        if presented.len() > MAX_HEADER_BYTES {
            return Err(bad());
        }
        let hex_part = presented
            .trim()
            .strip_prefix("sha256=")
            .unwrap_or(presented.trim());
        let sig = hex::decode(hex_part).ok().ok_or_else(bad)?;
        let secret = resolve(policy, t, &t.signature_secret)?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret).map_err(|_| bad())?;
        mac.update(body);
        // Constant time.
        return mac.verify_slice(&sig).map_err(|_| bad());
    }
    if !t.bearer_token.is_empty() {
        let presented =
            header("authorization").ok_or_else(|| VerifyError::Missing("Authorization".into()))?;
        if presented.len() > MAX_HEADER_BYTES {
            return Err(VerifyError::BadToken);
        }
        let token = presented
            .strip_prefix("Bearer ")
            .or_else(|| presented.strip_prefix("bearer "))
            .ok_or(VerifyError::BadToken)?;
        let secret = resolve(policy, t, &t.bearer_token)?;
        // Equal-length digests, compared in constant time.
        let (a, b) = (Sha256::digest(token.trim().as_bytes()), Sha256::digest(&secret));
        if !bool::from(subtle::ConstantTimeEq::ct_eq(&a[..], &b[..])) {
            return Err(VerifyError::BadToken);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(secret: &str, token: &str) -> Trigger {
        Trigger {
            signature_secret: secret.into(),
            bearer_token: token.into(),
            source: railyard_model::trigger::Source::Config,
            ..Trigger::default()
        }
    }

    #[test]
    fn env_refs() {
        assert!(is_env_ref("$GITHUB_SECRET"));
        assert!(!is_env_ref("GITHUB_SECRET"));
        assert!(!is_env_ref("$"));
        assert!(!is_env_ref("$1X"));
        assert!(!is_env_ref("$A-B"));
    }

    #[test]
    fn signatures_verify_only_with_the_right_secret() {
        // SAFETY: this test's own variable, read by this test only.
        unsafe { std::env::set_var("TEST_SIG_SECRET", "s3cret") };
        let t = trigger("$TEST_SIG_SECRET", "");
        let body = br#"{"a":1}"#;
        let good = sign(b"s3cret", body);
        let h = |v: Option<String>| {
            move |name: &str| (name == "X-Hub-Signature-256").then(|| v.clone()).flatten()
        };
        assert_eq!(
            verify(&SecretPolicy::default(), &t, &h(Some(good.clone())), body),
            Ok(())
        );
        assert!(matches!(
            verify(&SecretPolicy::default(), &t, &h(None), body),
            Err(VerifyError::Missing(_))
        ));
        let wrong = sign(b"other", body);
        assert!(matches!(
            verify(&SecretPolicy::default(), &t, &h(Some(wrong)), body),
            Err(VerifyError::BadSignature(_))
        ));
        assert!(matches!(
            verify(&SecretPolicy::default(), &t, &h(Some(good.clone())), b"{}"),
            Err(VerifyError::BadSignature(_))
        ));
        assert!(matches!(
            verify(&SecretPolicy::default(), &t, &h(Some("sha256=zz".into())), body),
            Err(VerifyError::BadSignature(_))
        ));
        let unset = trigger("$TEST_SIG_UNSET", "");
        assert_eq!(
            verify(&SecretPolicy::default(), &unset, &h(Some(good)), body),
            Err(VerifyError::SecretUnset)
        );
    }

    #[test]
    fn bearer_tokens() {
        // SAFETY: this test's own variable, read by this test only.
        unsafe { std::env::set_var("TEST_BEARER", "tok") };
        let t = trigger("", "$TEST_BEARER");
        let h = |v: &'static str| move |name: &str| (name == "authorization").then(|| v.to_string());
        assert_eq!(
            verify(&SecretPolicy::default(), &t, &h("Bearer tok"), b""),
            Ok(())
        );
        assert_eq!(
            verify(&SecretPolicy::default(), &t, &h("Bearer nope"), b""),
            Err(VerifyError::BadToken)
        );
        assert_eq!(
            verify(&SecretPolicy::default(), &t, &h("tok"), b""),
            Err(VerifyError::BadToken)
        );
    }
}
